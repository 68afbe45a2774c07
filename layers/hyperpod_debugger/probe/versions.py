"""The software a node runs (§ E), read from its probe document into one typed set of component versions.

Pure: text in, versions out. Each component is read, absent (the probe looked where it lives and found
nothing) or not read (the probe could not look, or found it without a readable version): never a guess.

Sources of the formats (recorded 2026-12-04; facts, not copied text):

- ``/proc/driver/nvidia/version``: ``NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.129.03  <date>`` for
  the proprietary module, ``NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.127.05  Release Build
  (…)`` for the open one (NVIDIA's CUDA install notes and several public parsers of the file).
- ``nvidia-smi -q``: ``Driver Version : 550.127.05`` and ``CUDA Version : 12.4`` lines near the top (the
  CUDA version there is the newest the driver supports, not the toolkit installed).
- ``/usr/local/cuda/version.json`` (CUDA ≥ 11.1): ``"cuda" : {"name" : "CUDA SDK", "version" : "12.4.1"}``
  first; older toolkits have ``version.txt``: ``CUDA Version 10.2.89``.
- ``/opt/amazon/efa_installed_packages``: the EFA installer writes ``# EFA installer version: 1.38.0``, then
  ``# Debug packages installed: no``, then the package list (aws-efa-installer's ``efa_installer.sh``).
- ``fi_info --version``: ``fi_info: 1.22.0amzn5.0`` / ``libfabric: 1.22.0amzn5.0`` / ``libfabric api: 1.22``
  (AWS EFA "get started" examples; ``/opt/amazon/efa/bin/fi_info: …`` when called by its path).
- ``fi_info -p efa``: ``version: 122.0`` under ``provider: efa`` (the provider's own version).
- aws-ofi-nccl: the plugin library carries ``aws-ofi-nccl 1.18.0-aws`` (it logs ``NET/OFI Initializing
  aws-ofi-nccl 1.18.0-aws`` at start).
- NCCL: the library's file name, ``libnccl.so.2.21.5``.
- Neuron: ``/sys/module/neuron/version`` (the module's ``modinfo`` version, e.g. ``2.19.64.0``) and the runtime
  library's file name ``libnrt.so.<version>`` where the package installs a versioned one.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from hyperpod_debugger.probe.document import ProbeDocument, ProbeItem

State = Literal["read", "absent", "unread"]

#: component id → how a person names it, in report order
COMPONENTS: dict[str, str] = {
    "nvidia_driver": "NVIDIA driver",
    "cuda_driver": "CUDA (the driver's)",
    "cuda_toolkit": "CUDA toolkit",
    "kernel": "kernel",
    "efa_installer": "EFA installer",
    "efa_driver": "EFA kernel driver",
    "libfabric": "libfabric",
    "efa_provider": "libfabric EFA provider",
    "aws_ofi_nccl": "aws-ofi-nccl",
    "nccl": "NCCL",
    "neuron_driver": "Neuron driver",
    "neuron_runtime": "Neuron runtime",
}

ITEM = "software_versions"


@dataclass(frozen=True, slots=True)
class Reading:
    state: State
    version: str | None = None
    #: where the version was read (read), or why there is none (absent, unread)
    detail: str = ""


@dataclass(frozen=True, slots=True)
class SoftwareVersions:
    readings: dict[str, Reading] = field(default_factory=dict)

    def get(self, component: str) -> Reading:
        return self.readings.get(component, Reading("unread", detail="not collected"))

    def __iter__(self) -> Iterator[tuple[str, Reading]]:
        return iter((c, self.get(c)) for c in COMPONENTS)

    @property
    def any_read(self) -> bool:
        return any(r.state == "read" for r in self.readings.values())


_NOT_READ = re.compile(r"^\(not read: ([^)]*)\)$", re.M)


def parts(text: str) -> dict[str, str]:
    """The item's ``== <part>`` sections, by name (text without the header line)."""
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        m = re.fullmatch(r"== ([a-z_]+)", line.strip())
        if m:
            current = out.setdefault(m.group(1), [])
        elif current is not None:
            current.append(line)
    return {name: "\n".join(lines).strip() for name, lines in out.items()}


