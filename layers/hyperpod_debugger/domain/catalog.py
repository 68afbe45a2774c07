"""What each instance type should show on the node: GPUs, EFA devices, Neuron devices and
cores, and whether it has local NVMe instance storage. HyperPod types carry an ``ml.`` prefix.

Only facts we are sure of are listed; an unknown type or an unknown field is ``None`` and the
checks say "no expectation" instead of guessing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hyperpod_debugger.domain.aws_types import ec2_type


@dataclass(frozen=True, slots=True)
class InstanceSpec:
    gpus: int | None = None
    gpu_model: str | None = None
    efa: int | None = None
    neuron_devices: int | None = None
    neuron_cores: int | None = None
    nvme: bool | None = None
    #: how the GPUs meet: "hgx" (NVSwitches on the board, configured by the node's NVIDIA Fabric Manager)
    #: or "nvl" (an NVLink domain across trays, e.g. GB200 NVL72: the switches are managed off the node)
    nvswitch: str | None = None

    @property
    def accelerated(self) -> bool:
        return bool(self.gpus) or bool(self.neuron_devices)


def _g_family(model: str, efa_48: int | None) -> dict[str, InstanceSpec]:
    # g5/g6/g6e: 1 GPU up to 16xlarge, 4 GPUs on 12xlarge and 24xlarge, 8 on 48xlarge; all with NVMe.
    sizes = {
        "xlarge": 1,
        "2xlarge": 1,
        "4xlarge": 1,
        "8xlarge": 1,
        "16xlarge": 1,
        "12xlarge": 4,
        "24xlarge": 4,
        "48xlarge": 8,
    }
    return {
        size: InstanceSpec(gpus=n, gpu_model=model, nvme=True, efa=efa_48 if size == "48xlarge" else None)
        for size, n in sizes.items()
    }


_TABLE: dict[str, InstanceSpec] = {
    "p4d.24xlarge": InstanceSpec(gpus=8, gpu_model="A100", efa=4, nvme=True, nvswitch="hgx"),
    "p4de.24xlarge": InstanceSpec(gpus=8, gpu_model="A100", efa=4, nvme=True, nvswitch="hgx"),
    "p5.48xlarge": InstanceSpec(gpus=8, gpu_model="H100", efa=32, nvme=True, nvswitch="hgx"),
    "p5e.48xlarge": InstanceSpec(gpus=8, gpu_model="H200", efa=32, nvme=True, nvswitch="hgx"),
    "p5en.48xlarge": InstanceSpec(gpus=8, gpu_model="H200", efa=16, nvme=True, nvswitch="hgx"),
    "p6-b200.48xlarge": InstanceSpec(gpus=8, gpu_model="B200", nvme=True, nvswitch="hgx"),
    "p6e-gb200.36xlarge": InstanceSpec(gpus=4, gpu_model="B200", nvme=True, nvswitch="nvl"),
    "trn1.2xlarge": InstanceSpec(gpus=0, neuron_devices=1, neuron_cores=2, nvme=True),
    "trn1.32xlarge": InstanceSpec(gpus=0, neuron_devices=16, neuron_cores=32, efa=8, nvme=True),
    "trn1n.32xlarge": InstanceSpec(gpus=0, neuron_devices=16, neuron_cores=32, efa=16, nvme=True),
    "trn2.48xlarge": InstanceSpec(gpus=0, neuron_devices=16, efa=16, nvme=True),
    "inf2.xlarge": InstanceSpec(gpus=0, neuron_devices=1, neuron_cores=2),
    "inf2.8xlarge": InstanceSpec(gpus=0, neuron_devices=1, neuron_cores=2),
    "inf2.24xlarge": InstanceSpec(gpus=0, neuron_devices=6, neuron_cores=12),
    "inf2.48xlarge": InstanceSpec(gpus=0, neuron_devices=12, neuron_cores=24),
}
# g4dn: one T4 up to 16xlarge, four on 12xlarge, eight on metal (the one size listed with an EFA here)
_TABLE.update(
    {
        **{
            f"g4dn.{size}": InstanceSpec(gpus=1, gpu_model="T4", nvme=True)
            for size in ("xlarge", "2xlarge", "4xlarge", "8xlarge", "16xlarge")
        },
        "g4dn.12xlarge": InstanceSpec(gpus=4, gpu_model="T4", nvme=True),
        "g4dn.metal": InstanceSpec(gpus=8, gpu_model="T4", efa=1, nvme=True),
    }
)
for _family, _model, _efa in (("g5", "A10G", 1), ("g6", "L4", None), ("g6e", "L40S", None)):
    _TABLE.update({f"{_family}.{size}": spec for size, spec in _g_family(_model, _efa).items()})

#: CPU-only families HyperPod offers for controllers, login and system groups: no accelerator.
_CPU_FAMILY_NAMES = ("c5", "c5n", "c6i", "c6in", "c7i", "m5", "m6i", "m7i", "r5", "r6i", "r7i", "t3")
_CPU_FAMILIES = re.compile(rf"^({'|'.join(_CPU_FAMILY_NAMES)})\.")


def spec_for(instance_type: str) -> InstanceSpec | None:
    name = ec2_type(instance_type)
    if name in _TABLE:
        return _TABLE[name]
    if _CPU_FAMILIES.match(name):
        return InstanceSpec(gpus=0, neuron_devices=0)
    return None


def known_types() -> tuple[str, ...]:
    """The accelerated instance types with an expectation here, as HyperPod names them (``ml.`` prefix)."""
    return tuple(f"ml.{name}" for name in sorted(_TABLE))


def cpu_families() -> str:
    """The CPU-only families accepted (controllers, login and system groups), for messages."""
    return ", ".join(_CPU_FAMILY_NAMES)
