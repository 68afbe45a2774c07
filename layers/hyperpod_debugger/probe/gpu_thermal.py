"""GPU temperature and clock slowdown (§ G.1, ``probe.gpu_thermal``).

The check reads one state per GPU (temperature and the slowdown reasons, from the CSV row, its
``clocks_event_reasons.active`` mask, then ``nvidia-smi -q``) and decides its verdict once, over those
states: hot GPUs and held-down clocks are problems; otherwise a pass, with a note on a GPU far hotter than
the others.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

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

HOT_CELSIUS = 85.0  # sustained ≥ 85 °C is where data-centre GPUs start thermal slowdown
OUTLIER_CELSIUS = 20.0  # one GPU this much hotter than the median of the others is called out

#: slowdown reasons: CSV column suffix, -q key, bit in clocks_event_reasons.active, display name
_REASONS = (
    ("hw_thermal_slowdown", "hw thermal slowdown", 0x40, "HW thermal slowdown"),
    ("sw_thermal_slowdown", "sw thermal slowdown", 0x20, "SW thermal slowdown"),
    ("hw_power_brake_slowdown", "hw power brake slowdown", 0x80, "HW power brake slowdown"),
    ("hw_slowdown", "hw slowdown", 0x08, "HW slowdown"),
)
_REASON_COLUMNS = tuple(f"clocks_event_reasons.{reason[0]}" for reason in _REASONS)
_REASON_BITS = tuple(reason[2] for reason in _REASONS)
_REASON_NAMES = tuple(reason[3] for reason in _REASONS)
_BRAKE = "HW power brake slowdown"


@dataclass(slots=True)
class ThermalState:
    """One GPU's temperature (None: not reported) and slowdown reasons. ``origin`` is where the values read
    from the GPU's CSV row come from; ``where`` holds the others' (keyed "temperature" and by reason)."""

    gpu: Gpu
    celsius: float | None = None
    #: each reason of ``_REASONS``, in its order: active (True), not (False), not reported (None)
    reasons: list[bool | None] = field(default_factory=lambda: [None] * len(_REASONS))
    origin: Origin = NO_ROW
    where: dict[str, Origin] = field(default_factory=dict)

    def origin_of(self, name: str) -> Origin | None:
        """Where the temperature ("temperature") or a reason (by display name) was read; None when it was not
        reported."""
        value = self.celsius if name == "temperature" else self.reasons[_REASON_NAMES.index(name)]
        return None if value is None else self.where.get(name, self.origin)

    @property
    def active(self) -> list[str]:
        """The active reasons' display names."""
        if True not in self.reasons:
            return []  # the usual GPU: no list to build
        names = [name for name, active in zip(_REASON_NAMES, self.reasons, strict=True) if active]
        # "HW slowdown" is the parent of the thermal and power-brake causes: name the cause when known
        if len(names) > 1 and "HW slowdown" in names:
            names.remove("HW slowdown")
        return names

    @property
    def first_reason(self) -> str:
        """The display name of the first reason reported."""
        return next(name for name, value in zip(_REASON_NAMES, self.reasons, strict=True) if value is not None)

    @property
    def judged(self) -> bool:
        return self.celsius is not None or any(value is not None for value in self.reasons)


def _mask(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value.strip(), 16) if value.strip().lower().startswith("0x") else None
    except ValueError:
        return None


def _thermal_state(gpu: Gpu) -> ThermalState:
    """The temperature from the CSV, else ``-q``; each slowdown reason from the CSV (:func:`_csv_reasons`),
    else ``-q``."""
    row = gpu.row
    if row is None:
        state = ThermalState(gpu)
    else:
        state = ThermalState(gpu, nvsmi.number(row.values.get("temperature.gpu")), _csv_reasons(row), row_origin(row))
    if gpu.q is not None:
        _fill_thermal_from_q(state, gpu, gpu.q)
    return state


