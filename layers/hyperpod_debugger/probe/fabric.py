"""NVIDIA Fabric Manager on NVSwitch instance types (§ G.1.c).

On HGX boards (p4d, p4de, p5, p5e, p5en, p6-b200) the GPUs reach each other only through NVSwitches,
and the switches are configured by the ``nvidia-fabricmanager`` service. While it is stopped, or before
it has finished training the fabric, every GPU looks healthy to ``nvidia-smi`` yet CUDA refuses peer
work (``cudaErrorSystemNotReady``) and NCCL jobs fail or hang: the failure an operator cannot see from
the GPU checks. Two readings, either is enough:

``systemctl_is_active``  the unit's state (``active`` or not)
``nvidia_smi_q``         each GPU's ``Fabric`` section: ``State`` (``Completed`` when trained) and
                         ``Status`` (``Success``)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from hyperpod_debugger.domain.catalog import spec_for
from hyperpod_debugger.domain.checking import Check
from hyperpod_debugger.domain.commands import read_only
from hyperpod_debugger.domain.model import Finding, Priority, Tag, trim_evidence
from hyperpod_debugger.domain.observations import NotApplicable
from hyperpod_debugger.probe.base import ProbeContext, finding
from hyperpod_debugger.probe.parse.nvsmi import UNKNOWN_BUS, parse_q
from hyperpod_debugger.probe.parse.sysparse import UnitState, cached, parse_is_active
from hyperpod_debugger.probe.services import verdict

if TYPE_CHECKING:
    from hyperpod_debugger.probe.document import ProbeDocument

CHECK = "probe.fabric_manager"
UNIT = "nvidia-fabricmanager"
ON_NODE = "on the node (SSM session, § K)"
#: how long after boot a fabric "In Progress" is still Fabric Manager at work, not a fault
FRESH_BOOT_S = 600.0

_COMMANDS = [
    read_only(["systemctl", "status", f"{UNIT}.service", "--no-pager"], f"See the Fabric Manager service {ON_NODE}"),
    read_only(
        ["journalctl", "-u", f"{UNIT}.service", "-n", "50", "--no-pager"],
        f"Read why Fabric Manager stopped or did not finish {ON_NODE}",
    ),
    read_only(["nvidia-smi", "-q", "-d", "FABRIC"], f"Read each GPU's fabric state {ON_NODE}"),
]
_CAUSE = (
    "NVIDIA Fabric Manager sets up the NVSwitches that connect this node's GPUs. Without it the GPUs "
    "look healthy one by one, but peer-to-peer CUDA work and NCCL over NVLink fail or hang. Usual causes: "
    "the service crashed or was killed, or its version does not match the GPU driver's."
)


@dataclass(frozen=True, slots=True)
class _GpuFabric:
    """One GPU's ``Fabric`` section of ``nvidia-smi -q``."""

    bus: str
    state: str | None
    status: str | None
    #: the section's State, Status and Health Summary lines, for evidence
    lines: list[str]
    health: str | None

    @property
    def ready(self) -> bool:
        """State ``Completed``, and Status ``Success`` where the driver reports one."""
        return (self.state or "").lower() == "completed" and (self.status is None or self.status.lower() == "success")


def _fabric_states(doc: ProbeDocument) -> list[_GpuFabric]:
    """Each GPU whose ``nvidia-smi -q`` has a Fabric section."""
    found = doc.item("nvidia_smi_q")
    if found is None or found.timed_out or found.missing_tool or not found.stdout:
        return []
    report = doc.parsed("nvsmi.q", lambda: parse_q(found.stdout))
    out = []
    for gpu in report.gpus:
        if "fabric" not in gpu.sections:
            continue
        state, status = gpu.get("fabric", "state"), gpu.get("fabric", "status")
        health = gpu.get("fabric", "health", "summary")
        out.append(
            _GpuFabric(
                gpu.bus_id,
                state.value if state else None,
                status.value if status else None,
                [e.line for e in (state, status, health) if e is not None],
                health.value if health else None,
            )
        )
    return out


def _unit(doc: ProbeDocument, nvswitch: str) -> UnitState | None:
    """The Fabric Manager unit's state, where the node runs it and ``systemctl`` was read."""
    services = doc.item("systemctl_is_active")
    # on an NVLink domain (GB200 NVL72) the switches are managed off the node: only the GPUs' fabric state counts
    if nvswitch == "hgx" and services is not None and services.stdout and not services.missing_tool:
        return cached(doc, services, "systemctl_is_active", parse_is_active).get(UNIT)
    return None


