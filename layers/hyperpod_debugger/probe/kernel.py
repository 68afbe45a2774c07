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
from hyperpod_debugger.domain.xid import PREVIOUS_XID, SECONDARY_CODES, XidInfo, decoded, lookup, parse_xid_codes
from hyperpod_debugger.probe import catalog
from hyperpod_debugger.probe.base import ProbeContext, finding, item
from hyperpod_debugger.probe.document import ProbeDocument
from hyperpod_debugger.probe.parse.klog import (
    PREVIOUS_BOOT,
    THIS_BOOT,
    KernelLine,
    Recent,
    boot_time,
    not_a_kernel_log,
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


def _within(lines: list[KernelLine], window: timedelta) -> str:
    """Where in time the lines sit: "in the last 24 h" when any is dated, else "this boot" (time unknown)."""
    if any(line.time is not None for line in lines):
        return f"in the last {window_label(window)}"
    return "this boot, time unknown"


def _span(lines: list[KernelLine]) -> str:
    times = [line.time for line in lines if line.time is not None]
    if not times:
        return "time unknown"
    first, last = stamp(min(times)), stamp(max(times))
    return first if first == last else f"{first} … {last}"


def _count(n: int, noun: str) -> str:
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


def _ignored_note(*logs: Recent) -> list[str]:
    ignored = sum(log.undated_ignored for log in logs)
    if not ignored:
        return []
    return [f"({ignored} previous-boot line(s) of unknown time not judged: that boot ended before the window began)"]


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
    #: the secondary code whose lines named this one as their cause (this code's own line is absent)
    inferred_from: int | None = None


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


def attribute_secondaries(groups: dict[int, XidGroup]) -> tuple[dict[int, XidGroup], dict[int, list[XidGroup]]]:
    """Fold the Xids that follow from an earlier fault into that fault: a secondary code (45, 43, 31,
    13) whose line names its cause ("caused by previous Xid 149"), or whose every GPU also logged a
    non-workload code, is reported under that root. Returns the groups left and, per root code, the
    secondaries folded into it. A root named only by a secondary gets a group of its own (the
    secondary's lines are its evidence)."""
    kept = dict(groups)
    folded: dict[int, list[XidGroup]] = {}
    # roots by GPU: hardware faults and contained memory errors; an ambiguous code (109, 32, ...) can as
    # well be the workload's own doing, so an app Xid beside it stays the workload's
    roots = {
        c: g
        for c, g in groups.items()
        if c not in SECONDARY_CODES and (lookup(c).is_hardware or lookup(c).xid_class in ("memory", "nvlink", "bus"))
    }
    for code in sorted(groups):
        if code not in SECONDARY_CODES:
            continue
        group = groups[code]
        # lines naming their cause go to that cause, each on its own (one code may name several roots)
        by_root: dict[int, XidGroup] = {}
        rest: list[KernelLine] = []
        for line in group.lines:
            m = PREVIOUS_XID.search(line.text)
            named = int(m.group(1)) if m else None
            if named is None or named in SECONDARY_CODES:
                rest.append(line)
                continue
            part = by_root.setdefault(named, XidGroup(code))
            part.lines.append(line)
            if gpu := _XID_GPU.search(line.text):
                part.gpus[gpu.group(1).lower()] = None
        for root, part in by_root.items():
            if root not in kept:
                kept[root] = XidGroup(root, list(part.lines), dict(part.gpus), inferred_from=code)
            elif kept[root].inferred_from is not None:
                kept[root].lines.extend(part.lines)
                kept[root].gpus.update(part.gpus)
            if kept[root].inferred_from is None:
                folded.setdefault(root, []).append(part)
        remaining = XidGroup(code, rest, {g: None for g in group.gpus} if not by_root else {})
        for line in rest:
            if gpu := _XID_GPU.search(line.text):
                remaining.gpus[gpu.group(1).lower()] = None
        kept.pop(code, None)
        if not rest:
            continue
        owners = [c for c, g in roots.items() if remaining.gpus and set(remaining.gpus) <= set(g.gpus)]
        if owners:
            folded.setdefault(min(owners, key=lambda c: (not lookup(c).is_hardware, c)), []).append(remaining)
        else:
            kept[code] = remaining
    return kept, folded


def _xid_lines(
    doc: ProbeDocument, ctx: ProbeContext, item_id: str, window: timedelta
) -> tuple[Recent, dict[int, XidGroup]]:
    """The Xid lines of one boot inside ``window``, grouped by code (once per document)."""
    key = ("kernel.xid", item_id, ctx.now, window)

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
    consequences: list[XidGroup] | None = None,
    same_event: list[list[KernelLine]] | None = None,
) -> Finding:
    consequences = consequences or []
    torn_down = group.inferred_from == 45 or any(c.code == 45 for c in consequences)
    info = decoded(lookup(group.code), (line.text for line in group.lines), tore_down_channels=torn_down)
    lines = group.lines
    gpus = ", ".join(group.gpus) or "unknown GPU"
    when = f" ({_span(lines)})" if any(line.time for line in lines) else ""
    head = f"{info.label()} on {gpus}: {_count(len(lines), 'line')} {_within(lines, ctx.window)}{when}"
    if group.inferred_from is not None:
        named_by = _count(len(lines), f"Xid {group.inferred_from} line")
        head = (
            f"{info.label()} on {gpus}, named as the cause by {named_by} {_within(lines, ctx.window)}{when} "
            f"(the Xid {group.code} line itself is not in this log)"
        )
    evidence = trim_evidence([line.raw for line in lines], EVIDENCE_LIMIT)
    tag, priority, action = Tag.WARN, Priority.P1, "investigate"
    if info.is_application:
        tag, priority, action = Tag.WARN, Priority.P2, "fix-workload"
        tail = "raised by the workload (a fault in the job's GPU code or a killed process), not the node: fix the job"
        cause = "Application-class Xid: the running job faulted; the GPU and the node are not implicated."
    elif info.action == "warn":
        tag, priority, action = Tag.WARN, Priority.P2, "investigate"
        if group.code == 63:
            # NVIDIA's catalogue: IGNORE / IGNORE. The remap is applied at the next GPU reset; a failure to
            # remap is Xid 64, an uncorrectable error Xid 48/95: those carry their own action
            tail = (
                "a memory row was marked for remapping (applied at the next GPU reset); NVIDIA lists no action "
                "for it alone: act on an Xid 64 (remap failed) or an uncorrectable ECC Xid (48, 95), not on this"
            )
            cause = (
                f"{info.label()}: the GPU recorded a row to remap; on its own not a fault that needs the node reset."
            )
        elif info.xid_class == "memory":
            tail = (
                "contained: the driver stopped only the process that touched the failed memory; the GPU keeps "
                "running, the row is remapped at the next GPU reset, and no node action is needed"
            )
            cause = f"{info.label()}: an uncorrectable memory error was contained to one process."
        else:
            tail = "NVIDIA lists no immediate action for it: watch for it repeating and for throttling"
            cause = f"{info.label()}: reported by the driver; not a fault that needs the node to be reset."
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
    elif info.action == "replace" and info.xid_class != "bus":
        tag, priority, action = Tag.FAIL, Priority.P0, "replace"
        tail = "the GPU's spare capacity for this fault is used up (NVIDIA: an RMA condition): replace the node"
        cause = f"{info.label()}: {info.xid_class} fault that a reset does not repair."
    elif info.xid_class == "driver":
        tag, action = Tag.FAIL, "reboot"
        tail = "GPU firmware/driver fault: a GPU reset (node reboot) clears it; replace the node if it returns"
        cause = f"{info.label()}: the GPU's firmware or driver stopped responding."
    else:
        tag, action = Tag.FAIL, "reboot"
        priority = Priority.P0 if info.xid_class == "bus" or info.action == "replace" else Priority.P1
        tail = "hardware fault: reboot the node (HyperPod's recovery does); replace it if the code returns after that"
        cause = f"{info.label()}: {info.xid_class} fault on the GPU."
    for lines_of in same_event or []:
        evidence.append(f"(the driver's own words for the same event, {_count(len(lines_of), 'line')}:)")
        evidence.extend(trim_evidence([line.raw for line in lines_of], 2))
    for secondary in consequences:
        evidence.append(
            f"(then {lookup(secondary.code).label()} on the same GPU, {_count(len(secondary.lines), 'line')}: "
            f"a consequence of Xid {group.code}, not a fault of its own)"
        )
        evidence.extend(trim_evidence([line.raw for line in secondary.lines], 2))
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