def _fill_thermal_from_q(state: ThermalState, gpu: Gpu, q: nvsmi.QGpu) -> None:
    """The reasons and the temperature the CSV left out, from the GPU's ``-q`` block."""
    for position, (_, key, _, name) in enumerate(_REASONS):
        if state.reasons[position] is not None:
            continue
        entry = nvsmi.q_value(q, "clocks event reasons", key) or nvsmi.q_value(q, "clocks throttle reasons", key)
        value = nvsmi.flag(entry.value) if entry else None
        if entry is not None and value is not None:
            state.reasons[position] = value
            state.where[name] = gpu.q_origin(entry.line)
    if state.celsius is None:
        entry = nvsmi.q_value(q, "temperature", "gpu current temp")
        celsius = nvsmi.number(entry.value) if entry else None
        if entry is not None and celsius is not None:
            state.celsius = celsius
            state.where["temperature"] = gpu.q_origin(entry.line)


def _csv_reasons(row: nvsmi.CsvRow) -> list[bool | None]:
    """The slowdown reasons the row gives, in ``_REASONS``' order: each from its own column, else from its bit
    in the ``clocks_event_reasons.active`` mask (read only when a column is missing)."""
    reasons = list(map(nvsmi.flag, map(row.values.get, _REASON_COLUMNS)))
    if None not in reasons:
        return reasons
    mask = _mask(row.raw("clocks_event_reasons.active"))
    if mask is None:
        return reasons
    return [bool(mask & bit) if value is None else value for value, bit in zip(reasons, _REASON_BITS, strict=True)]


def _reasons_in_csv(gs: GpuSet) -> bool:
    return gs.csv_has(*_REASON_COLUMNS) or gs.csv_has("clocks_event_reasons.active")


def _thermal_needs_more(gs: GpuSet) -> Callable[[Gpu], bool]:
    complete = gs.csv_has("temperature.gpu") and _reasons_in_csv(gs)
    return lambda gpu: gpu.row is None or not complete


def _thermal_commands() -> list[SuggestedCommand]:
    return [
        on_node(
            ["nvidia-smi", "-q", "-d", "TEMPERATURE,PERFORMANCE"], "Show temperatures and active clock-event reasons"
        ),
        on_node(["nvidia-smi", "-q", "-d", "POWER"], "Show power draw and limits"),
    ]


def _cited(states: list[ThermalState], name: str) -> list[Origin]:
    return [o for s in states if (o := s.origin_of(name))]


def _hot_finding(ctx: ProbeContext, gs: GpuSet, judged: list[ThermalState], hot: list[ThermalState]) -> Finding:
    cool = [t for s in judged if s not in hot and (t := s.celsius) is not None]
    listed = ", ".join(f"{s.gpu.label} at {s.celsius:.0f} °C" for s in hot)
    if cool:
        where = (
            f"while the other {len(cool)} are at {min(cool):.0f}–{max(cool):.0f} °C: cooling local to "
            f"{'that GPU' if len(hot) == 1 else 'those GPUs'} (heatsink, airflow, fan)"
        )
    else:
        where = "— every GPU is hot: node-level cooling, airflow or ambient temperature"
    return gpu_problem(
        ctx,
        "probe.gpu_thermal",
        Tag.WARN,
        Priority.P1,
        "G.1",
        f"{listed} (≥ {HOT_CELSIUS:.0f} °C) {where}",
        gpu_evidence(gs, _cited(hot, "temperature")),
        "investigate",
        "GPUs this hot slow their clocks to protect themselves; a single hot GPU among cool ones "
        "points at its own cooling, all hot at the chassis or the room.",
        _thermal_commands(),
    )


def _slowed(judged: list[ThermalState]) -> dict[str, list[ThermalState]]:
    """Each active slowdown reason and the GPUs it holds down, in the order first seen."""
    slowed: dict[str, list[ThermalState]] = {}
    for state in judged:
        for name in state.active:
            slowed.setdefault(name, []).append(state)
    return slowed


