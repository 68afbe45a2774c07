"""The node's NVIDIA GPUs as the probe's nvidia-smi items show them, and what the GPU evaluators share.

Sources, in the order they are trusted for one fact:

1. ``nvidia_smi_query_gpu`` (CSV, one row per GPU): count, temperature, clock-event reasons, ECC
   totals, retired pages.
2. ``nvidia_smi_remapped_rows`` (CSV): row remapping (Ampere and later).
3. ``nvidia_smi_q`` (text): the same facts for drivers whose CSV lacks a field, parsed only when
   a fact is missing from the CSV.

GPUs are matched across sources by PCI bus id. A value the tool cannot give (``[N/A]``…) means
"cannot judge", never zero.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from hyperpod_debugger.domain.commands import read_only
from hyperpod_debugger.domain.model import Finding, NodeAction, Priority, SuggestedCommand, Tag, trim_evidence
from hyperpod_debugger.domain.observations import NotApplicable, Unobservable
from hyperpod_debugger.probe.base import ProbeContext, finding, item
from hyperpod_debugger.probe.document import MISSING_TOOL_CODES, ProbeDocument, ProbeItem
from hyperpod_debugger.probe.parse import nvsmi

CSV_ITEM = "nvidia_smi_query_gpu"
Q_ITEM = "nvidia_smi_q"
REMAP_ITEM = "nvidia_smi_remapped_rows"

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

_ON_NODE = "on the node (SSM session, § K)"
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


def usable(doc: ProbeDocument, item_id: str, what: str) -> ProbeItem:
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
        return Source(item=usable(doc, item_id, what))
    except (NotApplicable, Unobservable) as exc:
        found = doc.item(item_id)
        # kept without its traceback: its frames would hold the whole evaluation in a reference cycle
        return Source(problem=exc.with_traceback(None), tool_missing=found is not None and _tool_missing(found))


#: where a value was read, as a finding cites it: the verbatim lines (a CSV row, or ``nvidia-smi -q``'s GPU line
#: and the value's line) and their source, "csv" (query-gpu), "remap" (query-remapped-rows) or "q" (-q), which
#: says which CSV header to cite with them. A check decides over plain values and keeps their origins.
Origin = tuple[tuple[str, ...], str]
#: the origin of the values read from a GPU's CSV row when it has none (all its values come from elsewhere)
NO_ROW: Origin = ((), "csv")


def row_origin(row: nvsmi.CsvRow, source: str = "csv") -> Origin:
    """A value read from a CSV row: the row's line, from the query CSV ("csv") or the remap CSV ("remap")."""
    return (row.line,), source


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

    def q_origin(self, *lines: str) -> Origin:
        """A value read from this GPU's ``nvidia-smi -q`` block: its ``GPU <bus id>`` line, then ``lines``."""
        return (self.q.header_line if self.q else self.label, *lines), "q"


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

    @property
    def q_read(self) -> bool:
        """Whether ``nvidia-smi -q`` has been parsed (some check needed it)."""
        return self._q_read

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
        if not self.gpus or any(map(needs_q, self.gpus)):
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
            _, down = lost_and_down(self)
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


def gpu_set(doc: ProbeDocument) -> GpuSet:
    """The document's GPU set, built once and shared by every GPU check."""
    return doc.parsed("probe.gpu.set", lambda: GpuSet(doc))


def gpus_to_judge(
    doc: ProbeDocument, needs_more: Callable[[GpuSet], Callable[[Gpu], bool]], *, with_remap: bool = False
) -> tuple[GpuSet, list[Gpu]]:
    """What every per-GPU check does first: read the GPU set; refuse (UNKNOWN) when none of its sources
    is usable; fill in from ``nvidia-smi -q`` the GPUs ``needs_more(gs)`` says the CSV left short; refuse
    when no GPU is listed at all. Returns the set and the GPUs to judge."""
    gs = gpu_set(doc)
    sources = [gs.csv_src.item, gs.q_src.item, *([gs.remap_src.item] if with_remap else [])]
    if all(source is None for source in sources):
        raise gs.unusable()
    gpus = gs.ensure(needs_more(gs))
    gs.require_gpus()
    return gs, gpus


def lost_and_down(gs: GpuSet) -> tuple[list[str], str | None]:
    """Lost-GPU and driver-failure lines; ``-q`` is read for them only when the CSV has no rows."""
    lost: list[str] = []
    down: str | None = None
    use_q = gs.q_src.item is not None and (gs.q_read or gs.csv is None or not gs.csv.rows)
    for parsed in (gs.csv, gs.q if use_q else None):
        if parsed is None:
            continue
        lost.extend(parsed.lost_gpu_lines)
        down = down or parsed.driver_down_line
    return list(dict.fromkeys(lost)), down


# --------------------------------------------------------------------------- findings


def gpu_evidence(gs: GpuSet, cited: list[Origin], extra: list[str] | None = None) -> list[str]:
    """The lines a finding cites: the header of each CSV a cited value comes from, the values' lines, ``extra``,
    and which items were cut."""
    lines: list[str] = []
    sources = {source for _, source in cited}
    for table, source in ((gs.csv, "csv"), (gs.remap, "remap")):
        if table is not None and table.header and source in sources:
            lines.append(table.header)
    for value_lines, _ in cited:
        lines.extend(value_lines)
    lines.extend(extra or [])
    lines.extend(gs.truncated_items)
    return trim_evidence(list(dict.fromkeys(lines)))


def gpu_names(gpus: list[Gpu]) -> str:
    return ", ".join(g.label for g in gpus)


def on_node(argv: list[str], purpose: str) -> SuggestedCommand:
    """A read-only command to run on the node."""
    return read_only(argv, f"{purpose} {_ON_NODE}")


def gpu_problem(
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


def coverage_note(gs: GpuSet, judged: int) -> str:
    """What a PASS over ``judged`` GPUs must add about the GPUs it did not see ("" when it saw them all)."""
    total = gs.expected_count
    if _excerpt_only(gs) and not (gs.q and gs.q.attached_gpus):
        return (
            "; read from an excerpt of one GPU without its `GPU <bus id>` line: which GPU it is, and the "
            "node's other GPUs, are not in it"
        )
    if judged >= total:
        return ""
    cut = " (output truncated)" if gs.truncated_items else ""
    return f"; {total - judged} of {total} GPU(s) not reported{cut}"
