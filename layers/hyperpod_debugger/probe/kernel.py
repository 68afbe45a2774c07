"""Kernel-log evaluators: NVIDIA Xid (§ G.1), kernel faults (§ N) and OOM kills (§ I.3).

All three read the ``kernel_log`` item (this boot) and ``kernel_log_previous_boot`` through
:func:`hyperpod_debugger.probe.parse.klog.recent`, so only lines inside ``ctx.window`` count, and a
line of unknown time counts only when its boot lies inside the window (the evidence says so).
Old lines are history, not alerts: a node that logged Xid 79 last month and was repaired is not
reported again (the sticky-counter trap).

The previous boot matters twice: a panic is normally visible only there (the panic rebooted the
node), and the same hardware fault in both boots means a reboot did not cure it (replace).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta

from hyperpod_debugger.checks.base import Check
from hyperpod_debugger.domain.model import Finding, NodeAction, Priority, SuggestedCommand, Tag, trim_evidence
from hyperpod_debugger.domain.xid import XidInfo, lookup, parse_xid_codes
from hyperpod_debugger.probe.base import ProbeContext, finding, item
from hyperpod_debugger.probe.document import ProbeDocument
from hyperpod_debugger.probe.parse.klog import (
    PREVIOUS_BOOT,
    THIS_BOOT,
    KernelLine,
    Recent,
    boot_time,
    recent,
    stamp,
    window_label,
)
from hyperpod_debugger.remediation.suggest import read_only

CHECK_XID = "probe.xid"
CHECK_FAULTS = "probe.kernel_faults"
CHECK_OOM = "probe.oom"

#: How far back the previous boot is searched for the same hardware fault (the recurrence rule);
#: never shorter than the evaluation window.
RECURRENCE_LOOKBACK = timedelta(days=7)
EVIDENCE_LIMIT = 10
ON_NODE = "on the node (SSM session, § K)"


# --------------------------------------------------------------------------- shared


def _this_boot(
    doc: ProbeDocument, ctx: ProbeContext, what: str, keywords: re.Pattern[str], words: tuple[str, ...]
) -> Recent:
    item(doc, THIS_BOOT, what=what)  # absent / tool missing → skipped; timed out → unknown
    return recent(doc, THIS_BOOT, ctx.now, ctx.window, keywords, words=words)


def _previous_boot(doc: ProbeDocument, ctx: ProbeContext, keywords: re.Pattern[str], words: tuple[str, ...]) -> Recent:
    return recent(doc, PREVIOUS_BOOT, ctx.now, ctx.window, keywords, words=words)


def _notes(doc: ProbeDocument, ctx: ProbeContext, logs: Iterable[Recent], lines: Iterable[KernelLine]) -> list[str]:
    """What the reader must know about the evidence: cut output, lines of unknown time."""
    notes: list[str] = []
    for log in logs:
        if log.available and log.truncated:
            name = "previous boot's" if log.previous_boot else "this boot's"
            notes.append(f"({name} kernel log: output truncated; judged what was read)")
    undated = sum(1 for line in lines if line.time is None)
    if undated:
        boot = boot_time(doc, ctx.now)
        notes.append(
            f"(time unknown for {undated} line(s): counted because this boot began at {stamp(boot)}, inside "
            f"the {window_label(ctx.window)} window; the previous boot ended then)"
        )
    return notes


def _span(lines: list[KernelLine]) -> str:
    times = [line.time for line in lines if line.time is not None]
    if not times:
        return "time unknown"
    first, last = min(times), max(times)
    return stamp(first) if first == last else f"{stamp(first)} … {stamp(last)}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _ignored_note(*logs: Recent) -> list[str]:
    ignored = sum(log.undated_ignored for log in logs)
    if not ignored:
        return []
    return [
        f"({ignored} kernel-log line(s) of unknown time not judged: their boot is older than the window or unknown)"
    ]


# --------------------------------------------------------------------------- probe.xid

_XID_KEYWORD = re.compile(r"Xid")
_XID_GPU = re.compile(r"Xid\s*\((?:PCI:)?([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})")
_RECOVERY = re.compile(r"recovery action changed from .* to 0x[0-9A-Fa-f]+ \(([^)]*)\)")


@dataclass(slots=True)
class XidGroup:
    """Every line of one Xid code in one log, in log order."""

    code: int
    lines: list[KernelLine] = field(default_factory=list)
    gpus: dict[str, None] = field(default_factory=dict)


def xid_groups(lines: Iterable[KernelLine]) -> dict[int, XidGroup]:
    groups: dict[int, XidGroup] = {}
    for line in lines:
        text = line.text
        if "Xid" not in text:
            continue
        codes = parse_xid_codes(text)
        if not codes:
            continue
        gpu = _XID_GPU.search(text)
        for code in dict.fromkeys(codes):
            group = groups.get(code)
            if group is None:
                group = groups[code] = XidGroup(code)
            group.lines.append(line)
            if gpu:
                group.gpus[gpu.group(1).lower()] = None
    return groups


def _xid_lines(
    doc: ProbeDocument, ctx: ProbeContext, item_id: str, window: timedelta
) -> tuple[Recent, dict[int, XidGroup]]:
    """The Xid lines of one boot inside ``window``, grouped by code (once per document)."""
    key = f"kernel.xid:{item_id}:{ctx.now.isoformat()}:{window.total_seconds()}"

    def scan() -> tuple[Recent, dict[int, XidGroup]]:
        log = recent(doc, item_id, ctx.now, window, _XID_KEYWORD, words=("Xid",))
        return log, xid_groups(log.lines)

    return doc.parsed(key, scan)


@functools.lru_cache(maxsize=16)
def _xid_commands_for(xid_class: str, application: bool) -> tuple[SuggestedCommand, ...]:
    return tuple(_build_xid_commands(xid_class, application))


def _xid_commands(info: XidInfo) -> list[SuggestedCommand]:
    return list(_xid_commands_for(info.xid_class, info.is_application))


def _build_xid_commands(xid_class: str, application: bool) -> list[SuggestedCommand]:
    commands = [
        read_only(
            ["journalctl", "-k", "-b", "0", "--no-pager", "--grep", "NVRM"],
            f"Read this boot's NVIDIA driver messages around the Xid {ON_NODE}",
        )
    ]
    if xid_class == "memory":
        commands += [
            read_only(["nvidia-smi", "-q", "-d", "ECC"], f"Read the GPUs' ECC error counters {ON_NODE}"),
            read_only(
                [
                    "nvidia-smi",
                    "--query-remapped-rows=gpu_bus_id,remapped_rows.pending,remapped_rows.failure",
                    "--format=csv",
                ],
                f"Check for pending or failed memory row remapping (§ G.1.a) {ON_NODE}",
            ),
        ]
    elif xid_class == "nvlink":
        commands.append(read_only(["nvidia-smi", "nvlink", "--status"], f"List NVLink link states {ON_NODE}"))
    elif xid_class == "bus":
        commands.append(read_only(["nvidia-smi", "-L"], f"List the GPUs the driver still sees {ON_NODE}"))
    elif application:
        commands.append(
            read_only(
                ["nvidia-smi", "--query-compute-apps=pid,process_name,gpu_bus_id,used_memory", "--format=csv"],
                f"See which processes use the GPUs now {ON_NODE}",
            )
        )
    return commands


def _xid_finding(
    doc: ProbeDocument,
    ctx: ProbeContext,
    group: XidGroup,
    before_reboot: XidGroup | None,
    logs: tuple[Recent, ...],
) -> Finding:
    info = lookup(group.code)
    lines = group.lines
    gpus = ", ".join(group.gpus) or "unknown GPU"
    head = (
        f"{info.label()} on {gpus}: {_count(len(lines), 'line')} in the last {window_label(ctx.window)} "
        f"({_span(lines)})"
    )
    evidence = trim_evidence([line.raw for line in lines], EVIDENCE_LIMIT)
    tag, priority, action = Tag.WARN, Priority.P1, "investigate"
    if info.is_application:
        tag, priority, action = Tag.WARN, Priority.P2, "fix-workload"
        tail = "raised by the workload (a fault in the job's GPU code or a killed process), not the node: fix the job"
        cause = "Application-class Xid: the running job faulted; the GPU and the node are not implicated."
    elif info.action == "investigate":
        tail = "the code alone does not settle whether the job, the driver or the hardware is at fault"
        cause = "Ambiguous Xid: read the full driver messages (and neighbouring Xids) before acting on the node."
        if group.code == 154 and (asked := _recovery_asked(lines)):
            tail = f"the driver asks for: {asked}"
            if "reset" in asked.lower() or "reboot" in asked.lower():
                action = "reboot"
    elif before_reboot is not None:
        tag, priority, action = Tag.FAIL, Priority.P0, "replace"
        tail = (
            f"it was logged before the last reboot too ({_span(before_reboot.lines)}): "
            "the fault survived a reboot, so the hardware is at fault"
        )
        cause = f"{info.label()} recurred after a reboot on this node."
        evidence = [*evidence, "(before the last reboot:)", *trim_evidence([x.raw for x in before_reboot.lines], 3)]
    elif info.xid_class == "driver":
        action = "reboot"
        tail = "GPU firmware/driver fault: a GPU reset (node reboot) clears it; replace the node if it returns"
        cause = f"{info.label()}: the GPU's firmware or driver stopped responding."
    else:
        tag, action = Tag.FAIL, "reboot"
        priority = Priority.P0 if info.xid_class == "bus" or info.action == "replace" else Priority.P1
        tail = "hardware fault: reboot the node (HyperPod's recovery does); replace it if the code returns after that"
        cause = f"{info.label()}: {info.xid_class} fault on the GPU."
    return finding(
        ctx,
        CHECK_XID,
        tag,
        f"{head}; {tail}",
        priority=priority,
        section="G.1",
        evidence=[*evidence, *_notes(doc, ctx, logs, lines)],
        root_cause=cause,
        suggested_commands=_xid_commands(info),
        node_action=action,
    )


def _recovery_asked(lines: list[KernelLine]) -> str | None:
    for line in reversed(lines):
        if m := _RECOVERY.search(line.text):
            return m.group(1).strip()
    return None


def check_xid(doc: ProbeDocument, ctx: ProbeContext) -> list[Finding]:
    item(doc, THIS_BOOT, what="NVIDIA Xid errors in the kernel log")
    lookback = max(ctx.window, RECURRENCE_LOOKBACK)
    this, now_groups = _xid_lines(doc, ctx, THIS_BOOT, ctx.window)
    before, before_groups = _xid_lines(doc, ctx, PREVIOUS_BOOT, lookback)
    logs = (this, before)
    findings: list[Finding] = []
    for code in sorted(now_groups):
        info = lookup(code)
        recurring = before_groups.get(code) if info.is_hardware else None
        findings.append(_xid_finding(doc, ctx, now_groups[code], recurring, logs))
    findings.sort(key=lambda f: (f.priority or "P9", f.tag != Tag.FAIL))
    if findings:
        return findings
    label = window_label(ctx.window)
    out = [
        finding(
            ctx,
            CHECK_XID,
            Tag.PASS,
            f"No NVIDIA Xid in this boot's kernel log in the last {label}",
            section="G.1",
            evidence=[*_notes(doc, ctx, logs, ()), *_ignored_note(this)],
        )
    ]
    # A hardware Xid just before the last reboot (inside the window): the node is clean now, but the
    # next occurrence means the reboot did not cure it. Worth knowing, not an alert.
    _, recent_before = _xid_lines(doc, ctx, PREVIOUS_BOOT, ctx.window)
    for code in sorted(recent_before):
        info = lookup(code)
        if not info.is_hardware:
            continue
        group = recent_before[code]
        out.append(
            finding(
                ctx,
                CHECK_XID,
                Tag.INFO,
                f"{info.label()} was logged before the last reboot ({_span(group.lines)}) and not since: "
                "if it returns on this boot, the reboot did not cure it (replace the node)",
                section="G.1",
                evidence=trim_evidence([line.raw for line in group.lines], 3),
            )
        )
    return out


# --------------------------------------------------------------------------- probe.kernel_faults

_JOURNAL_PREV = read_only(
    ["journalctl", "-k", "-b", "-1", "-n", "200", "--no-pager"],
    f"Read the last kernel messages before the last reboot {ON_NODE}",
)
_PSTORE = read_only(["ls", "-l", "/sys/fs/pstore"], f"Look for crash records the firmware kept (pstore) {ON_NODE}")
_JOURNAL_FAULTS = read_only(
    ["journalctl", "-k", "-b", "0", "--no-pager", "--grep", "lockup|blocked for more than|BUG:|Oops"],
    f"Read this boot's lockup / hung-task / oops reports {ON_NODE}",
)
_JOURNAL_HW = read_only(
    ["journalctl", "-k", "--no-pager", "--grep", "Hardware Error|NMI|mce:"],
    f"Read every machine-check / NMI report the journal kept {ON_NODE}",
)
_NVIDIA = read_only(["nvidia-smi", "-L"], f"List the GPUs the NVIDIA driver sees {ON_NODE}")


@dataclass(frozen=True, slots=True)
class FaultKind:
    key: str
    label: str
    tag: Tag
    priority: Priority
    section: str
    action: NodeAction
    #: the same fault in both boots means the hardware is bad: replace
    hardware: bool
    root_cause: str
    commands: tuple[SuggestedCommand, ...]


_KINDS: dict[str, FaultKind] = {
    kind.key: kind
    for kind in (
        FaultKind(
            "panic",
            "Kernel panic",
            Tag.FAIL,
            Priority.P0,
            "N",
            "investigate",
            False,
            "The kernel hit an unrecoverable error and stopped (the node rebooted).",
            (_JOURNAL_PREV, _PSTORE),
        ),
        FaultKind(
            "hard_lockup",
            "Hard lockup (a CPU stopped taking interrupts)",
            Tag.FAIL,
            Priority.P0,
            "N",
            "investigate",
            False,
            "A CPU was stuck with interrupts off; on GPU hosts often PCIe/NVLink or firmware trouble.",
            (_JOURNAL_FAULTS, _JOURNAL_PREV),
        ),
        FaultKind(
            "mce",
            "Uncorrected machine-check / hardware error",
            Tag.FAIL,
            Priority.P0,
            "N",
            "investigate",
            True,
            "The CPU or memory reported an uncorrected hardware error.",
            (_JOURNAL_HW,),
        ),
        FaultKind(
            "nmi",
            "Hardware NMI",
            Tag.FAIL,
            Priority.P0,
            "N",
            "investigate",
            True,
            "A non-maskable interrupt signalled a hardware problem (memory parity, PCIe system error).",
            (_JOURNAL_HW,),
        ),
        FaultKind(
            "oops",
            "Kernel BUG / oops",
            Tag.FAIL,
            Priority.P1,
            "N",
            "investigate",
            False,
            "The kernel detected a bug in itself or a driver; the kernel may be in an inconsistent state.",
            (_JOURNAL_FAULTS,),
        ),
        FaultKind(
            "mce_corrected",
            "Corrected machine-check errors",
            Tag.WARN,
            Priority.P1,
            "N",
            "investigate",
            False,
            "The CPU or memory corrected hardware errors; a growing rate precedes uncorrected ones.",
            (_JOURNAL_HW,),
        ),
        FaultKind(
            "soft_lockup",
            "Soft lockup (a CPU stuck in the kernel)",
            Tag.WARN,
            Priority.P1,
            "N",
            "investigate",
            False,
            "A CPU ran kernel code without yielding for tens of seconds (often a driver waiting on PCIe/NVLink).",
            (_JOURNAL_FAULTS,),
        ),
        FaultKind(
            "hung_task",
            "Hung task (process blocked in the kernel)",
            Tag.WARN,
            Priority.P1,
            "N",
            "investigate",
            False,
            "A process waited uninterruptibly for minutes: storage/NFS/FSx I/O or a stuck GPU operation.",
            (_JOURNAL_FAULTS,),
        ),
        FaultKind(
            "gpu_off_bus",
            "GPU fell off the PCIe bus (NVIDIA driver)",
            Tag.FAIL,
            Priority.P0,
            "G.1",
            "reboot",
            True,
            "The NVIDIA driver lost the GPU on the PCIe bus.",
            (_NVIDIA,),
        ),
        FaultKind(
            "gpu_init",
            "NVIDIA driver could not initialise a GPU",
            Tag.FAIL,
            Priority.P1,
            "G.1",
            "reboot",
            True,
            "The NVIDIA driver failed to initialise a GPU (RmInitAdapter).",
            (_NVIDIA,),
        ),
        FaultKind(
            "nvidia_mismatch",
            "NVIDIA driver version mismatch",
            Tag.WARN,
            Priority.P1,
            "G.1",
            "investigate",
            False,
            "The NVIDIA user-space libraries and the loaded kernel module are different versions (§ E drift).",
            (read_only(["cat", "/proc/driver/nvidia/version"], f"Show the loaded NVIDIA kernel module {ON_NODE}"),),
        ),
    )
}

#: the keywords a raw line needs before the precise patterns run (most lines carry none). Every
#: branch starts with a capital letter: the regex engine skips other characters fast. Soft lockups
#: ("watchdog: BUG: soft lockup") are found by "BUG", hung tasks by "INFO: task … blocked".
_FAULT_KEYWORDS = re.compile(
    r"Kernel panic|LOCKUP|BUG|Oops|Hardware Error|Machine|NMI|INFO: task|NVRM: |Trigger a crash"
)
_PANIC = re.compile(r"Kernel panic - not syncing")
_HARD_LOCKUP = re.compile(r"hard LOCKUP", re.IGNORECASE)
_SOFT_LOCKUP = re.compile(r"soft lockup", re.IGNORECASE)
_GHES = re.compile(r"\{(\d+)\}\[Hardware Error\]")
_GHES_SEVERITY = re.compile(r"\{(\d+)\}\[Hardware Error\]:\s+event severity:\s*(\w+)")
_MCE = re.compile(r"\[Hardware Error\]|Machine Check Exception|Machine check: ")
_MCE_CORRECTED = re.compile(r"Machine check events logged|(?<!un)corrected error|severity:\s*corrected", re.IGNORECASE)
_NMI = re.compile(r"Uhhuh\. NMI|NMI received|NMI: (?:PCI system error|IOCK error)")
_HUNG = re.compile(r"blocked for more than \d+ seconds|hung_task(?!_timeout_secs)")
_OOPS = re.compile(r"\bBUG: |Oops: |kernel BUG at")
_OFF_BUS = re.compile(r"NVRM: .*fallen off the bus")
_INIT_FAIL = re.compile(r"RmInitAdapter failed|rm_init_adapter failed")
_MISMATCH = re.compile(r"NVRM: API mismatch")
_SYSRQ_CRASH = re.compile(r"sysrq: .*Trigger a crash|sysrq_handle_crash")
_FRAME_MODULE = re.compile(r"\+0x[0-9a-f]+/0x[0-9a-f]+ \[(\w+)\]")
_TRACE_END = re.compile(r"---\[ end ")
TRACE_LOOKAHEAD = 60


def _fault_kind(text: str, ghes: dict[str, str]) -> str | None:
    # plain substring tests first: most keyword lines (NVRM chatter) match none of the patterns
    if "panic" in text and _PANIC.search(text):
        return "panic"
    if ("LOCKUP" in text or "lockup" in text) and (kind := _lockup(text)):
        return kind
    if ("Hardware Error" in text or "Machine" in text) and _MCE.search(text):
        record = _GHES.search(text)
        severity = ghes.get(record.group(1), "") if record else ""
        if severity == "corrected" or (not record and _MCE_CORRECTED.search(text)):
            return "mce_corrected"
        return "mce"
    if "NMI" in text and _NMI.search(text):
        return "nmi"
    if ("blocked for more" in text or "hung_task" in text) and _HUNG.search(text):
        return "hung_task"
    if "NVRM" in text and "Xid" not in text:  # NVRM Xid lines belong to probe.xid
        if "fallen off the bus" in text and _OFF_BUS.search(text):
            return "gpu_off_bus"
        if "nit" in text and _INIT_FAIL.search(text):
            return "gpu_init"
        if "mismatch" in text and _MISMATCH.search(text):
            return "nvidia_mismatch"
    if ("BUG" in text or "Oops" in text) and _OOPS.search(text):
        return "oops"
    return None


def _lockup(text: str) -> str | None:
    if _HARD_LOCKUP.search(text):
        return "hard_lockup"
    if _SOFT_LOCKUP.search(text):
        return "soft_lockup"
    return None


@dataclass(slots=True)
class BootFaults:
    """The fault lines of one boot's windowed log, by kind, with call-trace context."""

    by_kind: dict[str, list[KernelLine]] = field(default_factory=dict)
    #: kernel modules named in the call trace that follows the first line of each kind
    modules: dict[str, list[str]] = field(default_factory=dict)
    frames: dict[str, list[str]] = field(default_factory=dict)
    deliberate_crash: bool = False