def _slowdown_finding(
    ctx: ProbeContext, gs: GpuSet, judged: list[ThermalState], slowed: dict[str, list[ThermalState]], any_hot: bool
) -> Finding:
    parts = []
    for name, affected in slowed.items():
        everywhere = len(affected) == len(judged) > 1
        who = f"all {len(affected)} GPUs" if everywhere else gpu_names([s.gpu for s in affected])
        if name == _BRAKE and everywhere:
            who += " (at once: the external power-brake signal from the baseboard or power supply, not one GPU)"
        parts.append(f"{name} on {who}")
    affected_states = list({id(s): s for group in slowed.values() for s in group}.values())
    # A power brake asserted on every GPU at once, with nothing hot, is the baseboard's power policy
    # (seen on healthy idle HGX nodes): worth knowing if jobs run slow, not a P1 fault of this node.
    brake_everywhere = len(slowed.get(_BRAKE, [])) == len(judged) > 1
    only_brake = set(slowed) <= {_BRAKE, "HW slowdown"}
    policy = brake_everywhere and only_brake and not any_hot
    return gpu_problem(
        ctx,
        "probe.gpu_thermal",
        Tag.WARN,
        Priority.P2 if policy else Priority.P1,
        "G.1",
        "clocks held down: " + "; ".join(parts),
        gpu_evidence(
            gs,
            [o for s in affected_states for n in s.active if (o := s.origin_of(n))]
            + _cited(affected_states, "temperature"),
        ),
        "investigate",
        "Hardware or thermal slowdown caps the GPU clocks, so collective jobs run at the pace of the "
        "slowest GPU. Thermal causes point at cooling; power brake is asserted by the system's power "
        "delivery.",
        _thermal_commands(),
    )


def _outliers(judged: list[ThermalState]) -> list[tuple[ThermalState, float]]:
    """GPUs at least OUTLIER_CELSIUS above the median of the others, each with its lead."""
    measured = [(s, t) for s in judged if (t := s.celsius) is not None]
    temps = [t for _, t in measured]
    if len(measured) < 3 or max(temps) - min(temps) < OUTLIER_CELSIUS:
        return []  # (a GPU's lead over the median of the others is at most the spread)
    found = []
    for position, (state, celsius) in enumerate(measured):
        delta = celsius - statistics.median(temps[:position] + temps[position + 1 :])
        if delta >= OUTLIER_CELSIUS:
            found.append((state, delta))
    return found


def _thermal_healthy(ctx: ProbeContext, gs: GpuSet, judged: list[ThermalState]) -> list[Finding]:
    """Nothing hot or slowed: PASS with the temperature range, and a note on each GPU far above the others."""
    coverage = coverage_note(gs, len(judged))
    known = [t for s in judged if (t := s.celsius) is not None]
    range_text = ""
    if known:
        low, high = min(known), max(known)
        range_text = f" at {low:.0f} °C" if low == high else f" at {low:.0f}–{high:.0f} °C"
    # each GPU's temperature, or the first slowdown reason of one that reports none
    cited = [o for s in judged if (o := s.origin_of("temperature") or s.origin_of(s.first_reason))]
    found = [
        finding(
            ctx,
            "probe.gpu_thermal",
            Tag.INFO if coverage else Tag.PASS,
            f"{len(judged)} GPU(s){range_text}, no thermal, hardware or power-brake slowdown{coverage}",
            evidence=gpu_evidence(gs, cited),
        )
    ]
    outliers = _outliers(judged)
    if outliers:
        found.append(
            finding(
                ctx,
                "probe.gpu_thermal",
                Tag.INFO,
                "; ".join(
                    f"{s.gpu.label} runs {s.celsius:.0f} °C, {delta:.0f} °C above the median of the others "
                    "(a busy GPU runs hotter than idle ones; otherwise watch its cooling)"
                    for s, delta in outliers
                ),
                evidence=gpu_evidence(gs, _cited([s for s, _ in outliers], "temperature")),
            )
        )
    return found


def check_gpu_thermal(doc: ProbeDocument, ctx: ProbeContext) -> list[Finding]:
    """Temperature and clock slowdown, decided here over one state per GPU: hot GPUs, then held-down clocks;
    neither, a pass."""
    gs, gpus = gpus_to_judge(doc, _thermal_needs_more)
    judged = [s for s in map(_thermal_state, gpus) if s.judged]
    if not judged:
        cut = " (output truncated)" if gs.truncated_items else ""
        raise NotApplicable(f"no GPU reports its temperature or clock-event reasons{cut}: cannot judge")
    hot = [s for s in judged if (s.celsius or 0) >= HOT_CELSIUS]
    slowed = _slowed(judged)
    findings = [_hot_finding(ctx, gs, judged, hot)] if hot else []
    if slowed:
        findings.append(_slowdown_finding(ctx, gs, judged, slowed, any_hot=bool(hot)))
    return findings or _thermal_healthy(ctx, gs, judged)
