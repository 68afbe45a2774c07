"""What every run hands back: the report (findings, coverage, verdicts), the cluster it is about, and the API calls it
made. Shared by the cluster triage (:mod:`hyperpod_debugger.triage`), the sweep's probe batches
(:mod:`hyperpod_debugger.probe_batch`) and the CLI's offline analysis."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from hyperpod_debugger import __version__
from hyperpod_debugger.domain.model import ClusterRef, Coverage, TriageReport
from hyperpod_debugger.remediation.verdict import node_verdicts

if TYPE_CHECKING:
    from collections.abc import Callable
    from datetime import datetime

    from hyperpod_debugger.aws.clients import AwsClients
    from hyperpod_debugger.domain.model import CheckCoverage, Finding, NodeVerdict, RunError
    from hyperpod_debugger.domain.observations import Cluster


def build_report(
    scope_node: str | None,
    now: datetime,
    cluster: ClusterRef,
    findings: list[Finding],
    coverage: Coverage,
    error: RunError | None = None,
    verdicts: list[NodeVerdict] | None = None,
) -> TriageReport:
    return TriageReport(
        tool_version=__version__,
        generated_at=now.isoformat(),
        cluster=cluster,
        scope_node=scope_node,
        findings=findings,
        coverage=coverage,
        summary=TriageReport.summarise(findings),
        node_verdicts=node_verdicts(findings) if verdicts is None else verdicts,
        error=error,
        exit_code=TriageReport.exit_code_for(findings, error),
    )


def coverage_of(clients: AwsClients) -> Callable[..., Coverage]:
    """Coverage of a run: its checks, the nodes it probed, and the API calls ``clients`` made since the
    run began (the monitor reuses its clients across warm invocations)."""
    before = Counter(clients.calls)

    def coverage(
        checks: list[CheckCoverage], probed: list[str] | None = None, software: dict[str, dict[str, str]] | None = None
    ) -> Coverage:
        made = Counter(clients.calls) - before
        return Coverage(
            checks=checks, api_calls=dict(sorted(made.items())), probed_nodes=probed, software=software or None
        )

    return coverage


def cluster_ref(cluster: Cluster, account: str | None) -> ClusterRef:
    return ClusterRef(
        name=cluster.name,
        arn=cluster.arn,
        cluster_id=cluster.cluster_id,
        region=cluster.region,
        account_id=account or cluster.account_id,
        status=cluster.status,
        orchestrator=cluster.orchestrator,
        eks_cluster_arn=cluster.eks_cluster_arn,
    )