def version_key(version: str) -> tuple[tuple[int, int | str], ...]:
    """Order of versions: numbers as numbers (``535.183.01`` < ``550.54.15``; ``1.9`` < ``1.10``), other text
    after numbers of the same place."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.findall(r"\d+|[A-Za-z]+", version))


def _first(pattern: str, text: str, flags: int = 0) -> str | None:
    m = re.search(pattern, text, flags)
    return m.group(1) if m else None


def _item_reason(item: ProbeItem | None, what: str) -> str | None:
    """Why ``item`` cannot be read at all, or None when it can."""
    if item is None:
        return f"the probe document has no {what} item (an older probe, or pasted outputs without it)"
    if item.timed_out:
        return f"{what} timed out on the node"
    if item.missing_tool:
        return f"{what}: its tool is not on the node"
    return None


def _from_part(text: str | None, pattern: str, where: str, *, flags: int = 0, truncated: bool = False) -> Reading:
    if text is None:
        if truncated:
            return Reading("unread", detail="the probe's output was cut before this part")
        return Reading("unread", detail="the probe did not report this part")
    why = _NOT_READ.search(text)
    m = re.search(pattern, text, flags)
    found = next((g for g in m.groups() if g), None) if m else None
    if found:
        return Reading("read", found, where)
    if why:
        return Reading("unread", detail=f"{where}: not read ({why.group(1)})")
    if not text.strip():
        return Reading("absent", detail=f"nothing at {where}")
    return Reading("unread", detail=f"{where}: no version in {text.strip().splitlines()[0][:120]!r}")


def _names(text: str | None, pattern: str, where: str, *, truncated: bool = False) -> Reading:
    """Versions in file names, one per line; several distinct ones are listed together."""
    if text is None:
        return Reading("unread", detail="the probe's output was cut before this part" if truncated else "not reported")
    if not text.strip():
        return Reading("absent", detail=f"no {where} found")
    found = sorted({m.group(1) for m in re.finditer(pattern, text)}, key=version_key)
    if not found:
        return Reading("unread", detail=f"{where} present without a version in its name")
    return Reading("read", " + ".join(found), where)


def _nvidia_q(doc: ProbeDocument) -> tuple[str | None, str | None, str | None]:
    """(driver, CUDA, why not) from ``nvidia-smi -q``."""
    item = doc.item("nvidia_smi_q")
    reason = _item_reason(item, "nvidia_smi_q")
    if reason or item is None:
        return None, None, reason
    driver = _first(r"^\s*Driver Version\s*:\s*(\d[\w.-]*)", item.stdout, re.M)
    cuda = _first(r"^\s*CUDA Version\s*:\s*(\d[\w.-]*)", item.stdout, re.M)
    return driver, cuda, None if (driver or cuda) else "nvidia-smi -q printed no version"


#: component → (version pattern, where the version is read, regex flags), for the parts of the item named
#: after their component whose version one pattern finds
_ONE_PATTERN: dict[str, tuple[str, str, int]] = {
    "kernel": (r"^(\d[^\s]*)$", "uname -r", re.M),
    "nvidia_driver": (
        r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)\b",
        "/proc/driver/nvidia/version",
        0,
    ),
    "efa_installer": (r"^#\s*EFA installer version:\s*(\d[\w.]*)", "/opt/amazon/efa_installed_packages", re.M),
    "libfabric": (r"^libfabric:\s*(\d[\w.~-]*)", "fi_info --version", re.M),
    "neuron_driver": (r"^(\d[\w.]*)", "/sys/module/neuron/version", re.M),
}
#: components read from the ``software_versions`` item (the others come from items of their own)
_FROM_ITEM = (*_ONE_PATTERN, "cuda_toolkit", "aws_ofi_nccl", "nccl", "neuron_runtime")


def parse(doc: ProbeDocument) -> SoftwareVersions:
    """Every component's reading from one node's document."""
    item = doc.item(ITEM)
    reason = _item_reason(item, ITEM)
    if item is not None and reason is None:
        readings = _read_item(parts(item.stdout), cut=item.truncated)
    else:
        readings = {component: Reading("unread", detail=reason or "") for component in _FROM_ITEM}
    q_driver, q_cuda, q_why = _nvidia_q(doc)
    if readings["nvidia_driver"].state != "read" and q_driver:
        readings["nvidia_driver"] = Reading("read", q_driver, "nvidia-smi -q")
    readings["cuda_driver"] = _cuda_driver(doc, q_cuda, q_why)
    readings["efa_driver"] = _efa_driver(doc)
    readings["efa_provider"] = _efa_provider(doc)
    return SoftwareVersions({component: readings[component] for component in COMPONENTS})


def _read_item(text: dict[str, str], *, cut: bool) -> dict[str, Reading]:
    """The readings of the ``software_versions`` item's parts; ``cut``: the item's output was truncated."""
    readings = {
        component: _from_part(text.get(component), pattern, where, flags=flags, truncated=cut)
        for component, (pattern, where, flags) in _ONE_PATTERN.items()
    }
    cuda = text.get("cuda")
    where = _first(r"^file (\S+)", cuda or "", re.M) or "/usr/local/cuda/version.json"
    readings["cuda_toolkit"] = _from_part(
        cuda,
        r'"cuda"\s*:\s*\{[^}]*?"version"\s*:\s*"(\d[^"]*)"|CUDA Version (\d[\w.]*)',
        where,
        flags=re.S,
        truncated=cut,
    )
    readings["aws_ofi_nccl"] = _aws_ofi_nccl(text.get("aws_ofi_nccl"), cut=cut)
    readings["nccl"] = _names(text.get("nccl"), r"libnccl\.so\.(2\.\d+\.\d+)", "libnccl.so.2.*", truncated=cut)
    readings["neuron_runtime"] = _names(
        text.get("neuron_runtime"), r"libnrt\.so\.(\d+\.\d+\.\d+[\d.]*)", "libnrt.so.*", truncated=cut
    )
    return readings


def _aws_ofi_nccl(ofi: str | None, *, cut: bool) -> Reading:
    where = _first(r"^path (\S+)", ofi or "", re.M) or "/opt/amazon/ofi-nccl"
    reading = _from_part(ofi, r"aws-ofi-nccl\s+(\d[\w.-]*)", where, truncated=cut)
    if reading.state == "unread" and ofi and "(not read: exit 1)" in ofi:
        return Reading("unread", detail=f"{where} carries no version string")
    return reading


def _cuda_driver(doc: ProbeDocument, q_cuda: str | None, q_why: str | None) -> Reading:
    """The newest CUDA the driver supports, from ``nvidia-smi -q``."""
    if q_cuda:
        return Reading("read", q_cuda, "nvidia-smi -q")
    smi = doc.item("nvidia_smi_q")
    if smi is not None and smi.missing_tool:
        return Reading("absent", detail="nvidia-smi is not on the node")
    return Reading("unread", detail=q_why or "no CUDA Version line")


def _efa_driver(doc: ProbeDocument) -> Reading:
    module = doc.item("efa_module")
    module_why = _item_reason(module, "efa_module")
    if module is not None and module_why is None and module.exit_code == 0 and module.stdout.strip():
        return Reading("read", module.stdout.strip().split()[0], "/sys/module/efa/version")
    if module is not None and module_why is None:
        return Reading("absent", detail="no /sys/module/efa/version (the efa module is not loaded)")
    return Reading("unread", detail=module_why or "")


def _efa_provider(doc: ProbeDocument) -> Reading:
    fi = doc.item("fi_info_efa")
    fi_why = _item_reason(fi, "fi_info_efa")
    provider = _first(r"provider:\s*efa\b.*?^\s*version:\s*(\d[\w.]*)", fi.stdout, re.M | re.S) if fi else None
    if provider:
        return Reading("read", provider, "fi_info -p efa")
    if fi is not None and fi_why is None:
        return Reading("absent", detail="fi_info lists no efa provider")
    return Reading("unread", detail=fi_why or "")
