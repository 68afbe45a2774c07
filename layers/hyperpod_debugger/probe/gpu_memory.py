"""GPU memory evaluators (§ G.1, G.1.a): ECC errors and page retirement (``probe.gpu_ecc``), row remapping
(``probe.gpu_row_remap``).

Each check reads one state per GPU (its CSV row, filled in from ``nvidia-smi -q`` where the row is silent)
and decides its verdict once, over those states: each state names the problems its GPU shows, a table gives
each problem's finding for the GPUs that show it, and a node without any passes (INFO when part of it is not
reported). The states hold plain values and where each was read; only the values a finding cites become
evidence lines.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from hyperpod_debugger.domain.model import Finding, Priority, SuggestedCommand, Tag
from hyperpod_debugger.domain.observations import NotApplicable
from hyperpod_debugger.probe.base import ProbeContext, finding
from hyperpod_debugger.probe.gpu_set import (
    NO_ROW,
    Gpu,
    GpuSet,
    Origin,
    coverage_note,
    gpu_evidence,
    gpu_names,
    gpu_problem,
    gpus_to_judge,
    on_node,
    row_origin,
)
from hyperpod_debugger.probe.parse import nvsmi

if TYPE_CHECKING:
    from hyperpod_debugger.probe.document import ProbeDocument

RETIRED_PAGES_LIMIT = 60  # the driver retires at most 64 pages; at 60 the GPU is near its end


def _read_row(
    row: nvsmi.CsvRow, counts: tuple[str, ...], flags: tuple[str, ...]
) -> tuple[list[float | None], list[bool | None], bool]:
    """The row's values of its ``counts`` columns and of its Yes/No ``flags`` columns, None where the row gives
    none; and whether one of those was printed but cannot be read with certainty (``Yes this one``, ``zero?``)."""
    get = row.values.get
    numbers: list[float | None] = []
    answers: list[bool | None] = []
    unsure = False
    for column in counts:
        printed = get(column)
        number = nvsmi.number(printed)
        if number is None and not unsure:
            unsure = nvsmi.unreadable(printed, "number")
        numbers.append(number)
    for column in flags:
        printed = get(column)
        answer = nvsmi.flag(printed)
        if answer is None and not unsure:
            unsure = nvsmi.unreadable(printed, "flag")
        answers.append(answer)
    return numbers, answers, unsure


_S = TypeVar("_S")


def _by_problem(states: Sequence[_S], problems: Callable[[_S], Sequence[str]]) -> dict[str, list[_S]]:
    """The states each problem holds for, as ``problems`` names them for each state."""
    found: dict[str, list[_S]] = {}
    for state in states:
        for problem in problems(state):
            found.setdefault(problem, []).append(state)
    return found


def _unreadable_finding(
    ctx: ProbeContext, gs: GpuSet, check: str, section: str, what: str, states: Sequence[EccState | RemapState]
) -> Finding:
    lines = [line for s in states for line in s.unreadable]
    return finding(
        ctx,
        check,
        Tag.UNKNOWN,
        f"{what} on {gpu_names([s.gpu for s in states])} printed but not readable with certainty (a note or "
        "text where nvidia-smi prints Yes/No or a count): cannot judge it; run the command again and paste "
        "its output unedited",
        priority=Priority.P2,
        section=section,
        evidence=gpu_evidence(gs, [], lines),
    )


# --------------------------------------------------------------------------- probe.gpu_ecc

#: the query CSV's ECC counts, in the order of EccState's count fields, and its Yes/No column
_ECC_COUNTS = (
    "ecc.errors.uncorrected.volatile.total",
    "ecc.errors.uncorrected.aggregate.total",
    "ecc.errors.corrected.volatile.total",
    "ecc.errors.corrected.aggregate.total",
    "retired_pages.single_bit_ecc.count",
    "retired_pages.double_bit.count",
)
_ECC_FLAGS = ("retired_pages.pending",)
_ECC_COLUMNS = (*_ECC_COUNTS, *_ECC_FLAGS)


def _count(value: float | None) -> int:
    return int(value) if value is not None else 0


@dataclass(slots=True)
class EccState:
    """One GPU's ECC and page-retirement readings (None: not reported), and where they were read."""

    gpu: Gpu
    unc_volatile: float | None = None
    unc_aggregate: float | None = None
    cor_volatile: float | None = None
    cor_aggregate: float | None = None
    retired_single: float | None = None
    retired_double: float | None = None
    retire_pending: bool | None = None
    #: lines of fields printed but not readable with certainty (``Pending Page Blacklist : Yes this one``)
    unreadable: tuple[str, ...] = ()
    #: where the values read from the GPU's CSV row come from; ``where``: the origin of each read from ``-q``
    origin: Origin = NO_ROW
    where: dict[str, Origin] = field(default_factory=dict)

    def origin_of(self, name: str) -> Origin | None:
        """Where the reading ``name`` was read; None when it was not reported."""
        return None if getattr(self, name) is None else self.where.get(name, self.origin)

    @property
    def judged(self) -> bool:
        return bool(
            self.unreadable
            or self.unc_volatile is not None
            or self.unc_aggregate is not None
            or self.retired_single is not None
            or self.retired_double is not None
            or self.retire_pending is not None
        )

    def problems(self) -> list[str]:
        """What this GPU's readings show wrong, by the names of ``_ECC_PROBLEMS``."""
        found = []
        if _count(self.unc_volatile) > 0:
            found.append("uncorrected now")
        if self.retire_pending is True:
            found.append("retirement pending")
        if _count(self.retired_single) + _count(self.retired_double) >= RETIRED_PAGES_LIMIT:
            found.append("near page limit")
        if self.unreadable:
            found.append("unsure")
        return found

    def corrected(self) -> int:
        """Correctable errors: the volatile count, or the lifetime count where no volatile one is printed."""
        return _count(self.cor_volatile) if self.cor_volatile is not None else _count(self.cor_aggregate)

    def uncorrected_before(self) -> bool:
        """Uncorrectable errors in the lifetime (aggregate) counter only, none since the driver loaded."""
        return _count(self.unc_aggregate) > 0 and _count(self.unc_volatile) == 0


