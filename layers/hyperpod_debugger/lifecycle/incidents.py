"""Incidents: what the monitor tells people about, one per problem, derived from the open findings.

Pure. Findings are the stored facts and the history; an *incident* is what a person acts on, and what the
alerts speak of (``references/decisions.md``, 2026-12-03). Three kinds, each with a stable key under its
cluster:

* ``node`` (``NODE#<instance id>``): the node's verdict (:func:`~hyperpod_debugger.remediation.verdict.node_verdicts`,
  the same one the CLI prints) over the node's own open findings, when it asks something of a person:
  investigate, reboot, replace, fix the workload, watch (P2), or wait for HyperPod (``hyperpod-acting``: held,
  not paged, until the repair takes longer than the grace or ends with the node still failing).
* ``cause`` (``CAUSE#<fingerprint>``): a cluster-level problem that nothing else explains (a security group,
  a missing endpoint, a capacity shortage, a missing permission), with every finding it explains listed
  under it (:func:`~hyperpod_debugger.remediation.rootcause.root_causes`). A node whose problems all trace
  back to it gets no incident of its own: one lifecycle failure caused by a missing S3 route is one incident.
* ``coverage`` (``COVERAGE``): what could not be read, as one problem per cluster ("12 nodes could not be
  probed: …"), never one UNKNOWN per node, and never a verdict.

:func:`desired_incidents` says which incidents the findings hold now; :func:`plan_incidents` compares them with
the stored ones and decides the transitions: ``OPENED``, ``ESCALATED`` (the node climbed the ladder, the
priority rose, or a held repair became a page), ``RESOLVED`` (once, when the problem is gone) and ``UPDATED``
(the stored content moved; nothing is said). Each change says whether it is *paged*; which channel hears of
it is the alert policy's business (:mod:`hyperpod_debugger.notify.policy`).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Literal

from hyperpod_debugger.domain.model import Finding, NodeProblem, NodeVerdict, Priority, SuggestedCommand, Tag
from hyperpod_debugger.lifecycle.findings import iso, parse_iso, signature
from hyperpod_debugger.remediation.rootcause import root_causes
from hyperpod_debugger.remediation.verdict import RANK, node_verdicts, weight

IncidentKind = Literal["node", "cause", "coverage"]

#: Node verdicts that ask something of a person (``unknown`` goes to the coverage incident instead).
ACTIONABLE = frozenset({"watch", "fix-workload", "investigate", "reboot", "replace", "hyperpod-acting"})
#: How long HyperPod may repair a node before the incident is paged anyway (a reboot takes minutes, a
#: replacement tens of minutes; past this, its repair is stuck or failing).
REPAIR_GRACE = timedelta(minutes=60)
#: What an incident keeps of what it lists (nodes, explained findings, evidence lines).
MAX_LISTED = 200
MAX_EVIDENCE = 20
#: a node incident's other problems kept (the messages show six per group) and the characters of each
MAX_ISSUES = 40
ISSUE_CHARS = 400
COVERAGE_KEY = "COVERAGE"

_PRIORITY_RANK = {Priority.P0: 0, Priority.P1: 1, Priority.P2: 2}


class IncidentState(StrEnum):
    OPEN = "OPEN"
    RESOLVED = "RESOLVED"


class IncidentTransition(StrEnum):
    OPENED = "OPENED"
    ESCALATED = "ESCALATED"
    RESOLVED = "RESOLVED"
    UPDATED = "UPDATED"


def worst(priorities: Iterable[Priority | None]) -> Priority | None:
    ranked = [p for p in priorities if p is not None]
    return min(ranked, key=lambda p: _PRIORITY_RANK[p]) if ranked else None


def higher(a: Priority | None, b: Priority | None) -> bool:
    """``a`` is more urgent than ``b`` (a priority beats none)."""
    if a is None:
        return False
    return b is None or _PRIORITY_RANK[a] < _PRIORITY_RANK[b]


@dataclass(frozen=True)
class Explained:
    """A finding an incident's cause explains, as listed under it."""

    check: str
    message: str
    instance_id: str | None = None


