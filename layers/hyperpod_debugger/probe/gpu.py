"""NVIDIA GPU evaluators (§ G.1, G.1.a, G.1.b) over the probe's nvidia-smi and dcgmi items.

Sources, in the order they are trusted for one fact:

1. ``nvidia_smi_query_gpu`` (CSV, one row per GPU): count, temperature, clock-event reasons, ECC
   totals, retired pages.
2. ``nvidia_smi_remapped_rows`` (CSV): row remapping (Ampere and later).
3. ``nvidia_smi_q`` (text): the same facts for drivers whose CSV lacks a field, parsed only when
   a fact is missing from the CSV.

GPUs are matched across sources by PCI bus id. A value the tool cannot give (``[N/A]``…) means
"cannot judge", never zero. These evaluators never build reboot/replace commands: they set
``node_action`` and the suggestion engine turns that into the guarded commands.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from hyperpod_debugger.checks.base import Check
from hyperpod_debugger.domain.model import Finding, NodeAction, Priority, SuggestedCommand, Tag, trim_evidence
from hyperpod_debugger.domain.observations import NotApplicable, Unobservable
from hyperpod_debugger.probe.base import ProbeContext, finding, item
from hyperpod_debugger.probe.catalog import InstanceSpec, spec_for
from hyperpod_debugger.probe.document import MISSING_TOOL_CODES, ProbeDocument, ProbeItem
from hyperpod_debugger.probe.parse import nvsmi
from hyperpod_debugger.remediation.suggest import read_only

CSV_ITEM = "nvidia_smi_query_gpu"
Q_ITEM = "nvidia_smi_q"
REMAP_ITEM = "nvidia_smi_remapped_rows"
NVLINK_ITEM = "nvidia_smi_nvlink_status"
DCGM_ITEM = "dcgmi_health"

#: the probe's field lists (references/probe.md), used when a CSV arrives without its header line
QUERY_FIELDS = tuple(
    nvsmi.normalize_column(name)
    for name in (
        "index,pci.bus_id,name,uuid,temperature.gpu,power.draw,clocks_event_reasons.active,"
        "clocks_event_reasons.hw_slowdown,clocks_event_reasons.hw_thermal_slowdown,"
        "clocks_event_reasons.sw_thermal_slowdown,clocks_event_reasons.hw_power_brake_slowdown,"
        "ecc.errors.corrected.volatile.total,ecc.errors.uncorrected.volatile.total,"
        "ecc.errors.corrected.aggregate.total,ecc.errors.uncorrected.aggregate.total,"
        "retired_pages.single_bit_ecc.count,retired_pages.double_bit.count,retired_pages.pending"
    ).split(",")
)
REMAP_FIELDS = tuple(
    nvsmi.normalize_column(name)
    for name in (
        "gpu_bus_id",
        "gpu_uuid",
        "remapped_rows.correctable",
        "remapped_rows.uncorrectable",
        "remapped_rows.pending",
        "remapped_rows.failure",
    )
)

#: thresholds
HOT_CELSIUS = 85.0  # sustained ≥ 85 °C is where data-centre GPUs start thermal slowdown
OUTLIER_CELSIUS = 20.0  # one GPU this much hotter than the median of the others is called out
RETIRED_PAGES_LIMIT = 60  # the driver retires at most 64 pages; at 60 the GPU is near its end
BOOT_GRACE_S = 300.0  # GPUs may still be initialising this soon after boot (HMA waits ~2 min too)
#: GPU models whose HyperPod instance types wire the GPUs together with NVLink
NVLINK_MODELS = frozenset({"A100", "H100", "H200", "B200"})

_ON_NODE = "on the node (SSM session, § K)"
_number, _flag = nvsmi.number, nvsmi.flag
_NOT_INSTALLED = re.compile(r"command not found|No such file or directory|not installed", re.IGNORECASE)


# --------------------------------------------------------------------------- sources


def _tool_missing(found: ProbeItem) -> bool:
    if found.exit_code in MISSING_TOOL_CODES:
        return True
    head = f"{found.stdout[:300]}\n{found.stderr[:300]}"
    # the words are rare in a healthy output: a plain substring test spares the regex almost always
    lowered = head.lower()
    return ("not found" in lowered or "no such file" in lowered or "not installed" in lowered) and bool(
        _NOT_INSTALLED.search(head)
    )


def _usable(doc: ProbeDocument, item_id: str, what: str) -> ProbeItem:
    """The item, or NotApplicable/Unobservable. An error that merely says "not found" (NVML's
    "Not Found", DCGM's "The Group is not found") with an ordinary exit code is output to read,
    not a missing tool."""
    found = doc.item(item_id)
    if found is not None and not found.timed_out and not _tool_missing(found):
        return found
    return item(doc, item_id, what=what)


@dataclass(slots=True)
class Source:
    item: ProbeItem | None = None
    problem: Exception | None = None
    tool_missing: bool = False


def _source(doc: ProbeDocument, item_id: str, what: str) -> Source:
    try:
        return Source(item=_usable(doc, item_id, what))
    except (NotApplicable, Unobservable) as exc:
        found = doc.item(item_id)
        # kept without its traceback: its frames would hold the whole evaluation in a reference cycle
        return Source(problem=exc.with_traceback(None), tool_missing=found is not None and _tool_missing(found))


class Fact(NamedTuple):
    """One value and the verbatim lines it was read from (a named tuple: a document makes ~150)."""

    value: object
    lines: tuple[str, ...]
    #: "csv" (query-gpu), "remap" (query-remapped-rows) or "q" (nvidia-smi -q): which header to cite
    source: str = "q"


@dataclass(slots=True)
class Gpu:
    key: str
    bus_id: str | None = None
    index: int | None = None
    row: nvsmi.CsvRow | None = None
    remap_row: nvsmi.CsvRow | None = None
    q: nvsmi.QGpu | None = None

    @property
    def label(self) -> str:
        if self.bus_id == nvsmi.UNKNOWN_BUS and self.index is None:
            return "the pasted GPU (bus id not in the excerpt)"
        if self.index is not None and self.bus_id:
            return f"GPU {self.index} ({self.bus_id})"
        if self.index is not None:
            return f"GPU {self.index}"
        return f"GPU {self.bus_id}"

    def csv_number(self, column: str) -> Fact | None:
        row = self.row
        if row is None:
            return None
        value = row.number(column)
        return Fact(value, (row.line,), "csv") if value is not None else None

    def csv_flag(self, column: str) -> Fact | None:
        row = self.row
        if row is None:
            return None
        value = row.flag(column)
        return Fact(value, (row.line,), "csv") if value is not None else None

    def q_fact(self, value: object, line: str) -> Fact:
        return Fact(value, (self.q.header_line if self.q else self.label, line))


class GpuSet:
    """The node's GPUs as the nvidia-smi items show them, merged by PCI bus id.

    ``nvidia-smi -q`` is parsed only when a check needs a fact the CSV does not carry."""

    def __init__(self, doc: ProbeDocument) -> None:
        self.doc = doc
        self.csv_src = _source(doc, CSV_ITEM, "GPU inventory and health (nvidia-smi --query-gpu)")
        self.q_src = _source(doc, Q_ITEM, "GPU details (nvidia-smi -q)")
        self.remap_src = _source(doc, REMAP_ITEM, "GPU row remapping (nvidia-smi --query-remapped-rows)")
        self.csv = nvsmi.parse_csv(self.csv_src.item.stdout, QUERY_FIELDS) if self.csv_src.item else None
        self.remap = nvsmi.parse_csv(self.remap_src.item.stdout, REMAP_FIELDS) if self.remap_src.item else None
        self.gpus: list[Gpu] = []
        self._by_key: dict[str, Gpu] = {}
        self._q_merged = False
        self._q_read = False
        self._has: dict[tuple[str, ...], bool] = {}
        self._truncated: dict[bool, list[str]] = {}
        for position, row in enumerate(self.csv.rows if self.csv else ()):
            bus, index = row.bus_id, row.index
            gpu = self._add(nvsmi.bus_key(bus) or f"index:{index if index is not None else position}")
            gpu.bus_id, gpu.index, gpu.row = bus, index, row
        for row in self.remap.rows if self.remap else ():
            key = nvsmi.bus_key(row.bus_id)
            if key is None:
                continue
            gpu = self._by_key.get(key) or self._add(key)
            gpu.bus_id = gpu.bus_id or row.bus_id
            gpu.remap_row = row

    def _add(self, key: str) -> Gpu:
        gpu = self._by_key.get(key)
        if gpu is None:
            gpu = self._by_key[key] = Gpu(key=key)
            self.gpus.append(gpu)
        return gpu

    @property
    def q(self) -> nvsmi.QReport | None:
        if self.q_src.item is None:
            return None
        self._q_read = True
        text = self.q_src.item.stdout
        return self.doc.parsed("nvsmi.q", lambda: nvsmi.parse_q(text))

    def merge_q(self) -> None:
        """Attach ``nvidia-smi -q`` blocks (and add GPUs only -q shows)."""
        if self._q_merged:
            return
        self._q_merged = True
        report = self.q
        if report is None:
            return
        by_bus = all(g.bus_id for g in self.gpus if g.row is not None)
        for position, block in enumerate(report.gpus):
            key = nvsmi.bus_key(block.bus_id) or block.bus_id
            gpu = self._by_key.get(key)
            if gpu is None and not by_bus and position < len(self.gpus):
                gpu = self.gpus[position]  # a CSV without bus ids: same enumeration order
            if gpu is None:
                gpu = self._add(key)
                gpu.bus_id = block.bus_id
            gpu.q = block

    def ensure(self, needs_q: Callable[[Gpu], bool]) -> list[Gpu]:
        if not self.gpus or any(needs_q(g) for g in self.gpus):
            self.merge_q()
        return self.gpus

    def csv_has(self, *columns: str) -> bool:
        known = self._has.get(columns)
        if known is None:
            known = self._has[columns] = self.csv is not None and all(self.csv.has(c) for c in columns)
        return known

    @property
    def expected_count(self) -> int:
        """How many GPUs the outputs announce (a cut -q still says "Attached GPUs: 8"; a lost GPU
        has an error line instead of a row)."""
        attached = self.q.attached_gpus if self._q_read and self.q else None
        lost = len(self.csv.lost_gpu_lines) if self.csv is not None else 0
        csv_rows = len(self.csv.rows) if self.csv is not None else 0
        return max(len(self.gpus), attached or 0, csv_rows + lost)

    @property
    def truncated_items(self) -> list[str]:
        # fixed once -q has been read (or found unneeded): kept per state, since every finding cites it
        known = self._truncated.get(self._q_read)
        if known is None:
            known = self._truncated[self._q_read] = self._find_truncated()
        return list(known)

    def _find_truncated(self) -> list[str]:
        found = []
        for item_id, src, parsed in (
            (CSV_ITEM, self.csv_src, self.csv),
            (REMAP_ITEM, self.remap_src, self.remap),
            (Q_ITEM, self.q_src, self.q if self._q_read else None),
        ):
            if src.item is None:
                continue
            cut = src.item.truncated or bool(parsed is not None and getattr(parsed, "truncated", False))
            if item_id == Q_ITEM and parsed is not None:
                cut = cut or parsed.incomplete  # type: ignore[union-attr]
            if cut:
                found.append(f"({item_id}: output truncated)")
        return found

    def require_gpus(self) -> None:
        """Nothing to judge when nvidia-smi shows no GPU at all: probe.gpu_count reports that."""
        if not self.gpus:
            _, down = _lost_and_down(self)
            why = f" ({down})" if down else ""
            raise NotApplicable(f"nvidia-smi shows no GPU{why}; see probe.gpu_count")

    def unusable(self) -> Exception:
        """Why no source could be read: a timeout (UNKNOWN) wins over a skip reason."""
        problems = [s.problem for s in (self.csv_src, self.q_src, self.remap_src) if s.problem is not None]
        # a new exception each time: the kept one, raised again, would hold the raising frames (and this
        # set with them) in a reference cycle
        for problem in problems:
            if isinstance(problem, Unobservable):
                return Unobservable(problem.failure)
        return (
            NotApplicable(*problems[0].args)
            if problems
            else NotApplicable("no nvidia-smi output in the probe document")
        )


def _gpus(doc: ProbeDocument) -> GpuSet:
    return doc.parsed("probe.gpu.set", lambda: GpuSet(doc))


def _gpus_to_judge(
    doc: ProbeDocument, needs_more: Callable[[GpuSet], Callable[[Gpu], bool]], *, with_remap: bool = False
) -> tuple[GpuSet, list[Gpu]]:
    """What every per-GPU check does first: read the GPU set; refuse (UNKNOWN) when none of its sources
    is usable; fill in from ``nvidia-smi -q`` the GPUs ``needs_more(gs)`` says the CSV left short; refuse
    when no GPU is listed at all. Returns the set and the GPUs to judge."""
    gs = _gpus(doc)
    sources = [gs.csv_src.item, gs.q_src.item, *([gs.remap_src.item] if with_remap else [])]
    if all(source is None for source in sources):
        raise gs.unusable()
    gpus = gs.ensure(needs_more(gs))
    gs.require_gpus()
    return gs, gpus


def _evidence(gs: GpuSet, facts: list[Fact], extra: list[str] | None = None) -> list[str]:
    lines: list[str] = []
    sources = {f.source for f in facts}
    for table, source in ((gs.csv, "csv"), (gs.remap, "remap")):
        if table is not None and table.header and source in sources:
            lines.append(table.header)
    for fact in facts:
        lines.extend(fact.lines)
    lines.extend(extra or [])
    lines.extend(gs.truncated_items)
    return trim_evidence(list(dict.fromkeys(lines)))


def _names(gpus: list[Gpu]) -> str:
    return ", ".join(g.label for g in gpus)


def _cmd(argv: list[str], purpose: str) -> SuggestedCommand:
    return read_only(argv, f"{purpose} {_ON_NODE}")


def _problem(
    ctx: ProbeContext,
    check: str,
    tag: Tag,
    priority: Priority,
    section: str,
    message: str,
    evidence: list[str],
    action: NodeAction,
    root_cause: str,
    commands: list[SuggestedCommand],
) -> Finding:
    return finding(
        ctx,
        check,
        tag,
        message,
        priority=priority,
        section=section,
        evidence=evidence,
        root_cause=root_cause,
        suggested_commands=commands,
        node_action=action,
    )


def _excerpt_only(gs: GpuSet) -> bool:
    """Only a pasted part of ``nvidia-smi -q`` without its ``GPU <bus id>`` line (and no "Attached GPUs"):
    one GPU of unknown address, and nothing says how many the node has."""
    return bool(gs.gpus) and all(g.bus_id == nvsmi.UNKNOWN_BUS and g.row is None for g in gs.gpus)


def _coverage_note(judged: int, total: int, gs: GpuSet) -> str:
    if _excerpt_only(gs) and not (gs.q and gs.q.attached_gpus):
        return (
            "; read from an excerpt of one GPU without its `GPU <bus id>` line: which GPU it is, and the "
            "node's other GPUs, are not in it"
        )
    if judged >= total:
        return ""
    cut = " (output truncated)" if gs.truncated_items else ""
    return f"; {total - judged} of {total} GPU(s) not reported{cut}"


# --------------------------------------------------------------------------- probe.gpu_count


def _lost_and_down(gs: GpuSet) -> tuple[list[str], str | None]:
    """Lost-GPU and driver-failure lines; ``-q`` is read for them only when the CSV has no rows."""
    lost: list[str] = []
    down: str | None = None
    use_q = gs.q_src.item is not None and (gs._q_read or gs.csv is None or not gs.csv.rows)
    for parsed in (gs.csv, gs.q if use_q else None):
        if parsed is None:
            continue
        lost.extend(parsed.lost_gpu_lines)
        down = down or parsed.driver_down_line
    return list(dict.fromkeys(lost)), down


def check_gpu_count(doc: ProbeDocument, ctx: ProbeContext) -> list[Finding]:
    check = "probe.gpu_count"
    spec = spec_for(ctx.instance_type)
    expected = spec.gpus if spec else None
    if doc.item(CSV_ITEM) is None and doc.item(Q_ITEM) is None:
        raise NotApplicable("the probe document has no nvidia-smi items (GPU inventory)")
    if expected == 0:
        raise NotApplicable(f"no NVIDIA GPUs expected on {ctx.instance_type}")
    gs = _gpus(doc)
    if gs.csv_src.item is None and gs.q_src.item is None:
        sources = [s for s in (gs.csv_src, gs.q_src) if s.problem is not None]
        if expected and sources and all(s.tool_missing for s in sources):
            return [
                _problem(
                    ctx,
                    check,
                    Tag.FAIL,
                    Priority.P0,
                    "G.1",
                    f"nvidia-smi is not installed on this {ctx.instance_type} node, which should have "
                    f"{expected} GPUs: the NVIDIA driver or its tools are gone",
                    [str(s.problem) for s in sources],
                    "investigate",
                    "The HyperPod AMI ships the NVIDIA driver and nvidia-smi; without them no GPU workload "
                    "can run. A lifecycle script or a package change may have removed them.",
                    [
                        _cmd(["lspci", "-d", "10de:"], "List the NVIDIA devices on the PCI bus"),
                        _cmd(["cat", "/proc/driver/nvidia/version"], "Show whether the NVIDIA kernel driver is loaded"),
                    ],
                )
            ]
        raise gs.unusable()

    seen: int | None = None
    lines: list[str] = []
    if (gs.csv is None or not gs.csv.rows) and gs.q is not None and gs.q.attached_gpus is None:
        if gs.q.gpus and all(g.bus_id == nvsmi.UNKNOWN_BUS for g in gs.q.gpus):
            raise NotApplicable(
                "nvidia-smi -q was given as an excerpt of one GPU without its `GPU <bus id>` line or the "
                "'Attached GPUs' count: it cannot say how many GPUs the node has"
            )
    if gs.csv is not None and gs.csv.rows:
        seen, lines = len(gs.csv.rows), [r.line for r in gs.csv.rows]
    else:
        report = gs.q
        if report is not None and (report.attached_gpus is not None or report.gpus):
            seen = report.attached_gpus if report.attached_gpus is not None else len(report.gpus)
            lines = [line for line in (report.attached_line, *(g.header_line for g in report.gpus)) if line]
    lost, down = _lost_and_down(gs)
    if seen is None:
        if down is None and not lost:
            raise NotApplicable("nvidia-smi printed nothing the GPU count can be read from")
        seen = 0
    evidence = trim_evidence(list(dict.fromkeys([*lost, *([down] if down else []), *lines, *gs.truncated_items])))
    if expected is None:
        return [
            finding(
                ctx,
                check,
                Tag.INFO,
                f"{seen} GPU(s) visible to nvidia-smi; no expectation for {ctx.instance_type}",
                evidence=evidence,
            )
        ]
    if seen < expected or lost:
        detail = f"{seen} of {expected} GPUs visible to nvidia-smi on {ctx.instance_type}"
        if down:
            detail += " (nvidia-smi cannot use the NVIDIA driver)"
        if lost:
            detail += f"; {len(lost)} GPU(s) reported lost or unreachable"
        if doc.uptime_s is not None and doc.uptime_s < BOOT_GRACE_S:
            return [
                _problem(
                    ctx,
                    check,
                    Tag.WARN,
                    Priority.P1,
                    "G.1",
                    f"{detail}, {int(doc.uptime_s)} s after boot: the driver may still be initialising; "
                    "probe again in a few minutes before acting",
                    evidence,
                    "investigate",
                    "Right after a boot the GPUs can take a minute or two to appear; HyperPod's health agent "
                    "also waits before it counts them.",
                    [_cmd(["nvidia-smi", "-L"], "List the GPUs the driver sees")],
                )
            ]
        return [
            _problem(
                ctx,
                check,
                Tag.FAIL,
                Priority.P0,
                "G.1",
                f"{detail}: a GPU fell off the bus or the driver failed; the node needs a reboot, and "
                "a replacement if the GPU is missing again afterwards",
                evidence,
                "reboot",
                "A GPU that fell off the PCIe bus (Xid 79), a lost GPU or a driver that did not load leaves "
                "fewer GPUs than the instance type has. HyperPod's health agent reboots a node on a GPU "
                "count mismatch; the same GPU missing again after the reboot is a hardware fault.",
                [
                    _cmd(["nvidia-smi", "-L"], "List the GPUs the driver sees"),
                    _cmd(["lspci", "-d", "10de:"], "List the NVIDIA devices still on the PCI bus"),
                    _cmd(["journalctl", "-k", "-b", "0", "--grep", "NVRM: Xid"], "Show this boot's Xid lines"),
                ],
            )
        ]
    if seen > expected:
        return [
            finding(
                ctx,
                check,
                Tag.INFO,
                f"{seen} GPUs visible but a {ctx.instance_type} has {expected}: is the instance type right?",
                evidence=evidence,
            )
        ]
    model = f" {spec.gpu_model}" if spec and spec.gpu_model else ""
    return [
        finding(
            ctx,
            check,
            Tag.PASS,
            f"{seen} of {expected}{model} GPU(s) of {ctx.instance_type} visible to nvidia-smi",
            evidence=evidence,
        )
    ]


# --------------------------------------------------------------------------- probe.gpu_ecc

_ECC_COLUMNS = (
    "ecc.errors.uncorrected.volatile.total",
    "ecc.errors.uncorrected.aggregate.total",
    "ecc.errors.corrected.volatile.total",
    "ecc.errors.corrected.aggregate.total",
    "retired_pages.single_bit_ecc.count",
    "retired_pages.double_bit.count",
    "retired_pages.pending",
)


@dataclass(slots=True)
class EccState:
    gpu: Gpu
    unc_volatile: Fact | None = None
    unc_aggregate: Fact | None = None
    cor_volatile: Fact | None = None
    cor_aggregate: Fact | None = None
    retired_single: Fact | None = None
    retired_double: Fact | None = None
    retire_pending: Fact | None = None
    #: lines of fields printed but not readable with certainty (``Pending Page Blacklist : Yes this one``)
    unreadable: tuple[str, ...] = ()

    @property
    def judged(self) -> bool:
        return bool(self.unreadable) or any(
            f is not None
            for f in (
                self.unc_volatile,
                self.unc_aggregate,
                self.retired_single,
                self.retired_double,
                self.retire_pending,
            )
        )

    @staticmethod
    def count(fact: Fact | None) -> int:
        return int(fact.value) if fact is not None else 0  # type: ignore[call-overload]


def _q_counted(gpu: Gpu, counted: nvsmi.Counted) -> Fact | None:
    if counted.value is None or gpu.q is None:
        return None
    return Fact(counted.value, (gpu.q.header_line, *counted.lines))


def _ecc_state(gs: GpuSet, gpu: Gpu) -> EccState:
    state = EccState(
        gpu=gpu,
        unc_volatile=gpu.csv_number("ecc.errors.uncorrected.volatile.total"),
        unc_aggregate=gpu.csv_number("ecc.errors.uncorrected.aggregate.total"),
        cor_volatile=gpu.csv_number("ecc.errors.corrected.volatile.total"),
        cor_aggregate=gpu.csv_number("ecc.errors.corrected.aggregate.total"),
        retired_single=gpu.csv_number("retired_pages.single_bit_ecc.count"),
        retired_double=gpu.csv_number("retired_pages.double_bit.count"),
        retire_pending=gpu.csv_flag("retired_pages.pending"),
    )
    if gpu.row is not None:
        state.unreadable = _csv_unreadable(gpu.row, _ECC_COLUMNS)
    if gpu.q is None:
        return state
    state.unreadable += nvsmi.q_unreadable(gpu.q).get("retired pages", ())
    unc_v, cor_v = nvsmi.q_ecc(gpu.q, "volatile")
    unc_a, cor_a = nvsmi.q_ecc(gpu.q, "aggregate")
    state.unc_volatile = state.unc_volatile or _q_counted(gpu, unc_v)
    state.unc_aggregate = state.unc_aggregate or _q_counted(gpu, unc_a)
    state.cor_volatile = state.cor_volatile or _q_counted(gpu, cor_v)
    state.cor_aggregate = state.cor_aggregate or _q_counted(gpu, cor_a)
    pages = nvsmi.q_retired_pages(gpu.q)
    if state.retired_single is None and "single" in pages:
        state.retired_single = gpu.q_fact(pages["single"].value, pages["single"].line)
    if state.retired_double is None and "double" in pages:
        state.retired_double = gpu.q_fact(pages["double"].value, pages["double"].line)
    if state.retire_pending is None and "pending" in pages:
        state.retire_pending = gpu.q_fact(pages["pending"].value, pages["pending"].line)
    return state


def _csv_unreadable(row: nvsmi.CsvRow, columns: tuple[str, ...]) -> tuple[str, ...]:
    """The row's line when one of ``columns`` holds a value that cannot be read with certainty."""
    for column in columns:
        value = row.values.get(column)
        kind = "flag" if column.endswith((".pending", ".failure")) else "number"
        if nvsmi.unreadable(value, kind):
            return (row.line,)
    return ()


def _unreadable_finding(ctx: ProbeContext, gs: GpuSet, check: str, section: str, what: str, states: list) -> Finding:
    lines = [line for s in states for line in s.unreadable]
    return finding(
        ctx,
        check,
        Tag.UNKNOWN,
        f"{what} on {_names([s.gpu for s in states])} printed but not readable with certainty (a note or "
        "text where nvidia-smi prints Yes/No or a count): cannot judge it; run the command again and paste "
        "its output unedited",
        priority=Priority.P2,
        section=section,
        evidence=_evidence(gs, [], lines),
    )


#: what nvidia-smi prints where it tried to read a value and failed (unlike ``N/A``: not supported)
_READ_ERRORS = frozenset({"unknown error", "err!", "gpu is lost", "insufficient permissions"})


def _ecc_read_failures(gpus: list[Gpu]) -> dict[str, Gpu]:
    """GPUs whose ECC mode or counters nvidia-smi failed to read (``Unknown Error``, ``ERR!``), each with its
    first such line: a driver that cannot read ECC says nothing about the memory, so it is not "N/A"."""
    out: dict[str, Gpu] = {}
    for gpu in gpus:
        lines = []
        if gpu.row is not None:
            values = (gpu.row.values.get(c) or "" for c in _ECC_COLUMNS)
            if any(v.strip(" []").lower() in _READ_ERRORS for v in values):
                lines.append(gpu.row.line)
        if gpu.q is not None:
            entries = [*gpu.q.under("ecc mode"), *gpu.q.under("ecc errors")]
            lines += [e.line for e in entries if e.value.strip(" []").lower() in _READ_ERRORS][:1]
        if lines:
            out[lines[0]] = gpu
    return out


def _ecc_unread(ctx: ProbeContext, gs: GpuSet, failed: dict[str, Gpu]) -> Finding:
    return finding(
        ctx,
        "probe.gpu_ecc",
        Tag.UNKNOWN,
        f"nvidia-smi could not read the ECC state of {_names(list(failed.values()))} (it printed an error "
        "where the mode or the counters belong): cannot judge the GPU memory; a driver that cannot read ECC "
        "often means the GPU itself is in trouble: read the kernel log for an Xid",
        priority=Priority.P1,
        section="G.1",
        evidence=_evidence(gs, [], list(failed)),
    )


def _ecc_needs_more(gs: GpuSet) -> Callable[[Gpu], bool]:
    complete = gs.csv_has(*_ECC_COLUMNS)
    return lambda gpu: gpu.row is None or not complete


def _ecc_commands() -> list[SuggestedCommand]:
    return [
        _cmd(["nvidia-smi", "-q", "-d", "ECC"], "Show the ECC counters per GPU"),
        _cmd(["nvidia-smi", "-q", "-d", "ROW_REMAPPER"], "Show row remapping (A100 and later)"),
        _cmd(["nvidia-smi", "-q", "-d", "PAGE_RETIREMENT"], "Show retired pages (V100 and earlier)"),
    ]


def _rows_alone(gpus: list[Gpu], remap: bool = False) -> list[nvsmi.CsvRow] | None:
    """Each GPU's row of the query CSV (or the remap CSV), when every GPU has one and none has a ``-q``
    block: the case the shortcuts judge; None sends the check down its full path."""
    rows = [gpu.remap_row if remap else gpu.row for gpu in gpus]
    if not gpus or any(row is None for row in rows) or any(gpu.q is not None for gpu in gpus):
        return None
    return rows  # type: ignore[return-value]


def _ecc_all_clear(gpus: list[Gpu]) -> list[Fact] | None:
    """The usual node, judged from the CSV alone without building a state per GPU: every GPU has its
    row (and no ``-q`` block), reports some counter, and every counter reads clear. Returns the facts
    the PASS cites, or None whenever :func:`check_gpu_ecc`'s full path could conclude anything else
    (a test holds the two to the same answer)."""
    rows = _rows_alone(gpus)
    if rows is None:
        return None
    facts: list[Fact] = []
    for row in rows:
        get = row.values.get  # read straight from the row: the shortcut reads each value once
        unc_v, unc_a = _number(get(_ECC_COLUMNS[0])), _number(get(_ECC_COLUMNS[1]))
        cor_v, cor_a = _number(get(_ECC_COLUMNS[2])), _number(get(_ECC_COLUMNS[3]))
        single, double = _number(get(_ECC_COLUMNS[4])), _number(get(_ECC_COLUMNS[5]))
        pending = _flag(get(_ECC_COLUMNS[6]))
        if _csv_unreadable(row, _ECC_COLUMNS):
            return None
        if unc_v is None and unc_a is None and single is None and double is None and pending is None:
            return None  # not judged: the full path words the coverage
        if (unc_v is not None and int(unc_v) > 0) or (unc_a is not None and int(unc_a) > 0) or pending is True:
            return None
        if (int(single) if single is not None else 0) + (
            int(double) if double is not None else 0
        ) >= RETIRED_PAGES_LIMIT:
            return None
        if (cor_v is not None and int(cor_v) > 0) or (cor_v is None and cor_a is not None and int(cor_a) > 0):
            return None  # correctable errors: the full path notes them
        if unc_v is not None:
            facts.append(Fact(unc_v, (row.line,), "csv"))
        elif unc_a is not None:
            facts.append(Fact(unc_a, (row.line,), "csv"))
    return facts


def _ecc_passed(ctx: ProbeContext, gs: GpuSet, judged: int, facts: list[Fact], note: str) -> Finding:
    coverage = _coverage_note(judged, gs.expected_count, gs)
    return finding(
        ctx,
        "probe.gpu_ecc",
        Tag.INFO if coverage else Tag.PASS,
        f"no uncorrectable ECC errors, no pending page retirement on {judged} GPU(s){coverage}{note}",
        evidence=_evidence(gs, facts),
    )


def check_gpu_ecc(doc: ProbeDocument, ctx: ProbeContext) -> list[Finding]:
    check = "probe.gpu_ecc"
    gs, gpus = _gpus_to_judge(doc, _ecc_needs_more)
    clear = _ecc_all_clear(gpus)
    if clear is not None:
        return [_ecc_passed(ctx, gs, len(gpus), clear, "")]
    states = [_ecc_state(gs, g) for g in gpus]
    judged = [s for s in states if s.judged]
    failed_reads = _ecc_read_failures([s.gpu for s in states if not s.judged])
    if not judged:
        if failed_reads:
            return [_ecc_unread(ctx, gs, failed_reads)]
        if gs.truncated_items:
            raise NotApplicable("the ECC counters are missing from the output (output truncated): cannot judge")
        raise NotApplicable("no GPU reports ECC counters ([N/A]): ECC is disabled or not supported")
    findings: list[Finding] = [_ecc_unread(ctx, gs, failed_reads)] if failed_reads else []
    volatile = [s for s in judged if s.count(s.unc_volatile) > 0]
    if volatile:
        counts = ", ".join(f"{s.gpu.label}: {s.count(s.unc_volatile)}" for s in volatile)
        findings.append(
            _problem(
                ctx,
                check,
                Tag.FAIL,
                Priority.P0,
                "G.1",
                f"uncorrectable ECC errors since the driver loaded on {counts}: reboot so the GPU is reset "
                "and the bad memory is remapped or retired; replace if they return after the reboot",
                _evidence(gs, [s.unc_volatile for s in volatile if s.unc_volatile]),
                "reboot",
                "An uncorrectable (double-bit) ECC error corrupts data in GPU memory; the job on that GPU is "
                "lost. A GPU reset lets the row remapper (A100 and later) or page retirement take the bad "
                "memory out of service (see G.1.a).",
                _ecc_commands(),
            )
        )
    # uncorrectable errors in the lifetime (aggregate) counters only, none since the driver loaded: NVIDIA's
    # memory error management takes the faulty rows or pages out of service at the reset that follows, and the
    # lifetime counter never goes down, so it says nothing about the memory now (§ G.1.a: "fine now"); a
    # remap or retirement that did not happen is the pending and failure checks' business
    historic = [
        s
        for s in judged
        if s.count(s.unc_aggregate) > 0
        and s not in volatile
        and (s.unc_volatile is None or s.count(s.unc_volatile) == 0)
    ]
    pending = [s for s in judged if s.retire_pending is not None and s.retire_pending.value is True]
    if pending:
        findings.append(
            _problem(
                ctx,
                check,
                Tag.WARN,
                Priority.P1,
                "G.1",
                f"page retirement pending on {_names([s.gpu for s in pending])}: the pages are retired "
                "only when the GPU is reset (reboot)",
                _evidence(gs, [s.retire_pending for s in pending if s.retire_pending]),
                "reboot",
                "The driver marked memory pages for retirement after ECC errors; until a reset the bad "
                "pages may still be handed to workloads.",
                _ecc_commands(),
            )
        )
    worn = [s for s in judged if s.count(s.retired_single) + s.count(s.retired_double) >= RETIRED_PAGES_LIMIT]
    if worn:
        counts = ", ".join(
            f"{s.gpu.label}: {s.count(s.retired_single)} single-bit + {s.count(s.retired_double)} double-bit"
            for s in worn
        )
        findings.append(
            _problem(
                ctx,
                check,
                Tag.FAIL,
                Priority.P1,
                "G.1",
                f"retired pages near the driver's 64-page limit on {counts}: replace the node",
                _evidence(gs, [f for s in worn for f in (s.retired_single, s.retired_double) if f]),
                "replace",
                "Each retired page takes faulty memory out of service; the driver can retire at most 64. "
                "A GPU this close to the limit will soon have no spare left and keeps raising ECC errors.",
                _ecc_commands(),
            )
        )
    unsure = [s for s in judged if s.unreadable]
    if unsure:
        findings.append(_unreadable_finding(ctx, gs, check, "G.1", "an ECC or page-retirement field", unsure))
    if findings:
        return findings
    corrected = [
        s for s in judged if s.count(s.cor_volatile) > 0 or (s.cor_volatile is None and s.count(s.cor_aggregate) > 0)
    ]
    note = ""
    if corrected:
        note = "; correctable errors (background unless the rate grows) on " + ", ".join(
            f"{s.gpu.label}: {s.count(s.cor_volatile) or s.count(s.cor_aggregate)}" for s in corrected
        )
    if historic:
        note += (
            "; uncorrectable errors in the lifetime counters only (none since the driver loaded: past faults, "
            "their memory taken out of service at a reset) on "
            + ", ".join(f"{s.gpu.label}: {s.count(s.unc_aggregate)}" for s in historic)
        )
    facts = [f for s in judged for f in (s.unc_volatile or s.unc_aggregate,) if f]
    facts += [f for s in historic if (f := s.unc_aggregate)]
    facts += [f for s in corrected for f in (s.cor_volatile or s.cor_aggregate,) if f]
    return [_ecc_passed(ctx, gs, len(judged), facts, note)]


# --------------------------------------------------------------------------- probe.gpu_row_remap

_REMAP_KEYS = ("correctable", "uncorrectable", "pending", "failure")


@dataclass(slots=True)
class RemapState:
    gpu: Gpu
    facts: dict[str, Fact] = field(default_factory=dict)
    repair: dict[str, Fact] = field(default_factory=dict)  # 590-era "… Repair Pending", "Unrepairable Memory"
    #: lines of remapping fields printed but not readable with certainty (``Pending : Yes this one``)
    unreadable: tuple[str, ...] = ()

    def flag(self, name: str) -> bool:
        fact = self.facts.get(name)
        return bool(fact and fact.value)

    def count(self, name: str) -> int:
        fact = self.facts.get(name)
        return int(fact.value) if fact and fact.value is not None else 0  # type: ignore[call-overload]


def _remap_state(gpu: Gpu, in_query: bool) -> RemapState:
    """Remap facts from the remap CSV, then the query CSV (when it carries remapped_rows.*), then -q."""
    state = RemapState(gpu=gpu)
    for row in (gpu.remap_row, gpu.row if in_query else None):
        if row is None:
            continue
        for name in _REMAP_KEYS:
            column = f"remapped_rows.{name}"
            value = row.number(column) if name in ("correctable", "uncorrectable") else row.flag(column)
            if value is not None and name not in state.facts:
                state.facts[name] = Fact(value, (row.line,), "csv" if row is gpu.row else "remap")
        state.unreadable += _csv_unreadable(row, _REMAP_COLUMNS)
    if gpu.q is not None:
        state.unreadable += nvsmi.q_unreadable(gpu.q).get("remapped rows", ())
        for name, reading in nvsmi.q_remapped_rows(gpu.q).items():
            state.facts.setdefault(name, gpu.q_fact(reading.value, reading.line))
        for leaf in ("channel repair pending", "tpc repair pending", "unrepairable memory"):
            entry = gpu.q.get("ecc errors", leaf)
            value = nvsmi.flag(entry.value) if entry else None
            if entry is not None and value is not None:
                state.repair[leaf] = gpu.q_fact(value, entry.line)
    return state


def _lacks_remap_counts(gpu: Gpu) -> bool:
    return not (gpu.remap_row and any(gpu.remap_row.raw(f"remapped_rows.{n}") for n in _REMAP_KEYS))


def _remap_evidence(gs: GpuSet, states: list[RemapState], *names: str) -> list[str]:
    facts = [s.facts[n] for s in states for n in names if n in s.facts]
    facts += [f for s in states for f in s.repair.values() if f.value]
    return _evidence(gs, facts)


def _remap_commands() -> list[SuggestedCommand]:
    return [
        _cmd(
            [
                "nvidia-smi",
                "--query-remapped-rows=gpu_bus_id,remapped_rows.correctable,remapped_rows.uncorrectable,"
                "remapped_rows.pending,remapped_rows.failure",
                "--format=csv",
            ],
            "Show row remapping per GPU (pending should read 0/No after a reboot)",
        ),
        _cmd(["nvidia-smi", "-q", "-d", "ROW_REMAPPER"], "Show the remapping details and bank availability"),
    ]


_REMAP_COLUMNS = tuple(f"remapped_rows.{name}" for name in _REMAP_KEYS)


def _remap_all_clear(gpus: list[Gpu], in_query: bool) -> list[Fact] | None:
    """The usual node from the remap CSV alone (every GPU has its row and no ``-q`` block, reports some
    remap value, and nothing is pending, failed or remapped): the facts the PASS cites, or None whenever
    :func:`check_gpu_row_remap`'s full path could conclude anything else (a test holds them equal)."""
    rows = None if in_query else _rows_alone(gpus, remap=True)
    if rows is None:
        return None
    facts: list[Fact] = []
    for row in rows:
        get = row.values.get
        correctable, uncorrectable = _number(get(_REMAP_COLUMNS[0])), _number(get(_REMAP_COLUMNS[1]))
        pending, failure = _flag(get(_REMAP_COLUMNS[2])), _flag(get(_REMAP_COLUMNS[3]))
        if correctable is None and uncorrectable is None and pending is None and failure is None:
            return None
        if _csv_unreadable(row, _REMAP_COLUMNS):
            return None
        if pending or failure or (uncorrectable is not None and int(uncorrectable) > 0):
            return None
        for value in (pending, failure):
            if value is not None:
                facts.append(Fact(value, (row.line,), "remap"))
    return facts


def _remap_passed(ctx: ProbeContext, gs: GpuSet, judged: int, evidence: list[str]) -> Finding:
    coverage = _coverage_note(judged, gs.expected_count, gs)
    return finding(
        ctx,
        "probe.gpu_row_remap",
        Tag.INFO if coverage else Tag.PASS,
        f"no row remapping pending or failed on {judged} GPU(s){coverage}",
        evidence=evidence,
    )


def check_gpu_row_remap(doc: ProbeDocument, ctx: ProbeContext) -> list[Finding]:
    check = "probe.gpu_row_remap"
    gs, gpus = _gpus_to_judge(doc, lambda _: _lacks_remap_counts, with_remap=True)
    in_query = gs.csv is not None and any(gs.csv.has(c) for c in _REMAP_COLUMNS)
    clear = _remap_all_clear(gpus, in_query)
    if clear is not None:
        return [_remap_passed(ctx, gs, len(gpus), _evidence(gs, clear))]
    states = [_remap_state(g, in_query) for g in gpus]
    judged = [s for s in states if s.facts or s.repair or s.unreadable]
    if not judged:
        if gs.truncated_items:
            raise NotApplicable("row remapping is missing from the output (output truncated): cannot judge")
        raise NotApplicable(
            "no GPU reports row remapping ([N/A]): GPUs before Ampere retire pages instead (see probe.gpu_ecc)"
        )
    findings: list[Finding] = []
    failed = [
        s for s in judged if s.flag("failure") or bool(s.repair.get("unrepairable memory", Fact(False, ())).value)
    ]
    if failed:
        findings.append(
            _problem(
                ctx,
                check,
                Tag.FAIL,
                Priority.P0,
                "G.1.a",
                f"row remapping failed on {_names([s.gpu for s in failed])}: the GPU has no spare rows left "
                "for its bad memory; replace the node",
                _remap_evidence(gs, failed, "failure", "uncorrectable"),
                "replace",
                "A remapping failure means a memory bank ran out of spare rows; the uncorrectable errors "
                "will keep coming back and no reset can repair it.",
                _remap_commands(),
            )
        )
    pending = [
        s
        for s in judged
        if s not in failed
        and (s.flag("pending") or any(f.value for k, f in s.repair.items() if k != "unrepairable memory"))
    ]
    if pending:
        findings.append(
            _problem(
                ctx,
                check,
                Tag.WARN,
                Priority.P1,
                "G.1.a",
                f"row remapping pending on {_names([s.gpu for s in pending])}: reboot so the GPU reset applies "
                "it; if it is still pending after the reboot, replace the node",
                _remap_evidence(gs, pending, "pending", "uncorrectable"),
                "reboot",
                "After an uncorrectable error the remapper stages a spare row, which only takes effect at the "
                "next GPU reset. A remap that stays pending across reboots silently degrades the memory.",
                _remap_commands(),
            )
        )
    unsure = [s for s in judged if s.unreadable and s not in failed and s not in pending]
    if unsure:
        findings.append(_unreadable_finding(ctx, gs, check, "G.1.a", "a row-remapping field", unsure))
    if findings:
        return findings
    remapped = [s for s in judged if s.count("uncorrectable") > 0]
    coverage = _coverage_note(len(judged), gs.expected_count, gs)
    if remapped:
        counts = ", ".join(f"{s.gpu.label}: {s.count('uncorrectable')}" for s in remapped)
        return [
            finding(
                ctx,
                check,
                # NVIDIA's memory error guide and § G.1.a: remapped rows with nothing pending are in use, fine now
                Tag.INFO if coverage else Tag.PASS,
                f"rows already remapped after uncorrectable errors on {counts}; nothing pending and no failure, "
                f"healthy now (a high count across many nodes is a cohort signal){coverage}",
                section="G.1.a",
                evidence=_remap_evidence(gs, remapped, "uncorrectable", "pending", "failure"),
            )
        ]
    return [_remap_passed(ctx, gs, len(judged), _remap_evidence(gs, judged, "pending", "failure"))]


# --------------------------------------------------------------------------- probe.gpu_thermal

#: reason key → (CSV column suffix, -q key, bit in clocks_event_reasons.active, display name)
_REASONS = (
    ("hw_thermal_slowdown", "hw thermal slowdown", 0x40, "HW thermal slowdown"),
    ("sw_thermal_slowdown", "sw thermal slowdown", 0x20, "SW thermal slowdown"),
    ("hw_power_brake_slowdown", "hw power brake slowdown", 0x80, "HW power brake slowdown"),
    ("hw_slowdown", "hw slowdown", 0x08, "HW slowdown"),
)
_THERMAL_COLUMNS = ("temperature.gpu", *(f"clocks_event_reasons.{r[0]}" for r in _REASONS))


@dataclass(slots=True)
class ThermalState:
    gpu: Gpu
    temperature: Fact | None = None
    reasons: dict[str, Fact] = field(default_factory=dict)  # display name → fact (value True/False)

    @property
    def active(self) -> list[str]:
        names = [name for name, fact in self.reasons.items() if fact.value]
        # "HW slowdown" is the parent of the thermal and power-brake causes: name the cause when known
        if len(names) > 1 and "HW slowdown" in names:
            names.remove("HW slowdown")
        return names

    @property
    def judged(self) -> bool:
        return self.temperature is not None or bool(self.reasons)


def _mask(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value.strip(), 16) if value.strip().lower().startswith("0x") else None
    except ValueError:
        return None


def _thermal_state(gpu: Gpu) -> ThermalState:
    state = ThermalState(gpu=gpu, temperature=gpu.csv_number("temperature.gpu"))
    mask = _mask(gpu.row.raw("clocks_event_reasons.active")) if gpu.row else None
    for column, q_key, bit, name in _REASONS:
        fact = gpu.csv_flag(f"clocks_event_reasons.{column}")
        if fact is None and mask is not None and gpu.row is not None:
            fact = Fact(bool(mask & bit), (gpu.row.line,), "csv")
        if fact is None and gpu.q is not None:
            entry = nvsmi.q_value(gpu.q, "clocks event reasons", q_key) or nvsmi.q_value(
                gpu.q, "clocks throttle reasons", q_key
            )
            value = nvsmi.flag(entry.value) if entry else None
            if entry is not None and value is not None:
                fact = gpu.q_fact(value, entry.line)
        if fact is not None:
            state.reasons[name] = fact
    if state.temperature is None and gpu.q is not None:
        entry = nvsmi.q_value(gpu.q, "temperature", "gpu current temp")
        celsius = nvsmi.number(entry.value) if entry else None
        if entry is not None and celsius is not None:
            state.temperature = gpu.q_fact(celsius, entry.line)
    return state


def _thermal_needs_more(gs: GpuSet) -> Callable[[Gpu], bool]:
    complete = gs.csv_has(_THERMAL_COLUMNS[0]) and _reasons_in_csv(gs)
    return lambda gpu: gpu.row is None or not complete


def _celsius(fact: Fact | None) -> float | None:
    return float(fact.value) if fact is not None else None  # type: ignore[arg-type]


def _thermal_commands() -> list[SuggestedCommand]:
    return [
        _cmd(["nvidia-smi", "-q", "-d", "TEMPERATURE,PERFORMANCE"], "Show temperatures and active clock-event reasons"),
        _cmd(["nvidia-smi", "-q", "-d", "POWER"], "Show power draw and limits"),
    ]


_REASON_COLUMNS = tuple(f"clocks_event_reasons.{reason[0]}" for reason in _REASONS)


def _thermal_all_clear(gpus: list[Gpu]) -> list[Fact] | None:
    """The usual node from the CSV alone (every GPU has its row and no ``-q`` block, a temperature below
    the hot mark, every slowdown reason read and inactive, no GPU far above the others): the temperature
    facts the PASS cites, or None whenever :func:`check_gpu_thermal`'s full path could conclude anything
    else (a test holds them equal)."""
    rows = _rows_alone(gpus)
    if rows is None:
        return None
    facts: list[Fact] = []
    for row in rows:
        get = row.values.get
        celsius = _number(get("temperature.gpu"))
        if celsius is None or celsius >= HOT_CELSIUS:
            return None
        for column in _REASON_COLUMNS:
            if _flag(get(column)) is not False:
                return None  # active, or not in the CSV: the full path reads the mask or -q
        facts.append(Fact(celsius, (row.line,), "csv"))
    temps = [fact.value for fact in facts]
    if len(temps) >= 3 and max(temps) - min(temps) >= OUTLIER_CELSIUS:  # type: ignore[type-var,operator]
        return None  # an outlier: the full path names it
    return facts


def _thermal_passed(ctx: ProbeContext, gs: GpuSet, judged: int, known: list[float], evidence: list[str]) -> Finding:
    coverage = _coverage_note(judged, gs.expected_count, gs)
    range_text = ""
    if known:
        low, high = min(known), max(known)
        range_text = f" at {low:.0f} °C" if low == high else f" at {low:.0f}–{high:.0f} °C"
    return finding(
        ctx,
        "probe.gpu_thermal",
        Tag.INFO if coverage else Tag.PASS,
        f"{judged} GPU(s){range_text}, no thermal, hardware or power-brake slowdown{coverage}",
        evidence=evidence,
    )


def check_gpu_thermal(doc: ProbeDocument, ctx: ProbeContext) -> list[Finding]:
    check = "probe.gpu_thermal"
    gs, gpus = _gpus_to_judge(doc, _thermal_needs_more)
    clear = _thermal_all_clear(gpus)
    if clear is not None:
        known = [float(fact.value) for fact in clear]  # type: ignore[arg-type]
        return [_thermal_passed(ctx, gs, len(gpus), known, _evidence(gs, clear))]
    states = [_thermal_state(g) for g in gpus]
    judged = [s for s in states if s.judged]
    if not judged:
        cut = " (output truncated)" if gs.truncated_items else ""
        raise NotApplicable(f"no GPU reports its temperature or clock-event reasons{cut}: cannot judge")
    temps = {id(s): _celsius(s.temperature) for s in judged}
    known = [t for t in temps.values() if t is not None]
    findings: list[Finding] = []

    hot = [s for s in judged if (temps[id(s)] or 0) >= HOT_CELSIUS]
    if hot:
        cool = [t for s in judged if s not in hot and (t := temps[id(s)]) is not None]
        listed = ", ".join(f"{s.gpu.label} at {temps[id(s)]:.0f} °C" for s in hot)
        if cool:
            where = (
                f"while the other {len(cool)} are at {min(cool):.0f}–{max(cool):.0f} °C: cooling local to "
                f"{'that GPU' if len(hot) == 1 else 'those GPUs'} (heatsink, airflow, fan)"
            )
        else:
            where = "— every GPU is hot: node-level cooling, airflow or ambient temperature"
        findings.append(
            _problem(
                ctx,
                check,
                Tag.WARN,
                Priority.P1,
                "G.1",
                f"{listed} (≥ {HOT_CELSIUS:.0f} °C) {where}",
                _evidence(gs, [s.temperature for s in hot if s.temperature]),
                "investigate",
                "GPUs this hot slow their clocks to protect themselves; a single hot GPU among cool ones "
                "points at its own cooling, all hot at the chassis or the room.",
                _thermal_commands(),
            )
        )

    slowed: dict[str, list[ThermalState]] = {}
    for state in judged:
        for name in state.active:
            slowed.setdefault(name, []).append(state)
    if slowed:
        parts = []
        for name, affected in slowed.items():
            who = f"all {len(affected)} GPUs" if len(affected) == len(judged) > 1 else _names([s.gpu for s in affected])
            if name == "HW power brake slowdown" and len(affected) == len(judged) > 1:
                who += " (at once: the external power-brake signal from the baseboard or power supply, not one GPU)"
            parts.append(f"{name} on {who}")
        affected_states = list({id(s): s for group in slowed.values() for s in group}.values())
        # A power brake asserted on every GPU at once, with nothing hot, is the baseboard's power policy
        # (seen on healthy idle HGX nodes): worth knowing if jobs run slow, not a P1 fault of this node.
        brake_everywhere = len(slowed.get("HW power brake slowdown", [])) == len(judged) > 1
        only_brake = set(slowed) <= {"HW power brake slowdown", "HW slowdown"}
        policy = brake_everywhere and only_brake and not hot
        findings.append(
            _problem(
                ctx,
                check,
                Tag.WARN,
                Priority.P2 if policy else Priority.P1,
                "G.1",
                "clocks held down: " + "; ".join(parts),
                _evidence(
                    gs,
                    [s.reasons[n] for s in affected_states for n in s.active]
                    + [s.temperature for s in affected_states if s.temperature],
                ),
                "investigate",
                "Hardware or thermal slowdown caps the GPU clocks, so collective jobs run at the pace of the "
                "slowest GPU. Thermal causes point at cooling; power brake is asserted by the system's power "
                "delivery.",
                _thermal_commands(),
            )
        )
    if findings:
        return findings

    result = [
        _thermal_passed(
            ctx,
            gs,
            len(judged),
            known,
            _evidence(gs, [s.temperature or next(iter(s.reasons.values())) for s in judged]),
        )
    ]
    outliers = _outliers(judged, temps)
    if outliers:
        result.append(
            finding(
                ctx,
                check,
                Tag.INFO,
                "; ".join(
                    f"{s.gpu.label} runs {temps[id(s)]:.0f} °C, {delta:.0f} °C above the median of the others "
                    "(a busy GPU runs hotter than idle ones; otherwise watch its cooling)"
                    for s, delta in outliers
                ),
                evidence=_evidence(gs, [s.temperature for s, _ in outliers if s.temperature]),
            )
        )
    return result


def _reasons_in_csv(gs: GpuSet) -> bool:
    return gs.csv_has(*_THERMAL_COLUMNS[1:]) or gs.csv_has("clocks_event_reasons.active")


def _outliers(judged: list[ThermalState], temps: dict[int, float | None]) -> list[tuple[ThermalState, float]]:
    known = {id(s): t for s in judged if (t := temps[id(s)]) is not None}
    measured = [s for s in judged if id(s) in known]
    if len(measured) < 3 or max(known.values()) - min(known.values()) < OUTLIER_CELSIUS:
        return []  # (a GPU's lead over the median of the others is at most the spread)
    found = []
    for state in measured:
        others = [known[id(o)] for o in measured if o is not state]
        delta = known[id(state)] - statistics.median(others)
        if delta >= OUTLIER_CELSIUS:
            found.append((state, delta))
    return found


# --------------------------------------------------------------------------- probe.gpu_nvlink


def _nvlink_expected(spec: InstanceSpec | None) -> bool | None:
    if spec is None or spec.gpus is None:
        return None
    if spec.gpus == 0:
        return False
    return spec.gpu_model in NVLINK_MODELS


def _nvlink_commands() -> list[SuggestedCommand]:
    return [
        _cmd(["nvidia-smi", "nvlink", "--status"], "Show every NVLink link and its speed"),
        _cmd(["nvidia-smi", "nvlink", "-e"], "Show the NVLink error counters"),
        _cmd(["systemctl", "is-active", "nvidia-fabricmanager"], "Check the NVSwitch fabric manager is running"),
    ]


_NVLINK_MIG = re.compile(r"Nvlink queries are not supported for Devices in MIG mode|not supported[^\n]*MIG mode", re.I)


def check_gpu_nvlink(doc: ProbeDocument, ctx: ProbeContext) -> list[Finding]:
    check = "probe.gpu_nvlink"
    spec = spec_for(ctx.instance_type)
    expected = _nvlink_expected(spec)
    if expected is False:
        model = spec.gpu_model if spec and spec.gpu_model else "no NVIDIA GPU"
        raise NotApplicable(f"{ctx.instance_type} ({model}) has no NVLink between its GPUs")
    found = _usable(doc, NVLINK_ITEM, "NVLink status (nvidia-smi nvlink --status)")
    report = doc.parsed("nvsmi.nvlink", lambda: nvsmi.parse_nvlink(found.stdout))
    cut = ["(nvidia_smi_nvlink_status: output truncated)"] if found.truncated or report.truncated else []
    with_links = [g for g in report.gpus if g.links or g.all_inactive_line]
    if not with_links and (mig := _NVLINK_MIG.search(found.stdout)):
        # the driver does not report links for GPUs in MIG mode: nothing was read, so nothing is judged
        return [
            _problem(
                ctx,
                check,
                Tag.UNKNOWN,
                Priority.P2,
                "G.1",
                "NVLink state not readable: nvidia-smi does not report NVLink for GPUs in MIG mode",
                [mig.group(0), *cut],
                "investigate",
                "With MIG enabled the driver answers NVLink queries with 'not supported'; read the links with "
                "MIG disabled, or from DCGM.",
                _nvlink_commands(),
            )
        ]
    if not with_links:
        all_down = report.all_inactive_line
        if expected and all_down:
            return [
                _problem(
                    ctx,
                    check,
                    Tag.FAIL,
                    Priority.P1,
                    "G.1",
                    f"every NVLink link is inactive on this {ctx.instance_type}: GPU-to-GPU traffic falls back "
                    "to PCIe or fails; reboot, replace if the links stay down",
                    [all_down, *cut],
                    "reboot",
                    "On NVSwitch systems the links come up when the fabric manager trains them; all links down "
                    "means the fabric manager, the driver or the NVSwitch baseboard failed.",
                    _nvlink_commands(),
                )
            ]
        if expected:
            return [
                _problem(
                    ctx,
                    check,
                    Tag.WARN,
                    Priority.P1,
                    "G.1",
                    f"nvidia-smi nvlink --status printed no links on {ctx.instance_type}, whose GPUs use NVLink: "
                    "the driver or the fabric manager cannot report them",
                    [*(report.messages[:5] or ["(empty output)"]), *cut],
                    "investigate",
                    "An NVLink system always lists its links; an empty answer means the NVLink state is not "
                    "available, which usually follows a driver or fabric-manager problem.",
                    _nvlink_commands(),
                )
            ]
        raise NotApplicable("no NVLink links reported (GPUs attached over PCIe only)")

    any_active = any(g.active for g in with_links)
    faulty = [g for g in with_links if g.inactive or g.all_inactive_line]
    faulty = [g for g in faulty if g.active or any_active or expected]
    if faulty:
        details = []
        evidence: list[str] = []
        for gpu in faulty:
            numbers = ", ".join(str(link.number) for link in gpu.inactive) or "all"
            details.append(f"GPU {gpu.index}: link(s) {numbers} of {len(gpu.links) or '?'} inactive")
            evidence.append(gpu.line)
            evidence.extend(link.line for link in gpu.inactive)
            if gpu.all_inactive_line:
                evidence.append(gpu.all_inactive_line)
        return [
            _problem(
                ctx,
                check,
                Tag.FAIL,
                Priority.P1,
                "G.1",
                "inactive NVLink links — " + "; ".join(details) + ": collectives slow down or hang; reboot, "
                "replace if the links stay down",
                trim_evidence([*evidence, *cut]),
                "reboot",
                "A link that does not train leaves its GPU with less bandwidth to its peers (or none through "
                "NVLink). A reset often retrains it; a link down again after a reboot is a hardware fault "
                "(Xid 74 often accompanies it).",
                _nvlink_commands(),
            )
        ]
    if not any_active:
        return [
            finding(
                ctx,
                check,
                Tag.INFO,
                f"no active NVLink links on {len(with_links)} GPU(s); no expectation for {ctx.instance_type}",
                evidence=trim_evidence([*(g.line for g in with_links), *cut]),
            )
        ]
    links = sum(len(g.links) for g in with_links)
    speeds = sorted({link.speed_gbps for g in with_links for link in g.links if link.speed_gbps})
    speed = f" at {speeds[0]:g} GB/s" if len(speeds) == 1 else ""
    return [
        finding(
            ctx,
            check,
            Tag.PASS,
            f"all {links} NVLink links active on {len(with_links)} GPU(s){speed}",
            evidence=trim_evidence([*(g.line for g in with_links), *cut]),
        )
    ]


# --------------------------------------------------------------------------- probe.dcgm_health


def _dcgm_commands() -> list[SuggestedCommand]:
    return [
        _cmd(["dcgmi", "health", "-g", "0", "--check"], "Re-read DCGM's health verdicts"),
        _cmd(["ls", "-lt", "/var/log/nvidia-dcgm/"], "List DCGM's logs (deep health check results)"),
        _cmd(["nvidia-smi", "-q", "-d", "ECC,TEMPERATURE,PERFORMANCE"], "Cross-check ECC, temperature and clocks"),
    ]


def check_dcgm_health(doc: ProbeDocument, ctx: ProbeContext) -> list[Finding]:
    check = "probe.dcgm_health"
    found = _usable(doc, DCGM_ITEM, "DCGM health watches (dcgmi health --check)")
    report = doc.parsed("dcgmi.health", lambda: nvsmi.parse_dcgm_health(f"{found.stdout}\n{found.stderr}"))
    cut = ["(dcgmi_health: output truncated)"] if found.truncated or report.truncated else []
    if report.overall is None or report.overall == "Internal error":
        why = report.error_line or (report.overall_line or "no 'Overall Health' verdict in the output")
        raise NotApplicable(f"DCGM gave no health verdict, so nothing to judge: {why}")
    if report.overall == "Healthy":
        return [
            finding(
                ctx,
                check,
                Tag.PASS,
                "DCGM health watches report Healthy (passive watches; only Warning/Failure are conclusive)",
                evidence=[report.overall_line or "Overall Health: Healthy", *cut],
            )
        ]
    incidents = list(report.incidents)
    summary = "; ".join(
        f"{i.entity} {i.health.lower()}"
        + (f" ({i.system})" if i.system else "")
        + (f": {i.message}" if i.message else "")
        for i in incidents
    )
    evidence = trim_evidence(
        [report.overall_line or "", *(line for i in incidents for line in i.lines), *cut],
    )
    failure = report.overall == "Failure"
    return [
        _problem(
            ctx,
            check,
            Tag.FAIL if failure else Tag.WARN,
            Priority.P0 if failure else Priority.P1,
            "G.1.b",
            f"DCGM health {report.overall}" + (f" — {summary}" if summary else ""),
            [line for line in evidence if line],
            "investigate",
            "DCGM's background watches flagged a GPU subsystem (memory, PCIe, NVLink, thermal, power, "
            "InfoROM, driver). The message says which; cross-check it with the ECC, row-remap, thermal and "
            "NVLink checks before acting on the node.",
            _dcgm_commands(),
        )
    ]


CHECKS: tuple[Check, ...] = (
    Check("probe.gpu_count", "G.1", "GPU count vs instance type", check_gpu_count),
    Check("probe.gpu_ecc", "G.1", "GPU ECC errors and retired pages", check_gpu_ecc),
    Check("probe.gpu_row_remap", "G.1.a", "GPU memory row remapping", check_gpu_row_remap),
    Check("probe.gpu_thermal", "G.1", "GPU temperature and clock slowdown", check_gpu_thermal),
    Check("probe.gpu_nvlink", "G.1", "NVLink link state", check_gpu_nvlink),
    Check("probe.dcgm_health", "G.1.b", "DCGM health watches", check_dcgm_health),
)
