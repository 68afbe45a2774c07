"""A Slurm job, read on the controller: which nodes it held, when it ran, how it ended.

One fixed, read-only command (:func:`jobs_command`, the ``jobs`` pinned Session document's) prints every job the
controller still holds (``scontrol show job --oneliner``: running ones, and ended ones for ``MinJobAge``, five
minutes by default) and the last seven days of the accounting database (``sacct``, allocations only; it
answers only where accounting is configured). The command names no job, so it can be pinned: the job is
picked out of the answer here (:func:`find_job`). Slurm prints times in the controller's local time; HyperPod's
images run in UTC, and the times are read as UTC.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

from hyperpod_debugger.domain.jobs import JobNode, TrainingJob
from hyperpod_debugger.slurm.parse import COMMAND_TIMEOUT_S, MARKER, expand_hostlist, parse_query_output

#: Sections of the jobs command, in the order it prints them.
JOBS_KEYS = ("jobs_live", "jobs_history")
#: ``sacct --format`` of the history section; the job name last, since a name may hold a ``|``.
SACCT_FIELDS = ("JobID", "User", "State", "ExitCode", "Start", "End", "NodeList", "Reason", "JobName")
#: How far back the history section reads, and how many of its last lines it keeps.
HISTORY_DAYS = 7
HISTORY_LINES = 5000
#: A job id as people type it: ``4123``, an array task ``4123_7``, a heterogeneous component ``4123+1``.
JOB_ID = re.compile(r"^[0-9]{1,12}(?:[_+][0-9]{1,8})?$")
#: ``Key=Value`` fields of a ``--oneliner`` line; a value runs to the next `` Key=`` (names may hold spaces).
_FIELD = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_:/]*)=")


def jobs_command() -> str:
    """One line, read-only: ``bash -c '…'`` printing both sections after their markers (as the Slurm query)."""
    t = f"timeout {COMMAND_TIMEOUT_S}"
    fields = ",".join(SACCT_FIELDS)
    parts = [
        'export PATH="$PATH:/opt/slurm/bin:/usr/local/bin"',
        f"echo {MARKER.format(key='jobs_live')}",
        f"{t} scontrol show job --oneliner 2>&1",
        f"echo {MARKER.format(key='jobs_history')}",
        f"{t} sacct --allusers --allocations --parsable2 --noheader --starttime now-{HISTORY_DAYS}days "
        f"--format={fields} 2>&1 | tail -n {HISTORY_LINES}",
    ]
    script = "; ".join(parts)
    assert "'" not in script  # noqa: S101 - a single quote would end the bash -c argument
    return f"bash -c '{script}'"


def parse_oneliner(line: str) -> dict[str, str]:
    """``JobId=4123 JobName=train llama UserId=alice(1000) …`` -> {key: value} (values stripped)."""
    marks = list(_FIELD.finditer(line))
    fields: dict[str, str] = {}
    for index, mark in enumerate(marks):
        end = marks[index + 1].start() if index + 1 < len(marks) else len(line)
        fields[mark.group(1)] = line[mark.end() : end].strip()
    return fields


@dataclass(frozen=True, slots=True)
class JobsRead:
    """What the controller answered: the jobs it holds, the accounting rows, and what it said instead."""

    live: dict[str, dict[str, str]]
    history: dict[str, dict[str, str]]
    #: the sections that answered with an error instead of jobs (accounting not configured, a timeout)
    errors: dict[str, str]


def parse_jobs_output(stdout: str) -> JobsRead:
    sections = parse_query_output(stdout)
    live: dict[str, dict[str, str]] = {}
    history: dict[str, dict[str, str]] = {}
    errors: dict[str, str] = {}
    for line in sections.get("jobs_live", "").splitlines():
        fields = parse_oneliner(line.strip()) if line.strip().startswith("JobId=") else {}
        if fields:
            live[fields["JobId"]] = {**fields, "_line": line.strip()}
        elif line.strip() and not line.startswith("No jobs"):
            errors.setdefault("jobs_live", line.strip())
    for line in sections.get("jobs_history", "").splitlines():
        cells = line.split("|", len(SACCT_FIELDS) - 1)
        if len(cells) == len(SACCT_FIELDS) and JOB_ID.match(cells[0]):
            history[cells[0]] = {**dict(zip(SACCT_FIELDS, cells, strict=True)), "_line": line.strip()}
        elif line.strip():
            errors.setdefault("jobs_history", line.strip())
    for key in JOBS_KEYS:
        if key not in sections:
            errors[key] = "the section is missing from the answer"
    return JobsRead(live, history, errors)


def find_job(read: JobsRead, job_id: str) -> TrainingJob | None:
    """The job ``job_id`` as the controller holds it, else as accounting recorded it; None when neither has it."""
    if job_id in read.live:
        return _from_live(read.live[job_id])
    if job_id in read.history:
        return _from_history(read.history[job_id])
    return None


def _from_live(fields: dict[str, str]) -> TrainingJob:
    user = fields.get("UserId", "")
    return TrainingJob(
        orchestrator="Slurm",
        job_id=fields["JobId"],
        name=fields.get("JobName") or fields.get("Name") or "",
        owner=user.split("(")[0] or None,
        state=fields.get("JobState", "UNKNOWN"),
        exit_code=fields.get("ExitCode") or None,
        reason=_none(fields.get("Reason")),
        start=_time(fields.get("StartTime")),
        end=_time(fields.get("EndTime")),
        nodes=_nodes(fields.get("NodeList")),
        source_lines=(fields["_line"],),
    )


def _from_history(fields: dict[str, str]) -> TrainingJob:
    return TrainingJob(
        orchestrator="Slurm",
        job_id=fields["JobID"],
        name=fields["JobName"],
        owner=fields["User"] or None,
        state=fields["State"],
        exit_code=fields["ExitCode"] or None,
        reason=_none(fields["Reason"]),
        start=_time(fields["Start"]),
        end=_time(fields["End"]),
        nodes=_nodes(fields["NodeList"]),
        source_lines=(fields["_line"],),
    )


def _nodes(nodelist: str | None) -> tuple[JobNode, ...]:
    if not nodelist or nodelist.startswith("(") or nodelist.lower() in ("none", "(null)"):
        return ()
    return tuple(JobNode(name) for name in expand_hostlist(nodelist))


def _none(value: str | None) -> str | None:
    return None if not value or value in ("None", "(null)") else value


def _time(value: str | None) -> datetime | None:
    """``2026-11-30T03:12:00`` as UTC; ``Unknown``/``None`` (not started, still running) -> None."""
    if not value:
        return None
    try:
        return datetime.strptime(value.strip(), "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
    except ValueError:
        return None
