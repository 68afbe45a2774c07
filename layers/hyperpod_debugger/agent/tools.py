"""What the agent interface's tools do, as plain functions over the same core the CLI uses.

Every function reads only: the HyperPod, EC2, EKS, Logs and Session Manager calls of a triage (the same
read-only IAM policy as the CLI), the findings table, and the package's own runbook and probe script.
None runs a suggested command; commands come back as text for a person. A failure is a :class:`ToolFailure`
whose ``kind`` is one of the triage report's error kinds (``invalid_argument``, ``credentials``,
``cluster_not_found``, ``endpoint``, ``internal``) or, for the findings table, the API failure's kind.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from importlib import resources
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from hyperpod_debugger.domain import validate
from hyperpod_debugger.domain.model import SuggestedCommand, TriageReport
from hyperpod_debugger.report import runbook
from hyperpod_debugger.report.findings import TABLE_ENV

if TYPE_CHECKING:
    from hyperpod_debugger.report.support_case import SupportCase

ClientsFactory = Callable[[str], Any]  # Region → AwsClients


class ToolFailure(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


# --------------------------------------------------------------------------- results


class StoredFindingView(BaseModel):
    fingerprint: str
    cluster_arn: str
    cluster_name: str | None
    instance_id: str | None
    check: str
    section: str | None
    tag: str
    priority: str | None
    state: str
    first_seen: str
    last_seen: str
    count: int
    message: str
    evidence: list[str]
    suggested_commands: list[dict[str, Any]]
    acknowledged_by: str | None


class FindingsList(BaseModel):
    cluster_arn: str
    table: str
    findings: list[StoredFindingView] = Field(
        description="Most urgent first: OPEN, then ACKNOWLEDGED (RESOLVED if asked)"
    )


class Transition(BaseModel):
    at: str
    transition: str
    fingerprint: str
    check: str
    tag: str
    priority: str | None
    state: str
    message: str


class NodeHistory(BaseModel):
    key: str = Field(description="The instance id, or the cluster ARN for cluster-wide findings")
    table: str
    transitions: list[Transition] = Field(description="Newest first")


class FindingsStats(BaseModel):
    """``findings stats --json``: a cluster's findings history over a period (the words: ``lifecycle.stats``)."""

    cluster: str
    since: str
    until: str
    transitions_read: int
    nodes: list[dict[str, Any]] = Field(description="Per node (logical id where known): incidents, node-hours")
    repeat_offenders: list[str] = Field(description="Nodes with two or more incidents in the period")
    groups: list[dict[str, Any]]
    types: list[dict[str, Any]]
    checks: list[dict[str, Any]] = Field(description="Openings in the period by check, most first")
    causes: list[dict[str, Any]] = Field(description="Openings in the period by runbook section, most first")
    time_to_resolve_hours: dict[str, Any]
    open_now: list[dict[str, Any]] = Field(description="Problems still open, oldest first")


class RunbookSection(BaseModel):
    section: str
    title: str
    anchor: str
    what_to_do: str | None
    text: str = Field(description="The section's Markdown, its subsections included")
    truncated: bool


class CommandsForFinding(BaseModel):
    fingerprint: str
    message: str
    state: str
    commands: list[SuggestedCommand]
    text: str = Field(description="The commands as a person should see them, with blast radius and IaC notes")


# --------------------------------------------------------------------------- helpers


class JobDiagnosisView(BaseModel):
    """Why a job died (``diagnose_job``): the answer's kind and sentence, the culprit nodes with the evidence that
    places each fault in the job's window, what all the job's nodes share, and what was and was not read."""

    kind: Literal["node", "cluster", "own", "unexplained", "running"] = Field(
        description="node: culprit node(s) found; cluster: a cause common to the job's nodes; own: nothing on the "
        "nodes explains it, the job's own exit is the lead; unexplained: the orchestrator blames a node nothing "
        "read confirms; running: still running, nothing wrong read"
    )
    conclusion: str
    job: dict[str, Any] = Field(description="The job as read: id, name, owner, state, exit code, reason, times, nodes.")
    window_start: str
    window_end: str
    culprits: list[dict[str, Any]] = Field(
        default_factory=list, description="Each culprit node: likely or possible, its placed evidence, next command."
    )
    common: list[dict[str, Any]] = Field(default_factory=list)
    read: list[str] = Field(default_factory=list)
    unknown: list[str] = Field(default_factory=list, description="What could not be read: neither fault nor clean.")
    notes: list[str] = Field(default_factory=list)


