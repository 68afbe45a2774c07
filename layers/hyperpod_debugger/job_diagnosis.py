"""One job diagnosis: from a Slurm job id to the node (or the cluster, or the job itself) that ended it.

The run: read the cluster and its nodes; read the job on the controller (the ``jobs`` pinned command: which
nodes, when, how it ended) and resolve its nodes to instances; triage the cluster scoped to those nodes, with
HyperPod's events and the health agent's log over the job's window and, for nodes still running, the probes;
read the monitor's findings history of the window when a table is named; then
:func:`hyperpod_debugger.remediation.culprits.diagnose` weighs it all. Read-only, like every run.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from hyperpod_debugger.aws import sagemaker
from hyperpod_debugger.aws.clients import AwsClients
from hyperpod_debugger.aws.errors import ApiCallError, CredentialsError
from hyperpod_debugger.aws.k8s_jobs import NAME, as_training_job, instance_of_node, node_evidence
from hyperpod_debugger.checks.logs import hma_detections
from hyperpod_debugger.domain.jobs import JobEvidence, TrainingJob
from hyperpod_debugger.domain.model import Tag
from hyperpod_debugger.lifecycle.findings import TransitionKind
from hyperpod_debugger.probe.options import ProbeOptions
from hyperpod_debugger.remediation.culprits import diagnose, window
from hyperpod_debugger.slurm.jobs import HISTORY_DAYS, JOB_ID, find_job
from hyperpod_debugger.slurm.query import node_instances, read_jobs
from hyperpod_debugger.triage import TriageRequest, triage_with_observation

if TYPE_CHECKING:
    from collections.abc import Callable

    from hyperpod_debugger.checks.logs import HmaDetection
    from hyperpod_debugger.domain.jobs import JobDiagnosis
    from hyperpod_debugger.domain.model import TriageReport
    from hyperpod_debugger.domain.observations import Cluster, ClusterEvent, ClusterNode, ClusterObservation, Observed
    from hyperpod_debugger.store.findings import FindingStore, HistoryRecord

#: The triage's checks that sum up events and detections this run reads one by one, with their times.
_READ_WITH_TIMES = frozenset({"cluster.events", "logs.hma"})
#: HyperPod event levels that count against a node, and what they weigh.
_EVENT_TAGS = {"error": Tag.FAIL, "warn": Tag.WARN, "warning": Tag.WARN}


@dataclass(frozen=True, slots=True)
class JobRequest:
    cluster: str
    region: str
    #: the Slurm job id (``4123``, ``4123_7``), or ``namespace/name`` of a PyTorchJob
    job: str
    kind: Literal["slurm", "pytorchjob"] = "slurm"
    now: datetime | None = None
    #: probe the job's nodes that still run (their kernel log, GPUs, EFA now)
    probe: bool = True
    probe_options: ProbeOptions = ProbeOptions()
    progress: Callable[[str], None] | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class JobRun:
    """The diagnosis, or why there is none (the job could not be read), and the scoped triage beside it."""

    diagnosis: JobDiagnosis | None
    error: str | None = None
    error_kind: Literal["invalid_argument", "job_not_found", "could_not_read", "cluster"] | None = None
    triage: TriageReport | None = None


def diagnose_job(req: JobRequest, clients: AwsClients | None = None, store: FindingStore | None = None) -> JobRun:
    """The diagnosis of one Slurm job or PyTorchJob (``store``: the monitor's findings table, for the window's
    history)."""
    refused = refuse(req.job, req.kind)
    if refused:
        return JobRun(None, refused, "invalid_argument")
    now = req.now or datetime.now(UTC)
    clients = clients or AwsClients(req.region)
    say = req.progress or (lambda _: None)
    say(f"reading cluster {req.cluster} in {req.region}")
    try:
        cluster = sagemaker.describe_cluster(clients, req.cluster)
        nodes = sagemaker.list_cluster_nodes(clients, cluster)
    except (sagemaker.ClusterNotFound, ApiCallError, CredentialsError) as exc:
        return JobRun(None, f"Cannot read cluster {req.cluster!r}: {exc}", "cluster")
    wanted = "Slurm" if req.kind == "slurm" else "EKS"
    if cluster.orchestrator != wanted:
        return JobRun(
            None, f"cluster {cluster.name} is orchestrated by {cluster.orchestrator}, not {wanted}", "cluster"
        )
    say(f"reading job {req.job} on the {'Slurm controller' if req.kind == 'slurm' else 'Kubernetes API'}")
    found = (
        _read_job(req, clients, cluster, nodes)
        if req.kind == "slurm"
        else _read_pytorchjob(req, clients, cluster, nodes)
    )
    if isinstance(found, JobRun):
        return found
    job, told, said_job = found
    start, _ = window(job, now)
    say(f"triaging the job's {len(job.nodes)} node(s) over its window")
    report, obs = triage_with_observation(_scoped(req, cluster, job, nodes, now, start), clients)
    evidence, read, unknown = _evidence(job, report, obs, now, start)
    evidence += told
    read[0:1] = said_job[:1]
    unknown += said_job[1:]
    if store is not None:
        history, said = _history(store, cluster, job, start, now)
        evidence += history
        read.append(said)
    diagnosis = diagnose(job, evidence, now=now, read=read, unknown=unknown)
    return JobRun(_with_verdicts(diagnosis, report), triage=report)


def refuse(job: str, kind: str) -> str | None:
    """Why ``job`` cannot name a job of ``kind`` (None: it can)."""
    if kind == "slurm":
        return None if JOB_ID.match(job) else f"{job!r} is not a Slurm job id (4123, 4123_7 or 4123+1)"
    namespace, _, name = job.partition("/")
    if not (NAME.match(namespace) and NAME.match(name)):
        return f"{job!r} is not NAMESPACE/NAME of a PyTorchJob (lowercase letters, digits and '-')"
    return None


#: what a job reader returns: the job, the orchestrator's own evidence, and what was read (then what was not)
_Found = tuple[TrainingJob, list[JobEvidence], list[str]]


def _read_pytorchjob(
    req: JobRequest, clients: AwsClients, cluster: Cluster, nodes: list[ClusterNode]
) -> _Found | JobRun:
    """The PyTorchJob, its pods and their events through the EKS cluster's Kubernetes API (GETs only)."""
    from hyperpod_debugger.aws import eks
    from hyperpod_debugger.aws.collector import Collector

    namespace, _, name = req.job.partition("/")
    collector = Collector(clients)
    eks_arn = cluster.eks_cluster_arn or ""
    read = collector.pytorchjob(collector.observe(lambda: eks.describe_cluster(clients, eks_arn)), namespace, name)
    if not read.available or read.value is None:
        if read.failure is not None and read.failure.kind == "not_found":
            return JobRun(
                None,
                f"PyTorchJob {req.job} is not in the EKS cluster (or the Kubeflow training operator's PyTorchJob "
                f"resource is not installed): {read.failure.describe()}",
                "job_not_found",
            )
        return JobRun(None, f"could not read PyTorchJob {req.job}: {_why(read)}", "could_not_read")
    known = {n.eks_name: n.instance_id for n in nodes}

    def instance_of(node: str) -> str | None:
        return instance_of_node(node, known)

    job = as_training_job(read.value, namespace, name, instance_of)
    said = [f"PyTorchJob {req.job} and its {len(read.value.pods)} pod(s) through the Kubernetes API"]
    if not read.value.events.available:
        said.append(f"the events of the job's pods: {_why(read.value.events)}")
    return job, node_evidence(read.value, instance_of), said


