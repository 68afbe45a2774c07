"""One batch of the sweep's rotation: probe exactly the nodes named (no cluster-level checks) and apply the
node-action ladder. Loads only what a batch runs; the cluster triage is :mod:`hyperpod_debugger.triage`."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from hyperpod_debugger.aws import sagemaker
from hyperpod_debugger.aws.clients import AwsClients
from hyperpod_debugger.aws.errors import ApiCallError, CredentialsError
from hyperpod_debugger.domain.model import ClusterRef, RunError
from hyperpod_debugger.probe.options import ProbeOptions
from hyperpod_debugger.remediation import ladder
from hyperpod_debugger.run_report import build_report, cluster_ref, coverage_of

if TYPE_CHECKING:
    from hyperpod_debugger.domain.model import TriageReport
    from hyperpod_debugger.domain.observations import ClusterNode


@dataclass(frozen=True, slots=True)
class ProbeBatchRequest:
    """One batch of the sweep's rotation: probe exactly these nodes of one cluster."""

    cluster: str  # ARN (or name)
    region: str
    nodes: tuple[ClusterNode, ...]
    controllers: frozenset[str] = frozenset()
    #: instance id → what HyperPod is already doing to it (seen by the cluster step): no duplicate action
    recovering: dict[str, str] = field(default_factory=dict)
    now: datetime | None = None
    event_window: timedelta = timedelta(hours=24)
    probe_options: ProbeOptions = ProbeOptions()


def run_probe_batch(req: ProbeBatchRequest, clients: AwsClients | None = None) -> TriageReport:
    """Probe the given nodes (no cluster-level checks) and apply the node-action ladder.

    The report's coverage names only on-node checks and lists the nodes actually probed, so the store
    resolves on-node findings of those nodes only.
    """
    from hyperpod_debugger.probe.runner import probe_cluster  # the runner loads when a run probes

    now = req.now or datetime.now(UTC)
    clients = clients or AwsClients(req.region)
    ref = ClusterRef(name=req.cluster, region=req.region)

    coverage = coverage_of(clients)

    try:
        cluster = sagemaker.describe_cluster(clients, req.cluster)
    except CredentialsError as exc:
        error = RunError(kind="credentials", message=f"AWS credentials are missing, expired or rejected: {exc}")
        return build_report(None, now, ref, [], coverage([]), error)
    except (sagemaker.ClusterNotFound, ApiCallError) as exc:
        kind = "cluster_not_found" if isinstance(exc, sagemaker.ClusterNotFound) else "internal"
        error = RunError(kind=kind, message=f"Cannot probe cluster {req.cluster!r}: {exc}")
        return build_report(None, now, ref, [], coverage([]), error)
    ref = cluster_ref(cluster, cluster.account_id)
    by_id = {n.instance_id: n for n in req.nodes}
    probed = probe_cluster(
        clients,
        cluster,
        list(req.nodes),
        now,
        focus=(),
        suspects=[],
        controllers=set(req.controllers),
        options=replace(req.probe_options, max_nodes=len(req.nodes), window=req.event_window, batch=True),
    )
    findings = ladder.apply(
        probed.findings,
        ladder.Target.of(cluster),
        by_id,
        recovering=dict(req.recovering),
        controllers=set(req.controllers),
    )
    return build_report(None, now, ref, findings, coverage(probed.coverage, probed.probed, probed.software))
