"""The findings-store lifecycle, pure: what a sweep changes, never how it is written.

A stored finding is keyed by its *fingerprint*: cluster, node, check and a normalised signature
of the message (numbers, ids, times and sizes replaced by placeholders), so the same problem seen
by the next sweep maps to the same item even when a counter or a timestamp in its message moved.

:func:`plan_sweep` compares what is stored with one :class:`~hyperpod_debugger.domain.model.TriageReport`
and decides, per fingerprint, one of the transitions below. The DynamoDB adapter
(``hyperpod_debugger.store.findings``) writes the plan with conditional writes.

* NEW: a problem not stored before.
* ESCALATED: a stored problem whose priority rose (P2→P1→P0), or same priority and tag rose
  (UNKNOWN→WARN→FAIL). An acknowledged finding that escalates is OPEN again.
* UNCHANGED: seen again, no escalation. Only a heartbeat (last_seen, count, latest message and
  evidence) is written, and at most once per ``heartbeat`` interval per finding.
* RESOLVED: a stored open problem not seen again although its check RAN everywhere in this run;
  a skipped or unknown check resolves nothing, nor does a run that failed (``report.error``), and
  a focused run (``report.scope_node``) resolves only findings of that node, and an on-node
  finding (``probe.*``) is resolved only when its node's probe document was evaluated in this run
  (``coverage.probed_nodes``): a sweep probes a rotating subset of a large cluster. A check whose
  coverage names its nodes (HyperPod's verdicts in a window of events) resolves only on those. A run that read
  the whole node list (``nodes_present``) resolves every finding of a node no longer in it.
* REOPENED: a RESOLVED fingerprint seen again (first_seen stays where it was).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, Literal

from hyperpod_debugger.domain.model import CheckStatus, Finding, Priority, Tag, TriageReport, trim_evidence

HEARTBEAT = timedelta(hours=1)
EVIDENCE_MAX_LINES = 20
EVIDENCE_MAX_BYTES = 4096
FINGERPRINT_CHARS = 32


class State(StrEnum):
    OPEN = "OPEN"
    ACKNOWLEDGED = "ACKNOWLEDGED"
    RESOLVED = "RESOLVED"


class TransitionKind(StrEnum):
    NEW = "NEW"
    ESCALATED = "ESCALATED"
    UNCHANGED = "UNCHANGED"
    RESOLVED = "RESOLVED"
    REOPENED = "REOPENED"
    ACKNOWLEDGED = "ACKNOWLEDGED"


#: Transitions that deserve a notification (one transition, one notification).
NOTIFYING = frozenset({TransitionKind.NEW, TransitionKind.ESCALATED, TransitionKind.RESOLVED, TransitionKind.REOPENED})

_PRIORITY_RANK = {Priority.P2: 0, Priority.P1: 1, Priority.P0: 2}
_TAG_RANK = {Tag.UNKNOWN: 0, Tag.WARN: 1, Tag.FAIL: 2}

# --- fingerprint -----------------------------------------------------------------------------

_NORMALISERS: tuple[tuple[re.Pattern[str], str], ...] = (
    # ISO-8601 and syslog / journal style timestamps.
    (
        re.compile(
            r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?",
            re.IGNORECASE,
        ),
        "<time>",
    ),
    (re.compile(r"\b\d{4}-\d{2}-\d{2}\b"), "<time>"),
    (re.compile(r"\b(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)\s+\d{1,2}\s+\d{2}:\d{2}:\d{2}\b"), "<time>"),
    (re.compile(r"\b\d{1,2}:\d{2}:\d{2}(?:\.\d+)?\b"), "<time>"),
    # PCI bus ids (GPU / NIC addresses: 00000000:3B:00.0).
    (re.compile(r"\b[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]\b", re.IGNORECASE), "<pci>"),
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.IGNORECASE), "<uuid>"),
    (re.compile(r"\bi-[0-9a-f]{8,17}\b", re.IGNORECASE), "<instance>"),
    (re.compile(r"\b0x[0-9a-f]+\b", re.IGNORECASE), "<hex>"),
    # Byte counts: "12 GiB", "4096 bytes", "1.5MB".
    (
        re.compile(r"\b\d+(?:\.\d+)?(?:\s*(?:[KMGTPE]i?B|bytes?)|\s+B)\b", re.IGNORECASE),
        "<bytes>",
    ),
    # Bare hex ids of 8+ characters holding a digit (sg-0abc1234def, ENI suffixes, GPU UUID parts).
    (re.compile(r"(?<![0-9a-z])(?=[0-9a-f]*\d)[0-9a-f]{8,}(?![0-9a-z])", re.IGNORECASE), "<hex>"),
    (re.compile(r"\d+(?:\.\d+)?"), "<n>"),
)


#: On-node checks (the probe's evaluators and the session outcome) share this prefix.
ON_NODE_PREFIX = "probe."


def is_on_node(check: str) -> bool:
    """A check judged from a node's probe document: it says something only about nodes that were probed."""
    return check.startswith(ON_NODE_PREFIX)


