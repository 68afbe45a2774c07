"""The fleet's health as CloudWatch metrics, through Powertools' embedded metric format.

Each call writes its own EMF blobs (``EphemeralMetrics``: one per dimension set it needs), apart from the
handler's ``metrics`` object, whose one dimension set belongs to the invocation. Names and dimensions:
``functions.shared.metric_names``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit

from functions.shared import metric_names as names
from functions.shared.observability import NAMESPACE, SERVICE, logger

if TYPE_CHECKING:  # the sweep computes the health; the notifier, which imports this module too, never does
    from hyperpod_debugger.lifecycle.health import ClusterHealth, GroupHealth

_WEIGHT = {"FAIL": 0, "WARN": 1, "UNKNOWN": 2, "UNOBSERVED": 3, "NOT_RUNNING": 4}


def _blob(dimensions: Mapping[str, str], *, account_wide: bool) -> EphemeralMetrics:
    blob = EphemeralMetrics(namespace=NAMESPACE, service=SERVICE)
    for key, value in dimensions.items():
        blob.add_dimension(key, value)
    if account_wide:
        blob.add_dimensions(service=SERVICE)  # a second dimension set: the account's series
    return blob


def _health_metrics(blob: EphemeralMetrics, health: GroupHealth) -> None:
    for verdict, metric in names.VERDICT_METRICS.items():
        blob.add_metric(name=metric, unit=MetricUnit.Count, value=health.verdicts.get(verdict, 0))
    blob.add_metric(name=names.NODES, unit=MetricUnit.Count, value=health.nodes)
    for priority, metric in names.OPEN_FINDINGS.items():
        blob.add_metric(name=metric, unit=MetricUnit.Count, value=health.open_by_priority.get(priority, 0))
    if health.healthy_share is not None:
        blob.add_metric(name=names.HEALTHY_SHARE, unit=MetricUnit.Percent, value=round(health.healthy_share, 3))
    if health.unknown_share is not None:
        blob.add_metric(name=names.UNKNOWN_SHARE, unit=MetricUnit.Percent, value=round(health.unknown_share, 3))
    if health.oldest_probe_age_s is not None:
        blob.add_metric(name=names.OLDEST_PROBE_AGE, unit=MetricUnit.Seconds, value=round(health.oldest_probe_age_s))
        blob.add_metric(name=names.NEVER_PROBED, unit=MetricUnit.Count, value=health.never_probed)


def emit_health(health: ClusterHealth, *, step_seconds: float) -> None:
    """One sweep's view of a cluster: per instance group, per cluster, and account-wide."""
    cluster = health.cluster.cluster
    for group in health.groups:
        blob = _blob({names.CLUSTER: cluster, names.INSTANCE_GROUP: group.group or "-"}, account_wide=False)
        _health_metrics(blob, group)
        blob.flush_metrics()
    blob = _blob({names.CLUSTER: cluster}, account_wide=True)
    _health_metrics(blob, health.cluster)
    blob.add_metric(name=names.CLUSTER_STEP_SECONDS, unit=MetricUnit.Seconds, value=round(step_seconds, 3))
    blob.add_metric(name=names.CLUSTERS_SWEPT, unit=MetricUnit.Count, value=1)
    blob.flush_metrics()


def emit_cluster_failed(cluster: str) -> None:
    blob = _blob({names.CLUSTER: cluster}, account_wide=True)
    blob.add_metric(name=names.CLUSTERS_FAILED, unit=MetricUnit.Count, value=1)
    blob.flush_metrics()


def log_problem_nodes(health: ClusterHealth, groups: Mapping[str, str], checks: Mapping[str, list[str]]) -> int:
    """One log line per problem node, weightiest first, at most ``PROBLEM_NODES_LOGGED`` (the dashboard's
    table of current problem nodes reads them). Returns how many were logged."""
    ranked = sorted(health.problems.items(), key=lambda item: (_WEIGHT.get(item[1], 9), item[0]))
    for instance_id, verdict in ranked[: names.PROBLEM_NODES_LOGGED]:
        logger.info(
            names.PROBLEM_NODE_LOG,
            cluster=health.cluster.cluster,
            instance_group=groups.get(instance_id),
            instance_id=instance_id,
            verdict=verdict,
            checks=",".join(checks.get(instance_id, [])[:5]),
        )
    return min(len(ranked), names.PROBLEM_NODES_LOGGED)


def emit_sessions(cluster: str, calls: int, throttles: int) -> None:
    """A probe batch's StartSession calls and the throttled answers among them."""
    blob = _blob({names.CLUSTER: cluster}, account_wide=True)
    blob.add_metric(name=names.START_SESSION_CALLS, unit=MetricUnit.Count, value=calls)
    blob.add_metric(name=names.START_SESSION_THROTTLES, unit=MetricUnit.Count, value=throttles)
    blob.flush_metrics()


def emit_resolutions(resolutions: Iterable[tuple[str, float]]) -> None:
    """Seconds from first seen to resolved, one value per resolution, per cluster and account-wide."""
    by_cluster: dict[str, list[float]] = defaultdict(list)
    for cluster, seconds in resolutions:
        by_cluster[cluster].append(seconds)
    for cluster, values in by_cluster.items():
        blob = _blob({names.CLUSTER: cluster}, account_wide=True)
        for value in values:
            blob.add_metric(name=names.TIME_TO_RESOLVE, unit=MetricUnit.Seconds, value=round(value))
        blob.flush_metrics()
