"""NVIDIA Xid catalogue: what a code means and what an operator should do about it.

Shared by the CloudWatch log checks (HMA detection records) and the on-node probe (kernel log).
Classes and actions follow NVIDIA's Xid catalogue (immediate / investigatory resolution
buckets), mapped onto what a HyperPod operator can actually do with a node:

``none-workload``
    The fault is in the job (bad kernel, illegal address, process killed). Fix the workload;
    the node needs no action.
``reboot``
    NVIDIA's immediate action is a GPU reset (or a node reboot), which HyperPod's automatic
    recovery performs by rebooting the node. The same code coming back on the same node
    after that reboot means the hardware is at fault: replace the node.
``replace``
    The code points at hardware that a reset does not repair (GPU off the bus, NVLink
    fault, row-remap failure): the node should be replaced.
``warn``
    Worth knowing, no node action: a contained error the driver already dealt with (Xid 94: the
    process that touched the bad memory was stopped, the GPU keeps running, the row is remapped at
    the next reset) or an event NVIDIA's catalogue says needs no reset (Xid 163, power smoothing).
``investigate``
    The catalogue does not settle it (the cause may be workload, driver or hardware, or the
    action depends on sub-codes we do not decode). Look at the full message and its
    neighbours before acting.

Where the AWS HyperPod material and NVIDIA disagree, the table follows what HyperPod's health
monitoring agent does (Xid 71 raises ``NvidiaErrorReboot``; Xid 79 leads to replacement). Xid 74
is rebooted once and replaced if it comes back, like every hardware code (the recurrence rule).

:func:`xid_verdict` puts one Xid on that ladder for both readers, so an Xid means the same in either.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Literal

from hyperpod_debugger.domain.model import NodeAction, Priority, Tag

XidClass = Literal["application", "driver", "memory", "nvlink", "bus", "hardware", "informational", "unknown"]
XidAction = Literal["none-workload", "reboot", "replace", "investigate", "warn"]

#: Actions that put the node itself in question (HyperPod reboots or replaces it).
HARDWARE_ACTIONS: frozenset[str] = frozenset({"reboot", "replace"})


@dataclass(frozen=True, slots=True)
class XidInfo:
    code: int
    name: str
    xid_class: XidClass
    action: XidAction

    @property
    def is_hardware(self) -> bool:
        """The node (not the job) is suspect: HyperPod's recovery reboots or replaces it."""
        return self.action in HARDWARE_ACTIONS

    @property
    def is_application(self) -> bool:
        """The running workload caused the fault; the node is fine."""
        return self.action == "none-workload"

    def label(self) -> str:
        return f"Xid {self.code} ({self.name})"


def _entries(*rows: tuple[int, str, XidClass, XidAction]) -> dict[int, XidInfo]:
    return {code: XidInfo(code, name, xid_class, action) for code, name, xid_class, action in rows}


