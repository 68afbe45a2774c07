"""Trainium / Inferentia evaluators (§ G.2): Neuron devices and cores, Neuron runtime and hardware errors.

``neuron_ls`` is ``neuron-ls --json-output`` where the tool has it, else the table ``neuron-ls``
prints. Both are read: the JSON array of device objects (``neuron_device``, ``nc_count``), and the
table whose header spans two rows (``NEURON | DEVICE``, ``NEURON | CORES``) — the table never
contains the token ``neuron_device``, so it is read by its columns, up to the table's end (the
topology drawing after it is ignored). Published examples elide devices with a bare ``...`` line;
such output is read as partial.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from hyperpod_debugger.domain.catalog import InstanceSpec, spec_for
from hyperpod_debugger.domain.checking import Check
from hyperpod_debugger.domain.commands import read_only
from hyperpod_debugger.domain.model import Finding, NodeAction, Priority, SuggestedCommand, Tag, trim_evidence
from hyperpod_debugger.domain.observations import NotApplicable
from hyperpod_debugger.probe.base import ProbeContext, finding, item
from hyperpod_debugger.probe.document import TRUNCATION_MARKER, ProbeDocument, ProbeItem
from hyperpod_debugger.probe.kernel_evidence import unread
from hyperpod_debugger.probe.parse.klog import PREVIOUS_BOOT, THIS_BOOT, KernelLine, Recent, recent, stamp, window_label

CHECK_DEVICES = "probe.neuron_devices"
CHECK_RUNTIME = "probe.neuron_runtime"
ON_NODE = "on the node (SSM session, § K)"
EVIDENCE_LIMIT = 10

_NEURON_LS = read_only(["neuron-ls"], f"List the Neuron devices and cores the driver exposes {ON_NODE}")
_LSMOD = read_only(["lsmod"], f"Check that the 'neuron' kernel module is loaded {ON_NODE}")


# --------------------------------------------------------------------------- neuron-ls parsing


@dataclass(frozen=True, slots=True)
class NeuronDevice:
    index: int
    cores: int | None = None


@dataclass(frozen=True, slots=True)
class NeuronLs:
    form: str  # "json" | "table" | "message"
    devices: tuple[NeuronDevice, ...] = ()
    #: False when the output was elided ("...") or cut: fewer devices than expected proves nothing
    complete: bool = True
    logical_nc_config: int | None = None
    #: the output lines that name the devices (table rows, JSON "neuron_device" lines), for evidence
    rows: tuple[str, ...] = ()

    @property
    def device_count(self) -> int:
        return len({d.index for d in self.devices})

    @property
    def core_count(self) -> int | None:
        """Total NeuronCores (logical, as neuron-ls counts them), or None when a device lacks the figure."""
        cores = {d.index: d.cores for d in self.devices}
        if not cores or any(c is None for c in cores.values()):
            return None
        return sum(c for c in cores.values() if c is not None)


_ELIDED = re.compile(r"^\s*\.\.\.\s*$", re.MULTILINE)
_JSON_DEVICE = re.compile(r'"neuron_device"\s*:\s*(\d+)')
_JSON_CORES = re.compile(r'"nc_count"\s*:\s*(\d+)')
_LNC = re.compile(r"^logical-neuroncore-config:\s*(\d+)", re.MULTILINE)
#: neuron-ls's own words when the driver gives it nothing
_NO_DEVICES = re.compile(
    r"Failed to discover neuron devices|No neuron device(?:s)? (?:found|available)"
    r"|Unable to read device information from the driver",
    re.IGNORECASE,
)


def _int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def _json_devices(data: object) -> list[dict] | None:
    if isinstance(data, dict):  # tolerate a wrapper object holding the device list
        for value in data.values():
            if isinstance(value, list) and all(isinstance(x, dict) for x in value):
                found = _json_devices(value)
                if found is not None:
                    return found
        return None
    if isinstance(data, list) and all(isinstance(x, dict) for x in data):
        if not data or any("neuron_device" in x for x in data):
            return data
    return None


def _parse_json(text: str) -> NeuronLs | None:
    elided = bool(_ELIDED.search(text))
    cleaned = _ELIDED.sub("", text) if elided else text
    try:
        raw = _json_devices(json.loads(cleaned))
    except ValueError:
        raw = None
    if raw is not None:
        devices = [
            NeuronDevice(index, _int(d.get("nc_count")))
            for d in raw
            if (index := _int(d.get("neuron_device"))) is not None
        ]
        return NeuronLs("json", tuple(devices), complete=not elided, rows=_json_rows(text))
    # garbled or cut JSON: take what the device objects still say, and call it partial
    indices = [int(x) for x in _JSON_DEVICE.findall(text)]
    if not indices:
        return None
    cores = [int(x) for x in _JSON_CORES.findall(text)]
    pairs = zip(indices, cores, strict=False) if len(cores) == len(indices) else ((i, None) for i in indices)
    return NeuronLs("json", tuple(NeuronDevice(i, c) for i, c in pairs), complete=False, rows=_json_rows(text))


def _json_rows(text: str) -> tuple[str, ...]:
    return tuple(line.strip() for line in text.splitlines() if '"neuron_device"' in line)


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _parse_table(text: str) -> NeuronLs | None:
    header: list[list[str]] = []
    columns: list[str] = []
    devices: list[NeuronDevice] = []
    rows: list[str] = []
    closed = False  # the border line after the last data row was seen: the table is whole
    for line in text.splitlines():
        stripped = line.strip()
        if stripped == TRUNCATION_MARKER:
            closed = False
            break
        if stripped.startswith("+"):
            closed = bool(devices) or bool(columns) or bool(header)
            continue
        if not stripped.startswith("|"):
            if devices or columns:
                break  # the table is over (the topology drawing may follow)
            continue
        closed = False
        cells = _cells(stripped)
        if not columns and not (cells and cells[0].isdigit()):
            header.append(cells)
            continue
        if not columns:
            width = max(len(row) for row in header) if header else 0
            columns = [" ".join(row[i] for row in header if i < len(row) and row[i]).upper() for i in range(width)]
        device_col = next((i for i, c in enumerate(columns) if "DEVICE" in c and "CONNECTED" not in c), 0)
        cores_col = next((i for i, c in enumerate(columns) if c in ("NEURON CORES", "NEURONCORES", "CORES")), None)
        if device_col >= len(cells) or not cells[device_col].isdigit():
            continue  # a continuation row (another process on the same device)
        cores = _int(cells[cores_col]) if cores_col is not None and cores_col < len(cells) else None
        devices.append(NeuronDevice(int(cells[device_col]), cores))
        rows.append(stripped)
    if not header and not devices:
        return None
    lnc = _LNC.search(text)
    return NeuronLs(
        "table",
        tuple(devices),
        complete=closed,
        logical_nc_config=int(lnc.group(1)) if lnc else None,
        rows=tuple(rows),
    )


def parse_neuron_ls(text: str) -> NeuronLs | None:
    """Devices and cores from either form, or None when the output is neither."""
    body = text.strip()
    if not body:
        return None
    if body[0] in "[{":
        parsed = _parse_json(body)
        if parsed is not None:
            if TRUNCATION_MARKER in body:
                return NeuronLs(parsed.form, parsed.devices, False, parsed.logical_nc_config, parsed.rows)
            return parsed
    table = _parse_table(body)
    if table is not None:
        return table
    if _NO_DEVICES.search(body):
        return NeuronLs("message")
    return None


# --------------------------------------------------------------------------- probe.neuron_devices


def _neuron_spec(ctx: ProbeContext) -> InstanceSpec | None:
    """The spec of a Neuron type, None for an unknown type; NotApplicable for a known non-Neuron type."""
    spec = spec_for(ctx.instance_type)
    if spec is not None and not spec.neuron_devices:
        raise NotApplicable(f"{ctx.instance_type} has no Neuron devices")
    return spec


def check_neuron_devices(doc: ProbeDocument, ctx: ProbeContext) -> list[Finding]:
    spec = _neuron_spec(ctx)
    found = doc.item("neuron_ls")
    if found is not None and found.missing_tool and spec is not None:
        return [_tools_missing(ctx, found)]
    raw = item(doc, "neuron_ls", what="Neuron devices (neuron-ls)")
    parsed = doc.parsed("neuron:ls", lambda: parse_neuron_ls(raw.stdout))
    first_lines = raw.stdout.strip().splitlines()[:5]
    said = _driver_gave_nothing(raw)
    if said is not None and spec is not None and (parsed is None or parsed.device_count == 0):
        return [_no_device_seen(ctx, spec, [said[:300]] if said else first_lines)]
    if parsed is None:
        return [
            finding(
                ctx,
                CHECK_DEVICES,
                Tag.UNKNOWN,
                f"neuron-ls output not recognised (exit {raw.exit_code}): device count unknown",
                priority=Priority.P1,
                section="G.2",
                evidence=first_lines or raw.stderr.strip().splitlines()[:3],
                suggested_commands=[_NEURON_LS],
            )
        ]
    if spec is None:
        return [
            finding(
                ctx,
                CHECK_DEVICES,
                Tag.INFO,
                f"neuron-ls shows {_described(parsed)}; no expectation for {ctx.instance_type}",
                section="G.2",
                evidence=_partial_note(parsed),
            )
        ]
    return [_count_verdict(ctx, spec, parsed, first_lines)]


def _tools_missing(ctx: ProbeContext, found: ProbeItem) -> Finding:
    return finding(
        ctx,
        CHECK_DEVICES,
        Tag.FAIL,
        f"neuron-ls is not installed on this {ctx.instance_type}: the Neuron SDK tools (and likely the "
        "Neuron driver) are missing, so no workload can use the Neuron devices",
        priority=Priority.P0,
        section="G.2",
        evidence=(found.stderr.strip() or found.stdout.strip()).splitlines()[:3]
        or [f"neuron_ls exit {found.exit_code}"],
        root_cause=(
            "The node was not built from a Neuron-enabled image, or its lifecycle script did not install "
            "aws-neuronx-dkms / aws-neuronx-tools. Fix the image or lifecycle script and replace the node; "
            "do not load kernel modules by hand on a live node."
        ),
        suggested_commands=[_LSMOD],
        node_action="investigate",
    )


def _driver_gave_nothing(raw: ProbeItem) -> str | None:
    """The line where neuron-ls says the driver gave it no device ("" when no one line holds the words), or
    None when it does not say so."""
    output = f"{raw.stdout}\n{raw.stderr}"
    said = _NO_DEVICES.search(output)
    if said is None:
        return None
    return next((ln.strip() for ln in output.splitlines() if said.group(0) in ln), "")


def _no_device_seen(ctx: ProbeContext, spec: InstanceSpec, evidence: list[str]) -> Finding:
    return finding(
        ctx,
        CHECK_DEVICES,
        Tag.FAIL,
        f"neuron-ls cannot see any Neuron device on this {ctx.instance_type} (expected "
        f"{spec.neuron_devices}): the Neuron driver is not loaded or not accessible",
        priority=Priority.P0,
        section="G.2",
        evidence=evidence,
        root_cause=(
            "neuron-ls read nothing from the Neuron driver: aws-neuronx-dkms is missing, did not build for "
            "the running kernel, or its device files are not visible (for a container: not mounted). Fix "
            "the image or lifecycle script; do not load kernel modules by hand on a live node."
        ),
        suggested_commands=[_LSMOD, _NEURON_LS],
        node_action="investigate",
    )


def _described(parsed: NeuronLs) -> str:
    """What neuron-ls shows, in words: devices, cores where known, the logical NeuronCore config."""
    cores = parsed.core_count
    described = f"{parsed.device_count} Neuron device(s)" + (f", {cores} NeuronCores" if cores is not None else "")
    if parsed.logical_nc_config is not None:
        described += f" (logical NeuronCore config {parsed.logical_nc_config})"
    return described


def _partial_note(parsed: NeuronLs) -> list[str]:
    return [] if parsed.complete else ["(neuron-ls output elided or truncated: not every device is listed)"]


def _count_verdict(ctx: ProbeContext, spec: InstanceSpec, parsed: NeuronLs, first_lines: list[str]) -> Finding:
    """The devices and cores seen against the type's: PASS, FAIL when fewer, UNKNOWN when fewer but the output
    was partial (a cut list proves nothing)."""
    devices, cores = parsed.device_count, parsed.core_count
    described, notes = _described(parsed), _partial_note(parsed)
    expected_devices = spec.neuron_devices or 0
    expected_cores = spec.neuron_cores
    short_devices = devices < expected_devices
    short_cores = expected_cores is not None and cores is not None and cores < expected_cores
    if not (short_devices or short_cores):
        return finding(
            ctx,
            CHECK_DEVICES,
            Tag.PASS,
            f"{described} visible, as expected on {ctx.instance_type}",
            section="G.2",
            evidence=notes,
        )
    if not parsed.complete:
        return finding(
            ctx,
            CHECK_DEVICES,
            Tag.UNKNOWN,
            f"neuron-ls output is partial: it lists {described} of the {expected_devices} expected on "
            f"{ctx.instance_type}; the real count cannot be confirmed",
            priority=Priority.P1,
            section="G.2",
            evidence=notes,
            suggested_commands=[_NEURON_LS],
        )
    want = f"{expected_devices} devices" + (f" / {expected_cores} cores" if expected_cores else "")
    return finding(
        ctx,
        CHECK_DEVICES,
        Tag.FAIL,
        f"Only {described} visible on this {ctx.instance_type} (expected {want})"
        + ("; the Neuron driver may not be loaded" if devices == 0 else ""),
        priority=Priority.P0,
        section="G.2",
        evidence=trim_evidence(list(parsed.rows) or first_lines, 20) + notes,
        root_cause=(
            "Neuron devices or cores are missing: a device that failed, a driver that did not bind it, or a "
            "partial detection at boot. HyperPod's health agent reboots on this mismatch; if the count is "
            "still low after the reboot, replace the node."
        ),
        suggested_commands=[_NEURON_LS, _LSMOD],
        node_action="reboot",
    )


# --------------------------------------------------------------------------- probe.neuron_runtime


@dataclass(frozen=True, slots=True)
class NeuronErrorKind:
    key: str
    label: str
    tag: Tag
    priority: Priority
    action: NodeAction
    root_cause: str
    commands: tuple[SuggestedCommand, ...] = ()


_KINDS: dict[str, NeuronErrorKind] = {
    kind.key: kind
    for kind in (
        NeuronErrorKind(
            "hw_uncorrectable",
            "Neuron hardware uncorrectable error",
            Tag.FAIL,
            Priority.P0,
            "replace",
            "A Neuron device reported an uncorrectable (unrepairable) hardware error; no software step recovers it.",
            (_NEURON_LS,),
        ),
        NeuronErrorKind(
            "hw_repairable",
            "Neuron HBM repairable uncorrectable error",
            Tag.WARN,
            Priority.P1,
            "reboot",
            "A Neuron HBM error that the device repairs on the next driver load: reboot the node; replace it "
            "if the error returns.",
            (_NEURON_LS,),
        ),
        NeuronErrorKind(
            "hw_other",
            "Neuron hardware error",
            Tag.WARN,
            Priority.P1,
            "investigate",
            "A Neuron device reported a hardware error (DMA abort, collectives stall): it may be this device or a "
            "peer worker; check whether it repeats on this node.",
            (_NEURON_LS,),
        ),
        NeuronErrorKind(
            "driver",
            "Neuron driver missing or too old for the runtime",
            Tag.FAIL,
            Priority.P1,
            "investigate",
            "The Neuron runtime cannot use the installed driver (aws-neuronx-dkms missing or older than the "
            "runtime): image or lifecycle-script drift (§ E); fix the image, do not load modules by hand.",
            (_LSMOD,),
        ),
        NeuronErrorKind(
            "device_open",
            "Neuron runtime could not open a device",
            Tag.WARN,
            Priority.P1,
            "investigate",
            "The runtime could not open a Neuron device: compare the device count (probe.neuron_devices); a "
            "missing device means reboot, then replace.",
            (_NEURON_LS, _LSMOD),
        ),
        NeuronErrorKind(
            "core_stuck",
            "NeuronCore left in a bad state",
            Tag.WARN,
            Priority.P1,
            "reboot",
            "A NeuronCore was left running by an interrupted job; a reboot (driver reload) clears it, a repeat "
            "after the reboot points at the device.",
            (_NEURON_LS,),
        ),
        NeuronErrorKind(
            "cores_busy",
            "NeuronCores held by another process",
            Tag.WARN,
            Priority.P2,
            "fix-workload",
            "Another process (a leftover training process, neuron-top) holds the NeuronCores; stop it — not a "
            "node fault.",
            (read_only(["neuron-ls", "--wide"], f"See which processes hold the NeuronCores {ON_NODE}"),),
        ),
        NeuronErrorKind(
            "dge_overflow",
            "Neuron DGE notification queue overflow",
            Tag.WARN,
            Priority.P2,
            "fix-workload",
            "Runtime configuration, not hardware: the job should run with NEURON_RT_ENABLE_DGE_NOTIFICATIONS=0.",
        ),
        NeuronErrorKind(
            "model_too_big",
            "Model needs more NeuronCores than available",
            Tag.WARN,
            Priority.P2,
            "fix-workload",
            "The compiled model asks for more NeuronCores than the job was given: recompile or change the job's "
            "core allocation — not a node fault.",
        ),
        NeuronErrorKind(
            "runtime_error",
            "Neuron runtime errors",
            Tag.WARN,
            Priority.P1,
            "investigate",
            "The Neuron runtime logged errors that match no known pattern; read them with the job's logs.",
            (_NEURON_LS,),
        ),
    )
}
GENERIC = "runtime_error"

#: (kind, pattern) in precedence order: the first that matches a line classifies it
_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("hw_uncorrectable", re.compile(r"NEURON_HW_ERR=\S+.*action=TERMINATE_INSTANCE")),
    ("hw_repairable", re.compile(r"NRT_EXEC_HW_ERR_REPAIRABLE_HBM_UE|NEURON_HW_ERR=(?:\w*_)?REPAIRABLE")),
    (
        "hw_uncorrectable",
        re.compile(r"NEURON_HW_ERR=\w*UNCORRECTABLE|NRT_EXEC_HW_ERR_(?:HBM|NC)_UE\b|NRT_(?:EXEC_UNIT_)?UNRECOVERABLE"),
    ),
    ("hw_other", re.compile(r"NEURON_HW_ERR=\S+|NRT_EXEC_HW_ERR_\w+|NRT_HW_ERROR")),
    ("driver", re.compile(r"Unable to determine Neuron Driver version|requires Neuron Driver version")),
    ("device_open", re.compile(r"Could not open the nd\d+")),
    ("core_stuck", re.compile(r"Timestamp program stop timeout|Failed to stop neuron core")),
    ("cores_busy", re.compile(r"NeuronCore\(s\) not available|NRT_EXEC_NC_BUSY")),
    ("dge_overflow", re.compile(r"NRT_EXEC_SW_NQ_OVERFLOW|DGE notifications enabled")),
    (
        "model_too_big",
        re.compile(r"Could not find VNC id|Failed to stage graph|Failed to load NN|NRT_LOAD_NOT_ENOUGH_NC"),
    ),
    (GENERIC, re.compile(r"ERROR\s+(?:NRT|TDRV|NMGR|NCCL|NEC):")),
)
#: keywords a line needs before the rules run (capital-first, so the regex engine skips fast)
_NEURON_KEYWORDS = re.compile(r"NEURON_HW_ERR|NRT|TDRV|NMGR|NeuronCore|Neuron Driver|DGE")
_NEURON_WORDS = ("NEURON_HW_ERR", "NRT", "TDRV", "NMGR", "NeuronCore", "Neuron Driver", "DGE")


def classify_neuron_line(text: str) -> str | None:
    """The kind of a Neuron runtime / driver error line, or None for any other line."""
    if not _NEURON_KEYWORDS.search(text):
        return None
    return next((key for key, pattern in _RULES if pattern.search(text)), None)


def scan_neuron(lines: tuple[KernelLine, ...]) -> dict[str, list[KernelLine]]:
    found: dict[str, list[KernelLine]] = {}
    for line in lines:
        if (key := classify_neuron_line(line.text)) is not None:
            found.setdefault(key, []).append(line)
    return found


def _scan_of(doc: ProbeDocument, ctx: ProbeContext, item_id: str) -> tuple[Recent, dict[str, list[KernelLine]]]:
    key = ("neuron.runtime", item_id, ctx.now, ctx.window)

    def scan() -> tuple[Recent, dict[str, list[KernelLine]]]:
        selected = recent(doc, item_id, ctx.now, ctx.window, _NEURON_KEYWORDS, words=_NEURON_WORDS)
        return selected, scan_neuron(selected.lines)

    return doc.parsed(key, scan)


def check_neuron_runtime(doc: ProbeDocument, ctx: ProbeContext) -> list[Finding]:
    spec = _neuron_spec(ctx)
    item(doc, THIS_BOOT, what="Neuron runtime and hardware errors in the kernel log")
    this_log, this = _scan_of(doc, ctx, THIS_BOOT)
    prev_log, prev = _scan_of(doc, ctx, PREVIOUS_BOOT)
    if spec is None and not this and not prev:
        raise NotApplicable(f"no expectation for {ctx.instance_type} and no Neuron messages in the kernel log")
    label = window_label(ctx.window)
    seen = [kind for key, kind in _KINDS.items() if key in this or key in prev]
    # unmatched runtime errors are reported only when nothing more specific explains them
    kinds = [kind for kind in seen if kind.key != GENERIC] or seen
    findings: list[Finding] = []
    for kind in kinds:
        now_lines, before_lines = this.get(kind.key, []), prev.get(kind.key, [])
        lines = [*before_lines, *now_lines]
        where = (
            "in this boot and before the last reboot"
            if now_lines and before_lines
            else ("in this boot" if now_lines else "before the last reboot")
        )
        times = [line.time for line in lines if line.time is not None]
        span = "time unknown" if not times else " … ".join(dict.fromkeys((stamp(min(times)), stamp(max(times)))))
        evidence = trim_evidence([line.raw for line in lines], EVIDENCE_LIMIT)
        undated = len(lines) - len(times)
        if undated:
            evidence.append(f"(time unknown for {undated} line(s): read as this boot's, at an unknown time)")
        if any(log.truncated for log in (this_log, prev_log)):
            evidence.append("(kernel log: output truncated; judged what was read)")
        findings.append(
            finding(
                ctx,
                CHECK_RUNTIME,
                kind.tag,
                f"{kind.label} {where}: {len(lines)} line(s) in the last {label} ({span})",
                priority=kind.priority,
                section="G.2",
                evidence=evidence,
                root_cause=kind.root_cause,
                suggested_commands=list(kind.commands),
                node_action=kind.action,
            )
        )
    if findings:
        return findings
    if (not_read := unread(ctx, CHECK_RUNTIME, "G.2", "Neuron runtime errors", this_log)) is not None:
        return [not_read]
    return [
        finding(
            ctx,
            CHECK_RUNTIME,
            Tag.PASS,
            f"No Neuron runtime or hardware error in the kernel log in the last {label}",
            section="G.2",
            evidence=["(kernel log: output truncated; judged what was read)"] if this_log.truncated else [],
        )
    ]


CHECKS: tuple[Check, ...] = (
    Check(CHECK_DEVICES, "G.2", "Neuron devices and cores", check_neuron_devices),
    Check(CHECK_RUNTIME, "G.2", "Neuron runtime and hardware errors", check_neuron_runtime),
)
