"""NVIDIA GPU evaluators (§ G.1, G.1.a, G.1.b) over the probe's nvidia-smi and dcgmi items.

Here: the GPU count (``probe.gpu_count``), NVLink (``probe.gpu_nvlink``), DCGM's health watches
(``probe.dcgm_health``) and the list of every GPU check. The GPU set the per-GPU checks read, and the order
its sources are trusted in, is :mod:`.gpu_set`; ECC and row remapping are :mod:`.gpu_memory`, temperature and
clock slowdown :mod:`.gpu_thermal`.

These evaluators never build reboot/replace commands: they set ``node_action`` and the suggestion engine
turns that into the guarded commands.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from hyperpod_debugger.domain.catalog import InstanceSpec, spec_for
from hyperpod_debugger.domain.checking import Check
from hyperpod_debugger.domain.model import Finding, Priority, SuggestedCommand, Tag, trim_evidence
from hyperpod_debugger.domain.observations import NotApplicable
from hyperpod_debugger.probe.base import ProbeContext, finding
from hyperpod_debugger.probe.gpu_memory import check_gpu_ecc, check_gpu_row_remap
from hyperpod_debugger.probe.gpu_set import (
    CSV_ITEM,
    Q_ITEM,
    GpuSet,
    gpu_problem,
    gpu_set,
    lost_and_down,
    on_node,
    usable,
)
from hyperpod_debugger.probe.gpu_thermal import check_gpu_thermal
from hyperpod_debugger.probe.parse import dcgmi, nvsmi

if TYPE_CHECKING:
    from hyperpod_debugger.probe.document import ProbeDocument, ProbeItem

NVLINK_ITEM = "nvidia_smi_nvlink_status"
DCGM_ITEM = "dcgmi_health"

BOOT_GRACE_S = 300.0  # GPUs may still be initialising this soon after boot (HMA waits ~2 min too)
#: GPU models whose HyperPod instance types wire the GPUs together with NVLink
NVLINK_MODELS = frozenset({"A100", "H100", "H200", "B200"})


# --------------------------------------------------------------------------- probe.gpu_count


def _tool_not_installed(gs: GpuSet) -> bool:
    """Neither nvidia-smi item could be read, and each because the tool is not there."""
    sources = [s for s in (gs.csv_src, gs.q_src) if s.problem is not None]
    return bool(sources) and all(s.tool_missing for s in sources)


def _nvidia_smi_not_installed(ctx: ProbeContext, gs: GpuSet, expected: int) -> Finding:
    return gpu_problem(
        ctx,
        "probe.gpu_count",
        Tag.FAIL,
        Priority.P0,
        "G.1",
        f"nvidia-smi is not installed on this {ctx.instance_type} node, which should have "
        f"{expected} GPUs: the NVIDIA driver or its tools are gone",
        [str(s.problem) for s in (gs.csv_src, gs.q_src) if s.problem is not None],
        "investigate",
        "The HyperPod AMI ships the NVIDIA driver and nvidia-smi; without them no GPU workload "
        "can run. A lifecycle script or a package change may have removed them.",
        [
            on_node(["lspci", "-d", "10de:"], "List the NVIDIA devices on the PCI bus"),
            on_node(["cat", "/proc/driver/nvidia/version"], "Show whether the NVIDIA kernel driver is loaded"),
        ],
    )


def _visible(gs: GpuSet) -> tuple[int | None, list[str]]:
    """How many GPUs nvidia-smi lists, and the lines that say so: the CSV's rows, else ``-q``'s "Attached
    GPUs" line or its GPU blocks; None when neither says."""
    if (gs.csv is None or not gs.csv.rows) and gs.q is not None and gs.q.attached_gpus is None:
        if gs.q.gpus and all(g.bus_id == nvsmi.UNKNOWN_BUS for g in gs.q.gpus):
            raise NotApplicable(
                "nvidia-smi -q was given as an excerpt of one GPU without its `GPU <bus id>` line or the "
                "'Attached GPUs' count: it cannot say how many GPUs the node has"
            )
    if gs.csv is not None and gs.csv.rows:
        return len(gs.csv.rows), [r.line for r in gs.csv.rows]
    report = gs.q
    if report is not None and (report.attached_gpus is not None or report.gpus):
        seen = report.attached_gpus if report.attached_gpus is not None else len(report.gpus)
        return seen, [line for line in (report.attached_line, *(g.header_line for g in report.gpus)) if line]
    return None, []


