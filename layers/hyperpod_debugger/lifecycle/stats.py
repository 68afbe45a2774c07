"""What a cluster's findings history says over a period: which nodes keep failing, how long nodes were
unhealthy per group and instance type, what fails most, how long repairs take, what is still open.

Pure: the transitions of the period (the store's ``by_cluster`` index), the findings open now, the period and
the clock in; :class:`FleetStats` out. The words:

* an *occurrence* is one finding from its opening (NEW or REOPENED) to its RESOLVED transition, or to now
  while it is open; one that opened before the period starts at the period's start, and is not counted as
  opened in it;
* a node's *incident* is a stretch of time in which it had at least one open problem (overlapping occurrences
  merge): three findings of one Xid episode are one incident, the same fault a week later is a second one;
* *node-hours unhealthy*: the incidents' lengths inside the period, summed;
* *time to resolve*: opening to RESOLVED, for the occurrences that opened and resolved inside the period;
  percentiles by nearest rank (the value at rank ``ceil(p × n)`` of the sorted times).

A node is keyed by HyperPod's logical id where the history has one (a replacement keeps it, so a slot that
keeps failing on new instances is one repeat offender), else by its instance id. UNKNOWN findings are not
faults (what could not be read is no failure) and are left out; cluster-level findings count by check and
cause only.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from hyperpod_debugger.domain.model import Priority, Tag
from hyperpod_debugger.domain.sections import SECTIONS
from hyperpod_debugger.lifecycle.findings import State, StoredFinding, TransitionKind, parse_iso

OPENING = frozenset({TransitionKind.NEW, TransitionKind.REOPENED})
UNKNOWN_GROUP = "(group not recorded)"
UNKNOWN_TYPE = "(type not recorded)"


@dataclass(frozen=True, slots=True)
class Transition:
    """One stored transition, as the stats read it (``HistoryRecord`` of the store, or a test's own)."""

    at: datetime
    fingerprint: str
    transition: TransitionKind
    check: str
    tag: Tag
    priority: Priority | None = None
    section: str | None = None
    instance_id: str | None = None
    instance_group: str | None = None
    instance_type: str | None = None
    node_logical_id: str | None = None


@dataclass(frozen=True, slots=True)
class Occurrence:
    fingerprint: str
    check: str
    section: str | None
    priority: Priority | None
    instance_id: str | None
    instance_group: str | None
    instance_type: str | None
    node_logical_id: str | None
    start: datetime
    end: datetime | None  # None: still open
    opened_in_period: bool

    @property
    def node_key(self) -> str | None:
        return self.node_logical_id or self.instance_id


@dataclass(frozen=True, slots=True)
class NodeStats:
    node: str
    instance_ids: tuple[str, ...]
    instance_group: str
    instance_type: str
    incidents: int
    hours_unhealthy: float
    checks: tuple[str, ...]
    open_since: datetime | None


@dataclass(frozen=True, slots=True)
class GroupStats:
    name: str
    incidents: int
    nodes_affected: int
    hours_unhealthy: float


@dataclass(frozen=True, slots=True)
class CountStats:
    name: str
    label: str
    opened: int
    nodes: int


@dataclass(frozen=True, slots=True)
class OpenProblem:
    fingerprint: str
    check: str
    instance_id: str | None
    priority: Priority | None
    since: datetime
    hours_open: float


@dataclass(frozen=True)
class FleetStats:
    cluster: str
    since: datetime
    until: datetime
    transitions_read: int
    nodes: list[NodeStats] = field(default_factory=list)
    groups: list[GroupStats] = field(default_factory=list)
    types: list[GroupStats] = field(default_factory=list)
    checks: list[CountStats] = field(default_factory=list)
    causes: list[CountStats] = field(default_factory=list)
    resolve_hours_p50: float | None = None
    resolve_hours_p90: float | None = None
    resolved: int = 0
    open_now: list[OpenProblem] = field(default_factory=list)

    @property
    def repeat_offenders(self) -> list[NodeStats]:
        return [n for n in self.nodes if n.incidents >= 2]


def _hours(delta: timedelta) -> float:
    return delta.total_seconds() / 3600


def percentile(values: Sequence[float], p: float) -> float | None:
    """Nearest rank: the value at rank ``ceil(p × n)`` of the sorted values (None for no values)."""
    if not values:
        return None
    ranked = sorted(values)
    return ranked[max(1, math.ceil(p * len(ranked))) - 1]


def occurrences(
    transitions: Iterable[Transition], open_now: Iterable[StoredFinding], since: datetime, until: datetime
) -> list[Occurrence]:
    """Every problem finding's stretches of being open inside ``[since, until]``."""
    by_fp: dict[str, list[Transition]] = defaultdict(list)
    for t in transitions:
        if since <= t.at <= until and t.tag is not Tag.UNKNOWN:
            by_fp[t.fingerprint].append(t)
    out: list[Occurrence] = []
    for fp, seen in by_fp.items():
        out.extend(_stretches(fp, sorted(seen, key=lambda t: t.at), since))
    with_records = set(by_fp)
    for f in open_now:
        if f.fingerprint in with_records or f.tag is Tag.UNKNOWN or f.state is State.RESOLVED:
            continue
        first = parse_iso(f.first_seen)
        out.append(_from_finding(f, max(first, since), first >= since))
    return out


def _stretches(fp: str, seen: list[Transition], since: datetime) -> list[Occurrence]:
    out: list[Occurrence] = []
    start: Transition | None = None
    opened_here = False
    for t in seen:
        if t.transition in OPENING:
            if start is None:
                start, opened_here = t, True
        elif t.transition is TransitionKind.RESOLVED:
            first = start or t  # resolved with no opening in the period: it was open from the start
            begin = start.at if start is not None and opened_here else since
            out.append(_occurrence(first, t, begin, t.at, opened_here))
            start, opened_here = None, False
        elif start is None:
            start, opened_here = t, False  # escalated or acknowledged: open since before the period
    if start is not None:
        begin = start.at if opened_here else since
        out.append(_occurrence(start, seen[-1], begin, None, opened_here))
    return out


def _occurrence(first: Transition, last: Transition, start: datetime, end: datetime | None, opened: bool) -> Occurrence:
    return Occurrence(
        fingerprint=first.fingerprint,
        check=first.check,
        section=last.section or first.section,
        priority=last.priority or first.priority,
        instance_id=first.instance_id,
        instance_group=last.instance_group or first.instance_group,
        instance_type=last.instance_type or first.instance_type,
        node_logical_id=last.node_logical_id or first.node_logical_id,
        start=start,
        end=end,
        opened_in_period=opened,
    )


def _from_finding(f: StoredFinding, start: datetime, opened: bool) -> Occurrence:
    return Occurrence(
        fingerprint=f.fingerprint,
        check=f.check,
        section=f.section,
        priority=f.priority,
        instance_id=f.instance_id,
        instance_group=f.instance_group,
        instance_type=f.instance_type,
        node_logical_id=f.node_logical_id,
        start=start,
        end=None,
        opened_in_period=opened,
    )


@dataclass
class _Incident:
    start: datetime
    end: datetime
    opened_in_period: bool
    open: bool


def _incidents(stretches: list[Occurrence], until: datetime) -> list[_Incident]:
    """A node's occurrences merged where they overlap (or touch): one incident each."""
    merged: list[_Incident] = []
    for o in sorted(stretches, key=lambda o: o.start):
        end = o.end or until
        if merged and o.start <= merged[-1].end:
            last = merged[-1]
            last.end = max(last.end, end)
            last.open = last.open or o.end is None
            continue
        merged.append(_Incident(o.start, end, o.opened_in_period, o.end is None))
    return merged


def fleet_stats(
    cluster: str,
    transitions: Sequence[Transition],
    open_now: Iterable[StoredFinding],
    since: datetime,
    until: datetime,
) -> FleetStats:
    found = occurrences(transitions, open_now, since, until)
    nodes = _node_stats(found, until)
    times = [_hours(o.end - o.start) for o in found if o.end is not None and o.opened_in_period]
    still_open = [
        OpenProblem(o.fingerprint, o.check, o.instance_id, o.priority, o.start, _hours(until - o.start))
        for o in found
        if o.end is None
    ]
    return FleetStats(
        cluster=cluster,
        since=since,
        until=until,
        transitions_read=len(transitions),
        nodes=nodes,
        groups=_grouped(nodes, lambda n: n.instance_group),
        types=_grouped(nodes, lambda n: n.instance_type),
        checks=_counted(found, lambda o: o.check, lambda o: o.check),
        causes=_counted(found, lambda o: o.section or "-", _section_label),
        resolve_hours_p50=percentile(times, 0.5),
        resolve_hours_p90=percentile(times, 0.9),
        resolved=len(times),
        open_now=sorted(still_open, key=lambda p: p.since),
    )


def _section_label(o: Occurrence) -> str:
    section = o.section or "-"
    title = SECTIONS.get(section)
    return f"§ {section} {title}" if title else f"§ {section}"


def _node_stats(found: list[Occurrence], until: datetime) -> list[NodeStats]:
    by_node: dict[str, list[Occurrence]] = defaultdict(list)
    for o in found:
        if o.node_key:
            by_node[o.node_key].append(o)
    out = []
    for key, mine in by_node.items():
        incidents = _incidents(mine, until)
        latest = max(mine, key=lambda o: o.start)
        still = [i.start for i in incidents if i.open]
        out.append(
            NodeStats(
                node=key,
                instance_ids=tuple(dict.fromkeys(o.instance_id for o in mine if o.instance_id)),
                instance_group=latest.instance_group or UNKNOWN_GROUP,
                instance_type=latest.instance_type or UNKNOWN_TYPE,
                incidents=sum(1 for i in incidents if i.opened_in_period),
                hours_unhealthy=sum(_hours(i.end - i.start) for i in incidents),
                checks=tuple(dict.fromkeys(o.check for o in sorted(mine, key=lambda o: o.start))),
                open_since=min(still) if still else None,
            )
        )
    return sorted(out, key=lambda n: (-n.incidents, -n.hours_unhealthy, n.node))


def _grouped(nodes: list[NodeStats], key: Callable[[NodeStats], str]) -> list[GroupStats]:
    groups: dict[str, list[NodeStats]] = defaultdict(list)
    for n in nodes:
        groups[key(n)].append(n)
    out = [
        GroupStats(name, sum(n.incidents for n in members), len(members), sum(n.hours_unhealthy for n in members))
        for name, members in groups.items()
    ]
    return sorted(out, key=lambda g: (-g.hours_unhealthy, -g.incidents, g.name))


def _counted(
    found: list[Occurrence], key: Callable[[Occurrence], str], label: Callable[[Occurrence], str]
) -> list[CountStats]:
    counts: dict[str, list[Occurrence]] = defaultdict(list)
    for o in found:
        if o.opened_in_period:
            counts[key(o)].append(o)
    out = [
        CountStats(name, label(mine[0]), len(mine), len({o.node_key for o in mine if o.node_key}))
        for name, mine in counts.items()
    ]
    return sorted(out, key=lambda c: (-c.opened, c.name))
