"""The names and dimensions of the fleet-health metrics: shared by the functions that emit them
(``functions.monitor.fleet_metrics``) and the stack's dashboard and alarms (``infra.constructs.observability``).

Every metric is in the ``HyperPodDebugger`` namespace with the ``service`` dimension Powertools adds.
The per-cluster ones are emitted twice more: with ``cluster`` (and ``instance_group`` where the number
belongs to a group), and with ``service`` alone, the account-wide series the alarms watch (Maximum: the
worst cluster).
"""

from __future__ import annotations

CLUSTER = "cluster"
INSTANCE_GROUP = "instance_group"

#: Nodes by verdict (``hyperpod_debugger.lifecycle.health.VERDICTS``), each a metric of its own.
VERDICT_METRICS = {
    "HEALTHY": "NodesHealthy",
    "WARN": "NodesWarn",
    "FAIL": "NodesFailing",
    "UNKNOWN": "NodesUnknown",
    "UNOBSERVED": "NodesUnobserved",
    "NOT_RUNNING": "NodesNotRunning",
}
NODES = "Nodes"
#: Percent of the nodes HEALTHY: the fleet-health number.
HEALTHY_SHARE = "HealthyShare"
#: Percent of the nodes whose verdict is UNKNOWN (we could not read them).
UNKNOWN_SHARE = "UnknownShare"
#: Open findings by priority (P0, P1, P2).
OPEN_FINDINGS = {"P0": "OpenFindingsP0", "P1": "OpenFindingsP1", "P2": "OpenFindingsP2"}
#: Seconds the longest-unprobed Running node has gone without an evaluated probe document.
OLDEST_PROBE_AGE = "OldestProbeAgeSeconds"
NEVER_PROBED = "NodesNeverProbed"
#: Seconds one cluster's step of the sweep took (its API checks, the store, the probe plan).
CLUSTER_STEP_SECONDS = "SweepClusterSeconds"
#: Clusters whose sweep step completed (and, separately, failed to read the cluster).
CLUSTERS_SWEPT = "ClustersSwept"
CLUSTERS_FAILED = "ClusterSweepsFailed"
#: Session Manager StartSession calls a probe batch made, and the throttled answers among them.
START_SESSION_CALLS = "StartSessionCalls"
START_SESSION_THROTTLES = "StartSessionThrottles"
#: Per RESOLVED transition: seconds from first seen to resolved.
TIME_TO_RESOLVE = "TimeToResolveSeconds"
#: Finding events the courier put on EventBridge.
FINDING_EVENTS_PUT = "FindingEventsPut"
#: The sweep's log line naming one problem node (what the dashboard's table reads).
PROBLEM_NODE_LOG = "problem node"
#: At most this many problem nodes are logged per cluster and sweep (weightiest first).
PROBLEM_NODES_LOGGED = 200