#: Where the table rests (read 2026-12-04): NVIDIA, "Analyzing Xid Errors with the Xid Catalog",
#: https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html (Ampere and newer), each code's
#: "Resolution Bucket (Immediate Action)" and "(Investigatory Action)" columns; the spreadsheet rows as
#: mirrored in leptonai/gpud components/accelerator/nvidia/xid/catalog_generated.go (generated from that
#: page on 2025-10-29). Every row was checked again on 2026-12-04 against a full-text copy of NVIDIA's page
#: (the edition that ends at Xid 172), NVIDIA/NVSentinel's xiderrorsmapping.csv (immediate buckets) and the
#: driver's nverror.h (open-gpu-kernel-modules 595.45.04, for the names of 173-176). The comment after each
#: row gives NVIDIA's immediate / investigatory buckets; the class, action and wording are ours. Where we
#: deviate from the bucket, the row says why.
XID_TABLE: dict[int, XidInfo] = _entries(
    # --- faults raised by the workload (NVIDIA: RESTART_APP, then check the application / CUDA) -----
    (11, "invalid or corrupted push buffer stream", "application", "none-workload"),  # RESTART_APP / CHECK_APP
    (13, "graphics engine exception", "application", "none-workload"),  # RESTART_APP / WORKFLOW_XID_13
    (25, "invalid or illegal push buffer stream", "application", "none-workload"),  # RESTART_APP / CHECK_APP
    (31, "GPU memory page fault", "application", "none-workload"),  # RESTART_APP / WORKFLOW_XID_31
    (43, "GPU stopped processing a faulted channel", "application", "none-workload"),  # IGNORE / CONTACT_SUPPORT
    (45, "channel removed after an earlier error or a killed process", "application", "none-workload"),  # WF_45
    (69, "graphics engine class error", "application", "none-workload"),  # RESTART_APP / CHECK_APP
    (80, "corrupted data sent to the GPU (push buffer CRC mismatch)", "application", "none-workload"),  # RESTART_APP
    # --- ambiguous: workload, driver or hardware ------------------------------------------
    (8, "GPU stopped processing (channel idle timeout)", "driver", "investigate"),  # RESTART_APP / CONTACT_SUPPORT
    (32, "corrupted push buffer stream (PBDMA error)", "driver", "investigate"),  # RESTART_APP / CHECK_APP
    # 54: NVIDIA asks to check the board's seating and connections, which no reboot does and only AWS can do
    # on a cloud instance: the node is replaced
    (54, "auxiliary power not connected to the GPU board", "hardware", "replace"),  # CHECK_MECHANICALS
    (60, "video processor (SEC2) exception", "hardware", "investigate"),  # RESTART_APP / INVESTIGATE_SW
    (68, "video decoder (NVDEC0) exception", "hardware", "investigate"),  # RESTART_APP / CONTACT_SUPPORT
    (78, "vGPU start error", "driver", "investigate"),  # UPDATE_SWFW
    # 109: NVIDIA's bucket is RESET_GPU, but a context-switch timeout is as often a job that hangs a
    # channel; kept ambiguous so an app Xid beside it stays the workload's
    (109, "context switch timeout", "driver", "investigate"),  # RESET_GPU / CONTACT_SUPPORT
    (159, "CHI non-data error", "hardware", "investigate"),  # CHECK_UVM / SYMPATHETIC_REPORT_SOLO
    # --- GPU engines (copy, video, JPEG, optical flow): restart the job, support if it repeats ------
    *(
        (code, f"copy engine (CE{n}) exception", "hardware", "investigate")  # RESTART_APP / CONTACT_SUPPORT
        for code, n in (
            (39, 0),
            (40, 1),
            (41, 2),
            (70, 3),
            (72, 5),
            (75, 6),
            (76, 7),
            (77, 8),
            (85, 9),
            (126, 10),
            (127, 11),
            (128, 12),
            (129, 13),
            (130, 14),
            (131, 15),
            (132, 16),
            (133, 17),
            (134, 18),
            (135, 19),
        )
    ),
    *(
        # RESTART_APP / CONTACT_SUPPORT (142, GB200 only: CONTACT_SUPPORT alone)
        (code, f"{engine} exception", "hardware", "investigate")
        for code, engine in (
            (82, "JPEG decoder (NVJPG0)"),
            (83, "video decoder (NVDEC1)"),
            (84, "video decoder (NVDEC2)"),
            (86, "optical flow accelerator (OFA0)"),
            (88, "video decoder (NVDEC3)"),
            (89, "video decoder (NVDEC4)"),
            (96, "video decoder (NVDEC5)"),
            (97, "video decoder (NVDEC6)"),
            (98, "video decoder (NVDEC7)"),
            (99, "JPEG decoder (NVJPG1)"),
            (100, "JPEG decoder (NVJPG2)"),
            (101, "JPEG decoder (NVJPG3)"),
            (102, "JPEG decoder (NVJPG4)"),
            (103, "JPEG decoder (NVJPG5)"),
            (104, "JPEG decoder (NVJPG6)"),
            (105, "JPEG decoder (NVJPG7)"),
            (139, "optical flow accelerator (OFA1)"),
            (142, "video encoder (NVENC3)"),
        )
    ),
    # --- GPU memory ------------------------------------------------------------------------
    (48, "uncorrectable double-bit ECC error", "memory", "reboot"),  # WORKFLOW_XID_48
    # 63: NVIDIA's buckets are IGNORE / IGNORE: a row was marked for remapping (it takes effect at the
    # next GPU reset). Alone it needs no node action; 64 (remap failed), 48 or 95 beside it do.
    (63, "memory row remapping / page retirement event", "memory", "warn"),  # IGNORE / IGNORE
    # 64: NVIDIA's immediate bucket is RESET_GPU, but a reset adds no spare rows: a failed remap means the
    # GPU has none left (NVIDIA's memory error management guide; § G.1.a: failure → drain and replace)
    (64, "memory row remapping / page retirement failure", "memory", "replace"),  # RESET_GPU / CONTACT_SUPPORT
    (92, "excessive single-bit ECC error rate", "memory", "warn"),  # IGNORE / CONTACT_SUPPORT
    (94, "contained uncorrectable ECC error", "memory", "warn"),  # RESTART_APP / IGNORE
    (95, "uncontained uncorrectable ECC error", "memory", "reboot"),  # RESET_GPU / IGNORE
    (140, "unrecovered ECC error", "memory", "reboot"),  # RESET_GPU / CONTACT_SUPPORT
    (156, "resource retirement event", "memory", "reboot"),  # RESET_GPU / IGNORE
    (157, "resource retirement failure (no spare left; work may go on)", "memory", "warn"),  # IGNORE / CONTACT_SUPPORT
    (168, "reduced GPU memory capacity (errors in the write-protected region)", "memory", "investigate"),  # none
    # 171/172 give the detail (DRAM or SRAM) of an uncorrectable error reported as Xid 48: treated as 48
    (171, "uncorrectable DRAM error (detail of Xid 48)", "memory", "reboot"),  # no bucket listed
    (172, "uncorrectable SRAM error (detail of Xid 48)", "memory", "reboot"),  # no bucket listed
    # --- GPU internals, firmware and driver -----------------------------------------------
    (37, "driver firmware error (unimplemented firmware method)", "driver", "warn"),  # IGNORE / CHECK_APP
    (38, "driver firmware error (watchdog timeout)", "driver", "warn"),  # IGNORE / CONTACT_SUPPORT
    (44, "graphics engine fault during context switch", "driver", "warn"),  # IGNORE / CONTACT_SUPPORT
    (46, "GPU stopped processing (GPU timeout)", "driver", "reboot"),  # RESET_GPU / CONTACT_SUPPORT
    (62, "internal micro-controller (PMU) halt", "hardware", "reboot"),  # RESET_GPU / CONTACT_SUPPORT
    (66, "illegal register access by the driver", "driver", "warn"),  # IGNORE / INVESTIGATE_SW
    (67, "illegal access by the driver (verification violation)", "driver", "warn"),  # IGNORE / CONTACT_SUPPORT
    # 71: NVIDIA's bucket is RESTART_APP; HyperPod's health agent raises NvidiaErrorReboot for it
    (71, "copy engine (CE4) exception", "hardware", "reboot"),  # RESTART_APP / CONTACT_SUPPORT
    (93, "InfoROM wear limit exceeded (non-fatal)", "hardware", "warn"),  # IGNORE / CONTACT_SUPPORT
    (106, "SMBPBI test message", "informational", "warn"),  # IGNORE / IGNORE
    (107, "SMBPBI test message (silent)", "informational", "warn"),  # IGNORE / IGNORE
    (110, "security fault", "hardware", "reboot"),  # RESET_GPU / INVESTIGATE_SW
    (119, "GSP firmware RPC timeout", "driver", "reboot"),  # RESET_GPU / INVESTIGATE_SW
    (120, "GSP firmware error", "driver", "reboot"),  # RESET_GPU / INVESTIGATE_SW
    (141, "CUDA fast path error", "driver", "warn"),  # IGNORE / CONTACT_SUPPORT
    (143, "GPU initialization failure", "hardware", "reboot"),  # RESET_GPU / CONTACT_SUPPORT
    (151, "confidential-computing key rotation error", "driver", "reboot"),  # RESTART_VM / CONTACT_SUPPORT
    (152, "DLA SMMU error", "hardware", "warn"),  # IGNORE / CONTACT_SUPPORT
    (153, "DLA timeout", "hardware", "warn"),  # IGNORE / CONTACT_SUPPORT
    (158, "GPU fatal timeout", "hardware", "reboot"),  # RESET_GPU / CONTACT_SUPPORT
    (160, "channel retirement event", "driver", "warn"),  # IGNORE / INVESTIGATE_SW
    (161, "channel retirement failure", "driver", "warn"),  # IGNORE / INVESTIGATE_SW
    (169, "internal micro-controller (SEC2) halt", "hardware", "investigate"),  # no bucket listed
    # --- bus and NVLink -------------------------------------------------------------------
    (79, "GPU has fallen off the bus", "bus", "replace"),  # RESTART_BM / CONTACT_SUPPORT
    (167, "PCIe fatal timeout", "bus", "investigate"),  # no bucket listed
    (74, "NVLink error", "nvlink", "reboot"),  # WORKFLOW_NVLINK_ERR / CONTACT_SUPPORT
    (121, "C2C (chip-to-chip) link error", "nvlink", "warn"),  # IGNORE / CONTACT_SUPPORT
    (136, "NVLink link training failure", "nvlink", "reboot"),  # RESET_GPU / INVESTIGATE_LINK_SI
    # 137: IGNORE as the immediate action; NVIDIA's own flow (XID_137_FLOW) is investigatory
    (137, "NVLink privilege error", "nvlink", "warn"),  # IGNORE / XID_137_FLOW
    # 144-150: the action depends on the sub-unit and error status decoded from the message
    # (WORKFLOW_NVLINK5_ERR): each line's severity word decides (:func:`decoded`); 149's rows mix RESET_GPU
    # (fatal link events) with IGNORE (non-fatal bit-error-rate events)
    (144, "NVLink SAW error", "nvlink", "investigate"),
    (145, "NVLink RLW error", "nvlink", "investigate"),
    (146, "NVLink TLW error", "nvlink", "investigate"),
    (147, "NVLink TREX error", "nvlink", "investigate"),
    (148, "NVLink NVLPW control error", "nvlink", "investigate"),
    (149, "NVLink NETIR error", "nvlink", "investigate"),
    (150, "NVLink MSE error", "nvlink", "reboot"),
    (155, "NVLink software-defined error", "nvlink", "reboot"),  # RESET_GPU / INVESTIGATE_SW_USER
    (166, "NVLink encrypted-traffic error (confidential computing)", "nvlink", "investigate"),  # none listed
    (170, "NVLink interrupt in confidential-computing mode", "nvlink", "investigate"),  # none listed
    # --- informational ----------------------------------------------------------------------
    (154, "GPU recovery action changed", "informational", "investigate"),  # XID_154: read the action asked
    # 162-165: the power-smoothing circuitry's state; no bucket: NVIDIA's text says 163 needs no GPU reset and
    # for 164/165 to expect replacing the GPU only where power smoothing is wanted: no node action here
    (162, "power smoothing circuitry re-engaged", "informational", "warn"),
    (163, "power smoothing circuitry disengaged", "informational", "warn"),
    (164, "power smoothing circuitry low lifetime reached", "informational", "warn"),
    (165, "power smoothing circuitry lifetime exhausted", "informational", "warn"),
    # --- newer than the catalogue edition we read: names from the driver's nverror.h, action not yet published
    (173, "C2C (chip-to-chip) fatal link failure", "nvlink", "investigate"),
    (174, "channel reset with its process killed silently", "driver", "investigate"),
    (175, "memory subsystem error", "memory", "investigate"),
    (176, "PCIe correctable error fault", "bus", "investigate"),
)