@dataclass(frozen=True, slots=True)
class DriverSignal:
    """A GPU fault the NVIDIA driver names in words, with or without an Xid line of its own."""

    key: str
    label: str
    pattern: re.Pattern[str]
    #: Xid codes that report the same event: when one of them is in the log, the signal is its evidence
    same_as: frozenset[int]
    priority: Priority
    cause: str


_DRIVER_SIGNALS: tuple[DriverSignal, ...] = (
    DriverSignal(
        "off_bus",
        "GPU fell off the bus",
        re.compile(r"fallen off the bus|NV_ERR_GPU_IS_LOST|GPU is lost\b|GPU lost from the bus", re.IGNORECASE),
        frozenset({79}),
        Priority.P0,
        "The driver lost the GPU on the PCIe bus: every process on it is gone and it stays unusable until reset.",
    ),
    DriverSignal(
        "gsp",
        "GPU firmware (GSP) stopped answering",
        re.compile(
            r"_kgspIsHeartbeatTimedOut|GSP[^\n]{0,40}heartbeat|rpcSendMessage failed|RPC to GSP failed|"
            r"Timeout waiting for RPC from GSP|GSP RPC timeout",
            re.IGNORECASE,
        ),
        frozenset({119, 120}),
        Priority.P1,
        "The GPU System Processor (the GPU's own firmware) stopped answering the driver; a GPU reset (node "
        "reboot) restarts it.",
    ),
    DriverSignal(
        "reset",
        "The driver says the GPU needs a reset",
        re.compile(r"NV_ERR_RESET_REQUIRED|\bReset required\b", re.IGNORECASE),
        frozenset({154}),
        Priority.P1,
        "The driver refused work on the GPU until it is reset (NV_ERR_RESET_REQUIRED).",
    ),
    DriverSignal(
        "init",
        "NVIDIA driver could not initialise a GPU",
        # the driver's own words when a GPU does not come up (open-gpu-kernel-modules, nv.c / nv-pci.c):
        # RmInitAdapter / rm_init_adapter failures, a failed PCI probe ("nvidia: probe of <bdf> failed with
        # error -1", "The NVIDIA probe routine failed for N device(s)", "None of the NVIDIA devices were
        # initialized", "No NVIDIA GPU found"), an invalid PCI I/O region or no IRQ for the card
        re.compile(
            r"RmInitAdapter failed|rm_init_adapter failed|GPU \S+ failed to initialize"
            r"|(?:nvidia|NVRM)\S*:? (?:\S+ )?probe of \S+ failed with error|probe with driver nvidia failed"
            r"|NVIDIA probe routine failed|None of the NVIDIA devices were initialized"
            r"|No NVIDIA (?:GPU|devices?) (?:found|probed)"
            r"|PCI I/O region assigned to your NVIDIA device is invalid"
            r"|Can't find an IRQ for your NVIDIA card|No IRQ (?:was )?(?:found|assigned)[^\n]{0,40}NVIDIA",
            re.IGNORECASE,
        ),
        frozenset({62, 143}),
        Priority.P1,
        "The driver failed to bring a GPU up (initialisation or PCI probe failed); the GPU is missing for jobs "
        "until it is reset.",
    ),
    DriverSignal(
        "nvlink_training",
        "NVLink links did not come up (training or discovery failed)",
        # the driver's text for Xid 136 (ALI_TRAINING_FAIL): "NVLink: Link training failed for link N(...)";
        # and a knvlink* routine of the driver's NVLink core reporting a failure while it discovers or trains
        # links, with no Xid ("NVRM: knvlinkDiscoverPostRxDetLinks_GH100: Getting peer0's postRxDetLinkMask
        # failed!", open-gpu-kernel-modules kernel_nvlink_gh100.c, where the call then returns an error)
        re.compile(
            r"NVLink\b[^\n]{0,80}\btraining fail|nvlink[^\n]{0,80}failed to train|LinkTrainingFailed"
            r"|\bknvlink\w+:[^\n]{0,160}\bfailed\b",
            re.IGNORECASE,
        ),
        frozenset({136}),
        Priority.P1,
        "An NVLink link between GPUs did not come up (link training failed): NVLink traffic on that GPU is "
        "degraded or stopped; NVIDIA's catalogue resets the GPU and looks at the link if it repeats.",
    ),
)
_DRIVER_KEYWORDS = re.compile(
    r"fallen off|GPU_IS_LOST|GPU is lost|GPU lost|GSP|gsp|rpcSendMessage|RmInitAdapter|RESET_REQUIRED|Reset required|"
    r"rm_init_adapter|failed to initialize|probe|initialized|No NVIDIA|I/O region|IRQ|[Tt]raining|NVLink|nvlink"
)
_DRIVER_WORDS = (
    "RESET_REQUIRED",
    "Reset required",
    "fallen off",
    "GPU_IS_LOST",
    "GPU is lost",
    "GPU lost",
    "GSP",
    "gsp",
    "rpcSendMessage",
    "nitAdapter",
    "nit_adapter",
    "failed to initialize",
    "probe",
    "initialized",
    "No NVIDIA",
    "I/O region",
    "IRQ",
    "raining",
    "train",
    "nvlink",
)