@dataclass(frozen=True)
class NodeIssue:
    """A node incident's problem other than the one its verdict stands on, and whether the verdict's rung
    clears it (a reboot clears a transient GPU fault, never a full disk or a stopped service's cause)."""

    check: str
    message: str
    priority: Priority | None = None
    tag: str = "FAIL"
    section: str | None = None
    fixed_by_rung: bool = False

    @classmethod
    def of(cls, problem: NodeProblem) -> NodeIssue:
        message = problem.message
        return cls(
            check=problem.check,
            # an incident item stays far below DynamoDB's 400 KB however many problems a node has
            message=message if len(message) <= ISSUE_CHARS else message[: ISSUE_CHARS - 1] + "…",
            priority=problem.priority,
            tag=problem.tag.value,
            section=problem.section,
            fixed_by_rung=problem.fixed_by_rung,
        )


@dataclass(frozen=True)
class Incident:
    """What the findings say about one problem now."""

    key: str
    kind: IncidentKind
    cluster_arn: str
    priority: Priority | None
    #: node: the verdict state; cause: ``cause``; coverage: ``unknown``
    verdict: str
    #: the deciding finding's message (the verdict's *why*)
    title: str
    check: str
    section: str | None = None
    fingerprint: str | None = None
    cluster_name: str | None = None
    instance_id: str | None = None
    instance_group: str | None = None
    instance_type: str | None = None
    likely_cause: str | None = None
    next_step: str | None = None
    #: the one next command and the rung's own after it (``model_dump`` of SuggestedCommand)
    next_command: dict[str, Any] | None = None
    then_command: dict[str, Any] | None = None
    occupancy: str | None = None
    hyperpod: str | None = None
    checks: tuple[str, ...] = ()
    evidence: tuple[str, ...] = ()
    explains: tuple[Explained, ...] = ()
    #: cause: the nodes it explains; coverage: the nodes that could not be read
    nodes: tuple[str, ...] = ()
    #: coverage: why, as (reason, how many), most common first
    reasons: tuple[tuple[str, int], ...] = ()
    #: node: its most urgent problem when the verdict stands on another (the rung is chosen by what fixes
    #: the node), and every other problem of the node, most urgent first: an alert hides none of them
    worst: NodeIssue | None = None
    others: tuple[NodeIssue, ...] = ()

    def content(self) -> tuple[Any, ...]:
        """What, when it moves, is worth writing (not worth saying)."""
        return (
            self.priority,
            self.verdict,
            self.title,
            self.section,
            self.likely_cause,
            (self.next_command or {}).get("command"),
            (self.then_command or {}).get("command"),
            self.hyperpod,
            self.checks,
            self.nodes,
            self.reasons,
            len(self.explains),
            tuple((o.check, o.fixed_by_rung) for o in self.others),
        )


@dataclass(frozen=True)
class StoredIncident:
    """An incident as the store keeps it: what it says, and where it is in its life."""

    incident: Incident
    state: IncidentState
    #: changes with each opening (the same key opened again is another incident)
    incident_id: str
    opened_at: str
    updated_at: str
    resolved_at: str | None = None
    #: the most urgent priority and the highest rung it reached while open (escalation compares with these)
    peak_priority: Priority | None = None
    peak_rank: int = 0
    #: said to anyone yet; a held incident (HyperPod repairing) is not, until it is overdue or fails
    paged: bool = False
    held: bool = False
    acting_since: str | None = None
    #: opened by the first triage of its cluster: told as part of one baseline summary
    baseline: bool = False
    #: how many times this key has opened (a node that keeps failing)
    occurrences: int = 1
    version: int = 0
    last_transition: IncidentTransition | None = None
    last_transition_at: str | None = None
    #: why the last transition happened, in words ("HyperPod has repaired it for 75 min")
    reason: str | None = None
    trigger: str | None = None
    #: the paged transitions no channel has been told of yet: ``<at>#<kind>`` → kind (the alert group's
    #: flush tells them and removes exactly those entries)
    pending: Mapping[str, str] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return self.incident.key

    @property
    def is_open(self) -> bool:
        return self.state is IncidentState.OPEN