def scan_faults(selected: Recent) -> BootFaults:
    """Classify the keyword lines of one boot; the call trace after the first line of each kind
    is read from the full log (trace lines carry no keyword)."""
    found = BootFaults()
    ghes: dict[str, str] = {}
    for line in selected.lines:
        if "event severity" in line.text and (m := _GHES_SEVERITY.search(line.text)):
            ghes[m.group(1)] = m.group(2).lower()
    for line, index in zip(selected.lines, selected.indices, strict=True):
        text = line.text
        if "Trigger a crash" in text and _SYSRQ_CRASH.search(text):
            found.deliberate_crash = True
            continue
        kind = _fault_kind(text, ghes)
        if kind is None:
            continue
        bucket = found.by_kind.setdefault(kind, [])
        bucket.append(line)
        if len(bucket) == 1 and selected.log is not None:
            _trace_context(found, kind, selected.log.raws, index)
    return found


def _trace_context(found: BootFaults, kind: str, raws: tuple[str, ...], index: int) -> None:
    modules: dict[str, None] = {}
    frames: list[str] = []
    for raw in raws[index + 1 : index + 1 + TRACE_LOOKAHEAD]:
        if "---[ end" in raw:
            break
        if "+0x" in raw and (m := _FRAME_MODULE.search(raw)):
            if m.group(1) not in modules:
                frames.append(raw.rstrip())
            modules[m.group(1)] = None
    if modules:
        found.modules[kind] = list(modules)
        found.frames[kind] = frames[:3]