def _gpus_missing(
    doc: ProbeDocument,
    ctx: ProbeContext,
    seen: int,
    expected: int,
    lost: list[str],
    down: str | None,
    evidence: list[str],
) -> Finding:
    """Fewer GPUs than the instance type has, or some lost: probe again if the node just booted, else reboot."""
    detail = f"{seen} of {expected} GPUs visible to nvidia-smi on {ctx.instance_type}"
    if down:
        detail += " (nvidia-smi cannot use the NVIDIA driver)"
    if lost:
        detail += f"; {len(lost)} GPU(s) reported lost or unreachable"
    if doc.uptime_s is not None and doc.uptime_s < BOOT_GRACE_S:
        return gpu_problem(
            ctx,
            "probe.gpu_count",
            Tag.WARN,
            Priority.P1,
            "G.1",
            f"{detail}, {int(doc.uptime_s)} s after boot: the driver may still be initialising; "
            "probe again in a few minutes before acting",
            evidence,
            "investigate",
            "Right after a boot the GPUs can take a minute or two to appear; HyperPod's health agent "
            "also waits before it counts them.",
            [on_node(["nvidia-smi", "-L"], "List the GPUs the driver sees")],
        )
    return gpu_problem(
        ctx,
        "probe.gpu_count",
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
            on_node(["nvidia-smi", "-L"], "List the GPUs the driver sees"),
            on_node(["lspci", "-d", "10de:"], "List the NVIDIA devices still on the PCI bus"),
            on_node(["journalctl", "-k", "-b", "0", "--grep", "NVRM: Xid"], "Show this boot's Xid lines"),
        ],
    )


def check_gpu_count(doc: ProbeDocument, ctx: ProbeContext) -> list[Finding]:
    """The GPUs nvidia-smi sees against the instance type's count: fewer (or any lost) is a problem, the
    verdict decided here once the count and the lost-GPU and driver lines are read."""
    check = "probe.gpu_count"
    spec = spec_for(ctx.instance_type)
    expected = spec.gpus if spec else None
    if doc.item(CSV_ITEM) is None and doc.item(Q_ITEM) is None:
        raise NotApplicable("the probe document has no nvidia-smi items (GPU inventory)")
    if expected == 0:
        raise NotApplicable(f"no NVIDIA GPUs expected on {ctx.instance_type}")
    gs = gpu_set(doc)
    if gs.csv_src.item is None and gs.q_src.item is None:
        if expected and _tool_not_installed(gs):
            return [_nvidia_smi_not_installed(ctx, gs, expected)]
        raise gs.unusable()
    seen, lines = _visible(gs)
    lost, down = lost_and_down(gs)
    if seen is None:
        if down is None and not lost:
            raise NotApplicable("nvidia-smi printed nothing the GPU count can be read from")
        seen = 0
    evidence = trim_evidence(list(dict.fromkeys([*lost, *([down] if down else []), *lines, *gs.truncated_items])))
    if expected is None:
        message = f"{seen} GPU(s) visible to nvidia-smi; no expectation for {ctx.instance_type}"
        return [finding(ctx, check, Tag.INFO, message, evidence=evidence)]
    if seen < expected or lost:
        return [_gpus_missing(doc, ctx, seen, expected, lost, down, evidence)]
    if seen > expected:
        message = f"{seen} GPUs visible but a {ctx.instance_type} has {expected}: is the instance type right?"
        return [finding(ctx, check, Tag.INFO, message, evidence=evidence)]
    model = f" {spec.gpu_model}" if spec and spec.gpu_model else ""
    message = f"{seen} of {expected}{model} GPU(s) of {ctx.instance_type} visible to nvidia-smi"
    return [finding(ctx, check, Tag.PASS, message, evidence=evidence)]


# --------------------------------------------------------------------------- probe.gpu_nvlink


def _nvlink_expected(spec: InstanceSpec | None) -> bool | None:
    if spec is None or spec.gpus is None:
        return None
    if spec.gpus == 0:
        return False
    return spec.gpu_model in NVLINK_MODELS


def _nvlink_commands() -> list[SuggestedCommand]:
    return [
        on_node(["nvidia-smi", "nvlink", "--status"], "Show every NVLink link and its speed"),
        on_node(["nvidia-smi", "nvlink", "-e"], "Show the NVLink error counters"),
        on_node(["systemctl", "is-active", "nvidia-fabricmanager"], "Check the NVSwitch fabric manager is running"),
    ]


_NVLINK_MIG = re.compile(r"Nvlink queries are not supported for Devices in MIG mode|not supported[^\n]*MIG mode", re.I)