def _region(cluster: str | None, region: str | None, profile: str | None) -> str:
    from hyperpod_debugger.aws.region import region_for

    try:
        return region_for(cluster, region, profile=profile)
    except validate.InvalidArgument as exc:
        raise ToolFailure("invalid_argument", str(exc)) from exc


def _when(text: str, name: str = "until") -> datetime:
    """An ISO-8601 time (UTC when it names no zone); ToolFailure for one it is not."""
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ToolFailure("invalid_argument", f"{name} {text!r} is not an ISO-8601 time") from exc
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def _checked(check: Callable[[str], str], value: str) -> str:
    try:
        return check(value)
    except validate.InvalidArgument as exc:
        raise ToolFailure("invalid_argument", str(exc)) from exc


def _table(table: str | None) -> str:
    chosen = table or os.environ.get(TABLE_ENV)
    if not chosen:
        raise ToolFailure("invalid_argument", f"no findings table: pass table= or set {TABLE_ENV} for the server")
    return _checked(validate.table, chosen)


def _cluster_arn(clients: Any, cluster: str) -> str:
    from hyperpod_debugger.aws import sagemaker

    if cluster.startswith("arn:"):
        return cluster
    return sagemaker.describe_cluster(clients, cluster).arn


def _aws_errors(work: Callable[[], Any], region: str) -> Any:
    """Run a table read, turning the SDK's failures into tool failures of the CLI's kinds."""
    from hyperpod_debugger.aws import sagemaker
    from hyperpod_debugger.aws.errors import ApiCallError, CredentialsError

    try:
        return work()
    except sagemaker.ClusterNotFound as exc:
        raise ToolFailure("cluster_not_found", f"no HyperPod cluster of that name in {region}: {exc}") from exc
    except CredentialsError as exc:
        raise ToolFailure("credentials", f"AWS credentials are missing, expired or rejected: {exc}") from exc
    except ApiCallError as exc:
        raise ToolFailure(exc.failure.kind, exc.failure.describe()) from exc


# --------------------------------------------------------------------------- the tools


def triage_cluster(
    clients_for: ClientsFactory,
    cluster: str,
    region: str | None = None,
    node: str | None = None,
    probe: bool = False,
    max_probe_nodes: int = 5,
    since_hours: float = 24.0,
    log_days: float = 7.0,
    profile: str | None = None,
) -> TriageReport:
    from hyperpod_debugger.probe.options import ProbeOptions
    from hyperpod_debugger.triage import TriageRequest, run_triage

    cluster = _checked(validate.cluster, cluster)
    node = _checked(validate.instance_id, node) if node else None
    if not 0 < since_hours <= 24 * 90 or not 0 < log_days <= 90:
        raise ToolFailure("invalid_argument", "since_hours must be in (0, 2160] and log_days in (0, 90]")
    if not 1 <= max_probe_nodes <= 100:
        raise ToolFailure("invalid_argument", "max_probe_nodes must be between 1 and 100")
    chosen = _region(cluster, region, profile)
    report = run_triage(
        TriageRequest(
            cluster=cluster,
            region=chosen,
            node=node,
            event_window=timedelta(hours=since_hours),
            log_window=timedelta(days=log_days),
            probe=probe,
            probe_options=ProbeOptions(max_nodes=max_probe_nodes if node is None else 1),
            check_node=node is not None,
        ),
        clients_for(chosen),
    )
    if report.error is not None:
        known = (
            f" (clusters in {chosen}: {', '.join(report.error.clusters_in_region)})"
            if report.error.clusters_in_region
            else ""
        )
        raise ToolFailure(report.error.kind, report.error.message + known)
    return report


def analyze_probe_output(
    instance_type: str,
    document: str | dict[str, Any] | None = None,
    outputs: dict[str, str] | None = None,
    orchestrator: Literal["EKS", "Slurm"] | None = None,
    role: Literal["compute", "controller"] = "compute",
    now: str | None = None,
    window_hours: float = 24.0,
    instance_id: str | None = None,
    cluster: str | None = None,
    region: str | None = None,
) -> TriageReport:
    from hyperpod_debugger.domain import catalog
    from hyperpod_debugger.probe import document as probe_document
    from hyperpod_debugger.probe.parse import klog
    from hyperpod_debugger.report.analysis import analyze

    if (document is None) == (outputs is None):
        raise ToolFailure("invalid_argument", "give exactly one of document (probe.sh's JSON) or outputs (by item id)")
    if catalog.spec_for(instance_type) is None:
        raise ToolFailure(
            "invalid_argument", f"unknown instance type {instance_type!r}; known: {', '.join(catalog.known_types())}"
        )
    if not 0 < window_hours <= 24 * 90:
        raise ToolFailure("invalid_argument", "window_hours must be in (0, 2160]")
    when = _when(now, "now") if now is not None else None
    try:
        if isinstance(document, dict):
            doc = probe_document.from_dict(document)  # an agent may pass the JSON as an object
        elif document is not None:
            doc = probe_document.loads(document)
        else:
            doc = probe_document.from_outputs(outputs or {}, hostname="pasted outputs", collected_at=when)
    except probe_document.ProbeDocumentError as exc:
        raise ToolFailure("invalid_argument", str(exc)) from exc
    notes: tuple[str, ...] = ()
    if doc.ignored:
        notes = (f"Not probe items, left unread: {', '.join(doc.ignored)}",)
    moment = when or doc.collected_at or klog.newest_time(doc, datetime.now(UTC)) or datetime.now(UTC)
    return analyze(
        doc,
        instance_type=instance_type,
        now=moment,
        notes=notes,
        orchestrator=orchestrator,
        role=role,
        window=timedelta(hours=window_hours),
        instance_id=_checked(validate.instance_id, instance_id) if instance_id else None,
        cluster_name=_checked(validate.cluster, cluster) if cluster else None,
        region=_checked(validate.region, region) if region else None,
    )