def _read_job(req: JobRequest, clients: AwsClients, cluster: Cluster, nodes: list[ClusterNode]) -> _Found | JobRun:
    from hyperpod_debugger.probe.pinned import ssm_runner  # the session runner: loaded when a job is read

    read = read_jobs(
        clients,
        cluster,
        nodes,
        runner_factory=ssm_runner,
        timeout=req.probe_options.timeout,
        documents=req.probe_options.documents,
    )
    if not read.available or read.value is None:
        why = _why(read)
        return JobRun(None, f"could not read the jobs on the Slurm controller: {why}", "could_not_read")
    job = find_job(read.value, req.job)
    if job is None:
        said = "; ".join(f"{k}: {v}" for k, v in read.value.errors.items())
        return JobRun(
            None,
            f"job {req.job} is not among the jobs the controller holds nor the last {HISTORY_DAYS} days of "
            f"accounting{f' ({said})' if said else ''}; `sacct -j {req.job}` on the controller reaches further back",
            "job_not_found",
        )
    by_name = node_instances(nodes)
    job = replace(job, nodes=tuple(replace(n, instance_id=by_name.get(n.name)) for n in job.nodes))
    return job, [], [f"job {job.job_id} on the Slurm controller ({len(job.nodes)} node(s))"]


def _scoped(
    req: JobRequest, cluster: Cluster, job: TrainingJob, nodes: list[ClusterNode], now: datetime, start: datetime
) -> TriageRequest:
    """The triage of the job's nodes: events and logs over the job's window; probes of the nodes still running."""
    running = {n.instance_id for n in nodes if n.status == "Running"}
    probe_nodes = tuple(i for i in job.instance_ids if i in running)
    span = max(now - start, timedelta(hours=1))
    return TriageRequest(
        cluster=cluster.arn,
        region=cluster.region,
        now=now,
        event_window=span,
        log_window=max(span, timedelta(days=1)),
        probe=req.probe and bool(probe_nodes),
        probe_options=req.probe_options,
        nodes=probe_nodes or job.instance_ids,
        progress=req.progress,
    )