def _no_links(
    ctx: ProbeContext, found: ProbeItem, report: nvsmi.NvLinkReport, expected: bool | None, cut: list[str]
) -> Finding:
    """No GPU with links listed: MIG mode (nothing readable), all links inactive or nothing printed where
    NVLink is expected; else nothing to judge (NotApplicable)."""
    if mig := _NVLINK_MIG.search(found.stdout):
        # the driver does not report links for GPUs in MIG mode: nothing was read, so nothing is judged
        return gpu_problem(
            ctx,
            "probe.gpu_nvlink",
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
    all_down = report.all_inactive_line
    if expected and all_down:
        return gpu_problem(
            ctx,
            "probe.gpu_nvlink",
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
    if expected:
        return gpu_problem(
            ctx,
            "probe.gpu_nvlink",
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
    raise NotApplicable("no NVLink links reported (GPUs attached over PCIe only)")


def _inactive_links(ctx: ProbeContext, faulty: list[nvsmi.NvLinkGpu], cut: list[str]) -> Finding:
    details = []
    evidence: list[str] = []
    for gpu in faulty:
        numbers = ", ".join(str(link.number) for link in gpu.inactive) or "all"
        details.append(f"GPU {gpu.index}: link(s) {numbers} of {len(gpu.links) or '?'} inactive")
        evidence.append(gpu.line)
        evidence.extend(link.line for link in gpu.inactive)
        if gpu.all_inactive_line:
            evidence.append(gpu.all_inactive_line)
    return gpu_problem(
        ctx,
        "probe.gpu_nvlink",
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


def check_gpu_nvlink(doc: ProbeDocument, ctx: ProbeContext) -> list[Finding]:
    """NVLink link state, decided here: no links listed (:func:`_no_links`), inactive links where some are up
    or NVLink is expected, no active link at all, or every link active."""
    check = "probe.gpu_nvlink"
    spec = spec_for(ctx.instance_type)
    expected = _nvlink_expected(spec)
    if expected is False:
        model = spec.gpu_model if spec and spec.gpu_model else "no NVIDIA GPU"
        raise NotApplicable(f"{ctx.instance_type} ({model}) has no NVLink between its GPUs")
    found = usable(doc, NVLINK_ITEM, "NVLink status (nvidia-smi nvlink --status)")
    report = doc.parsed("nvsmi.nvlink", lambda: nvsmi.parse_nvlink(found.stdout))
    cut = ["(nvidia_smi_nvlink_status: output truncated)"] if found.truncated or report.truncated else []
    with_links = [g for g in report.gpus if g.links or g.all_inactive_line]
    if not with_links:
        return [_no_links(ctx, found, report, expected, cut)]
    any_active = any(g.active for g in with_links)
    faulty = [g for g in with_links if g.inactive or g.all_inactive_line]
    faulty = [g for g in faulty if g.active or any_active or expected]
    if faulty:
        return [_inactive_links(ctx, faulty, cut)]
    listed = trim_evidence([*(g.line for g in with_links), *cut])
    if not any_active:
        message = f"no active NVLink links on {len(with_links)} GPU(s); no expectation for {ctx.instance_type}"
        return [finding(ctx, check, Tag.INFO, message, evidence=listed)]
    links = sum(len(g.links) for g in with_links)
    speeds = sorted({link.speed_gbps for g in with_links for link in g.links if link.speed_gbps})
    speed = f" at {speeds[0]:g} GB/s" if len(speeds) == 1 else ""
    message = f"all {links} NVLink links active on {len(with_links)} GPU(s){speed}"
    return [finding(ctx, check, Tag.PASS, message, evidence=listed)]


# --------------------------------------------------------------------------- probe.dcgm_health


def _dcgm_commands() -> list[SuggestedCommand]:
    return [
        on_node(["dcgmi", "health", "-g", "0", "--check"], "Re-read DCGM's health verdicts"),
        on_node(["ls", "-lt", "/var/log/nvidia-dcgm/"], "List DCGM's logs (deep health check results)"),
        on_node(["nvidia-smi", "-q", "-d", "ECC,TEMPERATURE,PERFORMANCE"], "Cross-check ECC, temperature and clocks"),
    ]


def check_dcgm_health(doc: ProbeDocument, ctx: ProbeContext) -> list[Finding]:
    check = "probe.dcgm_health"
    found = usable(doc, DCGM_ITEM, "DCGM health watches (dcgmi health --check)")
    report = doc.parsed("dcgmi.health", lambda: dcgmi.parse_dcgm_health(f"{found.stdout}\n{found.stderr}"))
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
        gpu_problem(
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