def _faults_of(doc: ProbeDocument, ctx: ProbeContext, item_id: str) -> tuple[Recent, BootFaults]:
    key = f"kernel.faults:{item_id}:{ctx.now.isoformat()}:{ctx.window.total_seconds()}"

    def scan() -> tuple[Recent, BootFaults]:
        selected = recent(doc, item_id, ctx.now, ctx.window, _FAULT_KEYWORDS)
        return selected, scan_faults(selected)

    return doc.parsed(key, scan)


def check_kernel_faults(doc: ProbeDocument, ctx: ProbeContext) -> list[Finding]:
    item(doc, THIS_BOOT, what="kernel panics, lockups and hardware errors in the kernel log")
    this_log, this = _faults_of(doc, ctx, THIS_BOOT)
    prev_log, prev = _faults_of(doc, ctx, PREVIOUS_BOOT)
    # Xid 79 lines are probe.xid's; the driver's matching "fallen off the bus" line is the same event.
    covered_now = this.by_kind.get("gpu_off_bus") and 79 in _xid_lines(doc, ctx, THIS_BOOT, ctx.window)[1]
    covered_before = prev.by_kind.get("gpu_off_bus") and 79 in _xid_lines(doc, ctx, PREVIOUS_BOOT, ctx.window)[1]
    logs = (this_log, prev_log)
    findings: list[Finding] = []
    for key, kind in _KINDS.items():
        now_lines = [] if key == "gpu_off_bus" and covered_now else this.by_kind.get(key, [])
        before_lines = [] if key == "gpu_off_bus" and covered_before else prev.by_kind.get(key, [])
        if now_lines or before_lines:
            findings.append(_fault_finding(doc, ctx, kind, now_lines, before_lines, this, prev, logs))
    if findings:
        findings.sort(key=lambda f: (f.priority or "P9", f.tag != Tag.FAIL))
        return findings
    scope = "this boot and the previous one" if prev_log.available else "this boot (previous boot's log not available)"
    return [
        finding(
            ctx,
            CHECK_FAULTS,
            Tag.PASS,
            f"No kernel panic, lockup, hung task, oops, NMI or machine-check error in the last "
            f"{window_label(ctx.window)} ({scope})",
            section="N",
            evidence=[*_notes(doc, ctx, logs, ()), *_ignored_note(this_log, prev_log)],
        )
    ]