@dataclass(frozen=True)
class IncidentChange:
    """One write: ``item`` is the new image, ``previous`` what it replaces (None for a first opening)."""

    kind: IncidentTransition
    item: StoredIncident
    previous: StoredIncident | None = None

    @property
    def paged(self) -> bool:
        """Said to people (the policy decides which channels): opened, escalated or resolved while paged."""
        if self.kind is IncidentTransition.UPDATED:
            return False
        if self.kind is IncidentTransition.RESOLVED:
            return self.item.paged
        return not self.item.held


# --------------------------------------------------------------------------- what the findings say


def _command(findings: Sequence[Finding], text: str | None) -> dict[str, Any] | None:
    if not text:
        return None
    for f in findings:
        for c in f.suggested_commands:
            if c.command == text:
                return c.model_dump(mode="json")
    return SuggestedCommand(command=text, purpose="next command", mutates=False).model_dump(mode="json")


def _evidence(lines: Sequence[str]) -> tuple[str, ...]:
    """At most :data:`MAX_EVIDENCE` lines, the last saying how many more the stored findings hold."""
    if len(lines) <= MAX_EVIDENCE:
        return tuple(lines)
    rest = len(lines) - (MAX_EVIDENCE - 1)
    return (
        *lines[: MAX_EVIDENCE - 1],
        f"… {rest} more line(s) kept with the finding (hyperpod-debugger findings list --json)",
    )


def _listed(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(values))[:MAX_LISTED]


def _coverage_reason(f: Finding) -> str:
    """The reason an UNKNOWN gives, without the node it names (so nodes with one reason count together): its
    likely cause's first clause where it states one ("the SSM agent is not connected"), else its message."""
    if f.root_cause:
        return f.root_cause.split(":", 1)[0].strip()
    text = f.message
    if f.instance_id:
        text = text.replace(f.instance_id, "<node>")
    return signature(text)


def _nodes(n: int) -> str:
    return f"{n} node" if n == 1 else f"{n} nodes"


def desired_incidents(
    cluster_arn: str,
    findings: Sequence[tuple[str, Finding]],
    *,
    cluster_name: str | None = None,
    recovering: Mapping[str, str] | None = None,
    verdicts: Mapping[str, NodeVerdict] | None = None,
) -> dict[str, Incident]:
    """Every incident the cluster's open findings hold now, by key.

    ``findings``: (fingerprint, finding) of every open problem of the cluster. ``recovering``: nodes HyperPod
    is repairing, and how we know. ``verdicts``: this run's own verdicts, for what only a run knows (what
    runs on a node, its instance type), used when they agree with the verdict computed here.
    """
    recovering = recovering or {}
    verdicts = verdicts or {}
    fps = [fp for fp, _ in findings]
    problems = [f for _, f in findings]
    roots = root_causes(problems)

    cluster_roots = [
        i
        for i, f in enumerate(problems)
        if f.instance_id is None and f.is_problem and f.tag is not Tag.UNKNOWN and i not in roots
    ]
    explained_by_cluster = {effect for effect, root in roots.items() if root in cluster_roots}
    incidents = [
        _cause_incident(
            cluster_arn, cluster_name, fps[i], problems[i], [problems[e] for e, r in sorted(roots.items()) if r == i]
        )
        for i in cluster_roots
    ]

    by_node: dict[str, list[int]] = {}
    for i, f in enumerate(problems):
        if f.instance_id and i not in explained_by_cluster:
            by_node.setdefault(f.instance_id, []).append(i)
    unknown_nodes: list[tuple[str, Finding]] = []
    for node, indices in by_node.items():
        own = [problems[i] for i in indices]
        acting = {node: recovering[node]} if node in recovering else None
        verdict = node_verdicts(own, recovering=acting)[0]
        if verdict.verdict == "unknown":
            unknown_nodes.append((node, next(f for f in own if f.tag is Tag.UNKNOWN)))
        elif verdict.verdict in ACTIONABLE:
            top = max(indices, key=lambda i: weight(problems[i]))  # the finding the verdict stands on
            incidents.append(
                _node_incident(
                    cluster_arn, cluster_name, node, verdict, own, fps[top], problems[top], verdicts.get(node)
                )
            )

    cluster_unknowns = [f for f in problems if f.instance_id is None and f.tag is Tag.UNKNOWN]
    if unknown_nodes or cluster_unknowns:
        incidents.append(_coverage_incident(cluster_arn, cluster_name, unknown_nodes, cluster_unknowns))
    return {incident.key: incident for incident in incidents}