def _evidence(
    job: TrainingJob, report: TriageReport, obs: ClusterObservation | None, now: datetime, start: datetime
) -> tuple[list[JobEvidence], list[str], list[str]]:
    """HyperPod's events, the health agent's detections and what the triage finds now, as evidence; with what
    was read and what could not be, in words."""
    evidence: list[JobEvidence] = []
    read = [f"job {job.job_id} ({len(job.nodes)} node(s))"]
    unknown: list[str] = []
    span = f"{start:%Y-%m-%d %H:%M} to {now:%Y-%m-%d %H:%M} UTC"
    if obs is not None and obs.events.available and obs.events.value is not None:
        evidence += [_event(e) for e in obs.events.value.events if (e.level or "").lower() in _EVENT_TAGS]
        read.append(f"HyperPod's cluster events, {span}")
    elif obs is not None:
        unknown.append(f"HyperPod's cluster events: {_why(obs.events)}")
    if obs is not None and obs.logs.hma_events.available and obs.logs.hma_events.value is not None:
        for found in hma_detections(obs.logs.hma_events.value, start):
            evidence.append(
                JobEvidence(
                    source="health_agent",
                    check="logs.hma",
                    tag=Tag.FAIL,
                    message=f"the health agent detected {_detected(found)}",
                    instance_id=found.stream.instance_id,
                    at=found.timestamp,
                    instant=True,
                    section="F",
                )
            )
        read.append(f"the health agent's log, {span}")
    elif obs is not None:
        unknown.append(f"the health agent's log: {_why(obs.logs.hma_events)}")
    evidence += _now(report, job, now)
    problems = sum(1 for f in report.findings if f.is_problem)
    read.append(f"a triage of the cluster scoped to the job's nodes, now ({problems} problem finding(s))")
    return evidence, read, unknown