def _ecc_state(gpu: Gpu) -> EccState:
    """The GPU's ECC and page-retirement readings: its CSV row first, ``nvidia-smi -q`` where the row is silent."""
    row = gpu.row
    if row is None:
        state = EccState(gpu=gpu)
    else:
        counts, (pending,), unsure = _read_row(row, _ECC_COUNTS, _ECC_FLAGS)
        unc_volatile, unc_aggregate, cor_volatile, cor_aggregate, retired_single, retired_double = counts
        state = EccState(
            gpu,
            unc_volatile,
            unc_aggregate,
            cor_volatile,
            cor_aggregate,
            retired_single,
            retired_double,
            pending,
            (row.line,) if unsure else (),
            row_origin(row),
        )
    if gpu.q is not None:
        _fill_ecc_from_q(state, gpu, gpu.q)
    return state


def _fill_ecc_from_q(state: EccState, gpu: Gpu, q: nvsmi.QGpu) -> None:
    """The readings the CSV left out, from the GPU's ``-q`` block: ECC counters (summed over memory types)
    and retired pages."""
    state.unreadable += nvsmi.q_unreadable(q).get("retired pages", ())
    unc_v, cor_v = nvsmi.q_ecc(q, "volatile")
    unc_a, cor_a = nvsmi.q_ecc(q, "aggregate")
    for name, counted in (
        ("unc_volatile", unc_v),
        ("unc_aggregate", unc_a),
        ("cor_volatile", cor_v),
        ("cor_aggregate", cor_a),
    ):
        if getattr(state, name) is None and counted.value is not None:
            setattr(state, name, counted.value)
            state.where[name] = gpu.q_origin(*counted.lines)
    pages = nvsmi.q_retired_pages(q)
    for name, key in (("retired_single", "single"), ("retired_double", "double"), ("retire_pending", "pending")):
        if getattr(state, name) is None and key in pages:
            setattr(state, name, pages[key].value)
            state.where[name] = gpu.q_origin(pages[key].line)