def _driver_signals(
    doc: ProbeDocument, ctx: ProbeContext, item_id: str = THIS_BOOT, window: timedelta | None = None
) -> tuple[Recent, dict[str, list[KernelLine]]]:
    span = window or ctx.window
    key = ("kernel.nvrm", item_id, ctx.now, span)

    def scan() -> tuple[Recent, dict[str, list[KernelLine]]]:
        log = recent(doc, item_id, ctx.now, span, _DRIVER_KEYWORDS, words=_DRIVER_WORDS)
        found: dict[str, list[KernelLine]] = {}
        for line in log.lines:
            if parse_xid_codes(line.text):
                continue  # an Xid line is probe.xid's own evidence already
            for signal in _DRIVER_SIGNALS:
                if signal.pattern.search(line.text):
                    found.setdefault(signal.key, []).append(line)
                    break
        return log, found

    return doc.parsed(key, scan)


def _driver_finding(
    doc: ProbeDocument,
    ctx: ProbeContext,
    signal: DriverSignal,
    lines: list[KernelLine],
    log: Recent,
    before: list[KernelLine] | None,
) -> Finding:
    gpus = ", ".join(dict.fromkeys(m.group(1).lower() for line in lines if (m := _PCI.search(line.text))))
    when = f" ({_span(lines)})" if any(line.time for line in lines) else ""
    head = f"{signal.label} on {gpus or 'unknown GPU'}: {_count(len(lines), 'driver line')} "
    head += f"{_within(lines, ctx.window)}{when}"
    evidence = trim_evidence([line.raw for line in lines], EVIDENCE_LIMIT)
    priority, action = signal.priority, "reboot"
    if before:
        priority, action = Priority.P0, "replace"
        tail = (
            f"it was logged before the last reboot too ({_span(before)}): the reboot did not cure it, replace the node"
        )
        evidence = [*evidence, "(before the last reboot:)", *trim_evidence([x.raw for x in before], 3)]
    else:
        tail = "with no Xid line for it; reboot the node (a GPU reset); replace it if it returns after that"
    return finding(
        ctx,
        CHECK_XID,
        Tag.FAIL,
        f"{head}; {tail}",
        priority=priority,
        section="G.1",
        evidence=[*evidence, *_notes(doc, ctx, (log,), lines)],
        root_cause=signal.cause,
        suggested_commands=_xid_commands(lookup(min(signal.same_as))),
        node_action=action,
    )