def _cause_incident(
    cluster_arn: str, cluster_name: str | None, fingerprint: str, root: Finding, effects: Sequence[Finding]
) -> Incident:
    """The incident of a cluster-level problem, listing the findings it explains (``effects``)."""
    return Incident(
        key=f"CAUSE#{fingerprint}",
        kind="cause",
        cluster_arn=cluster_arn,
        cluster_name=cluster_name or root.cluster_name,
        priority=worst(f.priority for f in [root, *effects] if f.tag is not Tag.UNKNOWN),
        verdict="cause",
        title=root.message,
        check=root.check,
        section=root.section,
        fingerprint=fingerprint,
        instance_group=root.instance_group,
        next_step=root.next_step,
        next_command=_first_read_only(root),
        then_command=_first_mutating(root),
        checks=_listed([root.check, *(e.check for e in effects)]),
        evidence=_evidence(root.evidence),
        explains=tuple(Explained(e.check, e.message, e.instance_id) for e in effects)[:MAX_LISTED],
        nodes=_listed(e.instance_id for e in effects if e.instance_id),
    )


def _node_incident(
    cluster_arn: str,
    cluster_name: str | None,
    node: str,
    verdict: NodeVerdict,
    own: Sequence[Finding],
    fingerprint: str,
    deciding: Finding,
    known: NodeVerdict | None,
) -> Incident:
    """The incident of ``node``, whose ``verdict`` (over its ``own`` findings) asks something of a person;
    ``deciding`` is the finding the verdict stands on. What only a run knows (the instance type, what runs on
    the node) comes from the run's own verdict of the node (``known``), what runs there only when it agrees."""
    agree = known is not None and known.verdict == verdict.verdict
    contributing = [f for f in own if f.tag is not Tag.UNKNOWN] or own
    priority = worst(f.priority for f in contributing)
    if verdict.verdict == "hyperpod-acting" and priority is None:
        priority = Priority.P1
    return Incident(
        key=f"NODE#{node}",
        kind="node",
        cluster_arn=cluster_arn,
        cluster_name=cluster_name or deciding.cluster_name,
        priority=priority,
        verdict=verdict.verdict,
        title=deciding.message,
        check=deciding.check,
        section=verdict.section or deciding.section,
        fingerprint=fingerprint,
        instance_id=node,
        instance_group=verdict.instance_group or deciding.instance_group or (known.instance_group if known else None),
        instance_type=known.instance_type if known else None,
        likely_cause=verdict.likely_cause,
        next_step=verdict.next_step,
        next_command=_command(own, verdict.next_command),
        then_command=_command(own, verdict.then_command),
        occupancy=known.occupancy if agree and known else None,
        hyperpod=verdict.hyperpod,
        checks=tuple(verdict.checks),
        evidence=_evidence(deciding.evidence),
        worst=NodeIssue.of(verdict.worst) if verdict.worst else None,
        others=tuple(NodeIssue.of(p) for p in verdict.other_problems[:MAX_ISSUES]),
    )