#: Codes NVIDIA's catalogue lists as "Unused" (current drivers do not raise them).
UNUSED_CODES: frozenset[int] = frozenset(
    (
        *range(1, 8),
        9,
        10,
        12,
        14,
        *range(15, 25),
        *range(26, 31),
        *range(33, 37),
        42,
        47,
        *range(49, 54),
        *range(55, 60),
        61,
        65,
        73,
        81,
        87,
        90,
        91,
        108,
        *range(111, 119),
        *range(122, 126),
        138,
    )
)

#: Codes that follow from an earlier fault on the same GPU (the channel torn down, the work it ran
#: faulting): reported under the fault that caused them, not as a workload error of their own.
SECONDARY_CODES: frozenset[int] = frozenset({13, 31, 43, 45})
#: "... caused by previous Xid 149" and similar wording naming the root code in a secondary's line
PREVIOUS_XID = re.compile(r"previous Xid\s*[:#]?\s*(\d{1,4})", re.IGNORECASE)


def lookup(code: int) -> XidInfo:
    """The catalogue entry for ``code``; a code we do not know is 'unknown, investigate'."""
    info = XID_TABLE.get(code)
    if info is not None:
        return info
    if code in UNUSED_CODES:
        return XidInfo(code, "listed as unused in NVIDIA's catalogue", "unknown", "investigate")
    return XidInfo(code, "not in the catalogue", "unknown", "investigate")


