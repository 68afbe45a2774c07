"""What a support-case draft says, read-only: DescribeCluster, DescribeClusterNode, ListClusterEvents (the
node's, over the days asked for) and the monitor's findings table (the node's findings and their history),
drafted by :func:`hyperpod_debugger.report.support_case.draft`. Shared by ``hyperpod-debugger support-case``
and the agent interface; what it cannot read becomes a gap the draft names."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Literal

from hyperpod_debugger.report.findings import TABLE_ENV

if TYPE_CHECKING:  # the SDK and the draft are imported when a case is gathered, not with the CLI
    from datetime import datetime

    from hyperpod_debugger.aws.clients import AwsClients
    from hyperpod_debugger.domain.observations import ClusterEvent
    from hyperpod_debugger.lifecycle.findings import StoredFinding
    from hyperpod_debugger.report.support_case import CaseFacts, SupportCase
    from hyperpod_debugger.store.findings import HistoryRecord

DEFAULT_DAYS = 14


class CaseError(Exception):
    """The draft cannot be made at all: ``kind`` as the triage report's errors name them."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def gather(
    clients: AwsClients, cluster: str, node: str, table: str | None, now: datetime, days: int = DEFAULT_DAYS
) -> CaseFacts:
    """Everything the draft says, read-only. Raises :class:`CaseError` only when the cluster itself cannot
    be read; anything else missing becomes a gap the draft names."""
    from hyperpod_debugger.aws import sagemaker
    from hyperpod_debugger.aws.errors import ApiCallError, CredentialsError
    from hyperpod_debugger.report.support_case import CaseFacts
    from hyperpod_debugger.store.findings import FindingStore

    gaps: list[str] = []
    try:
        described = sagemaker.describe_cluster(clients, cluster)
    except sagemaker.ClusterNotFound as exc:
        raise CaseError("cluster_not_found", f"no HyperPod cluster {cluster!r} in {clients.region}: {exc}") from exc
    except CredentialsError as exc:
        raise CaseError("credentials", f"AWS credentials are missing, expired or rejected: {exc}") from exc
    except ApiCallError as exc:
        raise CaseError("endpoint", f"DescribeCluster failed: {exc.failure.describe()}") from exc
    detail = None
    try:
        detail = sagemaker.describe_cluster_node(clients, described, node)
    except ApiCallError as exc:
        gaps.append(f"the node's details (DescribeClusterNode: {exc.failure.describe()})")
    events: tuple[ClusterEvent, ...] = ()
    if described.provisioning_mode != "Continuous":
        gaps.append(
            "HyperPod's events for the node: the cluster's NodeProvisioningMode is not Continuous, so "
            "ListClusterEvents does not serve it; copy the node's reboots and replacements from the console"
        )
    else:
        try:
            events = tuple(sagemaker.list_cluster_events(clients, described, now - timedelta(days=days), now, node))
        except ApiCallError as exc:
            gaps.append(f"HyperPod's events for the node (ListClusterEvents: {exc.failure.describe()})")
    findings: tuple[StoredFinding, ...] = ()
    history: tuple[HistoryRecord, ...] = ()
    if not table:
        gaps.append(f"the monitor's findings and their history: no findings table (pass --table or set {TABLE_ENV})")
    else:
        store = FindingStore(clients, table)
        try:
            findings = tuple(store.open_findings(described.arn, include_resolved=True).values())
            history = tuple(store.history(node, limit=100))
        except ApiCallError as exc:
            gaps.append(f"the monitor's findings ({table}: {exc.failure.describe()})")
    gaps.append('the node-scoped triage report (run the command under "What Support asks for")')
    gaps.append("the S3 location of on-node bundles (nvidia-bug-report, DCGM logs), if you collected them (§ L)")
    return CaseFacts(
        cluster=described,
        node_id=node,
        generated_at=now,
        window_days=days,
        node=detail,
        findings=findings,
        history=history,
        events=events,
        gaps=tuple(gaps),
    )


def build(
    clients: AwsClients, cluster: str, node: str, table: str | None, now: datetime, days: int = DEFAULT_DAYS
) -> SupportCase:
    from hyperpod_debugger.report.support_case import draft

    return draft(gather(clients, cluster, node, table, now, days))


def build_for_job(
    clients: AwsClients,
    cluster: str,
    job_id: str,
    table: str | None,
    now: datetime,
    days: int = DEFAULT_DAYS,
    *,
    kind: Literal["slurm", "pytorchjob"] = "slurm",
) -> SupportCase:
    """The draft for the node a job's diagnosis (a Slurm job id, or a PyTorchJob's ``namespace/name``) names as
    its likely culprit, with the job's context. Raises
    :class:`CaseError` when the job cannot be read or the diagnosis names no culprit node (a case is about a
    node; ``hyperpod-debugger job`` says what it found instead)."""
    from hyperpod_debugger.job_diagnosis import JobRequest, diagnose_job
    from hyperpod_debugger.report.support_case import CaseJob
    from hyperpod_debugger.store.findings import FindingStore

    store = FindingStore(clients, table) if table else None
    run = diagnose_job(
        JobRequest(cluster=cluster, region=clients.region, job=job_id, kind=kind, now=now, probe=False),
        clients,
        store,
    )
    if run.diagnosis is None:
        raise CaseError(run.error_kind or "could_not_read", run.error or f"job {job_id} could not be read")
    diagnosis = run.diagnosis
    likely = [c for c in diagnosis.culprits if c.strength == "likely"]
    if not likely:
        raise CaseError("no_culprit", f"the diagnosis of job {job_id} names no culprit node: {diagnosis.conclusion}")
    culprit, job = likely[0], diagnosis.job
    case = build(clients, cluster, culprit.instance_id, table, now, days)
    context = CaseJob(
        job_id=job.job_id,
        name=job.name,
        owner=job.owner,
        state=job.state,
        exit_code=job.exit_code,
        start=job.start.isoformat() if job.start else None,
        end=job.end.isoformat() if job.end and job.ended else None,
        nodes=[n.instance_id or n.name for n in job.nodes],
        conclusion=diagnosis.conclusion,
        evidence=[f"{p.evidence.message} ({p.when})" for p in culprit.evidence],
    )
    subject = f"Training job {job.job_id} ended {job.state}: {case.subject}"
    return case.model_copy(update={"job": context, "subject": subject})