def _coverage_incident(
    cluster_arn: str,
    cluster_name: str | None,
    unknown_nodes: Sequence[tuple[str, Finding]],
    cluster_unknowns: Sequence[Finding],
) -> Incident:
    """The one incident of what could not be read: the nodes whose verdict is unknown (each with the UNKNOWN
    that decided it) and the cluster checks that could not look, counted by reason."""
    reasons = Counter(_coverage_reason(f) for _, f in unknown_nodes)
    reasons.update(_coverage_reason(f) for f in cluster_unknowns)
    nodes = _listed(sorted(n for n, _ in unknown_nodes))
    common = reasons.most_common(1)[0][0]
    if unknown_nodes:
        probed = all(f.check.startswith("probe.") for _, f in unknown_nodes)
        verb = "could not be probed" if probed else "could not be fully checked"
        title = f"{_nodes(len({n for n, _ in unknown_nodes}))} {verb}: {common}"
    else:
        checks = len(cluster_unknowns)
        title = f"{checks} cluster check{'s' if checks != 1 else ''} could not look: {common}"
    contributors = [f for _, f in unknown_nodes] + list(cluster_unknowns)
    urgent = any(f.priority in (Priority.P0, Priority.P1) for f in contributors)
    first = contributors[0]
    return Incident(
        key=COVERAGE_KEY,
        kind="coverage",
        cluster_arn=cluster_arn,
        cluster_name=cluster_name or first.cluster_name,
        priority=Priority.P1 if urgent else Priority.P2,
        verdict="unknown",
        title=title,
        check="coverage",
        section=first.section,
        checks=_listed(f.check for f in contributors),
        nodes=nodes,
        reasons=tuple(reasons.most_common(10)),
        next_step="Restore what the monitor could not read (access, the SSM agent, a timeout); nothing is "
        "judged on what could not be read.",
        next_command=_first_read_only(first),
        evidence=_evidence([f.message for f in contributors]),
    )


def _first_read_only(f: Finding) -> dict[str, Any] | None:
    c = next((c for c in f.suggested_commands if not c.mutates), None)
    return c.model_dump(mode="json") if c else None


def _first_mutating(f: Finding) -> dict[str, Any] | None:
    c = next((c for c in f.suggested_commands if c.mutates), None)
    return c.model_dump(mode="json") if c else None


# --------------------------------------------------------------------------- the lifecycle


def incident_id(cluster_arn: str, key: str, opened_at: str) -> str:
    return hashlib.sha256(f"{cluster_arn}\x1f{key}\x1f{opened_at}".encode()).hexdigest()[:16]


def _rank(incident: Incident) -> int:
    """How far up the ladder an incident is (HyperPod acting is not a rung of ours)."""
    if incident.kind != "node" or incident.verdict == "hyperpod-acting":
        return 0
    return RANK.get(incident.verdict, 0)


@dataclass
class IncidentPlan:
    cluster_arn: str
    at: str
    changes: list[IncidentChange] = field(default_factory=list)

    def paged(self) -> list[IncidentChange]:
        return [c for c in self.changes if c.paged]


def plan_incidents(
    stored: Mapping[str, StoredIncident],
    desired: Mapping[str, Incident],
    now: datetime,
    *,
    cluster_arn: str,
    nodes_in_scope: frozenset[str] | set[str] | None = None,
    baseline: bool = False,
    repair_grace: timedelta = REPAIR_GRACE,
    trigger: str | None = None,
) -> IncidentPlan:
    """The transitions that bring the stored incidents to what the findings say now.

    ``nodes_in_scope``: the nodes this run looked at (None: every node). A node incident outside it is left as
    it is: a run that did not look at a node cannot say it is fine. ``baseline``: this is the cluster's first
    triage; what it opens is told as one baseline summary.
    """
    at = iso(now)
    plan = IncidentPlan(cluster_arn, at)

    def in_scope(key: str) -> bool:
        if nodes_in_scope is None or not key.startswith("NODE#"):
            return True
        return key.removeprefix("NODE#") in nodes_in_scope

    for key, want in desired.items():
        if not in_scope(key):
            continue
        have = stored.get(key)
        if have is None or not have.is_open:
            plan.changes.append(_opened(want, have, at, now, baseline=baseline, trigger=trigger))
            continue
        change = _moved(have, want, at, now, repair_grace=repair_grace, trigger=trigger)
        if change is not None:
            plan.changes.append(change)
    for key, have in stored.items():
        if have.is_open and key not in desired and in_scope(key):
            resolved = replace(
                have,
                state=IncidentState.RESOLVED,
                resolved_at=at,
                updated_at=at,
                held=False,
                version=have.version + 1,
                last_transition=IncidentTransition.RESOLVED,
                last_transition_at=at,
                reason=None,
                trigger=trigger,
                pending={**have.pending, f"{at}#{IncidentTransition.RESOLVED}": str(IncidentTransition.RESOLVED)}
                if have.paged
                else dict(have.pending),
            )
            plan.changes.append(IncidentChange(IncidentTransition.RESOLVED, resolved, have))
    return plan