def _fault_finding(
    doc: ProbeDocument,
    ctx: ProbeContext,
    kind: FaultKind,
    now_lines: list[KernelLine],
    before_lines: list[KernelLine],
    this: BootFaults,
    prev: BootFaults,
    logs: tuple[Recent, ...],
) -> Finding:
    lines = [*before_lines, *now_lines]
    if now_lines and before_lines:
        where = f"in this boot ({_span(now_lines)}) and before the last reboot ({_span(before_lines)})"
    elif now_lines:
        where = f"in this boot ({_span(now_lines)})"
    else:
        where = f"before the last reboot ({_span(before_lines)})"
    parts = [f"{kind.label} {where}, {_count(len(lines), 'line')} in the last {window_label(ctx.window)}"]
    if kind.key == "panic" and not now_lines:
        parts.append("the previous boot ended in it")
    tag, priority, action, cause = kind.tag, kind.priority, kind.action, kind.root_cause
    modules = dict.fromkeys([*prev.modules.get(kind.key, []), *this.modules.get(kind.key, [])])
    if modules:
        parts.append(f"call trace through module(s) {', '.join(modules)}")
        if "nvidia" in modules:
            cause += " The call trace runs through the NVIDIA driver (§ G.1)."
    if kind.hardware and now_lines and before_lines:
        tag, priority, action = Tag.FAIL, Priority.P0, "replace"
        parts.append("seen in both boots: a reboot did not cure it, replace the node")
    elif kind.key in ("panic", "oops") and _all_deliberate(now_lines, before_lines, this, prev):
        tag, priority, action = Tag.WARN, Priority.P2, "investigate"
        parts.append("triggered on purpose through SysRq (a crash test), not a node fault")
        cause = "An operator or a test forced the crash through /proc/sysrq-trigger."
    message = "; ".join(parts)
    frames = [*prev.frames.get(kind.key, []), *this.frames.get(kind.key, [])]
    evidence = [*trim_evidence([line.raw for line in lines], EVIDENCE_LIMIT), *frames[:3]]
    return finding(
        ctx,
        CHECK_FAULTS,
        tag,
        message,
        priority=priority,
        section=kind.section,
        evidence=[*evidence, *_notes(doc, ctx, logs, lines)],
        root_cause=cause,
        suggested_commands=list(kind.commands),
        node_action=action,
    )