def check_fabric_manager(doc: ProbeDocument, ctx: ProbeContext) -> list[Finding]:
    spec = spec_for(ctx.instance_type)
    if spec is None or spec.nvswitch is None:
        raise NotApplicable(f"{ctx.instance_type} has no NVSwitch fabric")
    unit = _unit(doc, spec.nvswitch)
    fabrics = _fabric_states(doc)
    if unit is None and not fabrics:
        raise NotApplicable("neither the nvidia-fabricmanager unit nor a Fabric section of nvidia-smi -q was read")

    out: list[Finding] = []
    read: list[str] = []
    if unit is not None:
        state = verdict(unit)
        if state in ("down", "missing"):
            out.append(_service_down(ctx, unit, state))
        else:
            read.append(f"{UNIT} active" if state == "ok" else f"{UNIT}: {unit.state} (not judged)")
    bad = [gpu for gpu in fabrics if not gpu.ready]
    bad_buses = {gpu.bus for gpu in bad}
    unhealthy = [
        gpu
        for gpu in fabrics
        if gpu.health is not None and gpu.health.lower() not in ("healthy", "n/a") and gpu.bus not in bad_buses
    ]
    if bad:
        out.append(_fabric_not_ready(ctx, bad, len(fabrics), doc.uptime_s))
    if unhealthy:
        out.append(_fabric_unhealthy(ctx, unhealthy))
    if fabrics and not bad and not unhealthy:
        read.append(f"fabric Completed/Success on {len(fabrics)} GPU(s)")
    if out:
        return out
    return [
        finding(
            ctx,
            CHECK,
            Tag.PASS,
            f"NVIDIA Fabric Manager is up: {', '.join(read)}",
            section="G.1.c",
            evidence=trim_evidence(list(unit.lines) if unit is not None else [], 3),
        )
    ]


def _service_down(ctx: ProbeContext, unit: UnitState, state: str) -> Finding:
    what = "is not installed" if state == "missing" else "is not running"
    return finding(
        ctx,
        CHECK,
        Tag.FAIL,
        f"NVIDIA Fabric Manager {what} ({unit.state}{f' ({unit.sub})' if unit.sub else ''}) on this "
        f"{ctx.instance_type}: the GPUs cannot use NVLink through the NVSwitches, so multi-GPU jobs "
        "fail or hang while every GPU looks healthy",
        priority=Priority.P0,
        section="G.1.c",
        evidence=trim_evidence(list(unit.lines), 6),
        root_cause=_CAUSE,
        suggested_commands=list(_COMMANDS),
        node_action="investigate",
    )


def _fabric_not_ready(ctx: ProbeContext, bad: list[_GpuFabric], total: int, uptime_s: float | None) -> Finding:
    """GPUs whose fabric is not Completed/Success: a WARN while Fabric Manager is still at work just after
    boot, a FAIL otherwise."""
    # "In Progress" is normal for the first minutes after boot; later (or when the boot time is unknown)
    # it is the state a node stays in when Fabric Manager never finished: CUDA refuses peer work meanwhile
    fresh = uptime_s is not None and uptime_s < FRESH_BOOT_S
    pending = fresh and all((gpu.state or "").lower() == "in progress" for gpu in bad)
    named = [gpu.bus for gpu in bad if gpu.bus != UNKNOWN_BUS]
    gpus = f" ({', '.join(named)})" if named else ""
    states = "; ".join(
        f"{'' if gpu.bus == UNKNOWN_BUS else gpu.bus + ': '}State {gpu.state or '?'}, Status {gpu.status or '?'}"
        for gpu in bad[:4]
    )
    tail = (
        "; Fabric Manager is still training it (normal for a few minutes after boot)"
        if pending
        else "; until it completes, CUDA refuses work across GPUs (cudaErrorSystemNotReady)"
    )
    return finding(
        ctx,
        CHECK,
        Tag.WARN if pending else Tag.FAIL,
        f"The NVLink fabric is not ready on {len(bad)} of {total} GPU(s){gpus}: {states}{tail}",
        priority=Priority.P1 if pending else Priority.P0,
        section="G.1.c",
        evidence=trim_evidence([line for gpu in bad for line in gpu.lines], 8),
        root_cause=_CAUSE,
        suggested_commands=list(_COMMANDS),
        node_action=None if pending else "investigate",
    )


def _fabric_unhealthy(ctx: ProbeContext, unhealthy: list[_GpuFabric]) -> Finding:
    gpus = ", ".join(gpu.bus for gpu in unhealthy if gpu.bus != UNKNOWN_BUS) or "the GPU read"
    return finding(
        ctx,
        CHECK,
        Tag.WARN,
        f"The NVLink fabric is up (Completed/Success) but its health summary is not Healthy on {gpus} "
        f"({', '.join(sorted({gpu.health for gpu in unhealthy if gpu.health is not None}))}): NVLink may run "
        "degraded",
        priority=Priority.P1,
        section="G.1.c",
        evidence=trim_evidence([line for gpu in unhealthy for line in gpu.lines], 8),
        root_cause=_CAUSE,
        suggested_commands=list(_COMMANDS),
    )


CHECKS: tuple[Check, ...] = (
    Check(CHECK, "G.1.c", "NVIDIA Fabric Manager (NVSwitch instance types)", check_fabric_manager),
)