#: NVLink5 codes whose action NVIDIA decodes from the message (WORKFLOW_NVLINK5_ERR)
NVLINK5_CODES: frozenset[int] = frozenset(range(144, 151))
#: the severity word the driver prints after the sub-unit: "NETIR_LINK_EVT  Fatal", "RLW_RXPIPE Nonfatal"
_NVLINK5_SEVERITY = re.compile(r"\b(Nonfatal|Non-fatal|Fatal)\b", re.IGNORECASE)


def decoded(info: XidInfo, lines: Iterable[str], *, tore_down_channels: bool = False) -> XidInfo:
    """An NVLink5 code (144-150) with the action its own lines decide. NVIDIA's catalogue ("XID 144-150
    Decode", Severity) says a link- or GPU-fatal error leaves the GPU to be drained and reset, a non-fatal one
    needs no immediate action; the driver prints the severity after the sub-unit. A fatal line, or the app
    channels torn down because of it (Xid 45 naming it as their cause: a GPU-fatal error recovers every
    channel), is a reset (reboot); only non-fatal lines are a warning; without either the table's
    "investigate" stands. Other codes are returned as they are."""
    if info.code not in NVLINK5_CODES:
        return info
    words = {m.group(1).lower().replace("-", "") for text in lines if (m := _NVLINK5_SEVERITY.search(text))}
    if "fatal" in words or tore_down_channels:
        return replace(info, action="reboot")
    if words == {"nonfatal"}:
        return replace(info, action="warn")
    return info


