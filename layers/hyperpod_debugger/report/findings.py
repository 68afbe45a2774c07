"""The findings table's contents for people and machines: the lines of ``findings list``, ``history`` and
``sweeps``, and the JSON of a stored finding (the CLI's ``--json`` and the agent interface's tools). Pure."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from hyperpod_debugger.lifecycle.findings import State

if TYPE_CHECKING:
    from collections.abc import Sequence

    from hyperpod_debugger.lifecycle.findings import StoredFinding

#: the environment variable that names the findings table when none is given (the CLI, the agent server)
TABLE_ENV = "HYPERPOD_DEBUGGER_TABLE"
_PRIORITY_ORDER = {"P0": 0, "P1": 1, "P2": 2}
_STATE_ORDER = {State.OPEN: 0, State.ACKNOWLEDGED: 1, State.RESOLVED: 2}


def _when(text: str) -> str:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    except ValueError:
        return text


def sort_key(f: StoredFinding) -> tuple[int, int, str, str]:
    priority = _PRIORITY_ORDER.get(f.priority.value if f.priority else "", 9)
    return (_STATE_ORDER.get(f.state, 9), priority, f.instance_id or "", f.check)


def render_findings(findings: Sequence[StoredFinding], cluster: str, table: str) -> str:
    ordered = sorted(findings, key=sort_key)
    states = Counter(f.state.value for f in ordered)
    summary = ", ".join(f"{n} {s}" for s, n in sorted(states.items())) or "none"
    lines = [f"Findings of {cluster} in {table}: {summary}"]
    for f in ordered:
        priority = f.priority.value if f.priority else "--"
        node = f.instance_id or "cluster-wide"
        section = f" → references/node-diagnostics-detail.md § {f.section}" if f.section else ""
        lines.append(f"{f.state.value:<12} {priority} {f.tag.value:<7} {node:<20} {f.check:<24} {f.message}{section}")
        seen = f"first {_when(f.first_seen)} · last {_when(f.last_seen)} · seen {f.count}×"
        detail = f"{seen} · fingerprint {f.fingerprint}"
        if f.acknowledged_by:
            detail += f" · acknowledged by {f.acknowledged_by}"
        lines.append(f"{'':12} {detail}")
    return "\n".join(lines) + "\n"


def render_history(records: Sequence[Any], node: str) -> str:
    lines = [f"History of {node} (newest first): {len(records)} transition(s)"]
    for r in records:
        priority = r.priority.value if r.priority else "--"
        lines.append(
            f"{r.at}  {r.transition.value:<12} {priority} {r.tag.value:<7} {r.check:<24} {r.message} "
            f"(fingerprint {r.fingerprint})"
        )
    return "\n".join(lines) + "\n"


def render_sweeps(records: Sequence[Any], cluster: str) -> str:
    lines = [f"Latest sweeps of {cluster}: {len(records)}"]
    for r in records:
        checks = r.get("checks") or {}
        counts = ", ".join(f"{k} {int(v)}" for k, v in sorted(checks.items())) or "no checks"
        moved = ", ".join(f"{k} {int(v)}" for k, v in sorted((r.get("transitions") or {}).items())) or "no change"
        scope = f" (node {r['scope_node']})" if r.get("scope_node") else ""
        lines.append(f"{r.get('at')}{scope}: checks {counts}; transitions {moved}")
        if r.get("unknown"):
            lines.append(f"    could not run: {', '.join(sorted(r['unknown']))}")
        if r.get("error"):
            lines.append(f"    stopped early: {r['error']}")
    return "\n".join(lines) + "\n"


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON data: DynamoDB's numbers as int or float, enums as their values, sets as lists."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [jsonable(v) for v in value]
    if hasattr(value, "value") and not isinstance(value, str):
        return value.value
    return value


def finding_json(f: StoredFinding) -> dict[str, Any]:
    return {
        "fingerprint": f.fingerprint,
        "cluster_arn": f.cluster_arn,
        "cluster_name": f.cluster_name,
        "instance_id": f.instance_id,
        "check": f.check,
        "section": f.section,
        "tag": f.tag.value,
        "priority": f.priority.value if f.priority else None,
        "state": f.state.value,
        "first_seen": f.first_seen,
        "last_seen": f.last_seen,
        "count": f.count,
        "message": f.message,
        "evidence": list(f.evidence),
        "suggested_commands": jsonable(list(f.suggested_commands)),
        "acknowledged_by": f.acknowledged_by,
    }