def signature(message: str) -> str:
    """The message with its volatile parts replaced by placeholders, whitespace collapsed."""
    text = " ".join(message.split())
    for pattern, placeholder in _NORMALISERS:
        text = pattern.sub(placeholder, text)
    return text


def fingerprint(finding: Finding, *, cluster_arn: str | None = None) -> str:
    """Stable id of a problem across sweeps: SHA-256 over cluster, node, check and signature."""
    cluster = cluster_arn or finding.cluster_arn or finding.cluster_name or "-"
    parts = (cluster, finding.instance_id or "-", finding.check, signature(finding.message))
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:FINGERPRINT_CHARS]


# --- stored shapes -------------------------------------------------------------------------


def iso(moment: datetime) -> str:
    """UTC, millisecond precision, ``Z`` suffix: sorts lexically in time order."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def parse_iso(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def bounded_evidence(lines: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """What the store keeps: at most :data:`EVIDENCE_MAX_LINES` lines and :data:`EVIDENCE_MAX_BYTES` bytes."""
    return tuple(trim_evidence(lines, max_lines=EVIDENCE_MAX_LINES, max_bytes=EVIDENCE_MAX_BYTES, say_more=False))


@dataclass(frozen=True)
class StoredFinding:
    fingerprint: str
    cluster_arn: str
    instance_id: str | None
    check: str
    section: str | None
    tag: Tag
    priority: Priority | None
    state: State
    first_seen: str
    last_seen: str
    count: int
    message: str
    evidence: tuple[str, ...] = ()
    suggested_commands: tuple[dict[str, Any], ...] = ()
    #: Optimistic-locking version of the stored item; every write adds one.
    version: int = 0
    acknowledged_by: str | None = None
    #: The cluster's name when the finding was stored (alerts name clusters the way people do).
    cluster_name: str | None = None
    #: What made the run that wrote the last transition look: ``event`` / ``sweep`` / ``log``, in
    #: words ("Node Health Event for i-…", "the scheduled sweep"), and the node it named
    trigger_kind: str | None = None
    trigger: str | None = None
    trigger_node: str | None = None
    #: What the node's verdict is built from (items stored before these were kept read as None): the
    #: instance group, the rung the evidence asks for, the one-line next step, and the likely cause stated
    instance_group: str | None = None
    node_action: str | None = None
    next_step: str | None = None
    root_cause: str | None = None
    #: what the history groups by besides the group (absent on items stored before they were kept)
    instance_type: str | None = None
    node_logical_id: str | None = None

    @property
    def node(self) -> str:
        """The history key: the instance id, or the cluster for a cluster-wide finding."""
        return self.instance_id or self.cluster_arn


@dataclass(frozen=True)
class Trigger:
    """What made the monitor look, said in its alerts: an event (and the node it names), the scheduled
    sweep, or a health-agent log record."""

    kind: Literal["event", "sweep", "log"]
    what: str
    node: str | None = None


#: The scheduled sweep's trigger.
SWEEP = Trigger("sweep", "the scheduled sweep")


@dataclass(frozen=True)
class PlannedChange:
    """One write: ``item`` is the new image; ``previous`` the stored image it replaces (None for NEW)."""

    kind: TransitionKind
    item: StoredFinding
    previous: StoredFinding | None = None


@dataclass(frozen=True)
class Transition:
    """A transition that actually happened (the conditional write won)."""

    kind: TransitionKind
    fingerprint: str
    cluster_arn: str
    instance_id: str | None
    at: str
    finding: StoredFinding
    previous_priority: Priority | None = None

    @property
    def notify(self) -> bool:
        return self.kind in NOTIFYING


@dataclass(frozen=True)
class SweepCoverage:
    """What one sweep could look at: check ids by status (a check appears once, worst status wins)."""

    ran: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()
    unknown: tuple[str, ...] = ()
    scope_node: str | None = None
    error: str | None = None

    def counts(self) -> dict[str, int]:
        return {"ran": len(self.ran), "skipped": len(self.skipped), "unknown": len(self.unknown)}


@dataclass
class SweepPlan:
    cluster_arn: str
    at: str
    coverage: SweepCoverage
    new: list[PlannedChange] = field(default_factory=list)
    escalated: list[PlannedChange] = field(default_factory=list)
    unchanged: list[PlannedChange] = field(default_factory=list)
    resolved: list[PlannedChange] = field(default_factory=list)
    reopened: list[PlannedChange] = field(default_factory=list)
    #: Unchanged findings whose heartbeat was not due: nothing is written for them.
    heartbeat_skipped: int = 0

    def changes(self) -> list[PlannedChange]:
        return [*self.new, *self.reopened, *self.escalated, *self.unchanged, *self.resolved]


# --- planning ------------------------------------------------------------------------------


def _severity(tag: Tag, priority: Priority | None) -> tuple[int, int]:
    return (_PRIORITY_RANK[priority] if priority else -1, _TAG_RANK.get(tag, -1))


def escalated(previous: StoredFinding, finding: Finding) -> bool:
    """Priority rose (P2→P1→P0), or the priority held and the tag rose (UNKNOWN→WARN→FAIL)."""
    return _severity(finding.tag, finding.priority) > _severity(previous.tag, previous.priority)


def sweep_coverage(report: TriageReport) -> SweepCoverage:
    status: dict[str, CheckStatus] = {}
    worst = {CheckStatus.RAN: 0, CheckStatus.SKIPPED: 1, CheckStatus.UNKNOWN: 2}
    for entry in report.coverage.checks:
        current = status.get(entry.check)
        if current is None or worst[CheckStatus(entry.status)] > worst[current]:
            status[entry.check] = CheckStatus(entry.status)
    by = {s: tuple(sorted(c for c, v in status.items() if v is s)) for s in CheckStatus}
    return SweepCoverage(
        ran=by[CheckStatus.RAN],
        skipped=by[CheckStatus.SKIPPED],
        unknown=by[CheckStatus.UNKNOWN],
        scope_node=report.scope_node,
        error=report.error.kind if report.error else None,
    )


def _image(fp: str, cluster: str, finding: Finding, now: str, cluster_name: str | None = None) -> StoredFinding:
    return StoredFinding(
        fingerprint=fp,
        cluster_arn=cluster,
        cluster_name=finding.cluster_name or cluster_name,
        instance_id=finding.instance_id,
        check=finding.check,
        section=finding.section,
        tag=finding.tag,
        priority=finding.priority,
        state=State.OPEN,
        first_seen=now,
        last_seen=now,
        count=1,
        message=finding.message,
        evidence=bounded_evidence(finding.evidence),
        suggested_commands=tuple(c.model_dump(mode="json") for c in finding.suggested_commands),
        version=1,
        instance_group=finding.instance_group,
        node_action=finding.node_action,
        next_step=finding.next_step,
        root_cause=finding.root_cause,
        instance_type=finding.instance_type,
        node_logical_id=finding.node_logical_id,
    )


def _seen_again(previous: StoredFinding, finding: Finding, now: str, state: State) -> StoredFinding:
    return replace(
        previous,
        tag=finding.tag,
        priority=finding.priority,
        section=finding.section,
        state=state,
        last_seen=now,
        count=previous.count + 1,
        message=finding.message,
        evidence=bounded_evidence(finding.evidence),
        suggested_commands=tuple(c.model_dump(mode="json") for c in finding.suggested_commands),
        version=previous.version + 1,
        acknowledged_by=previous.acknowledged_by if state is State.ACKNOWLEDGED else None,
        cluster_name=previous.cluster_name or finding.cluster_name,
        instance_group=finding.instance_group or previous.instance_group,
        node_action=finding.node_action,
        next_step=finding.next_step,
        root_cause=finding.root_cause,
        instance_type=finding.instance_type or previous.instance_type,
        node_logical_id=finding.node_logical_id or previous.node_logical_id,
    )


def cluster_key(report: TriageReport) -> str:
    return report.cluster.arn or report.cluster.name


def plan_sweep(
    previous_open: dict[str, StoredFinding],
    report: TriageReport,
    now: datetime,
    *,
    heartbeat: timedelta = HEARTBEAT,
    nodes_present: frozenset[str] | set[str] | None = None,
    trigger: Trigger | None = None,
    node_triggers: Mapping[str, Trigger] | None = None,
) -> SweepPlan:
    """Decide every transition one report causes; each written image names ``trigger``, what made the run look
    (or, for a finding on a node in ``node_triggers``, what named that node: one event of a window).

    ``previous_open`` maps fingerprint → stored finding for the report's cluster. It normally holds
    the OPEN and ACKNOWLEDGED items; RESOLVED items it happens to hold are candidates for REOPENED
    (when it does not hold them, the adapter still turns a NEW that collides into a REOPENED).
    """
    plan = _plan(previous_open, report, now, heartbeat=heartbeat, nodes_present=nodes_present)
    if trigger is None and not node_triggers:
        return plan
    by_node = node_triggers or {}

    def named(item: StoredFinding) -> StoredFinding:
        cause = by_node.get(item.instance_id or "", trigger)
        if cause is None:
            return item
        return replace(item, trigger_kind=cause.kind, trigger=cause.what, trigger_node=cause.node)

    for changes in (plan.new, plan.reopened, plan.escalated, plan.unchanged, plan.resolved):
        changes[:] = [replace(c, item=named(c.item)) for c in changes]
    return plan


def _plan(
    previous_open: dict[str, StoredFinding],
    report: TriageReport,
    now: datetime,
    *,
    heartbeat: timedelta,
    nodes_present: frozenset[str] | set[str] | None,
) -> SweepPlan:
    cluster = cluster_key(report)
    at = iso(now)
    coverage = sweep_coverage(report)
    plan = SweepPlan(cluster_arn=cluster, at=at, coverage=coverage)

    # Current problems by fingerprint; two findings with one fingerprint keep the more severe.
    current: dict[str, Finding] = {}
    for finding in report.findings:
        if not finding.is_problem:
            continue
        fp = fingerprint(finding, cluster_arn=cluster)
        kept = current.get(fp)
        if kept is None or _severity(finding.tag, finding.priority) > _severity(kept.tag, kept.priority):
            current[fp] = finding

    for fp, finding in current.items():
        previous = previous_open.get(fp)
        if previous is None:
            plan.new.append(PlannedChange(TransitionKind.NEW, _image(fp, cluster, finding, at, report.cluster.name)))
        elif previous.state is State.RESOLVED:
            plan.reopened.append(
                PlannedChange(TransitionKind.REOPENED, _seen_again(previous, finding, at, State.OPEN), previous)
            )
        elif escalated(previous, finding):
            plan.escalated.append(
                PlannedChange(TransitionKind.ESCALATED, _seen_again(previous, finding, at, State.OPEN), previous)
            )
        elif parse_iso(previous.last_seen) + heartbeat <= now:
            plan.unchanged.append(
                PlannedChange(TransitionKind.UNCHANGED, _seen_again(previous, finding, at, previous.state), previous)
            )
        else:
            plan.heartbeat_skipped += 1

    if report.error is not None:
        return plan  # a run that stopped early resolves nothing
    ran = set(coverage.ran)
    # A check that ran but could not read some inputs says so with UNKNOWN findings: those keep
    # the open findings of that check (on that node, or everywhere for a cluster-wide UNKNOWN).
    blind_nodes = {(f.check, f.instance_id) for f in report.findings if f.tag is Tag.UNKNOWN}
    blind_checks = {check for check, node in blind_nodes if node is None}
    probed = set(report.coverage.probed_nodes or ())
    # a check that looked at some nodes only (HyperPod's verdicts on the nodes a window of events named)
    looked_at: dict[str, set[str]] = {}
    for entry in report.coverage.checks:
        if entry.nodes is not None:
            looked_at.setdefault(entry.check, set()).update(entry.nodes)
    for fp, previous in previous_open.items():
        if previous.state is State.RESOLVED or fp in current:
            continue
        if nodes_present is not None and previous.instance_id and previous.instance_id not in nodes_present:
            # the node left the cluster (replaced, scaled in): nothing about it is open any more
            resolved = replace(previous, state=State.RESOLVED, version=previous.version + 1)
            plan.resolved.append(PlannedChange(TransitionKind.RESOLVED, resolved, previous))
            continue
        if previous.check not in ran or previous.check in blind_checks:
            continue
        if (previous.check, previous.instance_id) in blind_nodes:
            continue
        if report.scope_node and previous.instance_id != report.scope_node:
            continue
        if previous.check in looked_at and previous.instance_id not in looked_at[previous.check]:
            continue
        if is_on_node(previous.check) and previous.instance_id and previous.instance_id not in probed:
            continue  # the node was not probed this time (rotation, cap, unreachable): nothing is known
        resolved = replace(previous, state=State.RESOLVED, last_seen=previous.last_seen, version=previous.version + 1)
        plan.resolved.append(PlannedChange(TransitionKind.RESOLVED, resolved, previous))
    return plan