def _cited(states: list[EccState], *names: str) -> list[Origin]:
    """What a finding cites: the origin of each state's ``names`` that were reported."""
    return [o for s in states for name in names if (o := s.origin_of(name))]


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
        f"nvidia-smi could not read the ECC state of {gpu_names(list(failed.values()))} (it printed an error "
        "where the mode or the counters belong): cannot judge the GPU memory; a driver that cannot read ECC "
        "often means the GPU itself is in trouble: read the kernel log for an Xid",
        priority=Priority.P1,
        section="G.1",
        evidence=gpu_evidence(gs, [], list(failed)),
    )


def _ecc_needs_more(gs: GpuSet) -> Callable[[Gpu], bool]:
    complete = gs.csv_has(*_ECC_COLUMNS)
    return lambda gpu: gpu.row is None or not complete


def _ecc_commands() -> list[SuggestedCommand]:
    return [
        on_node(["nvidia-smi", "-q", "-d", "ECC"], "Show the ECC counters per GPU"),
        on_node(["nvidia-smi", "-q", "-d", "ROW_REMAPPER"], "Show row remapping (A100 and later)"),
        on_node(["nvidia-smi", "-q", "-d", "PAGE_RETIREMENT"], "Show retired pages (V100 and earlier)"),
    ]


def _uncorrected_now_finding(ctx: ProbeContext, gs: GpuSet, volatile: list[EccState]) -> Finding:
    counts = ", ".join(f"{s.gpu.label}: {_count(s.unc_volatile)}" for s in volatile)
    return gpu_problem(
        ctx,
        "probe.gpu_ecc",
        Tag.FAIL,
        Priority.P0,
        "G.1",
        f"uncorrectable ECC errors since the driver loaded on {counts}: reboot so the GPU is reset "
        "and the bad memory is remapped or retired; replace if they return after the reboot",
        gpu_evidence(gs, _cited(volatile, "unc_volatile")),
        "reboot",
        "An uncorrectable (double-bit) ECC error corrupts data in GPU memory; the job on that GPU is "
        "lost. A GPU reset lets the row remapper (A100 and later) or page retirement take the bad "
        "memory out of service (see G.1.a).",
        _ecc_commands(),
    )


def _retirement_pending_finding(ctx: ProbeContext, gs: GpuSet, pending: list[EccState]) -> Finding:
    return gpu_problem(
        ctx,
        "probe.gpu_ecc",
        Tag.WARN,
        Priority.P1,
        "G.1",
        f"page retirement pending on {gpu_names([s.gpu for s in pending])}: the pages are retired "
        "only when the GPU is reset (reboot)",
        gpu_evidence(gs, _cited(pending, "retire_pending")),
        "reboot",
        "The driver marked memory pages for retirement after ECC errors; until a reset the bad "
        "pages may still be handed to workloads.",
        _ecc_commands(),
    )


def _near_page_limit_finding(ctx: ProbeContext, gs: GpuSet, worn: list[EccState]) -> Finding:
    counts = ", ".join(
        f"{s.gpu.label}: {_count(s.retired_single)} single-bit + {_count(s.retired_double)} double-bit" for s in worn
    )
    return gpu_problem(
        ctx,
        "probe.gpu_ecc",
        Tag.FAIL,
        Priority.P1,
        "G.1",
        f"retired pages near the driver's 64-page limit on {counts}: replace the node",
        gpu_evidence(gs, _cited(worn, "retired_single", "retired_double")),
        "replace",
        "Each retired page takes faulty memory out of service; the driver can retire at most 64. "
        "A GPU this close to the limit will soon have no spare left and keeps raising ECC errors.",
        _ecc_commands(),
    )


def _ecc_unsure_finding(ctx: ProbeContext, gs: GpuSet, unsure: list[EccState]) -> Finding:
    return _unreadable_finding(ctx, gs, "probe.gpu_ecc", "G.1", "an ECC or page-retirement field", unsure)


#: what a GPU's ECC readings can show wrong (:meth:`EccState.problems`), in the order the findings are listed,
#: each with the finding for the GPUs it holds for (a GPU may be named in several)
_ECC_PROBLEMS: tuple[tuple[str, Callable[[ProbeContext, GpuSet, list[EccState]], Finding]], ...] = (
    ("uncorrected now", _uncorrected_now_finding),
    ("retirement pending", _retirement_pending_finding),
    ("near page limit", _near_page_limit_finding),
    ("unsure", _ecc_unsure_finding),
)


