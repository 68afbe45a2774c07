"""One triage run: collect → evaluate → report. Used by the CLI and by the Lambda handlers."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from hyperpod_debugger import __version__, ladder
from hyperpod_debugger.aws import sagemaker, sts
from hyperpod_debugger.aws.clients import AwsClients
from hyperpod_debugger.aws.collector import CollectOptions, Collector
from hyperpod_debugger.aws.errors import ApiCallError, CredentialsError
from hyperpod_debugger.checks.base import CheckContext
from hyperpod_debugger.checks.registry import ACTION_SECTIONS, ALL_CHECKS, run_checks
from hyperpod_debugger.model import (
    CheckCoverage,
    CheckStatus,
    ClusterRef,
    Coverage,
    Finding,
    Priority,
    RunError,
    Tag,
    TriageReport,
)


@dataclass(frozen=True, slots=True)
class TriageRequest:
    cluster: str  # name or ARN
    region: str
    node: str | None = None
    now: datetime | None = None
    event_window: timedelta = timedelta(hours=24)
    log_window: timedelta = timedelta(days=7)


def build_report(
    scope_node: str | None,
    now: datetime,
    cluster: ClusterRef,
    findings: list[Finding],
    coverage: Coverage,
    error: RunError | None = None,
) -> TriageReport:
    return TriageReport(
        tool_version=__version__,
        generated_at=now.isoformat(),
        cluster=cluster,
        scope_node=scope_node,
        findings=findings,
        coverage=coverage,
        summary=TriageReport.summarise(findings),
        error=error,
        exit_code=TriageReport.exit_code_for(findings, error),  # type: ignore[arg-type]
    )


def _all_unknown(reason: str) -> list[CheckCoverage]:
    return [CheckCoverage(check=c.id, status=CheckStatus.UNKNOWN, reason=reason) for c in ALL_CHECKS]


def run_triage(req: TriageRequest, clients: AwsClients | None = None) -> TriageReport:
    now = req.now or datetime.now(UTC)
    clients = clients or AwsClients(req.region)
    ref = ClusterRef(name=req.cluster, region=req.region)

    def coverage(checks: list[CheckCoverage]) -> Coverage:
        return Coverage(checks=checks, api_calls=dict(sorted(clients.calls.items())))

    try:
        account = sts.caller_account(clients)
        ref.account_id = account
        cluster = sagemaker.describe_cluster(clients, req.cluster)
    except CredentialsError as exc:
        error = RunError(kind="credentials", message=f"AWS credentials are missing, expired or rejected: {exc}")
        return build_report(req.node, now, ref, [], coverage(_all_unknown("no usable credentials")), error)
    except sagemaker.ClusterNotFound as exc:
        names: list[str] = []
        try:
            names = [f"{c.get('ClusterName')} ({c.get('ClusterStatus')})" for c in sagemaker.list_clusters(clients)]
        except (ApiCallError, CredentialsError):
            names = []
        error = RunError(
            kind="cluster_not_found",
            message=f"No HyperPod cluster {req.cluster!r} in {req.region}: {exc}",
            clusters_in_region=names,
        )
        return build_report(req.node, now, ref, [], coverage(_all_unknown("cluster not found")), error)
    except ApiCallError as exc:
        failure = exc.failure
        if failure.kind == "denied":
            finding = Finding(
                tag=Tag.WARN,
                priority=Priority.P1,
                check="iam.permission",
                section=ACTION_SECTIONS.get(failure.action, "F"),
                message=f"Missing IAM permission {failure.action} (blocked: the whole triage)",
                evidence=[failure.message],
                root_cause=f"The identity running the triage is not allowed to call {failure.action}.",
            )
            return build_report(req.node, now, ref, [finding], coverage(_all_unknown(failure.describe())))
        kind = "endpoint" if failure.kind in ("endpoint", "timeout") else "internal"
        error = RunError(kind=kind, message=f"Cannot start the triage: {failure.describe()}")
        return build_report(req.node, now, ref, [], coverage(_all_unknown(failure.describe())), error)

    ref = ClusterRef(
        name=cluster.name,
        arn=cluster.arn,
        cluster_id=cluster.cluster_id,
        region=cluster.region,
        account_id=account or cluster.account_id,
        status=cluster.status,
        orchestrator=cluster.orchestrator,
        eks_cluster_arn=cluster.eks_cluster_arn,
    )
    opts = CollectOptions(now=now, scope_node=req.node, event_window=req.event_window, log_window=req.log_window)
    try:
        obs = Collector(clients).collect(cluster, opts)
    except CredentialsError as exc:
        error = RunError(kind="credentials", message=f"AWS credentials expired during the run: {exc}")
        return build_report(req.node, now, ref, [], coverage(_all_unknown("credentials expired")), error)
    if obs.nodes.available and obs.nodes.value is not None:
        ref.node_count = len(obs.nodes.value)
    ctx = CheckContext(now=now, scope_node=req.node, event_window=req.event_window, log_window=req.log_window)
    findings, checks = run_checks(obs, ctx)
    findings = ladder.refine(findings, obs, ctx)
    return build_report(req.node, now, ref, findings, coverage(checks))
