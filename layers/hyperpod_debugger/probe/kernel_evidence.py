"""How the kernel-log evaluators (``probe.xid``, ``probe.kernel_faults``, ``probe.oom``) state their evidence.

Each reads the ``kernel_log`` item (this boot) and ``kernel_log_previous_boot`` through
:func:`hyperpod_debugger.probe.parse.klog.recent`; what it read carries the same caveats for all of them:
output cut short, lines of unknown time, previous-boot lines that could not be placed in the window, or a
file that is no kernel log at all. This module words those caveats once.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from hyperpod_debugger.domain.model import Finding, Priority, Tag, trim_evidence
from hyperpod_debugger.probe.base import ProbeContext, finding
from hyperpod_debugger.probe.parse.klog import KernelLine, Recent, boot_time, not_a_kernel_log, stamp, window_label

if TYPE_CHECKING:
    from hyperpod_debugger.probe.document import ProbeDocument

EVIDENCE_LIMIT = 10
ON_NODE = "on the node (SSM session, § K)"


def evidence_notes(
    doc: ProbeDocument, ctx: ProbeContext, logs: Iterable[Recent], lines: Iterable[KernelLine]
) -> list[str]:
    """What the reader must know about the evidence: cut output, lines of unknown time."""
    notes: list[str] = []
    for log in logs:
        if log.available and log.truncated:
            name = "previous boot's" if log.previous_boot else "this boot's"
            notes.append(f"({name} kernel log: output truncated; judged what was read)")
    undated = sum(1 for line in lines if line.time is None)
    if undated:
        boot = boot_time(doc, ctx.now)
        if boot is None:
            notes.append(
                f"(time unknown for {undated} line(s): the log gives no wall-clock time and the boot time is "
                "unknown, so they are read as this boot's, at an unknown time; give the node's uptime (the "
                "`uptime` item) or a dated log to place them in the window)"
            )
        elif boot >= ctx.now - ctx.window:
            notes.append(
                f"(time unknown for {undated} line(s): counted because this boot began at {stamp(boot)}, inside "
                f"the {window_label(ctx.window)} window; the previous boot ended then)"
            )
        else:
            notes.append(
                f"(time unknown for {undated} line(s): they carry no time of their own, so they are read as this "
                f"boot's (since {stamp(boot)}), possibly older than the {window_label(ctx.window)} window)"
            )
    return notes


def time_span(lines: list[KernelLine]) -> str:
    """The first and last time of the lines ("time unknown" when none is dated)."""
    times = [line.time for line in lines if line.time is not None]
    if not times:
        return "time unknown"
    first, last = stamp(min(times)), stamp(max(times))
    return first if first == last else f"{first} … {last}"


def counted(n: int, noun: str) -> str:
    """``n`` and the noun, plural when ``n`` is not 1."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def unread(ctx: ProbeContext, check: str, section: str, what: str, *logs: Recent) -> Finding | None:
    """UNKNOWN when this boot's log is not a kernel log at all (a wrong file): a clean result over it
    would be a PASS from input never read."""
    for log in logs:
        if log.log is None or log.previous_boot:
            continue
        reason = not_a_kernel_log(log.log)
        if reason is not None:
            return finding(
                ctx,
                check,
                Tag.UNKNOWN,
                f"{what} not judged: the {log.item_id} output is not a kernel log: {reason}",
                priority=Priority.P2,
                section=section,
                evidence=list(trim_evidence(list(log.log.raws), 3)),
            )
    return None


def ignored_note(*logs: Recent) -> list[str]:
    """The previous-boot lines of unknown time left out, when there were any."""
    ignored = sum(log.undated_ignored for log in logs)
    if not ignored:
        return []
    return [f"({ignored} previous-boot line(s) of unknown time not judged: that boot ended before the window began)"]
