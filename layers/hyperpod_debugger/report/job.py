"""A job diagnosis for people (the terminal) and for programs (JSON).

Every string that came from the cluster (job names, messages, the orchestrator's notes) is escaped for the
terminal with :func:`hyperpod_debugger.domain.untrusted.visible`; the JSON keeps it as data.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from hyperpod_debugger.domain.sections import pointer
from hyperpod_debugger.domain.untrusted import visible
from hyperpod_debugger.report.text import command_lines

if TYPE_CHECKING:
    from hyperpod_debugger.domain.jobs import JobDiagnosis, Placed

_HEADLINES = {
    "node": "LIKELY CULPRIT",
    "cluster": "A CAUSE COMMON TO THE JOB'S NODES",
    "own": "NOTHING ON THE NODES EXPLAINS IT",
    "unexplained": "UNEXPLAINED",
    "running": "STILL RUNNING",
}


def render_text(diagnosis: JobDiagnosis) -> str:
    job = diagnosis.job
    out = [
        f"Job {visible(job.job_id)} ({visible(job.name) or 'no name'}, {visible(job.owner or '?')}) on "
        f"{len(job.nodes)} node(s): {visible(job.state)}, exit code {visible(job.exit_code or '?')}"
        + (f", reason {visible(job.reason)}" if job.reason else ""),
        f"  ran {_at(job.start)} to {_at(job.end) if job.ended else 'now (still running)'}; window read "
        f"{diagnosis.window_start:%Y-%m-%d %H:%M} to {diagnosis.window_end:%Y-%m-%d %H:%M} UTC",
        "",
        f"{_HEADLINES[diagnosis.kind]}: {visible(diagnosis.conclusion)}",
    ]
    for culprit in diagnosis.culprits:
        out += ["", f"  {culprit.strength.upper()}: {visible(culprit.node_name)} ({culprit.instance_id})"]
        out += [f"    - {_line(p)}" for p in culprit.evidence]
        if culprit.next_step:
            out.append(f"    next: {visible(culprit.next_step)}")
        out += [f"    {visible(line)}" for line in command_lines(list(culprit.commands))]
    if diagnosis.common:
        out += ["", "  Common to the job's nodes:"]
        out += [f"    - {_line(p)}" for p in diagnosis.common]
    if diagnosis.notes:
        out += ["", "  What the orchestrator said about the job's nodes:"]
        out += [f"    - {visible(note)}" for note in diagnosis.notes]
    out += ["", "Read:"] + [f"  - {visible(item)}" for item in diagnosis.read]
    if diagnosis.unknown:
        out += ["Could not read (neither a fault nor a clean bill):"] + [f"  - {visible(u)}" for u in diagnosis.unknown]
    return "\n".join(out) + "\n"


def render_json(diagnosis: JobDiagnosis) -> str:
    return json.dumps(as_data(diagnosis), indent=2) + "\n"


def as_data(diagnosis: JobDiagnosis) -> dict[str, Any]:
    """The diagnosis as JSON-ready data (times in ISO 8601, enums as their values)."""
    return _jsonable(asdict(diagnosis))


#: where a piece of evidence was read, in words
_SOURCES = {
    "finding": "the monitor's findings",
    "hyperpod_event": "HyperPod's event",
    "health_agent": "the health agent",
    "probe_now": "this run's triage",
    "orchestrator": "the orchestrator",
}


def _line(placed: Placed) -> str:
    item = placed.evidence
    where = f" → {pointer(item.section)}" if item.section else ""
    return f"[{item.tag.value}] {visible(item.message)} ({placed.when}; {_SOURCES[item.source]}){where}"


def _at(value: object) -> str:
    return f"{value:%Y-%m-%d %H:%M:%S} UTC" if value is not None else "?"


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if hasattr(value, "value") and isinstance(value.value, str):
        return value.value
    return value
