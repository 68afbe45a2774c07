"""Why did the job die: the job's nodes and time window against what was read about them.

:func:`diagnose` is pure. It keeps the evidence whose time overlaps the job's window (from a margin before the
job started to a margin after it ended, or now), and decides in this order:

1. **A node**: a failure (FAIL) on one of the job's nodes inside the window makes that node a likely culprit,
   whatever read it (a finding, a HyperPod event, the health agent, a probe now); a warning alone makes it a
   possible one. A problem every one of the job's nodes shows (two or more) is not one node's: it is common.
2. **The cluster**: a cluster-wide problem in the window (an EFA security group, a version skew), or one all
   the job's nodes share, when no node stands out.
3. **The job itself**: the job failed, nothing read on its nodes or the cluster explains it, and its
   orchestrator does not blame a node: its own exit (exit code, out of memory, time limit) is the lead.
4. **Unexplained**: the orchestrator says a node ended the job (Slurm's NODE_FAIL) or nothing at all fits:
   said so, with what was read and what could not be.

UNKNOWN evidence is never a culprit: it is listed as what could not be read. Problems of a kind that cannot end a
running job (capacity, lifecycle scripts, instance group settings, our own access, log collection:
:data:`JOB_SECTIONS`) are left out of the weighing.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from hyperpod_debugger.domain.jobs import Culprit, JobDiagnosis, JobEvidence, Placed, TrainingJob
from hyperpod_debugger.domain.model import Tag

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from hyperpod_debugger.domain.jobs import DiagnosisKind

#: A fault that opened shortly before the job started can be what killed it at start (NCCL init, the first
#: collective): the window opens this long before the start.
BEFORE = timedelta(minutes=15)
#: Detection lags the fault (a sweep every 15 minutes, events coalesced for 100 s): the window closes this long
#: after the job ended.
AFTER = timedelta(minutes=30)
#: Runbook sections (their letter) whose problems can end a running job: EFA, the network, software versions,
#: hardware and accelerators, Slurm, resources, the container runtime, the kernel, pod networking. Capacity,
#: lifecycle scripts, instance group settings, our own access (SSM) and log collection do not end a job
#: that is running, so they never make a culprit or a common cause.
JOB_SECTIONS = frozenset("ABEFGHIMNO")
#: States whose words say the job ran out of memory or time: its own limits, not a node's fault.
_OWN_LIMITS = {
    "OUT_OF_MEMORY": "it ran out of memory (Slurm's OUT_OF_MEMORY: the job's cgroup limit, § I.3)",
    "TIMEOUT": "it reached its time limit (Slurm's TIMEOUT)",
    "DEADLINE": "it reached its deadline (Slurm's DEADLINE)",
    "CANCELLED": "it was cancelled (a person or a script ran scancel)",
    "PREEMPTED": "it was preempted by a job of higher priority",
}


def window(
    job: TrainingJob, now: datetime, *, before: timedelta = BEFORE, after: timedelta = AFTER
) -> tuple[datetime, datetime]:
    """The job's window: from ``before`` its start (or ``now`` less a day when it has none) to ``after`` its end
    (or ``now`` while it runs)."""
    start = (job.start or now - timedelta(days=1)) - before
    end = min(now, (job.end + after)) if job.end is not None and job.ended else now
    return start, max(start, end)


def diagnose(
    job: TrainingJob,
    evidence: Iterable[JobEvidence],
    *,
    now: datetime,
    read: Sequence[str] = (),
    unknown: Sequence[str] = (),
    before: timedelta = BEFORE,
    after: timedelta = AFTER,
) -> JobDiagnosis:
    """The diagnosis of ``job`` from ``evidence`` (every source's, already read); ``read`` and ``unknown`` say
    in words what was read and what could not be, and are repeated in the answer."""
    start, end = window(job, now, before=before, after=after)
    gaps = list(unknown)
    gaps += [
        f"node {n.name}: its instance could not be resolved, so nothing about it was read"
        for n in job.nodes
        if not n.instance_id
    ]
    placed, cluster_wide = _placed(job, evidence, start, end, gaps)
    shared = _shared_by_all(job, placed)
    common = [p for p in cluster_wide if p.evidence.tag in (Tag.FAIL, Tag.WARN)]
    common += [p for checks in shared.values() for p in checks]
    shared_checks = set(shared)
    culprits = _culprits(job, placed, shared_checks)
    kind, conclusion = _conclude(job, culprits, common, now)
    notes = tuple(
        f"{n.name}: {note}" for n in job.nodes for note in n.notes if not any(c.node_name == n.name for c in culprits)
    )
    return JobDiagnosis(
        job=job,
        window_start=start,
        window_end=end,
        kind=kind,
        conclusion=conclusion,
        culprits=tuple(culprits),
        common=tuple(_unique(common)),
        read=tuple(read),
        unknown=tuple(dict.fromkeys(gaps)),
        notes=notes,
    )


def _placed(
    job: TrainingJob, evidence: Iterable[JobEvidence], start: datetime, end: datetime, gaps: list[str]
) -> tuple[dict[str, list[Placed]], list[Placed]]:
    """Evidence inside the window: per job node (instance id), and cluster-wide. UNKNOWN evidence and evidence
    without a time go to ``gaps``; other nodes' evidence is left out."""
    nodes = set(job.instance_ids)
    per_node: dict[str, list[Placed]] = defaultdict(list)
    cluster: list[Placed] = []
    for item in evidence:
        if item.instance_id is not None and item.instance_id not in nodes:
            continue
        where = f"node {item.instance_id}" if item.instance_id else "the cluster"
        if item.tag is Tag.UNKNOWN:
            gaps.append(f"{where}: {item.check} could not be read ({item.message})")
            continue
        if item.tag not in (Tag.FAIL, Tag.WARN) or (item.section and item.section[0] not in JOB_SECTIONS):
            continue
        if item.at is None:
            gaps.append(
                f"{where}: {item.check} has no time, so it cannot be placed in the job's window ({item.message})"
            )
            continue
        if not _overlaps(item, start, end):
            continue
        entry = Placed(item, when(item, job))
        if item.instance_id is None:
            cluster.append(entry)
        else:
            per_node[item.instance_id].append(entry)
    return per_node, cluster


def _overlaps(item: JobEvidence, start: datetime, end: datetime) -> bool:
    assert item.at is not None
    if item.instant or item.until is not None:
        until = item.at if item.instant else item.until
        assert until is not None
        return item.at <= end and until >= start
    return item.at <= end  # still open: it held from ``at`` on


def when(item: JobEvidence, job: TrainingJob) -> str:
    """Where ``item`` falls against the job's start and end, in words."""
    assert item.at is not None
    at = item.at
    stamp = at.strftime("%Y-%m-%d %H:%M:%S UTC")
    if item.source == "probe_now":  # read by this run: since when it holds is not known
        if job.end is not None and job.ended and at > job.end:
            return f"seen now, {stamp}, {_minutes(at - job.end)} after the job ended"
        return f"seen now, {stamp}, while the job runs"
    if job.start is not None and at < job.start:
        if item.instant or (item.until is not None and item.until < job.start):
            return f"{stamp}, {_minutes(job.start - at)} before the job started"
        return f"open since {stamp} ({_minutes(job.start - at)} before the job started), through the job"
    if job.end is not None and job.ended and at > job.end:
        return f"{stamp}, {_minutes(at - job.end)} after the job ended (detection lags the fault)"
    if job.start is not None:
        return f"{stamp}, {_minutes(at - job.start)} into the job"
    return stamp


def _minutes(delta: timedelta) -> str:
    minutes = int(delta.total_seconds() // 60)
    if minutes < 1:
        return "under a minute"
    if minutes < 120:
        return f"{minutes} min"
    hours, rest = divmod(minutes, 60)
    return f"{hours} h {rest} min" if hours < 48 else f"{hours // 24} days"


def _shared_by_all(job: TrainingJob, placed: dict[str, list[Placed]]) -> dict[str, list[Placed]]:
    """Checks with a problem on every one of the job's nodes (two or more): one entry per check."""
    nodes = job.instance_ids
    if len(nodes) < 2:
        return {}
    by_check: dict[str, dict[str, Placed]] = defaultdict(dict)
    for instance_id, entries in placed.items():
        for entry in entries:
            by_check[entry.evidence.check].setdefault(instance_id, entry)
    return {check: [seen[nodes[0]]] for check, seen in by_check.items() if set(seen) >= set(nodes)}


def _culprits(job: TrainingJob, placed: dict[str, list[Placed]], shared: set[str]) -> list[Culprit]:
    """Each job node with its own problems in the window (shared ones excluded), failures first."""
    found = []
    for node in job.nodes:
        entries = [p for p in placed.get(node.instance_id or "", []) if p.evidence.check not in shared]
        if not entries:
            continue
        entries.sort(key=_weight)
        strongest = entries[0].evidence
        found.append(
            Culprit(
                instance_id=node.instance_id or "",
                node_name=node.name,
                strength="likely" if strongest.tag is Tag.FAIL else "possible",
                evidence=tuple(entries),
                next_step=next((p.evidence.next_step for p in entries if p.evidence.next_step), None),
            )
        )
    found.sort(key=lambda c: (c.strength != "likely", _weight(c.evidence[0]), c.node_name))
    return found


def _weight(entry: Placed) -> tuple[int, int, str]:
    item = entry.evidence
    priority = int(item.priority.value[1]) if item.priority is not None else 9
    return (0 if item.tag is Tag.FAIL else 1, priority, item.check)


def _conclude(
    job: TrainingJob, culprits: list[Culprit], common: list[Placed], now: datetime
) -> tuple[DiagnosisKind, str]:
    likely = [c for c in culprits if c.strength == "likely"]
    if likely:
        names = ", ".join(f"{c.node_name} ({c.instance_id})" for c in likely)
        first = likely[0].evidence[0]
        return "node", (
            f"{'Node' if len(likely) == 1 else 'Nodes'} {names} likely ended the job: {first.evidence.message} "
            f"({first.when})."
        )
    if common:
        first = common[0]
        scope = "the cluster" if first.evidence.instance_id is None else f"all {len(job.nodes)} of the job's nodes"
        return (
            "cluster",
            f"No single node stands out: {scope} had a problem in the job's window: "
            f"{first.evidence.message} ({first.when}).",
        )
    possible = ", ".join(f"{c.node_name} ({c.instance_id})" for c in culprits)
    hedge = f" Only warnings were read, on {possible}: possible, not shown to be the cause." if culprits else ""
    if not job.ended:
        return "running", f"The job is still {job.state.lower()} and nothing read on its nodes shows a failure.{hedge}"
    if not job.failed:
        return "own", f"The job ended {job.state} (exit code {job.exit_code or 'unknown'}): nothing to blame.{hedge}"
    if job.node_ended_it:
        return "unexplained", (
            f"{job.orchestrator} says a node ended the job ({job.state}), but nothing read places a fault on one of "
            f"its nodes in the window; see what could not be read below.{hedge}"
        )
    why = _own_limit(job) or f"it exited with code {job.exit_code or 'unknown'}"
    return "own", (
        f"Nothing read on the job's {len(job.nodes)} node(s) or the cluster explains it, and {why}: the job itself is "
        f"the lead (its logs, its last change).{hedge}"
    )


def _own_limit(job: TrainingJob) -> str | None:
    """The job's own limit, when its state or its orchestrator's words name one."""
    state = job.state.upper().split()[0] if job.state.strip() else ""
    if state in _OWN_LIMITS:
        return _OWN_LIMITS[state]
    words = " ".join([job.reason or "", *(note for node in job.nodes for note in node.notes)])
    if "OOMKilled" in words:
        return "a container was killed for going over its memory limit (OOMKilled, § I.3)"
    return None


def _unique(entries: list[Placed]) -> list[Placed]:
    seen: set[tuple[str, str | None]] = set()
    out = []
    for entry in entries:
        key = (entry.evidence.check, entry.evidence.instance_id)
        if key not in seen:
            seen.add(key)
            out.append(entry)
    return out