def _opened(
    want: Incident, previous: StoredIncident | None, at: str, now: datetime, *, baseline: bool, trigger: str | None
) -> IncidentChange:
    held = want.verdict == "hyperpod-acting"
    # the previous occurrence's resolution nobody was told of yet is kept: a channel that heard it open hears
    # it end before it hears it open again
    carried = {k: v for k, v in (previous.pending if previous else {}).items() if v == IncidentTransition.RESOLVED}
    opening = {} if held else {f"{at}#{IncidentTransition.OPENED}": str(IncidentTransition.OPENED)}
    item = StoredIncident(
        incident=want,
        state=IncidentState.OPEN,
        incident_id=incident_id(want.cluster_arn, want.key, at),
        opened_at=at,
        updated_at=at,
        peak_priority=want.priority,
        peak_rank=_rank(want),
        paged=not held,
        held=held,
        acting_since=at if held else None,
        baseline=baseline,
        occurrences=(previous.occurrences + 1) if previous is not None else 1,
        version=(previous.version + 1) if previous is not None else 1,
        last_transition=IncidentTransition.OPENED,
        last_transition_at=at,
        reason=f"last resolved {previous.resolved_at}" if previous is not None and previous.resolved_at else None,
        trigger=trigger,
        pending={**carried, **opening},
    )
    return IncidentChange(IncidentTransition.OPENED, item, previous)


def _moved(
    have: StoredIncident, want: Incident, at: str, now: datetime, *, repair_grace: timedelta, trigger: str | None
) -> IncidentChange | None:
    acting = want.verdict == "hyperpod-acting"
    base = replace(
        have,
        incident=want,
        updated_at=at,
        peak_priority=want.priority if higher(want.priority, have.peak_priority) else have.peak_priority,
        peak_rank=max(have.peak_rank, _rank(want)),
        acting_since=(have.acting_since or at) if acting else None,
        version=have.version + 1,
        baseline=False,
    )
    if have.held:
        since = parse_iso(have.acting_since or have.opened_at)
        if acting and now - since < repair_grace:
            return _update(have, base, want)
        reason = (
            f"HyperPod has been repairing the node for {int((now - since).total_seconds() // 60)} min"
            if acting
            else "HyperPod's repair ended and the node still has the problem"
        )
        return _transition(
            IncidentTransition.ESCALATED, replace(base, held=False, paged=True), have, at, reason, trigger
        )
    climbed = _rank(want) > have.peak_rank
    rose = higher(want.priority, have.peak_priority)
    if climbed or rose:
        reason = f"now {want.verdict.upper()}" if climbed else f"priority now {want.priority}"
        return _transition(IncidentTransition.ESCALATED, replace(base, paged=True), have, at, reason, trigger)
    return _update(have, base, want)


def _transition(
    kind: IncidentTransition, item: StoredIncident, previous: StoredIncident, at: str, reason: str, trigger: str | None
) -> IncidentChange:
    pending = {**item.pending, f"{at}#{kind}": str(kind)}
    moved = replace(item, last_transition=kind, last_transition_at=at, reason=reason, trigger=trigger, pending=pending)
    return IncidentChange(kind, moved, previous)


def _update(have: StoredIncident, base: StoredIncident, want: Incident) -> IncidentChange | None:
    if want.content() == have.incident.content():
        return None
    return IncidentChange(IncidentTransition.UPDATED, base, have)


def nodes_looked_at(
    findings: Iterable[Finding], changed: Iterable[str | None], probed: Iterable[str], scope_node: str | None
) -> frozenset[str]:
    """The nodes a run can speak for: those its findings name (a PASS included), those whose stored findings
    it changed, those it probed, and the node it was scoped to."""
    out = {f.instance_id for f in findings if f.instance_id}
    out |= {c for c in changed if c}
    out |= set(probed)
    if scope_node:
        out.add(scope_node)
    return frozenset(out)