def _ecc_passed(ctx: ProbeContext, gs: GpuSet, judged: list[EccState]) -> Finding:
    """Nothing wrong: PASS, noting correctable errors and past uncorrectable ones.

    Uncorrectable errors in the lifetime (aggregate) counters only, none since the driver loaded: NVIDIA's
    memory error management takes the faulty rows or pages out of service at the reset that follows, and the
    lifetime counter never goes down, so it says nothing about the memory now (§ G.1.a: "fine now"); a remap
    or retirement that did not happen is the pending and failure checks' business."""
    corrected = [s for s in judged if s.corrected() > 0]
    historic = [s for s in judged if s.uncorrected_before()]
    note = ""
    if corrected:
        note = "; correctable errors (background unless the rate grows) on " + ", ".join(
            f"{s.gpu.label}: {s.corrected()}" for s in corrected
        )
    if historic:
        note += (
            "; uncorrectable errors in the lifetime counters only (none since the driver loaded: past faults, "
            "their memory taken out of service at a reset) on "
            + ", ".join(f"{s.gpu.label}: {_count(s.unc_aggregate)}" for s in historic)
        )
    cited = [o for s in judged if (o := s.origin_of("unc_volatile") or s.origin_of("unc_aggregate"))]
    cited += _cited(historic, "unc_aggregate")
    cited += [o for s in corrected if (o := s.origin_of("cor_volatile") or s.origin_of("cor_aggregate"))]
    coverage = coverage_note(gs, len(judged))
    return finding(
        ctx,
        "probe.gpu_ecc",
        Tag.INFO if coverage else Tag.PASS,
        f"no uncorrectable ECC errors, no pending page retirement on {len(judged)} GPU(s){coverage}{note}",
        evidence=gpu_evidence(gs, cited),
    )


def check_gpu_ecc(doc: ProbeDocument, ctx: ProbeContext) -> list[Finding]:
    """ECC errors and page retirement, decided here over one state per GPU: the GPUs whose ECC could not be
    read, then one finding per problem some GPU shows (:meth:`EccState.problems`); none, a pass."""
    gs, gpus = gpus_to_judge(doc, _ecc_needs_more)
    states = [_ecc_state(gpu) for gpu in gpus]
    judged = [s for s in states if s.judged]
    failed_reads = _ecc_read_failures([s.gpu for s in states if not s.judged])
    findings = [_ecc_unread(ctx, gs, failed_reads)] if failed_reads else []
    if not judged:
        if findings:
            return findings
        if gs.truncated_items:
            raise NotApplicable("the ECC counters are missing from the output (output truncated): cannot judge")
        raise NotApplicable("no GPU reports ECC counters ([N/A]): ECC is disabled or not supported")
    affected = _by_problem(judged, EccState.problems)
    findings += [report(ctx, gs, affected[name]) for name, report in _ECC_PROBLEMS if name in affected]
    return findings or [_ecc_passed(ctx, gs, judged)]


# --------------------------------------------------------------------------- probe.gpu_row_remap

#: the remap CSV's counts and Yes/No columns (also in the query CSV of some probes), and RemapState's names for
#: them, in the same order
_REMAP_COUNTS = ("remapped_rows.correctable", "remapped_rows.uncorrectable")
_REMAP_FLAGS = ("remapped_rows.pending", "remapped_rows.failure")
_REMAP_COLUMNS = (*_REMAP_COUNTS, *_REMAP_FLAGS)
_REMAP_NAMES = ("correctable", "uncorrectable", "pending", "failure")
#: 590-era drivers' repair keys under "ECC Errors" in ``-q``
_REPAIR_KEYS = ("channel repair pending", "tpc repair pending", "unrepairable memory")