def list_findings(
    clients_for: ClientsFactory,
    cluster: str,
    table: str | None = None,
    region: str | None = None,
    include_resolved: bool = False,
    profile: str | None = None,
) -> FindingsList:
    from hyperpod_debugger.report.findings import finding_json, sort_key
    from hyperpod_debugger.store.findings import FindingStore

    cluster = _checked(validate.cluster, cluster)
    name = _table(table)
    chosen = _region(cluster, region, profile)
    clients = clients_for(chosen)

    def read() -> FindingsList:
        arn = _cluster_arn(clients, cluster)
        found = sorted(
            FindingStore(clients, name).open_findings(arn, include_resolved=include_resolved).values(), key=sort_key
        )
        return FindingsList(cluster_arn=arn, table=name, findings=[StoredFindingView(**finding_json(f)) for f in found])

    return _aws_errors(read, chosen)


def findings_stats(
    clients_for: ClientsFactory,
    cluster: str,
    table: str | None = None,
    region: str | None = None,
    days: int = 30,
    until: str | None = None,
    profile: str | None = None,
) -> FindingsStats:
    from hyperpod_debugger.report import stats as stats_report
    from hyperpod_debugger.report.stats import history_stats
    from hyperpod_debugger.store.findings import FindingStore

    if not 1 <= days <= 90:
        raise ToolFailure("invalid_argument", "days must be between 1 and 90 (the history is kept for 90 days)")
    end = _when(until) if until else datetime.now(UTC)
    cluster = _checked(validate.cluster, cluster)
    name = _table(table)
    chosen = _region(cluster, region, profile)
    clients = clients_for(chosen)

    def read() -> FindingsStats:
        arn = _cluster_arn(clients, cluster)
        result = history_stats(FindingStore(clients, name), arn, cluster, (end - timedelta(days=days), end))
        return FindingsStats(**stats_report.as_json(result))

    return _aws_errors(read, chosen)


def node_history(
    clients_for: ClientsFactory,
    node: str | None = None,
    cluster: str | None = None,
    table: str | None = None,
    region: str | None = None,
    limit: int = 50,
    profile: str | None = None,
) -> NodeHistory:
    from hyperpod_debugger.report.findings import jsonable  # the history's plain JSON, as `findings history --json`
    from hyperpod_debugger.store.findings import FindingStore

    if (node is None) == (cluster is None):
        raise ToolFailure("invalid_argument", "give exactly one of node (an instance id) or cluster (cluster-wide)")
    if not 1 <= limit <= 1000:
        raise ToolFailure("invalid_argument", "limit must be between 1 and 1000")
    node = _checked(validate.instance_id, node) if node else None
    cluster = _checked(validate.cluster, cluster) if cluster else None
    name = _table(table)
    chosen = _region(cluster, region, profile)
    clients = clients_for(chosen)

    def read() -> NodeHistory:
        key = node or _cluster_arn(clients, str(cluster))
        records = FindingStore(clients, name).history(key, limit=limit)
        return NodeHistory(
            key=key,
            table=name,
            transitions=[Transition(**jsonable(asdict(r))) for r in records],
        )

    return _aws_errors(read, chosen)


def read_runbook_section(section: str) -> RunbookSection:
    section = section.strip().removeprefix("§").strip()
    try:
        text, truncated = runbook.section_text(section)
    except runbook.UnknownSection as exc:
        raise ToolFailure("invalid_argument", str(exc)) from exc
    summary = runbook.section_summary(section)
    return RunbookSection(
        section=section,
        title=str(summary["title"]),
        anchor=str(summary["anchor"]),
        what_to_do=summary["what_to_do"],
        text=text,
        truncated=truncated,
    )