def _with_verdicts(diagnosis: JobDiagnosis, report: TriageReport) -> JobDiagnosis:
    """Each culprit's next step and commands from its node's verdict in the triage (the ladder decides the rung
    from everything on the node, not from one piece of evidence): the suggested commands of the node's findings
    that the verdict names, with their blast radius and IaC note."""
    verdicts = {v.instance_id: v for v in report.node_verdicts}
    culprits = []
    for culprit in diagnosis.culprits:
        verdict = verdicts.get(culprit.instance_id)
        if verdict is None:
            culprits.append(culprit)
            continue
        named = {verdict.next_command, verdict.then_command} - {None}
        offered = [c for f in report.findings if f.instance_id == culprit.instance_id for c in f.suggested_commands]
        commands = tuple({c.command: c for c in offered if c.command in named}.values())
        culprits.append(replace(culprit, next_step=culprit.next_step or verdict.next_step, commands=commands))
    return replace(diagnosis, culprits=tuple(culprits))


def _now(report: TriageReport, job: TrainingJob, now: datetime) -> list[JobEvidence]:
    """The triage's problems on the job's nodes and the cluster, as seen now (from ``now`` on)."""
    verdicts = {v.instance_id: v for v in report.node_verdicts}
    nodes = set(job.instance_ids)
    out = []
    for finding in report.findings:
        if finding.instance_id is not None and finding.instance_id not in nodes:
            continue
        if finding.check in _READ_WITH_TIMES:
            continue  # their events and detections are read above, each with its own time
        verdict = verdicts.get(finding.instance_id or "")
        out.append(
            JobEvidence(
                source="probe_now",
                check=finding.check,
                tag=finding.tag,
                message=finding.message,
                instance_id=finding.instance_id,
                at=now,
                priority=finding.priority,
                section=finding.section,
                next_step=verdict.next_step if verdict else finding.next_step,
            )
        )
    return out


def _detected(found: HmaDetection) -> str:
    """``Xid 79 (XID Error)``, or the agent's own words when it names no Xid."""
    if found.codes:
        return f"{', '.join(f'Xid {code}' for code in found.codes)} ({found.describe()})"
    return found.describe()


def _event(event: ClusterEvent) -> JobEvidence:
    detail = "; ".join(event.failure_messages)
    return JobEvidence(
        source="hyperpod_event",
        check="hyperpod.event",
        tag=_EVENT_TAGS[(event.level or "").lower()],
        message=f"HyperPod {event.level} event: {event.description}{f' ({detail})' if detail else ''}",
        instance_id=event.instance_id,
        at=event.time,
        instant=True,
        section="F",
    )


def _history(
    store: FindingStore, cluster: Cluster, job: TrainingJob, start: datetime, now: datetime
) -> tuple[list[JobEvidence], str]:
    """The monitor's findings over the window: each finding from when it opened to when it resolved, and the
    findings still open (opened before the window, held through it)."""
    records = store.cluster_history(cluster.arn, start - timedelta(days=HISTORY_DAYS), now)
    opened: dict[str, HistoryRecord] = {}
    spans: list[tuple[HistoryRecord, datetime | None]] = []
    for record in sorted(records, key=lambda r: r.at):
        if record.transition in (TransitionKind.NEW, TransitionKind.REOPENED):
            opened[record.fingerprint] = record
        elif record.transition is TransitionKind.RESOLVED and record.fingerprint in opened:
            spans.append((opened.pop(record.fingerprint), _parse(record.at)))
    spans += [(record, None) for record in opened.values()]
    evidence = [
        JobEvidence(
            source="finding",
            check=record.check,
            tag=record.tag,
            message=record.message,
            instance_id=record.instance_id,
            at=_parse(record.at),
            until=until,
            priority=record.priority,
            section=record.section,
        )
        for record, until in spans
    ]
    return evidence, f"the monitor's findings history ({len(records)} transitions)"


def _parse(value: str) -> datetime | None:
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _why(observed: Observed[Any]) -> str:
    """Why ``observed`` has no value, with the service's own words (an RBAC message names what was denied)."""
    if observed.failure is not None:
        said = observed.failure.describe()
        detail = observed.failure.message
        return said if not detail or detail in said else f"{said}: {detail}"
    return observed.skipped or "not read"