#: Where one Xid stands, whichever log reported it: the workload's own fault; an event NVIDIA lists no
#: action for; a code that does not settle its cause; a hardware fault seen once; the same hardware
#: fault again after a reboot.
XidRung = Literal["workload", "no-action", "ambiguous", "fault", "recurred"]


@dataclass(frozen=True, slots=True)
class XidSeverity:
    """What a finding about one Xid says of the node."""

    tag: Tag
    priority: Priority
    node_action: NodeAction


#: The severity of every rung but a first hardware fault: the same whoever read the Xid.
_RUNG_SEVERITY: dict[XidRung, XidSeverity] = {
    "workload": XidSeverity(Tag.WARN, Priority.P2, "fix-workload"),
    "no-action": XidSeverity(Tag.WARN, Priority.P2, "investigate"),
    "ambiguous": XidSeverity(Tag.WARN, Priority.P1, "investigate"),
    # the fault survived the reboot that cures a transient one: the hardware is at fault
    "recurred": XidSeverity(Tag.FAIL, Priority.P0, "replace"),
}


def xid_verdict(info: XidInfo, *, recurred: bool, first_fault: XidSeverity) -> tuple[XidRung, XidSeverity]:
    """The rung of one Xid (as :func:`decoded` left it) and its severity: one ladder for the node's kernel
    log (``probe.xid``) and HyperPod's health-monitoring agent log (``logs.hma``). ``recurred`` says the
    same code came back after a reboot; it counts only for a code that puts the node in question. What a
    hardware fault seen once means depends on the log that shows it (the fault live on the node, or a
    detection HyperPod's recovery acts on), so the caller gives that severity as ``first_fault``."""
    rung: XidRung
    if info.is_application:
        rung = "workload"
    elif info.action == "warn":
        rung = "no-action"
    elif info.action == "investigate":
        rung = "ambiguous"
    else:
        rung = "recurred" if recurred else "fault"
    return rung, first_fault if rung == "fault" else _RUNG_SEVERITY[rung]


# Kernel / NVRM form: "NVRM: Xid (PCI:0000:b9:00): 71, pid=..." and the older
# "NVRM: Xid (0000:03:00): 14, Channel ...". The look-behind keeps NVSwitch "SXid (...)" lines out.
_XID_STRICT = re.compile(r"(?<![A-Za-z])Xid\s*\([^()\n]*\)\s*:\s*(\d{1,4})\b", re.IGNORECASE)
# Free-text forms seen in agent messages: "Xid 79", "XID: 48", "XID error 79", "Xid=74".
_XID_LOOSE = re.compile(r"(?<![A-Za-z])Xid(?:\s*(?:error|err|code|num(?:ber)?))?\s*[:=#]?\s*(\d{1,4})\b", re.IGNORECASE)


def parse_xid_codes(text: str, *, loose: bool = False) -> list[int]:
    """Every Xid code in ``text``, in order of appearance (repeats kept, so callers can count).

    By default only the kernel form ``Xid (<bus id>): <code>`` counts, whatever precedes it
    (dmesg timestamps, ``kern  :warn  :`` prefixes, syslog host prefixes, JSON escaping).
    With ``loose=True`` free-text forms such as ``Xid 79`` or ``XID error 48`` are accepted too,
    for agent messages that do not quote the kernel line.
    """
    if not text:
        return []
    found: list[tuple[int, int]] = [(m.start(), int(m.group(1))) for m in _XID_STRICT.finditer(text)]
    if loose:
        taken = {start for start, _ in found}
        found.extend((m.start(), int(m.group(1))) for m in _XID_LOOSE.finditer(text) if m.start() not in taken)
        found.sort()
    return [code for _, code in found]