def _all_deliberate(now: list[KernelLine], before: list[KernelLine], this: BootFaults, prev: BootFaults) -> bool:
    return (not now or this.deliberate_crash) and (not before or prev.deliberate_crash)


# --------------------------------------------------------------------------- probe.oom

#: keywords of the lines that make up an OOM kill report (capital-first, see _FAULT_KEYWORDS); the
#: benign "oom_score_adj" values printed elsewhere carry none of them
_OOM_KEYWORDS = re.compile(
    r"Out of memory|Memory cgroup out of memory|Kill process|Killed process|CONSTRAINT_|Task in "
)
#: every kill report has a "Kill process" / "Killed process" line, or at least its oom-kill: summary
_OOM_WORDS = ("Kill", "CONSTRAINT_")
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

    @property
    def workload(self) -> bool:
        """The victim hit a container/job memory limit, or (constraint unknown) lived in a job cgroup.

        An explicit ``CONSTRAINT_NONE`` is a node-wide shortage whoever the victim was."""
        if self.memcg_limit or self.constraint == "CONSTRAINT_MEMCG":
            return True
        return self.constraint is None and bool(self.cgroup and _JOB_CGROUP.search(self.cgroup))

    def describe(self) -> str:
        who = f"{self.task or 'unknown process'} (pid {self.pid or '?'}"
        return f"{who}, {self.cgroup})" if self.cgroup else f"{who})"