@dataclass(slots=True)
class RemapState:
    """One GPU's row-remapping readings by name (``_REMAP_NAMES``), its repair flags, and where they were read."""

    gpu: Gpu
    values: dict[str, float | bool] = field(default_factory=dict)
    repair: dict[str, bool] = field(default_factory=dict)  # 590-era "… Repair Pending", "Unrepairable Memory"
    #: lines of remapping fields printed but not readable with certainty (``Pending : Yes this one``)
    unreadable: tuple[str, ...] = ()
    #: where the values read from the GPU's remap CSV row come from; ``where``: the origin of each read elsewhere
    origin: Origin = NO_ROW
    where: dict[str, Origin] = field(default_factory=dict)

    def origin_of(self, name: str) -> Origin | None:
        """Where the reading or repair flag ``name`` was read; None when it was not reported."""
        if name not in self.values and name not in self.repair:
            return None
        return self.where.get(name, self.origin)

    @property
    def judged(self) -> bool:
        return bool(self.values or self.repair or self.unreadable)

    def count(self, name: str) -> int:
        return _count(self.values.get(name))

    def problems(self) -> tuple[str, ...]:
        """The gravest thing this GPU's remapping shows, by the names of ``_REMAP_PROBLEMS``: "failed" (a bank
        out of spare rows), else "pending" (a remap waiting for a reset), else "unsure" (a field not readable
        for certain); () when nothing is."""
        values, repair = self.values, self.repair
        if values.get("failure") or repair.get("unrepairable memory"):
            return ("failed",)
        if values.get("pending") or (repair and any(v for k, v in repair.items() if k != "unrepairable memory")):
            return ("pending",)
        return ("unsure",) if self.unreadable else ()


def _remap_state(gpu: Gpu, in_query: bool) -> RemapState:
    """Remap readings from the remap CSV, then the query CSV (when it carries remapped_rows.*), then -q: the
    first source to give a value wins."""
    state = RemapState(gpu=gpu)
    if gpu.remap_row is not None:
        state.origin = row_origin(gpu.remap_row, "remap")
        _read_remap_row(state, gpu.remap_row, None)
    if in_query and gpu.row is not None:
        _read_remap_row(state, gpu.row, row_origin(gpu.row))
    if gpu.q is not None:
        _fill_remap_from_q(state, gpu, gpu.q)
    return state


def _read_remap_row(state: RemapState, row: nvsmi.CsvRow, origin: Origin | None) -> None:
    """The row's values the state does not have yet; ``origin`` is theirs unless it is the state's own."""
    counts, answers, unsure = _read_row(row, _REMAP_COUNTS, _REMAP_FLAGS)
    values = state.values
    for name, value in zip(_REMAP_NAMES, [*counts, *answers], strict=True):
        if value is not None and name not in values:
            values[name] = value
            if origin is not None:
                state.where[name] = origin
    if unsure:
        state.unreadable += (row.line,)


def _fill_remap_from_q(state: RemapState, gpu: Gpu, q: nvsmi.QGpu) -> None:
    state.unreadable += nvsmi.q_unreadable(q).get("remapped rows", ())
    for name, reading in nvsmi.q_remapped_rows(q).items():
        if name not in state.values:
            state.values[name] = reading.value
            state.where[name] = gpu.q_origin(reading.line)
    for leaf in _REPAIR_KEYS:
        entry = q.get("ecc errors", leaf)
        value = nvsmi.flag(entry.value) if entry else None
        if entry is not None and value is not None:
            state.repair[leaf] = value
            state.where[leaf] = gpu.q_origin(entry.line)


def _lacks_remap_counts(gpu: Gpu) -> bool:
    row = gpu.remap_row
    return not (row and any(map(row.raw, _REMAP_COLUMNS)))


def _remap_evidence(gs: GpuSet, states: list[RemapState], *names: str) -> list[str]:
    """The lines of each state's ``names`` that were reported, and of its repair flags that are set."""
    cited = [o for s in states for n in names if (o := s.origin_of(n))]
    cited += [s.where[leaf] for s in states for leaf, value in s.repair.items() if value]
    return gpu_evidence(gs, cited)


def _remap_commands() -> list[SuggestedCommand]:
    return [
        on_node(
            [
                "nvidia-smi",
                "--query-remapped-rows=gpu_bus_id,remapped_rows.correctable,remapped_rows.uncorrectable,"
                "remapped_rows.pending,remapped_rows.failure",
                "--format=csv",
            ],
            "Show row remapping per GPU (pending should read 0/No after a reboot)",
        ),
        on_node(["nvidia-smi", "-q", "-d", "ROW_REMAPPER"], "Show the remapping details and bank availability"),
    ]


