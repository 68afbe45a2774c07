"""EFA on the node (§ A): kernel driver loaded, EFA devices present, libfabric's EFA provider usable.

Three items feed one check:

``efa_module``   ``cat /sys/module/efa/version`` — the file exists only while the driver is loaded.
``efa_devices``  ``ls -1 /sys/class/infiniband`` — EFA devices are ``rdmap<bus>s<slot>`` (older
                 kernels: ``efa_<n>``); other RDMA devices (``mlx5_0`` ConnectX NICs on some GPU
                 types) are listed apart and never counted as EFA.
``fi_info_efa``  ``fi_info -p efa -t FI_EP_RDM`` — must list ``provider: efa``; failure reads as
                 ``fi_getinfo: -61 (No data available)``. Its ``domain:`` lines name the NICs
                 libfabric can use (libfabric 2 lists each NIC twice, as ``efa`` and ``efa-direct``).

Each part is judged on its own; a part whose item is absent or whose tool is missing is skipped and
named in the result, a part that timed out is UNKNOWN. We never suggest loading modules by hand.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from hyperpod_debugger.domain.catalog import spec_for
from hyperpod_debugger.domain.checking import Check
from hyperpod_debugger.domain.commands import read_only
from hyperpod_debugger.domain.model import Finding, Priority, Tag, trim_evidence
from hyperpod_debugger.domain.observations import NotApplicable
from hyperpod_debugger.probe.base import ProbeContext, finding
from hyperpod_debugger.probe.document import TRUNCATION_MARKER, ProbeDocument, ProbeItem, fleet_shared

CHECK_EFA = "probe.efa"
ON_NODE = "on the node (SSM session, § K)"

_EFA_DEVICE = re.compile(r"^(?:rdmap\w+|efa_\d+)$")
_RDMA_DEVICE = re.compile(r"^[A-Za-z][\w.-]{0,63}$")
# A line may carry a launcher's prefix when fi_info ran under one: Open MPI's --tag-output
# ("[1,0]<stdout>:"), Intel MPI's -prepend-rank ("[0] "), srun -l ("0: "), pdsh ("host: ").
_FI_FIELD = re.compile(
    r"^(?:\[\d+,\d+\]<std(?:out|err)>:|\[\d+\]\s|\d+:\s|[A-Za-z0-9][\w.-]*:\s)?[ \t]*(provider|domain):[ \t]*(\S+)",
    re.MULTILINE,
)
_DOMAIN_SUFFIX = re.compile(r"-(?:rdm|dgrm)$")
_VERSION = re.compile(r"^\s*(\d+(?:\.\d+)+\w*)\s*$")

_LS_INFINIBAND = read_only(
    ["ls", "-l", "/sys/class/infiniband"], f"List the RDMA devices the kernel registered {ON_NODE}"
)
_MODINFO = read_only(["modinfo", "efa"], f"Check that the EFA kernel module is installed for this kernel {ON_NODE}")
_INSTALLED = read_only(
    ["cat", "/opt/amazon/efa_installed_packages"], f"Show the EFA installer version and packages {ON_NODE}"
)
_FI_INFO = read_only(
    ["/opt/amazon/efa/bin/fi_info", "-p", "efa", "-t", "FI_EP_RDM"],
    f"Ask libfabric for the EFA provider with the EFA installer's own fi_info {ON_NODE}",
)


@dataclass(frozen=True, slots=True)
class EfaDevices:
    efa: tuple[str, ...]
    other: tuple[str, ...]


@fleet_shared
def parse_devices(text: str) -> EfaDevices:
    """EFA and other RDMA device names from ``ls -1 /sys/class/infiniband`` (error text ignored)."""
    efa: list[str] = []
    other: list[str] = []
    for raw in text.splitlines():
        name = raw.strip()
        if not name or name == TRUNCATION_MARKER or " " in name:
            continue
        if _EFA_DEVICE.match(name):
            efa.append(name)
        elif _RDMA_DEVICE.match(name):
            other.append(name)
    return EfaDevices(tuple(dict.fromkeys(efa)), tuple(dict.fromkeys(other)))


@dataclass(frozen=True, slots=True)
class FiInfo:
    providers: tuple[str, ...]
    #: NICs behind the efa provider's entries (domain names without the -rdm/-dgrm suffix)
    nics: tuple[str, ...]


@fleet_shared
def parse_fi_info(text: str) -> FiInfo:
    providers: dict[str, None] = {}
    nics: dict[str, None] = {}
    current: str | None = None
    for m in _FI_FIELD.finditer(text):
        if m.group(1) == "provider":
            current = m.group(2)
            providers[current] = None
        elif current == "efa":
            nics[_DOMAIN_SUFFIX.sub("", m.group(2))] = None
    return FiInfo(tuple(providers), tuple(nics))


def _usable(doc: ProbeDocument, item_id: str) -> ProbeItem | None:
    found = doc.item(item_id)
    if found is None or found.missing_tool or found.timed_out:
        return None
    return found


def _first_lines(found: ProbeItem, n: int = 3) -> list[str]:
    text = found.stdout.strip() or found.stderr.strip()
    return text.splitlines()[:n]


@dataclass(slots=True)
class _Parts:
    """What the driver, device and provider parts found; :func:`_verdict` turns it into the findings."""

    problems: list[Finding] = field(default_factory=list)
    infos: list[Finding] = field(default_factory=list)
    facts: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)


def check_efa(doc: ProbeDocument, ctx: ProbeContext) -> list[Finding]:
    spec = spec_for(ctx.instance_type)
    expected = spec.efa if spec is not None else None
    devices_item = _usable(doc, "efa_devices")
    devices = doc.parsed("efa:devices", lambda: parse_devices(devices_item.stdout)) if devices_item else None
    if not expected and not (devices and devices.efa) and not _fi_lists_efa(doc):
        what = "no EFA expected" if spec is not None else f"no expectation for {ctx.instance_type}"
        raise NotApplicable(f"{what} on {ctx.instance_type} and no EFA device seen on the node")
    parts = _Parts()
    driver_missing = _judge_driver(ctx, doc.item("efa_module"), parts)
    _judge_devices(ctx, doc.item("efa_devices"), devices, expected, driver_missing, parts)
    _judge_provider(ctx, doc, driver_missing, parts)
    return _verdict(ctx, parts)


def _fi_lists_efa(doc: ProbeDocument) -> bool:
    """Whether a usable ``fi_info`` output names the efa provider."""
    fi_seen = _usable(doc, "fi_info_efa")
    return fi_seen is not None and "efa" in doc.parsed("efa:fi_info", lambda: parse_fi_info(fi_seen.stdout)).providers


def _judge_driver(ctx: ProbeContext, module: ProbeItem | None, parts: _Parts) -> bool:
    """Is the EFA kernel driver loaded? Records the answer; True when it is proven missing."""
    if module is None or module.missing_tool:
        parts.skipped.append("driver (efa_module not collected)")
        return False
    if module.timed_out:
        parts.unknown.append("efa_module timed out")
        return False
    if module.exit_code not in (0, None):
        parts.problems.append(_driver_not_loaded(ctx, module))
        return True
    version = _VERSION.match(module.stdout.strip())
    if version:
        parts.facts.append(f"EFA driver {version.group(1)} loaded")
    elif module.stdout.strip():
        parts.facts.append(f"EFA driver loaded (version {module.stdout.strip()[:40]!r})")
    else:
        parts.skipped.append("driver (efa_module empty)")
    return False


def _driver_not_loaded(ctx: ProbeContext, module: ProbeItem) -> Finding:
    return finding(
        ctx,
        CHECK_EFA,
        Tag.FAIL,
        f"EFA kernel driver not loaded on this {ctx.instance_type}: /sys/module/efa is absent, so no "
        "EFA device can exist and NCCL/MPI fall back to TCP or fail",
        priority=Priority.P0,
        section="A",
        evidence=_first_lines(module) or [f"efa_module exit {module.exit_code}"],
        root_cause=(
            "The EFA driver is not loaded: the image or lifecycle script lacks the EFA installer, the "
            "module was not built for the running kernel (kernel updated without DKMS rebuild), or its "
            "probe failed (see the kernel log). Fix the image or lifecycle script; do not load modules "
            "by hand on a live node."
        ),
        suggested_commands=[_MODINFO, _INSTALLED],
        node_action="investigate",
    )


def _judge_devices(
    ctx: ProbeContext,
    raw_devices: ProbeItem | None,
    devices: EfaDevices | None,
    expected: int | None,
    driver_missing: bool,
    parts: _Parts,
) -> None:
    """Does the node have as many EFA devices as its type ships? (A missing driver explains a low count.)"""
    if raw_devices is not None and raw_devices.timed_out:
        parts.unknown.append("efa_devices timed out")
        return
    if devices is None:
        parts.skipped.append("device count (efa_devices not collected)")
        return
    count = len(devices.efa)
    other = f"; other RDMA devices: {', '.join(devices.other)}" if devices.other else ""
    if expected is None:
        parts.infos.append(
            finding(
                ctx,
                CHECK_EFA,
                Tag.INFO,
                f"{count} EFA device(s) on the node; no expectation for {ctx.instance_type}{other}",
                section="A",
                evidence=trim_evidence([*devices.efa, *devices.other], 40),
            )
        )
    elif count < expected and raw_devices is not None and raw_devices.truncated:
        parts.unknown.append(f"efa_devices output truncated after {count} EFA device(s) of {expected}")
    elif count < expected and not driver_missing:
        parts.problems.append(_devices_missing(ctx, devices, count, expected))
    else:
        parts.facts.append(f"{count} of {expected} EFA devices{other}")


def _devices_missing(ctx: ProbeContext, devices: EfaDevices, count: int, expected: int) -> Finding:
    return finding(
        ctx,
        CHECK_EFA,
        Tag.FAIL,
        f"Only {count} of {expected} EFA devices on this {ctx.instance_type}: collective bandwidth is "
        "reduced or jobs fail to start on this node",
        priority=Priority.P1,
        section="A",
        evidence=trim_evidence([*devices.efa, *devices.other], 40) or ["(no RDMA device listed)"],
        root_cause=(
            "EFA interfaces are missing: a device that did not attach or whose driver probe failed. "
            "A reboot re-attaches them; replace the node if the count stays low."
        ),
        suggested_commands=[_LS_INFINIBAND, _FI_INFO],
        node_action="reboot",
    )


def _judge_provider(ctx: ProbeContext, doc: ProbeDocument, driver_missing: bool, parts: _Parts) -> None:
    """Can libfabric use EFA? (A missing driver already explains why it cannot.)"""
    fi = doc.item("fi_info_efa")
    if fi is None:
        parts.skipped.append("libfabric provider (fi_info_efa not collected)")
    elif fi.missing_tool:
        parts.skipped.append("libfabric provider (fi_info not found on the node's PATH)")
    elif fi.timed_out:
        parts.unknown.append("fi_info timed out")
    else:
        info = doc.parsed("efa:fi_info", lambda: parse_fi_info(fi.stdout))
        if "efa" in info.providers:
            cut = ", fi_info output truncated" if fi.truncated or TRUNCATION_MARKER in fi.stdout else ""
            parts.facts.append(f"libfabric efa provider present ({len(info.nics)} NIC(s){cut})")
        elif not driver_missing:
            parts.problems.append(_no_provider(ctx, fi))


def _no_provider(ctx: ProbeContext, fi: ProbeItem) -> Finding:
    return finding(
        ctx,
        CHECK_EFA,
        Tag.FAIL,
        "libfabric has no usable EFA provider (fi_info -p efa lists nothing): NCCL/MPI cannot use EFA on this node",
        priority=Priority.P0,
        section="A",
        evidence=[*_first_lines(fi, 5), *(["(output truncated)"] if fi.truncated else [])]
        or [f"fi_info exit {fi.exit_code}"],
        root_cause=(
            "libfabric cannot open the EFA devices (fi_getinfo -61): EFA installer missing or broken, "
            "devices missing, or an RDMA device the process cannot open. Inside a container this "
            "points at the pod spec; on the host at the image."
        ),
        suggested_commands=[_FI_INFO, _LS_INFINIBAND, _INSTALLED],
        node_action="investigate",
    )


def _verdict(ctx: ProbeContext, parts: _Parts) -> list[Finding]:
    """The check's one verdict: its problems (and an UNKNOWN for the parts that timed out or were cut), else a
    PASS listing what was read; informational findings ride along either way."""
    findings = list(parts.problems)
    if parts.unknown:
        findings.append(
            finding(
                ctx,
                CHECK_EFA,
                Tag.UNKNOWN,
                f"Could not judge part of EFA: {'; '.join(parts.unknown)}",
                priority=Priority.P1,
                section="A",
                evidence=[*parts.facts, *(f"(skipped: {s})" for s in parts.skipped)],
            )
        )
    if findings:
        return [*findings, *parts.infos]
    if not parts.facts:
        if parts.infos:
            return parts.infos
        raise NotApplicable("no EFA item could be judged: " + "; ".join(parts.skipped))
    return [
        finding(
            ctx,
            CHECK_EFA,
            Tag.PASS,
            "EFA: " + "; ".join(parts.facts),
            section="A",
            evidence=[f"(skipped: {s})" for s in parts.skipped],
        ),
        *parts.infos,
    ]


CHECKS: tuple[Check, ...] = (Check(CHECK_EFA, "A", "EFA driver, devices and libfabric provider", check_efa),)
