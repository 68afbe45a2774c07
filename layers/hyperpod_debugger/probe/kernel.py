"""Kernel-log evaluators: NVIDIA Xid (§ G.1) here; kernel faults (§ N, :mod:`.kernel_faults`) and OOM kills
(§ I.3, :mod:`.oom`) in their own modules. :data:`CHECKS` lists all three.

All three read the ``kernel_log`` item (this boot) and ``kernel_log_previous_boot`` through
:func:`hyperpod_debugger.probe.parse.klog.recent`, so only lines inside ``ctx.window`` count, and a
line of unknown time counts only when its boot lies inside the window (the evidence says so,
:mod:`.kernel_evidence`). Old lines are history, not alerts: a node that logged Xid 79 last month and
was repaired is not reported again (the sticky-counter trap).

The previous boot matters twice: a panic is normally visible only there (the panic rebooted the
node), and the same hardware fault in both boots means a reboot did not cure it (replace).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING

from hyperpod_debugger.domain import catalog
from hyperpod_debugger.domain.checking import Check
from hyperpod_debugger.domain.commands import read_only
from hyperpod_debugger.domain.model import Finding, Priority, SuggestedCommand, Tag, trim_evidence
from hyperpod_debugger.domain.xid import (
    PREVIOUS_XID,
    SECONDARY_CODES,
    XidInfo,
    XidRung,
    XidSeverity,
    decoded,
    lookup,
    parse_xid_codes,
    xid_verdict,
)
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
from hyperpod_debugger.probe.kernel_faults import CHECK_FAULTS, check_kernel_faults
from hyperpod_debugger.probe.oom import CHECK_OOM, check_oom
from hyperpod_debugger.probe.parse.klog import PREVIOUS_BOOT, THIS_BOOT, KernelLine, Recent, recent, window_label

if TYPE_CHECKING:
    from hyperpod_debugger.probe.document import ProbeDocument

CHECK_XID = "probe.xid"

#: How far back the previous boot is searched for the same hardware fault (the recurrence rule);
#: never shorter than the evaluation window.
RECURRENCE_LOOKBACK = timedelta(days=7)


def _within(lines: list[KernelLine], window: timedelta) -> str:
    """Where in time the lines sit: "in the last 24 h" when any is dated, else "this boot" (time unknown)."""
    if any(line.time is not None for line in lines):
        return f"in the last {window_label(window)}"
    return "this boot, time unknown"


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
    """One Xid code of this boot. The Xid ladder shared with ``logs.hma`` (:func:`xid_verdict`) decides
    the verdict; the kernel log adds what only it shows: a hardware fault live on the node now, its lines
    before the last reboot, the recovery the driver asks for (Xid 154), the driver's own words for the
    same event and the Xids that followed from it."""
    consequences = consequences or []
    torn_down = group.inferred_from == 45 or any(c.code == 45 for c in consequences)
    info = decoded(lookup(group.code), (line.text for line in group.lines), tore_down_channels=torn_down)
    live, live_tail, live_cause = _live_fault(info)
    rung, severity = xid_verdict(info, recurred=before_reboot is not None, first_fault=live)
    action = severity.node_action
    evidence = trim_evidence([line.raw for line in group.lines], EVIDENCE_LIMIT)
    if rung == "fault":
        tail, cause = live_tail, live_cause
    elif rung == "recurred" and before_reboot is not None:
        tail = (
            f"it was logged before the last reboot too ({time_span(before_reboot.lines)}): "
            "the fault survived a reboot, so the hardware is at fault"
        )
        cause = f"{info.label()} recurred after a reboot on this node."
        evidence = [*evidence, "(before the last reboot:)", *trim_evidence([x.raw for x in before_reboot.lines], 3)]
    else:
        tail, cause = _quiet_words(rung, info)
    if rung == "ambiguous" and group.code == 154 and (asked := _recovery_asked(group.lines)):
        tail = f"the driver asks for: {asked}"
        if "reset" in asked.lower() or "reboot" in asked.lower():
            action = "reboot"
    return finding(
        ctx,
        CHECK_XID,
        severity.tag,
        f"{_xid_head(info, group, ctx.window)}; {tail}",
        priority=severity.priority,
        section="G.1",
        evidence=[
            *evidence,
            *_related_evidence(group.code, same_event or [], consequences),
            *evidence_notes(doc, ctx, logs, group.lines),
        ],
        root_cause=cause,
        suggested_commands=_xid_commands(info),
        node_action=action,
    )


def _xid_head(info: XidInfo, group: XidGroup, window: timedelta) -> str:
    """What the log shows of one code: the Xid, its GPUs, how many lines and when."""
    lines = group.lines
    gpus = ", ".join(group.gpus) or "unknown GPU"
    when = f" ({time_span(lines)})" if any(line.time for line in lines) else ""
    if group.inferred_from is None:
        return f"{info.label()} on {gpus}: {counted(len(lines), 'line')} {_within(lines, window)}{when}"
    named_by = counted(len(lines), f"Xid {group.inferred_from} line")
    return (
        f"{info.label()} on {gpus}, named as the cause by {named_by} {_within(lines, window)}{when} "
        f"(the Xid {group.code} line itself is not in this log)"
    )


def _live_fault(info: XidInfo) -> tuple[XidSeverity, str, str]:
    """A hardware Xid in this boot's log that the previous boot did not show: the fault is on the node
    now. Its severity, the message's tail and the root cause."""
    if info.action == "replace" and info.xid_class != "bus":
        return (
            XidSeverity(Tag.FAIL, Priority.P0, "replace"),
            "the GPU's spare capacity for this fault is used up (NVIDIA: an RMA condition): replace the node",
            f"{info.label()}: {info.xid_class} fault that a reset does not repair.",
        )
    if info.xid_class == "driver":
        return (
            XidSeverity(Tag.FAIL, Priority.P1, "reboot"),
            "GPU firmware/driver fault: a GPU reset (node reboot) clears it; replace the node if it returns",
            f"{info.label()}: the GPU's firmware or driver stopped responding.",
        )
    priority = Priority.P0 if info.xid_class == "bus" or info.action == "replace" else Priority.P1
    return (
        XidSeverity(Tag.FAIL, priority, "reboot"),
        "hardware fault: reboot the node (HyperPod's recovery does); replace it if the code returns after that",
        f"{info.label()}: {info.xid_class} fault on the GPU.",
    )