_PCI = re.compile(r"(?:PCI:|GPU at PCI:|gpu[ :]*)?\b([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})(?:\.\d)?\b")


def _without_nvidia_gpus(ctx: ProbeContext) -> bool:
    """True when the instance type is known to carry no NVIDIA GPU (Trainium, CPU-only)."""
    spec = catalog.spec_for(ctx.instance_type)
    return spec is not None and spec.gpus == 0


def check_xid(doc: ProbeDocument, ctx: ProbeContext) -> list[Finding]:
    item(doc, THIS_BOOT, what="NVIDIA Xid errors in the kernel log")
    lookback = max(ctx.window, RECURRENCE_LOOKBACK)
    this, scanned = _xid_lines(doc, ctx, THIS_BOOT, ctx.window)
    now_groups, folded = attribute_secondaries(scanned)
    before, before_groups = _xid_lines(doc, ctx, PREVIOUS_BOOT, lookback)
    logs = (this, before)
    findings: list[Finding] = []
    driver_log, signals = _driver_signals(doc, ctx)
    for code in sorted(now_groups):
        info = lookup(code)
        recurring = before_groups.get(code) if info.is_hardware else None
        same = [lines for sig in _DRIVER_SIGNALS if code in sig.same_as and (lines := signals.get(sig.key))]
        findings.append(_xid_finding(doc, ctx, now_groups[code], recurring, logs, folded.get(code), same))
    _, signals_before = _driver_signals(doc, ctx, PREVIOUS_BOOT, lookback)
    for sig in _DRIVER_SIGNALS:
        lines = signals.get(sig.key)
        if sig.key == "init" and _without_nvidia_gpus(ctx):
            # an image that ships the NVIDIA driver also boots on Trainium and CPU nodes, where the driver
            # says it found no GPU: that is the truth there, not a GPU that failed to come up
            continue
        if lines and not (sig.same_as & set(now_groups)):
            findings.append(_driver_finding(doc, ctx, sig, lines, driver_log, signals_before.get(sig.key)))
    findings.sort(key=lambda f: (f.priority or "P9", f.tag != Tag.FAIL))
    if findings:
        return findings
    if (not_read := unread(ctx, CHECK_XID, "G.1", "NVIDIA Xid errors", this)) is not None:
        return [not_read]
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
            evidence=[*_notes(doc, ctx, logs, ()), *_ignored_note(this_log, prev_log)],
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
        where = f"in this boot ({_span(now_lines)}) and before the last reboot ({_span(before_lines)})"
    elif now_lines:
        where = f"in this boot ({_span(now_lines)})"
    else:
        where = f"before the last reboot ({_span(before_lines)})"
    dated = any(line.time is not None for line in lines)
    parts = [
        f"{kind.label} {where}, {_count(len(lines), 'line')}"
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
        evidence=[*evidence, *_notes(doc, ctx, logs, lines)],
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


# --------------------------------------------------------------------------- probe.oom

#: keywords of the lines that make up an OOM kill report (capital-first, see _FAULT_KEYWORDS); the
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
    kills: list[OomKill] = []
    pending: OomKill | None = None  # an oom-kill:/Task-in line waiting for its "Killed process" line
    for line in lines:
        text = line.text
        if m := _INVOKED.search(text):
            # the report's first line: a kill follows (its own line may be missing: cut, or lost)
            if pending is not None:
                kills.append(pending)
            pending = OomKill([line], task=None, invoker=m.group(1), previous_boot=previous_boot)
        elif _MEMCG_FRAME.search(text) and "Memory cgroup out of memory" not in text:
            # a call-trace frame of the report: the kill was inside a memory cgroup's limit
            if pending is not None:
                pending.memcg_limit = True
        elif m := _OOM_CONTEXT.search(text):
            if pending is not None and pending.constraint is None and pending.pid is None and pending.invoker:
                # the summary of the report the invoked line opened
                values = dict(_KV.findall(text))
                pending.lines.append(line)
                pending.pid = values.get("pid") or None
                pending.task = values.get("task") or None
                pending.constraint = m.group(1)
                pending.cgroup = values.get("task_memcg") or values.get("oom_memcg") or None
                continue
            if pending is not None:
                kills.append(pending)
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
            if pending is not None and pending.invoker and pending.pid is None and pending.cgroup is None:
                pending.lines.append(line)
                pending.cgroup, pending.memcg_limit = m.group(1), pending.memcg_limit or m.group(2) != "/"
                continue
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
            elif pending is None and kills and "sacrifice child" in kills[-1].lines[-1].text:
                # older kernels: "Kill process N (x) score S or sacrifice child", then the child it chose
                # instead: "Killed process M (y)" is the same kill, its victim the child
                kills[-1].lines.append(line)
                kills[-1].pid, kills[-1].task = pid, m.group(2)
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
    if (not_read := unread(ctx, CHECK_OOM, "I.3", "OOM kills", this_log)) is not None:
        return [not_read]
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