def _remap_failed_finding(ctx: ProbeContext, gs: GpuSet, failed: list[RemapState]) -> Finding:
    return gpu_problem(
        ctx,
        "probe.gpu_row_remap",
        Tag.FAIL,
        Priority.P0,
        "G.1.a",
        f"row remapping failed on {gpu_names([s.gpu for s in failed])}: the GPU has no spare rows left "
        "for its bad memory; replace the node",
        _remap_evidence(gs, failed, "failure", "uncorrectable"),
        "replace",
        "A remapping failure means a memory bank ran out of spare rows; the uncorrectable errors "
        "will keep coming back and no reset can repair it.",
        _remap_commands(),
    )


def _remap_pending_finding(ctx: ProbeContext, gs: GpuSet, pending: list[RemapState]) -> Finding:
    return gpu_problem(
        ctx,
        "probe.gpu_row_remap",
        Tag.WARN,
        Priority.P1,
        "G.1.a",
        f"row remapping pending on {gpu_names([s.gpu for s in pending])}: reboot so the GPU reset applies "
        "it; if it is still pending after the reboot, replace the node",
        _remap_evidence(gs, pending, "pending", "uncorrectable"),
        "reboot",
        "After an uncorrectable error the remapper stages a spare row, which only takes effect at the "
        "next GPU reset. A remap that stays pending across reboots silently degrades the memory.",
        _remap_commands(),
    )


def _remap_unsure_finding(ctx: ProbeContext, gs: GpuSet, unsure: list[RemapState]) -> Finding:
    return _unreadable_finding(ctx, gs, "probe.gpu_row_remap", "G.1.a", "a row-remapping field", unsure)


#: each problem :meth:`RemapState.problems` names, in the order the findings are listed, and its finding
_REMAP_PROBLEMS: tuple[tuple[str, Callable[[ProbeContext, GpuSet, list[RemapState]], Finding]], ...] = (
    ("failed", _remap_failed_finding),
    ("pending", _remap_pending_finding),
    ("unsure", _remap_unsure_finding),
)


def _remap_healthy(ctx: ProbeContext, gs: GpuSet, judged: list[RemapState]) -> Finding:
    """Nothing pending or failed: PASS, naming the GPUs whose rows were already remapped (in use, fine now)."""
    remapped = [s for s in judged if s.count("uncorrectable") > 0]
    coverage = coverage_note(gs, len(judged))
    if remapped:
        counts = ", ".join(f"{s.gpu.label}: {s.count('uncorrectable')}" for s in remapped)
        return finding(
            ctx,
            "probe.gpu_row_remap",
            # NVIDIA's memory error guide and § G.1.a: remapped rows with nothing pending are in use, fine now
            Tag.INFO if coverage else Tag.PASS,
            f"rows already remapped after uncorrectable errors on {counts}; nothing pending and no failure, "
            f"healthy now (a high count across many nodes is a cohort signal){coverage}",
            section="G.1.a",
            evidence=_remap_evidence(gs, remapped, "uncorrectable", "pending", "failure"),
        )
    return finding(
        ctx,
        "probe.gpu_row_remap",
        Tag.INFO if coverage else Tag.PASS,
        f"no row remapping pending or failed on {len(judged)} GPU(s){coverage}",
        evidence=_remap_evidence(gs, judged, "pending", "failure"),
    )


def check_gpu_row_remap(doc: ProbeDocument, ctx: ProbeContext) -> list[Finding]:
    """Row remapping, decided here over one state per GPU: one finding per problem some GPU shows (its gravest,
    :meth:`RemapState.problems`); none, a pass."""
    gs, gpus = gpus_to_judge(doc, lambda _: _lacks_remap_counts, with_remap=True)
    in_query = gs.csv is not None and any(map(gs.csv.has, _REMAP_COLUMNS))
    judged = [state for gpu in gpus if (state := _remap_state(gpu, in_query)).judged]
    if not judged:
        if gs.truncated_items:
            raise NotApplicable("row remapping is missing from the output (output truncated): cannot judge")
        raise NotApplicable(
            "no GPU reports row remapping ([N/A]): GPUs before Ampere retire pages instead (see probe.gpu_ecc)"
        )
    affected = _by_problem(judged, RemapState.problems)
    findings = [report(ctx, gs, affected[name]) for name, report in _REMAP_PROBLEMS if name in affected]
    return findings or [_remap_healthy(ctx, gs, judged)]
