"""Out-of-memory kills in the kernel log (§ I.3): the node's memory exhausted, or a job over its own limit.

Reads this boot's log and the previous boot's through :func:`hyperpod_debugger.probe.parse.klog.recent`, so
only kills inside ``ctx.window`` count.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hyperpod_debugger.domain.commands import read_only
from hyperpod_debugger.domain.model import Finding, Priority, Tag, trim_evidence
from hyperpod_debugger.probe.base import ProbeContext, finding, item
from hyperpod_debugger.probe.kernel_evidence import (
    EVIDENCE_LIMIT,
    ON_NODE,
    counted,
    evidence_notes,
    ignored_note,
    time_span,
    unread,
)
from hyperpod_debugger.probe.parse.klog import PREVIOUS_BOOT, THIS_BOOT, KernelLine, Recent, recent, window_label

if TYPE_CHECKING:
    from hyperpod_debugger.probe.document import ProbeDocument

CHECK_OOM = "probe.oom"


def _this_boot(
    doc: ProbeDocument, ctx: ProbeContext, what: str, keywords: re.Pattern[str], words: tuple[str, ...]
) -> Recent:
    item(doc, THIS_BOOT, what=what)  # absent / tool missing → skipped; timed out → unknown
    return recent(doc, THIS_BOOT, ctx.now, ctx.window, keywords, words=words)


def _previous_boot(doc: ProbeDocument, ctx: ProbeContext, keywords: re.Pattern[str], words: tuple[str, ...]) -> Recent:
    return recent(doc, PREVIOUS_BOOT, ctx.now, ctx.window, keywords, words=words)


#: keywords of the lines that make up an OOM kill report (capital-first, as kernel_faults._FAULT_KEYWORDS); the
#: benign "oom_score_adj" values printed elsewhere carry none of them
_OOM_KEYWORDS = re.compile(
    r"Out of memory|Memory cgroup out of memory|Kill process|Killed process|CONSTRAINT_|Task in "
    r"|invoked oom-killer|mem_cgroup_out_of_memory|mem_cgroup_oom_synchronize"
)
#: every kill report has a "Kill process" / "Killed process" line, its oom-kill: summary, or at least the
#: "<task> invoked oom-killer" line that opens it (the rest may be cut off by the tail cap)
_OOM_WORDS = ("Kill", "CONSTRAINT_", "oom-killer", "mem_cgroup_out_of_memory", "killed as a result of limit")
_INVOKED = re.compile(r"(\S+) invoked oom-killer:")
#: call-trace frames only a memory cgroup's OOM passes through (mm/memcontrol.c): the charge path's
#: mem_cgroup_out_of_memory and, on older kernels, the page-fault path's mem_cgroup_oom_synchronize
_MEMCG_FRAME = re.compile(r"mem_cgroup_out_of_memory|mem_cgroup_oom_synchronize")
_OOM_CONTEXT = re.compile(r"oom-kill:constraint=(\w+)")
_KV = re.compile(r"(?<![\w])(task_memcg|oom_memcg|task|pid)=([^,\s]*)")
_KILLED = re.compile(
    r"(Memory cgroup out of memory|Out of memory(?: \(oom_kill_allocating_task\))?): "
    r"Kill(?:ed)? process (\d+) \(([^)]*)\)"
)
_KILLED_BARE = re.compile(r"^Killed process (\d+) \(([^)]*)\)")
_TASK_IN = re.compile(r"Task in (\S+) killed as a result of limit of (\S+)")
#: cgroups of containers and batch jobs: a process there is the workload's
_JOB_CGROUP = re.compile(r"kubepods|/slurm|job_\d|/docker|containerd|cri-containerd|libpod")


@dataclass(slots=True)
class OomKill:
    lines: list[KernelLine]
    pid: str | None = None
    task: str | None = None
    constraint: str | None = None
    cgroup: str | None = None
    memcg_limit: bool = False
    previous_boot: bool = False
    #: the task whose allocation invoked the OOM killer (the report's first line); not the victim
    invoker: str | None = None

    @property
    def workload(self) -> bool:
        """The victim hit a container/job memory limit, or (constraint unknown) lived in a job cgroup.

        An explicit ``CONSTRAINT_NONE`` is a node-wide shortage whoever the victim was."""
        if self.memcg_limit or self.constraint == "CONSTRAINT_MEMCG":
            return True
        return self.constraint is None and bool(self.cgroup and _JOB_CGROUP.search(self.cgroup))

    def describe(self) -> str:
        if self.task is None and self.pid is None and self.invoker:
            return f"victim not in the log (the OOM killer was invoked by {self.invoker}; the kill line is missing)"
        who = f"{self.task or 'unknown process'} (pid {self.pid or '?'}"
        return f"{who}, {self.cgroup})" if self.cgroup else f"{who})"


def oom_kills(lines: Iterable[KernelLine], previous_boot: bool = False) -> list[OomKill]:
    """One entry per kill. The ``oom-kill:`` summary line and the ``Killed process`` line of the same
    kill are merged; the benign ``oom_score_adj`` values in other lines never start one."""
    reports = _KillReports(previous_boot)
    for line in lines:
        reports.read(line)
    return reports.finish()


class _KillReports:
    """The kill reports of one log, read line by line. A report opens with "<task> invoked oom-killer",
    then its call trace, its ``oom-kill:`` summary (or older kernels' "Task in <cgroup>"), and closes with
    the "Killed process" line; any of them may be missing (cut by the tail cap, or lost)."""

    def __init__(self, previous_boot: bool) -> None:
        self.previous_boot = previous_boot
        self.kills: list[OomKill] = []
        #: a report whose "Killed process" line has not come yet
        self.pending: OomKill | None = None

    def read(self, line: KernelLine) -> None:
        text = line.text
        if m := _INVOKED.search(text):
            # the report's first line: a kill follows (its own line may be missing: cut, or lost)
            self._close_pending()
            self.pending = OomKill([line], task=None, invoker=m.group(1), previous_boot=self.previous_boot)
        elif _MEMCG_FRAME.search(text) and "Memory cgroup out of memory" not in text:
            # a call-trace frame of the report: the kill was inside a memory cgroup's limit
            if self.pending is not None:
                self.pending.memcg_limit = True
        elif m := _OOM_CONTEXT.search(text):
            self._summary(line, m.group(1))
        elif m := _TASK_IN.search(text):
            self._task_in(line, m.group(1), m.group(2))
        elif m := _KILLED.search(text):
            self._killed(line, m.group(2), m.group(3), memcg=m.group(1).startswith("Memory cgroup"))
        elif m := _KILLED_BARE.search(text):
            self._killed_bare(line, m.group(1), m.group(2))

    def finish(self) -> list[OomKill]:
        self._close_pending()
        return self.kills

    def _close_pending(self) -> None:
        if self.pending is not None:
            self.kills.append(self.pending)
        self.pending = None

    def _summary(self, line: KernelLine, constraint: str) -> None:
        pending = self.pending
        if pending is not None and pending.constraint is None and pending.pid is None and pending.invoker:
            # the summary of the report the invoked line opened
            _summarise(pending, line, constraint)
            return
        self._close_pending()  # the report before it ends here, its "Killed process" line lost
        self.pending = OomKill([], previous_boot=self.previous_boot)
        _summarise(self.pending, line, constraint)

    def _task_in(self, line: KernelLine, cgroup: str, limit: str) -> None:
        pending = self.pending
        if pending is not None and pending.invoker and pending.pid is None and pending.cgroup is None:
            pending.lines.append(line)
            pending.cgroup, pending.memcg_limit = cgroup, pending.memcg_limit or limit != "/"
            return
        self._close_pending()
        self.pending = OomKill([line], cgroup=cgroup, memcg_limit=limit != "/", previous_boot=self.previous_boot)

    def _killed(self, line: KernelLine, pid: str, task: str, *, memcg: bool) -> None:
        if self.pending is not None and self.pending.pid in (None, pid):
            kill, self.pending = self.pending, None
        else:
            self._close_pending()
            last = self.kills[-1] if self.kills else None
            if last is not None and last.pid == pid and last.task == task and len(last.lines) < 3:
                last.lines.append(line)  # old kernels: "Kill process N" then "Killed process N"
                return
            kill = OomKill([], previous_boot=self.previous_boot)
        kill.lines.append(line)
        kill.pid, kill.task = pid, task
        kill.memcg_limit = kill.memcg_limit or memcg
        self.kills.append(kill)

    def _killed_bare(self, line: KernelLine, pid: str, task: str) -> None:
        last = self.kills[-1] if self.kills else None
        if last is not None and last.pid == pid:
            last.lines.append(line)
        elif self.pending is None and last is not None and "sacrifice child" in last.lines[-1].text:
            # older kernels: "Kill process N (x) score S or sacrifice child", then the child it chose
            # instead: "Killed process M (y)" is the same kill, its victim the child
            last.lines.append(line)
            last.pid, last.task = pid, task
        elif self.pending is not None and self.pending.pid in (None, pid):
            self.pending.lines.append(line)
            self.pending.pid, self.pending.task = pid, task
            self._close_pending()
        else:
            self.kills.append(OomKill([line], pid=pid, task=task, previous_boot=self.previous_boot))


def _summarise(kill: OomKill, line: KernelLine, constraint: str) -> None:
    """Fill a kill from its ``oom-kill:constraint=...,task_memcg=...,task=...,pid=...`` summary line."""
    values = dict(_KV.findall(line.text))
    kill.lines.append(line)
    kill.pid = values.get("pid") or None
    kill.task = values.get("task") or None
    kill.constraint = constraint
    kill.cgroup = values.get("task_memcg") or values.get("oom_memcg") or None


_OOM_COMMANDS = [
    read_only(
        ["journalctl", "-k", "-b", "0", "--no-pager", "--grep", "Out of memory|oom-kill|invoked oom-killer"],
        f"Read the OOM reports with their memory summaries {ON_NODE}",
    ),
    read_only(["ps", "-eo", "pid,user,rss,comm", "--sort=-rss"], f"List the largest memory users now {ON_NODE}"),
]


def check_oom(doc: ProbeDocument, ctx: ProbeContext) -> list[Finding]:
    this_log = _this_boot(doc, ctx, "OOM kills in the kernel log", _OOM_KEYWORDS, _OOM_WORDS)
    prev_log = _previous_boot(doc, ctx, _OOM_KEYWORDS, _OOM_WORDS)
    key = ("kernel.oom", ctx.now, ctx.window)
    kills = doc.parsed(key, lambda: [*oom_kills(prev_log.lines, True), *oom_kills(this_log.lines)])
    logs = (this_log, prev_log)
    label = window_label(ctx.window)
    workload = [k for k in kills if k.workload]
    system = [k for k in kills if not k.workload]
    findings: list[Finding] = []
    if system:
        lines = [line for k in system for line in k.lines]
        victims = _victims(system)
        findings.append(
            finding(
                ctx,
                CHECK_OOM,
                Tag.FAIL,
                f"The node ran out of memory: {counted(len(system), 'system-wide OOM kill')} in the last {label}"
                f"{_boots(system)} ({time_span(lines)}); killed: {victims}",
                priority=Priority.P1,
                section="I.3",
                evidence=[
                    *trim_evidence([line.raw for line in lines], EVIDENCE_LIMIT),
                    *evidence_notes(doc, ctx, logs, lines),
                ],
                root_cause=(
                    "The whole node's memory was exhausted and the kernel killed a process to survive; system "
                    "daemons (kubelet, slurmd, SSM agent) can be next. Find what grew: jobs without memory limits, "
                    "page cache pinned by /dev/shm, or a leaking daemon."
                ),
                suggested_commands=list(_OOM_COMMANDS),
                node_action="investigate",
            )
        )
    if workload:
        lines = [line for k in workload for line in k.lines]
        findings.append(
            finding(
                ctx,
                CHECK_OOM,
                Tag.WARN,
                f"{counted(len(workload), 'OOM kill')} inside container/job memory limits in the last {label}"
                f"{_boots(workload)} ({time_span(lines)}): {_victims(workload)}; the job needs more memory "
                "or a higher limit, the node is fine",
                priority=Priority.P2,
                section="I.3",
                evidence=[
                    *trim_evidence([line.raw for line in lines], EVIDENCE_LIMIT),
                    *evidence_notes(doc, ctx, logs, lines),
                ],
                root_cause=(
                    "A process exceeded the memory limit of its container or job cgroup; the fix is in the workload "
                    "spec (limits, batch size, data-loader workers)."
                ),
                suggested_commands=list(_OOM_COMMANDS),
                node_action="fix-workload",
            )
        )
    if findings:
        return findings
    if (not_read := unread(ctx, CHECK_OOM, "I.3", "OOM kills", this_log)) is not None:
        return [not_read]
    return [
        finding(
            ctx,
            CHECK_OOM,
            Tag.PASS,
            f"No OOM kill in the last {label}",
            section="I.3",
            evidence=[*evidence_notes(doc, ctx, logs, ()), *ignored_note(this_log, prev_log)],
        )
    ]


def _victims(kills: list[OomKill]) -> str:
    described = list(dict.fromkeys(k.describe() for k in kills))
    shown = ", ".join(described[:5])
    return shown + (f" and {len(described) - 5} more" if len(described) > 5 else "")


def _boots(kills: list[OomKill]) -> str:
    before = sum(1 for k in kills if k.previous_boot)
    if not before:
        return ""
    if before == len(kills):
        return " (before the last reboot)"
    return f" ({before} before the last reboot)"