def oom_kills(lines: Iterable[KernelLine], previous_boot: bool = False) -> list[OomKill]:
    """One entry per kill. The ``oom-kill:`` summary line and the ``Killed process`` line of the same
    kill are merged; the benign ``oom_score_adj`` values in other lines never start one."""
    kills: list[OomKill] = []
    pending: OomKill | None = None  # an oom-kill:/Task-in line waiting for its "Killed process" line
    for line in lines:
        text = line.text
        if m := _OOM_CONTEXT.search(text):
            if pending is not None:
                kills.append(pending)
            values = dict(_KV.findall(text))
            pending = OomKill(
                [line],
                pid=values.get("pid") or None,
                task=values.get("task") or None,
                constraint=m.group(1),
                cgroup=values.get("task_memcg") or values.get("oom_memcg") or None,
                previous_boot=previous_boot,
            )
        elif m := _TASK_IN.search(text):
            if pending is not None:
                kills.append(pending)
            pending = OomKill([line], cgroup=m.group(1), memcg_limit=m.group(2) != "/", previous_boot=previous_boot)
        elif m := _KILLED.search(text):
            pid, task = m.group(2), m.group(3)
            if pending is not None and pending.pid in (None, pid):
                kill = pending
                pending = None
            else:
                if pending is not None:
                    kills.append(pending)
                    pending = None
                if kills and kills[-1].pid == pid and kills[-1].task == task and len(kills[-1].lines) < 3:
                    kills[-1].lines.append(line)  # old kernels: "Kill process N" then "Killed process N"
                    continue
                kill = OomKill([], previous_boot=previous_boot)
            kill.lines.append(line)
            kill.pid, kill.task = pid, task
            kill.memcg_limit = kill.memcg_limit or m.group(1).startswith("Memory cgroup")
            kills.append(kill)
        elif m := _KILLED_BARE.search(text):
            pid = m.group(1)
            if kills and kills[-1].pid == pid:
                kills[-1].lines.append(line)
            elif pending is not None and pending.pid in (None, pid):
                pending.lines.append(line)
                pending.pid, pending.task = pid, m.group(2)
                kills.append(pending)
                pending = None
            else:
                kills.append(OomKill([line], pid=pid, task=m.group(2), previous_boot=previous_boot))
    if pending is not None:
        kills.append(pending)
    return kills


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
    key = f"kernel.oom:{ctx.now.isoformat()}:{ctx.window.total_seconds()}"
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
                f"The node ran out of memory: {_count(len(system), 'system-wide OOM kill')} in the last {label}"
                f"{_boots(system)} ({_span(lines)}); killed: {victims}",
                priority=Priority.P1,
                section="I.3",
                evidence=[*trim_evidence([line.raw for line in lines], EVIDENCE_LIMIT), *_notes(doc, ctx, logs, lines)],
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
                f"{_count(len(workload), 'OOM kill')} inside container/job memory limits in the last {label}"
                f"{_boots(workload)} ({_span(lines)}): {_victims(workload)}; the job needs more memory "
                "or a higher limit, the node is fine",
                priority=Priority.P2,
                section="I.3",
                evidence=[*trim_evidence([line.raw for line in lines], EVIDENCE_LIMIT), *_notes(doc, ctx, logs, lines)],
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
    return [
        finding(
            ctx,
            CHECK_OOM,
            Tag.PASS,
            f"No OOM kill in the last {label}",
            section="I.3",
            evidence=[*_notes(doc, ctx, logs, ()), *_ignored_note(this_log, prev_log)],
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


CHECKS: tuple[Check, ...] = (
    Check(CHECK_XID, "G.1", "NVIDIA Xid errors", check_xid),
    Check(CHECK_FAULTS, "N", "Kernel faults", check_kernel_faults),
    Check(CHECK_OOM, "I.3", "Out-of-memory kills", check_oom),
)