def _quiet_words(rung: XidRung, info: XidInfo) -> tuple[str, str]:
    """The message's tail and the root cause of an Xid that does not fault the node by itself."""
    if rung == "workload":
        return (
            "raised by the workload (a fault in the job's GPU code or a killed process), not the node: fix the job",
            "Application-class Xid: the running job faulted; the GPU and the node are not implicated.",
        )
    if rung == "ambiguous":
        return (
            "the code alone does not settle whether the job, the driver or the hardware is at fault",
            "Ambiguous Xid: read the full driver messages (and neighbouring Xids) before acting on the node.",
        )
    if info.code == 63:
        # NVIDIA's catalogue: IGNORE / IGNORE. The remap is applied at the next GPU reset; a failure to
        # remap is Xid 64, an uncorrectable error Xid 48/95: those carry their own action
        return (
            "a memory row was marked for remapping (applied at the next GPU reset); NVIDIA lists no action "
            "for it alone: act on an Xid 64 (remap failed) or an uncorrectable ECC Xid (48, 95), not on this",
            f"{info.label()}: the GPU recorded a row to remap; on its own not a fault that needs the node reset.",
        )
    if info.xid_class == "memory":
        return (
            "contained: the driver stopped only the process that touched the failed memory; the GPU keeps "
            "running, the row is remapped at the next GPU reset, and no node action is needed",
            f"{info.label()}: an uncorrectable memory error was contained to one process.",
        )
    return (
        "NVIDIA lists no immediate action for it: watch for it repeating and for throttling",
        f"{info.label()}: reported by the driver; not a fault that needs the node to be reset.",
    )


def _related_evidence(code: int, same_event: list[list[KernelLine]], consequences: list[XidGroup]) -> list[str]:
    """The driver's own words for the same event, then the Xids that followed from this one."""
    evidence: list[str] = []
    for lines_of in same_event:
        evidence.append(f"(the driver's own words for the same event, {counted(len(lines_of), 'line')}:)")
        evidence.extend(trim_evidence([line.raw for line in lines_of], 2))
    for secondary in consequences:
        evidence.append(
            f"(then {lookup(secondary.code).label()} on the same GPU, {counted(len(secondary.lines), 'line')}: "
            f"a consequence of Xid {code}, not a fault of its own)"
        )
        evidence.extend(trim_evidence([line.raw for line in secondary.lines], 2))
    return evidence


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
    when = f" ({time_span(lines)})" if any(line.time for line in lines) else ""
    head = f"{signal.label} on {gpus or 'unknown GPU'}: {counted(len(lines), 'driver line')} "
    head += f"{_within(lines, ctx.window)}{when}"
    evidence = trim_evidence([line.raw for line in lines], EVIDENCE_LIMIT)
    priority, action = signal.priority, "reboot"
    if before:
        priority, action = Priority.P0, "replace"
        tail = (
            f"it was logged before the last reboot too ({time_span(before)}): "
            "the reboot did not cure it, replace the node"
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
        evidence=[*evidence, *evidence_notes(doc, ctx, (log,), lines)],
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
            evidence=[*evidence_notes(doc, ctx, logs, ()), *ignored_note(this)],
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
                f"{info.label()} was logged before the last reboot ({time_span(group.lines)}) and not since: "
                "if it returns on this boot, the reboot did not cure it (replace the node)",
                section="G.1",
                evidence=trim_evidence([line.raw for line in group.lines], 3),
            )
        )
    return out


CHECKS: tuple[Check, ...] = (
    Check(CHECK_XID, "G.1", "NVIDIA Xid errors", check_xid),
    Check(CHECK_FAULTS, "N", "Kernel faults", check_kernel_faults),
    Check(CHECK_OOM, "I.3", "Out-of-memory kills", check_oom),
)
