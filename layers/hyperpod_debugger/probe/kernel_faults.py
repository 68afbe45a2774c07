"""Kernel faults in the kernel log (§ N): panics, lockups, hung tasks, oopses, NMIs, machine checks, lost disks.

Reads this boot's log and the previous boot's through :func:`hyperpod_debugger.probe.parse.klog.recent`, so
only lines inside ``ctx.window`` count. The previous boot matters twice: a panic is normally visible only
there (the panic rebooted the node), and the same hardware fault in both boots means a reboot did not cure
it (replace).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hyperpod_debugger.domain.commands import read_only
from hyperpod_debugger.domain.model import Finding, NodeAction, Priority, SuggestedCommand, Tag, trim_evidence
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
from hyperpod_debugger.probe.parse.klog import (
    PREVIOUS_BOOT,
    THIS_BOOT,
    KernelLine,
    Recent,
    boot_time,
    recent,
    window_label,
)

if TYPE_CHECKING:
    from hyperpod_debugger.probe.document import ProbeDocument

CHECK_FAULTS = "probe.kernel_faults"


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
        # runbook § N ("mce: [Hardware Error]" → CPU or memory hardware: drain and replace) and § F (machine-check
        # errors are among the faults that go to replacement); Intel SDM vol. 3B ch. 16 / AMD APM vol. 2 § 9:
        # an uncorrected error (UC set; PCC: processor context corrupt) is not repaired by the hardware
        FaultKind(
            "mce",
            "Uncorrected machine-check / hardware error",
            Tag.FAIL,
            Priority.P0,
            "N",
            "replace",
            True,
            "The CPU or memory reported an uncorrected hardware error: the host's hardware is failing (runbook § N: "
            "drain and replace).",
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
            "mce_logged",
            "Machine-check events logged (the line does not say whether they were corrected)",
            Tag.WARN,
            Priority.P1,
            "N",
            "investigate",
            False,
            "The kernel logged machine-check records without decoding them here; whether they were corrected or "
            "not is in the records themselves (mcelog / rasdaemon, or the journal's mce: lines).",
            (
                _JOURNAL_HW,
                read_only(["ras-mc-ctl", "--errors"], f"Read the decoded machine-check records (rasdaemon) {ON_NODE}"),
            ),
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
            "storage_lost",
            "A disk dropped off the node (NVMe controller reset failed, device removed)",
            Tag.FAIL,
            Priority.P1,
            "N",
            "reboot",
            True,
            "An NVMe controller stopped answering and the kernel removed the device: what was on it (instance "
            "store, a RAID of it, checkpoints written there) is unreachable until the node is rebooted.",
            (read_only(["lsblk", "-o", "NAME,SIZE,TYPE,MOUNTPOINT"], f"List the block devices left {ON_NODE}"),),
        ),
        FaultKind(
            "io_error",
            "Disk I/O errors",
            Tag.FAIL,
            Priority.P1,
            "N",
            "investigate",
            True,
            "The kernel failed reads or writes on a block device; a file system on it may have shut down.",
            (
                read_only(
                    ["journalctl", "-k", "-b", "0", "--no-pager", "--grep", "I/O error|nvme|XFS|EXT4-fs error"],
                    f"Read this boot's storage errors {ON_NODE}",
                ),
                read_only(["lsblk", "-o", "NAME,SIZE,TYPE,MOUNTPOINT"], f"List the block devices {ON_NODE}"),
            ),
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
    r"Kernel panic|LOCKUP|BUG|Oops|Hardware Error|Machine|NMI|INFO: task|NVRM: |Trigger a crash|EDAC|Memory failure"
    r"|Uncorrected hardware memory|Memory error not recovered"
    r"|Removing after probe failure|Device not ready|controller is down|I/O error|EXT4-fs error|XFS \("
)
_STORAGE_LOST = re.compile(
    r"nvme\S*: (?:Removing after probe failure|Device not ready; aborting reset|controller is down)"
)
_IO_ERROR = re.compile(
    r"blk_update_request: (?:critical medium |)I/O error|I/O error, dev \S+, sector|Buffer I/O error on dev"
    r"|XFS \([^)]*\): (?:log I/O error|metadata I/O error)|EXT4-fs error"
)
#: EDAC memory-controller reports: "EDAC MC0: 1 CE memory read error on ...", "EDAC MC1: 1 UE ...",
#: "EDAC skx MC2: ... Uncorrected error", "EDAC amd64: ... corrected error"
_EDAC = re.compile(r"EDAC\b.*?(?:\b\d+\s+(CE|UE)\b|\b(Corrected|Uncorrected|corrected|uncorrected)[ _]error)")
_PANIC = re.compile(r"Kernel panic - not syncing")
_HARD_LOCKUP = re.compile(r"hard LOCKUP", re.IGNORECASE)
_SOFT_LOCKUP = re.compile(r"soft lockup", re.IGNORECASE)
_GHES = re.compile(r"\{(\d+)\}\[Hardware Error\]")
_GHES_SEVERITY = re.compile(r"\{(\d+)\}\[Hardware Error\]:\s+event severity:\s*(\w+)")
_MCE = re.compile(r"\[Hardware Error\]|Machine Check Exception|Machine check: ")
_MCE_CORRECTED = re.compile(r"(?<!un)corrected error|severity:\s*corrected", re.IGNORECASE)
#: "mce: [Hardware Error]: Machine check events logged" (mce_log's notice): says records exist, not their kind
_MCE_LOGGED = re.compile(r"Machine check events logged", re.IGNORECASE)
#: the x86 MCE handler's words for an uncorrected memory error it recovered from by killing a process or
#: poisoning a page (arch/x86/kernel/cpu/mce/core.c; mm/memory-failure.c)
_MCE_UNCORRECTED_TEXT = re.compile(
    r"Uncorrected hardware memory error in user-access|Memory error not recovered|"
    r"Memory failure: 0x[0-9a-f]+: (?:recovery action for|unhandlable page)",
    re.IGNORECASE,
)
_NMI = re.compile(r"Uhhuh\. NMI|NMI received|NMI: (?:PCI system error|IOCK error)")
_HUNG = re.compile(r"blocked for more than \d+ seconds|hung_task(?!_timeout_secs)")
_OOPS = re.compile(r"\bBUG: |Oops: |kernel BUG at")
_MISMATCH = re.compile(r"NVRM: API mismatch")
_SYSRQ_CRASH = re.compile(r"sysrq: .*Trigger a crash|sysrq_handle_crash")
_FRAME_MODULE = re.compile(r"\+0x[0-9a-f]+/0x[0-9a-f]+ \[(\w+)\]")
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
        if not record and _MCE_LOGGED.search(text):
            return "mce_logged"
        return "mce"
    if ("memory error" in text or "Memory failure" in text) and _MCE_UNCORRECTED_TEXT.search(text):
        return "mce"
    if ("nvme" in text) and _STORAGE_LOST.search(text):
        return "storage_lost"
    if ("I/O error" in text or "EXT4-fs error" in text) and _IO_ERROR.search(text):
        return "io_error"
    if "EDAC" in text and (m := _EDAC.search(text)):
        uncorrected = m.group(1) == "UE" or (m.group(2) or "").lower() == "uncorrected"
        return "mce" if uncorrected else "mce_corrected"
    if "NMI" in text and _NMI.search(text):
        return "nmi"
    if ("blocked for more" in text or "hung_task" in text) and _HUNG.search(text):
        return "hung_task"
    if "NVRM" in text and "Xid" not in text:  # NVRM Xid lines belong to probe.xid
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
    in_trace = False  # frames count only under a "Call Trace:" line ("... at func+0x../0x.. [xfs]" is no trace)
    for raw in raws[index + 1 : index + 1 + TRACE_LOOKAHEAD]:
        if "---[ end" in raw:
            break
        if not in_trace:
            in_trace = "call trace:" in raw.lower()
            continue
        if "+0x" in raw and (m := _FRAME_MODULE.search(raw)):
            if m.group(1) not in modules:
                frames.append(raw.rstrip())
            modules[m.group(1)] = None
    if modules:
        found.modules[kind] = list(modules)
        found.frames[kind] = frames[:3]


def _faults_of(doc: ProbeDocument, ctx: ProbeContext, item_id: str) -> tuple[Recent, BootFaults]:
    key = ("kernel.faults", item_id, ctx.now, ctx.window)

    def scan() -> tuple[Recent, BootFaults]:
        selected = recent(doc, item_id, ctx.now, ctx.window, _FAULT_KEYWORDS)
        return selected, scan_faults(selected)

    return doc.parsed(key, scan)


def check_kernel_faults(doc: ProbeDocument, ctx: ProbeContext) -> list[Finding]:
    item(doc, THIS_BOOT, what="kernel panics, lockups and hardware errors in the kernel log")
    this_log, this = _faults_of(doc, ctx, THIS_BOOT)
    prev_log, prev = _faults_of(doc, ctx, PREVIOUS_BOOT)
    logs = (this_log, prev_log)
    findings: list[Finding] = []
    _fold_logged(this)
    _fold_logged(prev)
    for key, kind in _KINDS.items():
        now_lines = this.by_kind.get(key, [])
        before_lines = prev.by_kind.get(key, [])
        if now_lines or before_lines:
            findings.append(_fault_finding(doc, ctx, kind, now_lines, before_lines, this, prev, logs))
    if findings:
        findings.sort(key=lambda f: (f.priority or "P9", f.tag != Tag.FAIL))
        return findings
    if (not_read := unread(ctx, CHECK_FAULTS, "N", "Kernel faults", this_log)) is not None:
        return [not_read]
    scope = "this boot and the previous one" if prev_log.available else "this boot (previous boot's log not available)"
    return [
        finding(
            ctx,
            CHECK_FAULTS,
            Tag.PASS,
            f"No kernel panic, lockup, hung task, oops, NMI or machine-check error in the last "
            f"{window_label(ctx.window)} ({scope})",
            section="N",
            evidence=[*evidence_notes(doc, ctx, logs, ()), *ignored_note(this_log, prev_log)],
        )
    ]


def _fold_logged(faults: BootFaults) -> None:
    """ "Machine check events logged" says records exist, not their kind: beside records that state their kind
    (uncorrected first, else corrected) it is part of those; alone it stays a finding of unknown kind."""
    logged = faults.by_kind.get("mce_logged")
    if not logged:
        return
    for kind in ("mce", "mce_corrected"):
        if faults.by_kind.get(kind):
            faults.by_kind[kind] = [*faults.by_kind[kind], *logged]
            del faults.by_kind["mce_logged"]
            return


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
        where = f"in this boot ({time_span(now_lines)}) and before the last reboot ({time_span(before_lines)})"
    elif now_lines:
        where = f"in this boot ({time_span(now_lines)})"
    else:
        where = f"before the last reboot ({time_span(before_lines)})"
    dated = any(line.time is not None for line in lines)
    parts = [
        f"{kind.label} {where}, {counted(len(lines), 'line')}"
        + (f" in the last {window_label(ctx.window)}" if dated else "")
    ]
    if kind.key == "panic" and not now_lines:
        parts.append("the previous boot ended in it")
    tag, priority, action, cause = kind.tag, kind.priority, kind.action, kind.root_cause
    if kind.key == "panic" and now_lines:
        # the log that holds the panic is the boot that panicked: the node is stopped in it until rebooted
        action = "reboot"
        parts.append("the node stopped in it: reboot it, then read the panic's cause here")
    modules = dict.fromkeys([*prev.modules.get(kind.key, []), *this.modules.get(kind.key, [])])
    if modules:
        parts.append(f"call trace through module(s) {', '.join(modules)}")
        if "nvidia" in modules:
            cause += " The call trace runs through the NVIDIA driver (§ G.1)."
    if kind.hardware and now_lines and before_lines:
        tag, priority, action = Tag.FAIL, Priority.P0, "replace"
        parts.append("seen in both boots: a reboot did not cure it, replace the node")
    elif (
        kind.key == "mce" and not before_lines and _logged_at_boot(doc, ctx, now_lines) and not _fatal(now_lines, this)
    ):
        tag, priority, action = Tag.WARN, Priority.P2, "investigate"
        parts.append(
            "logged in the first minutes of this boot only: the firmware's record of an error from before the "
            "boot, not a new fault; watch for machine checks later in the boot"
        )
        cause = "A machine-check record reported at boot (kept across the reboot); nothing new since."
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
        evidence=[*evidence, *evidence_notes(doc, ctx, logs, lines)],
        root_cause=cause,
        suggested_commands=list(kind.commands),
        node_action=action,
    )


#: machine-check records reported this early in a boot describe errors from before it
BOOT_RECORD_S = 180.0


def _logged_at_boot(doc: ProbeDocument, ctx: ProbeContext, lines: list[KernelLine]) -> bool:
    boot = boot_time(doc, ctx.now)
    for line in lines:
        if line.uptime is not None:
            if line.uptime > BOOT_RECORD_S:
                return False
        elif line.time is not None and boot is not None:
            if (line.time - boot).total_seconds() > BOOT_RECORD_S:
                return False
        else:
            return False
    return bool(lines)


#: a machine check the kernel could not survive: it is live, whenever in the boot it came
_FATAL_MCE = re.compile(r"Processor context corrupt|Fatal machine check|Machine check from unknown source", re.I)


def _fatal(lines: list[KernelLine], faults: BootFaults) -> bool:
    panics = faults.by_kind.get("panic", [])
    return any(_FATAL_MCE.search(line.text) for line in [*lines, *panics])


def _all_deliberate(now: list[KernelLine], before: list[KernelLine], this: BootFaults, prev: BootFaults) -> bool:
    return (not now or this.deliberate_crash) and (not before or prev.deliberate_crash)
