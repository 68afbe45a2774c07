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
    the next reset) or an event NVIDIA lists without an immediate action (Xid 163, thermal).
``investigate``
    The catalogue does not settle it (the cause may be workload, driver or hardware, or the
    action depends on sub-codes we do not decode). Look at the full message and its
    neighbours before acting.

Where the AWS HyperPod material and NVIDIA disagree, the table follows what HyperPod's health
monitoring agent does (Xid 71 raises ``NvidiaErrorReboot``; Xid 79 leads to replacement). Xid 74
is rebooted once and replaced if it comes back, like every hardware code (the recurrence rule).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

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


XID_TABLE: dict[int, XidInfo] = _entries(
    # --- faults raised by the workload ----------------------------------------------------
    (13, "graphics engine exception", "application", "none-workload"),
    (31, "GPU memory page fault", "application", "none-workload"),
    (43, "GPU stopped processing a faulted channel", "application", "none-workload"),
    (45, "channel removed after an earlier error or a killed process", "application", "none-workload"),
    (69, "graphics engine class error", "application", "none-workload"),
    # --- ambiguous: workload, driver or hardware ------------------------------------------
    (32, "corrupted push buffer stream (PBDMA error)", "driver", "investigate"),
    (61, "internal micro-controller (PMU) breakpoint", "hardware", "investigate"),
    (68, "video decoder (NVDEC0) exception", "hardware", "investigate"),
    (109, "context switch timeout", "driver", "investigate"),
    # --- GPU memory ------------------------------------------------------------------------
    (48, "uncorrectable double-bit ECC error", "memory", "reboot"),
    (63, "memory row remapping / page retirement event", "memory", "reboot"),
    (64, "memory row remapping / page retirement failure", "memory", "replace"),
    (92, "excessive single-bit ECC error rate", "memory", "investigate"),
    (94, "contained uncorrectable ECC error", "memory", "warn"),
    (95, "uncontained uncorrectable ECC error", "memory", "reboot"),
    (140, "unrecovered ECC error", "memory", "reboot"),
    # --- GPU internals, firmware and driver -----------------------------------------------
    (62, "internal micro-controller (PMU) halt", "hardware", "reboot"),
    (71, "copy engine (CE4) exception", "hardware", "reboot"),
    (119, "GSP firmware RPC timeout", "driver", "reboot"),
    (120, "GSP firmware error", "driver", "reboot"),
    (143, "GPU initialization failure", "hardware", "reboot"),
    # --- bus and NVLink -------------------------------------------------------------------
    (79, "GPU has fallen off the bus", "bus", "replace"),
    (74, "NVLink error", "nvlink", "reboot"),
    (136, "NVLink link training failure", "nvlink", "reboot"),
    (144, "NVLink SAW error", "nvlink", "investigate"),
    (145, "NVLink RLW error", "nvlink", "investigate"),
    (146, "NVLink TLW error", "nvlink", "investigate"),
    (147, "NVLink TREX error", "nvlink", "investigate"),
    (148, "NVLink NVLPW control error", "nvlink", "investigate"),
    (149, "NVLink NETIR error", "nvlink", "reboot"),
    (150, "NVLink MSE error", "nvlink", "reboot"),
    # --- informational ----------------------------------------------------------------------
    (154, "GPU recovery action changed", "informational", "investigate"),
    (163, "GPU thermal event", "informational", "warn"),
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
    return XidInfo(code, "not in the catalogue", "unknown", "investigate")


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