def probe_script() -> str:
    return resources.files("hyperpod_debugger.probe").joinpath("probe.sh").read_text()


def commands_for_finding(
    clients_for: ClientsFactory,
    cluster: str,
    fingerprint: str,
    table: str | None = None,
    region: str | None = None,
    profile: str | None = None,
) -> CommandsForFinding:
    from hyperpod_debugger.lifecycle.findings import FINGERPRINT_CHARS
    from hyperpod_debugger.report.text import command_lines
    from hyperpod_debugger.store.findings import FindingStore

    cluster = _checked(validate.cluster, cluster)
    if not re.fullmatch(rf"[0-9a-f]{{{FINGERPRINT_CHARS}}}", fingerprint):
        raise ToolFailure("invalid_argument", f"fingerprint {fingerprint!r} is not a finding's fingerprint")
    name = _table(table)
    chosen = _region(cluster, region, profile)
    clients = clients_for(chosen)

    def read() -> CommandsForFinding:
        arn = _cluster_arn(clients, cluster)
        stored = FindingStore(clients, name).get(arn, fingerprint)
        if stored is None:
            raise ToolFailure("not_found", f"no finding {fingerprint} for {cluster} in {name}")
        commands = [SuggestedCommand.model_validate(c) for c in stored.suggested_commands]
        lines = command_lines(commands) or ["No command suggested for this finding; read its runbook section."]
        banner = "Never run by this tool: a person reads these and runs what applies, in this order."
        return CommandsForFinding(
            fingerprint=fingerprint,
            message=stored.message,
            state=stored.state.value,
            commands=commands,
            text="\n".join([banner, *lines]) + "\n",
        )

    return _aws_errors(read, chosen)


def draft_support_case(
    clients_for: ClientsFactory,
    cluster: str,
    node: str,
    table: str | None = None,
    region: str | None = None,
    days: int = 14,
    profile: str | None = None,
) -> SupportCase:
    """The draft case as data; the caller renders it (:func:`~hyperpod_debugger.report.support_case.render_markdown`)
    from what it hands on, so the Markdown quotes the same text."""
    from hyperpod_debugger.report.case_facts import CaseError, build

    cluster = _checked(validate.cluster, cluster)
    node = _checked(validate.instance_id, node)
    if not 1 <= days <= 90:
        raise ToolFailure("invalid_argument", "days must be between 1 and 90")
    name = _table(table) if (table or os.environ.get(TABLE_ENV)) else None
    chosen = _region(cluster, region, profile)
    try:
        return build(clients_for(chosen), cluster, node, name, datetime.now(UTC), days)
    except CaseError as exc:
        raise ToolFailure(exc.kind, str(exc)) from exc


def diagnose_job(
    clients_for: ClientsFactory,
    cluster: str,
    job: str | None = None,
    table: str | None = None,
    region: str | None = None,
    probe: bool = True,
    profile: str | None = None,
    pytorchjob: str | None = None,
) -> JobDiagnosisView:
    """Why a Slurm job or a PyTorchJob died: :func:`hyperpod_debugger.job_diagnosis.diagnose_job`, as the
    agent's tool."""
    from hyperpod_debugger.job_diagnosis import JobRequest, refuse
    from hyperpod_debugger.job_diagnosis import diagnose_job as run_diagnosis
    from hyperpod_debugger.report.job import as_data

    cluster = _checked(validate.cluster, cluster)
    if (job is None) == (pytorchjob is None):
        raise ToolFailure(
            "invalid_argument", "give exactly one of job (a Slurm job id) and pytorchjob (NAMESPACE/NAME)"
        )
    kind: Literal["slurm", "pytorchjob"] = "slurm" if job is not None else "pytorchjob"
    wanted = job if job is not None else pytorchjob or ""
    refused = refuse(wanted, kind)
    if refused:
        raise ToolFailure("invalid_argument", refused)
    chosen = _region(cluster, region, profile)
    clients = clients_for(chosen)
    store = None
    if table:
        from hyperpod_debugger.store.findings import FindingStore

        store = FindingStore(clients, _checked(validate.table, table))
    request = JobRequest(cluster=cluster, region=chosen, job=wanted, kind=kind, probe=probe)
    run = _aws_errors(lambda: run_diagnosis(request, clients, store), chosen)
    if run.diagnosis is None:
        raise ToolFailure(run.error_kind or "could_not_read", run.error or "the job could not be read")
    return JobDiagnosisView.model_validate(as_data(run.diagnosis))
