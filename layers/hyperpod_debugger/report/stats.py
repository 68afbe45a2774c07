"""``hyperpod-debugger findings stats``: a cluster's findings history over a period, read from the findings
table, as a monthly review reads it (text), or as data (``--json``). The figures come from
:mod:`hyperpod_debugger.lifecycle.stats`; the words for them are there."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from hyperpod_debugger.lifecycle.findings import parse_iso
from hyperpod_debugger.lifecycle.stats import Transition, fleet_stats

if TYPE_CHECKING:
    from datetime import datetime

    from hyperpod_debugger.lifecycle.stats import FleetStats

By = Literal["node", "group", "type", "check", "cause"]
BY: tuple[By, ...] = ("node", "group", "type", "check", "cause")
#: rows a text table shows (``--json`` has them all)
ROWS = 15


def history_stats(store: Any, arn: str, name: str, period: tuple[datetime, datetime]) -> FleetStats:
    """The review of ``period``: the cluster's transitions (one paged Query on ``by_cluster``) and its findings
    open now (one Query on its partition), summed by :func:`~hyperpod_debugger.lifecycle.stats.fleet_stats`."""
    since, until = period
    transitions = [
        Transition(
            at=parse_iso(r.at),
            fingerprint=r.fingerprint,
            transition=r.transition,
            check=r.check,
            tag=r.tag,
            priority=r.priority,
            section=r.section,
            instance_id=r.instance_id,
            instance_group=r.instance_group,
            instance_type=r.instance_type,
            node_logical_id=r.node_logical_id,
        )
        for r in store.cluster_history(arn, since, until)
    ]
    open_now = [f for f in store.open_findings(arn).values() if parse_iso(f.first_seen) <= until]
    return fleet_stats(name, transitions, open_now, since, until)


def _h(hours: float | None) -> str:
    if hours is None:
        return "-"
    if hours < 1:
        return f"{hours * 60:.0f} min"
    return f"{hours:.1f} h" if hours < 48 else f"{hours / 24:.1f} d"


def _nh(hours: float) -> str:
    """Node-hours, always in hours (they add up across nodes; days would read as elapsed time)."""
    return f"{hours:.1f} h"


def _day(moment: Any) -> str:
    return moment.strftime("%Y-%m-%d %H:%M UTC")


def _more(rows: int) -> list[str]:
    return [f"  … and {rows - ROWS} more (--json lists them all)"] if rows > ROWS else []


def _nodes(stats: FleetStats, *, repeat_only: bool) -> list[str]:
    rows = stats.repeat_offenders if repeat_only else stats.nodes
    title = "Repeat offenders (2 or more incidents)" if repeat_only else "Nodes"
    out = [f"{title}: {len(rows)}"]
    if rows:
        out.append(f"  {'node':<24} {'incidents':>9} {'unhealthy':>10}  {'group':<18} {'type':<18} checks")
    for n in rows[:ROWS]:
        tail = ", ".join(n.checks[:4]) + (" …" if len(n.checks) > 4 else "")
        if n.open_since is not None:
            tail += f"  [open since {_day(n.open_since)}]"
        out.append(
            f"  {n.node:<24} {n.incidents:>9} {_nh(n.hours_unhealthy):>10}  {n.instance_group:<18} "
            f"{n.instance_type:<18} {tail}"
        )
        if n.instance_ids not in ((), (n.node,)):
            out.append(f"  {'':<24} instances: {', '.join(n.instance_ids)}")
    return out + _more(len(rows))


def _groups(stats: FleetStats, by: Literal["group", "type"]) -> list[str]:
    rows = stats.groups if by == "group" else stats.types
    out = [f"By instance {by}: {len(rows)}"]
    if rows:
        out.append(f"  {by:<24} {'incidents':>9} {'nodes':>6} {'node-hours unhealthy':>21}")
    out += [f"  {g.name:<24} {g.incidents:>9} {g.nodes_affected:>6} {_nh(g.hours_unhealthy):>21}" for g in rows[:ROWS]]
    return out + _more(len(rows))


def _counts(stats: FleetStats, by: Literal["check", "cause"]) -> list[str]:
    rows = stats.checks if by == "check" else stats.causes
    title = "What fails most, by check" if by == "check" else "What fails most, by cause (runbook section)"
    out = [f"{title}: {len(rows)}"]
    if rows:
        out.append(f"  {'opened':>6} {'nodes':>6}  {by}")
    out += [f"  {c.opened:>6} {c.nodes or 'cluster':>6}  {c.label}" for c in rows[:ROWS]]
    return out + _more(len(rows))


def _summary(stats: FleetStats) -> list[str]:
    incidents = sum(n.incidents for n in stats.nodes)
    hours = sum(n.hours_unhealthy for n in stats.nodes)
    lines = [
        f"Findings history of {stats.cluster}, {_day(stats.since)} to {_day(stats.until)} "
        f"({stats.transitions_read} transition(s) read)",
        f"{incidents} node incident(s) on {len(stats.nodes)} node(s), {_nh(hours)} of node time unhealthy; "
        f"{len(stats.repeat_offenders)} repeat offender(s)",
        f"Time to resolve: p50 {_h(stats.resolve_hours_p50)}, p90 {_h(stats.resolve_hours_p90)} "
        f"({stats.resolved} problem(s) opened and resolved in the period)",
    ]
    return lines


def _open(stats: FleetStats) -> list[str]:
    out = [f"Still open: {len(stats.open_now)}"]
    for p in stats.open_now[:ROWS]:
        where = p.instance_id or "cluster-wide"
        prio = p.priority.value if p.priority else "--"
        out.append(f"  {prio} {where:<20} {p.check:<26} open {_h(p.hours_open)} (since {_day(p.since)})")
    return out + _more(len(stats.open_now))


def render(stats: FleetStats, by: By | None = None) -> str:
    """The review: a summary, then the table ``by`` asks for, or (without it) repeat offenders, groups,
    types, checks, causes and what is still open."""
    sections: list[list[str]] = [_summary(stats)]
    if by == "node":
        sections.append(_nodes(stats, repeat_only=False))
    elif by in ("group", "type"):
        sections.append(_groups(stats, by))
    elif by in ("check", "cause"):
        sections.append(_counts(stats, by))
    else:
        sections += [
            _nodes(stats, repeat_only=True),
            _groups(stats, "group"),
            _groups(stats, "type"),
            _counts(stats, "check"),
            _counts(stats, "cause"),
            _open(stats),
        ]
    if not stats.transitions_read and not stats.open_now:
        sections.append(
            [
                "No transition in this period. History is kept for 90 days; transitions written before the "
                "stack's by_cluster index existed are not in it."
            ]
        )
    return "\n\n".join("\n".join(s) for s in sections) + "\n"


def as_json(stats: FleetStats) -> dict[str, Any]:
    def when(moment: Any) -> str | None:
        return moment.isoformat().replace("+00:00", "Z") if moment is not None else None

    return {
        "cluster": stats.cluster,
        "since": when(stats.since),
        "until": when(stats.until),
        "transitions_read": stats.transitions_read,
        "nodes": [
            {
                "node": n.node,
                "instance_ids": list(n.instance_ids),
                "instance_group": n.instance_group,
                "instance_type": n.instance_type,
                "incidents": n.incidents,
                "hours_unhealthy": round(n.hours_unhealthy, 3),
                "checks": list(n.checks),
                "open_since": when(n.open_since),
            }
            for n in stats.nodes
        ],
        "repeat_offenders": [n.node for n in stats.repeat_offenders],
        "groups": [_group_json(g) for g in stats.groups],
        "types": [_group_json(g) for g in stats.types],
        "checks": [{"check": c.name, "opened": c.opened, "nodes": c.nodes} for c in stats.checks],
        "causes": [{"section": c.name, "label": c.label, "opened": c.opened, "nodes": c.nodes} for c in stats.causes],
        "time_to_resolve_hours": {
            "p50": stats.resolve_hours_p50,
            "p90": stats.resolve_hours_p90,
            "resolved": stats.resolved,
        },
        "open_now": [
            {
                "fingerprint": p.fingerprint,
                "check": p.check,
                "instance_id": p.instance_id,
                "priority": p.priority.value if p.priority else None,
                "since": when(p.since),
                "hours_open": round(p.hours_open, 3),
            }
            for p in stats.open_now
        ],
    }


def _group_json(g: Any) -> dict[str, Any]:
    return {
        "name": g.name,
        "incidents": g.incidents,
        "nodes_affected": g.nodes_affected,
        "hours_unhealthy": round(g.hours_unhealthy, 3),
    }
