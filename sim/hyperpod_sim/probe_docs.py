"""Probe documents for simulated nodes: healthy ones and ones with chosen faults.

The outputs follow the exact command formats of ``references/probe.md`` (nvidia-smi CSV with its
header, journalctl short-iso-precise kernel lines, ``df -P -k``, ``findmnt -J``, ``chronyc tracking``,
``systemctl is-active`` lines). Used by the demo's fake SSM agent, the tests and the benchmarks.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime, timedelta

from hyperpod_debugger.probe.document import ProbeDocument, ProbeItem

#: Faults a simulated node can carry.
FAULTS = frozenset(
    {
        "gpu_missing",  # one GPU fewer than the instance type has
        "xid79",  # GPU fell off the bus, this boot
        "xid79_twice",  # the same Xid in the previous boot too (survived a reboot)
        "xid13",  # an application-class Xid
        "hot_gpu",  # one GPU at 91 °C
        "uce",  # uncorrectable ECC on one GPU
        "remap_pending",  # a row remap waiting for a reset
        "root_full",  # root volume 93 % used
        "oom_job",  # an OOM kill inside a job's cgroup
        "clock_unsynced",  # chrony not synchronised
        "slurmd_down",
        "containerd_down",
        "old_driver",  # an older NVIDIA driver than its peers (a node left behind by a partial patch, § E)
    }
)

#: The software the simulated nodes run (§ E): the HyperPod AMI release for EKS of October 22, 2025 (NVIDIA
#: driver 580.95.05, EFA installer 1.43.3 with libfabric 2.1.0amzn5.0 and aws-ofi-nccl 1.16.3, default CUDA
#: 12.9), and the driver its Amazon Linux 2 build ran, on the node a partial patch left behind.
DRIVER, OLD_DRIVER = "580.95.05", "570.195.03"
_SOFTWARE = {
    "kernel": "5.15.0-1063-aws",
    "cuda": "12.9.1",
    "efa_installer": "1.43.3",
    "libfabric": "2.1.0amzn5.0",
    "aws_ofi_nccl": "1.16.3-aws",
    "nccl": "2.27.5",
}

_GPU_HEADER = (
    "index, pci.bus_id, name, uuid, temperature.gpu, power.draw [W], clocks_event_reasons.active, "
    "clocks_event_reasons.hw_slowdown, clocks_event_reasons.hw_thermal_slowdown, "
    "clocks_event_reasons.sw_thermal_slowdown, clocks_event_reasons.hw_power_brake_slowdown, "
    "ecc.errors.corrected.volatile.total, ecc.errors.uncorrected.volatile.total, "
    "ecc.errors.corrected.aggregate.total, ecc.errors.uncorrected.aggregate.total, "
    "retired_pages.single_bit_ecc.count, retired_pages.double_bit.count, retired_pages.pending"
)


def _bus(i: int) -> str:
    return f"00000000:{0x18 + 0x10 * i:02X}:00.0"


def _gpu_csv(gpus: int, model: str, faults: set[str]) -> str:
    rows = [_GPU_HEADER]
    for i in range(gpus):
        temp = 91 if ("hot_gpu" in faults and i == 3) else 38 + i
        uce = 2 if ("uce" in faults and i == 5) else 0
        rows.append(
            f"{i}, {_bus(i)}, NVIDIA {model}, GPU-{i:08x}-0000-0000-0000-000000000000, {temp}, 70.12 W, "
            f"0x0000000000000000, Not Active, Not Active, Not Active, Not Active, 0, {uce}, 0, {uce}, "
            "[N/A], [N/A], [N/A]"
        )
    return "\n".join(rows) + "\n"


def _remap(gpus: int, faults: set[str]) -> str:
    rows = [
        "gpu_bus_id, gpu_uuid, remapped_rows.correctable, remapped_rows.uncorrectable, remapped_rows.pending, "
        "remapped_rows.failure"
    ]
    for i in range(gpus):
        pending = "remap_pending" in faults and i == 2
        rows.append(
            f"{_bus(i)}, GPU-{i:08x}-0000-0000-0000-000000000000, 0, {1 if pending else 0}, "
            f"{'Yes' if pending else 'No'}, No"
        )
    return "\n".join(rows) + "\n"


def _stamp(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%S.%f+00:00")


def _kernel(host: str, now: datetime, faults: set[str], previous: bool) -> str:
    boot = now - timedelta(hours=6)
    lines = [
        f"{_stamp(boot + timedelta(seconds=5))} {host} kernel: efa 0000:36:00.0: Setup irq:0 name:efa-mgmnt@pci",
        f"{_stamp(boot + timedelta(seconds=9))} {host} kernel: nvidia-peermem: loading out-of-tree module",
    ]
    if previous:
        if "xid79_twice" in faults:
            when = boot - timedelta(hours=2)
            lines = [
                f"{_stamp(when)} {host} kernel: NVRM: Xid (PCI:0000:b9:00): 79, pid=1234, name=python, "
                "GPU has fallen off the bus."
            ]
        else:
            lines = []
        return "\n".join(lines) + ("\n" if lines else "")
    if "xid79" in faults or "xid79_twice" in faults:
        lines.append(
            f"{_stamp(now - timedelta(hours=1))} {host} kernel: NVRM: Xid (PCI:0000:b9:00): 79, pid=1234, "
            "name=python, GPU has fallen off the bus."
        )
    if "xid13" in faults:
        lines.append(
            f"{_stamp(now - timedelta(hours=2))} {host} kernel: NVRM: Xid (PCI:0000:53:00): 13, pid=2345, "
            "name=python3, Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address"
        )
    if "oom_job" in faults:
        stamp = _stamp(now - timedelta(minutes=30))
        # the kernel's order: the oom-kill summary, then the kill itself
        lines += [
            f"{stamp} {host} kernel: oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0-1,"
            "oom_memcg=/kubepods/burstable/pod1,task_memcg=/kubepods/burstable/pod1,task=python3,pid=4242,uid=0",
            f"{stamp} {host} kernel: Memory cgroup out of memory: Killed process 4242 (python3) "
            "total-vm:123456kB, anon-rss:65432kB",
        ]
    return "\n".join(lines) + "\n"


def _df(root_pct: int) -> str:
    total = 104_857_600
    used = total * root_pct // 100
    return (
        "Filesystem     1024-blocks      Used Available Capacity Mounted on\n"
        f"/dev/nvme0n1p1  {total} {used} {total - used} {root_pct}% /\n"
        "tmpfs           1047552000   1024 1047550976   1% /dev/shm\n"
        "/dev/nvme1n1    524288000  10240000 514048000   2% /opt/sagemaker\n"
        "/dev/md0      27000000000 100000000 26900000000  1% /opt/dlami/nvme\n"
    )


_FINDMNT = json.dumps(
    {
        "filesystems": [
            {"target": "/", "source": "/dev/nvme0n1p1", "fstype": "xfs", "size": "100G"},
            {"target": "/dev/shm", "source": "tmpfs", "fstype": "tmpfs", "size": "999G"},
            {"target": "/opt/sagemaker", "source": "/dev/nvme1n1", "fstype": "ext4", "size": "500G"},
            {"target": "/opt/dlami/nvme", "source": "/dev/md0", "fstype": "ext4", "size": "25T"},
        ]
    }
)


def _chrony(synced: bool) -> str:
    if not synced:
        return (
            "Reference ID    : 00000000 ()\nStratum         : 0\nRef time (UTC)  : Thu Jan 01 00:00:00 1970\n"
            "System time     : 0.000000000 seconds fast of NTP time\nLeap status     : Not synchronised\n"
        )
    return (
        "Reference ID    : A9FEA97B (169.254.169.123)\nStratum         : 4\n"
        "System time     : 0.000012345 seconds fast of NTP time\nLast offset     : +0.000001000 seconds\n"
        "RMS offset      : 0.000010000 seconds\nLeap status     : Normal\n"
    )


def _services(orchestrator: str | None, faults: set[str], controller: bool, nvswitch: bool = False) -> str:
    states = {"amazon-ssm-agent": "active", "nvidia-dcgm": "active"}
    if nvswitch:  # HGX boards run NVIDIA Fabric Manager for their NVSwitches
        states["nvidia-fabricmanager"] = "active"
    if orchestrator == "EKS":
        states["containerd"] = "inactive" if "containerd_down" in faults else "active"
        states["kubelet"] = "active"
    if orchestrator == "Slurm":
        states["munge"] = "active"
        if controller:
            states["slurmctld"] = "active"
        else:
            states["slurmd"] = "failed" if "slurmd_down" in faults else "active"
    return "".join(f"{unit} {state}\n" for unit, state in states.items())


def _software(gpus: int, efa_devices: int, faults: set[str]) -> str:
    """The ``software_versions`` item as probe.sh prints it (its formats: references/probe.md)."""
    s = _SOFTWARE
    lines = ["== kernel", s["kernel"], "== nvidia_driver"]
    if gpus:
        driver = OLD_DRIVER if "old_driver" in faults else DRIVER
        lines.append(
            f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {driver}  Release Build  "
            "(dvs-builder@U16-I3-B03-4-3)  Wed Oct  1 04:12:31 UTC 2025"
        )
    lines.append("== cuda")
    if gpus:
        lines += [
            "file /usr/local/cuda/version.json",
            "{",
            '   "cuda" : {',
            '      "name" : "CUDA SDK",',
            f'      "version" : "{s["cuda"]}"',
            "   },",
        ]
    lines.append("== efa_installer")
    if efa_devices:
        lines.append(f"# EFA installer version: {s['efa_installer']}")
    lines.append("== libfabric")
    if efa_devices:
        lines += [f"fi_info: {s['libfabric']}", f"libfabric: {s['libfabric']}", "libfabric api: 2.1"]
    lines.append("== aws_ofi_nccl")
    if efa_devices and gpus:
        lines += ["path /opt/amazon/ofi-nccl/lib/x86_64-linux-gnu/libnccl-net.so", f"aws-ofi-nccl {s['aws_ofi_nccl']}"]
    lines.append("== nccl")
    if gpus:
        lines.append(f"/usr/local/cuda/lib/libnccl.so.{s['nccl']}")
    lines += ["== neuron_driver", "== neuron_runtime"]
    return "\n".join(lines) + "\n"


def node_document(
    hostname: str,
    now: datetime,
    *,
    gpus: int = 8,
    gpu_model: str = "H100 80GB HBM3",
    efa_devices: int = 32,
    orchestrator: str | None = None,
    controller: bool = False,
    faults: Iterable[str] = (),
) -> ProbeDocument:
    """The document ``probe.sh`` would print on such a node at ``now``."""
    chosen = set(faults)
    unknown = chosen - FAULTS
    if unknown:
        raise ValueError(f"unknown simulated faults: {sorted(unknown)}")
    seen = gpus - 1 if "gpu_missing" in chosen else gpus
    items: dict[str, str] = {
        "uptime": f"{6 * 3600.0:.2f} 1000.00\n",
        "df": _df(93 if "root_full" in chosen else 41),
        "findmnt": _FINDMNT,
        "chronyc_tracking": _chrony("clock_unsynced" not in chosen),
        "systemctl_is_active": _services(orchestrator, chosen, controller, nvswitch=gpus == 8 and "H100" in gpu_model),
        "meminfo": "MemTotal:       2097152000 kB\nMemFree:        1500000000 kB\nMemAvailable:   1900000000 kB\n"
        "HugePages_Total:       0\nHugePages_Free:        0\n",
        "kernel_log": _kernel(hostname, now, chosen, previous=False),
        "kernel_log_previous_boot": _kernel(hostname, now, chosen, previous=True),
        "software_versions": _software(gpus, efa_devices, chosen),
    }
    if gpus:
        items["nvidia_smi_query_gpu"] = _gpu_csv(seen, gpu_model, chosen)
        items["nvidia_smi_remapped_rows"] = _remap(seen, chosen)
    if efa_devices:
        items["efa_devices"] = "".join(f"rdmap{16 + i}s27\n" for i in range(efa_devices))
        items["efa_module"] = "2.13.0g\n"
        items["fi_info_efa"] = (
            "provider: efa\n    fabric: efa\n    domain: rdmap16s27-rdm\n    version: 122.0\n"
            "    type: FI_EP_RDM\n    protocol: FI_PROTO_EFA\n"
        )
    return ProbeDocument(
        hostname=hostname,
        collected_at=now,
        uptime_s=6 * 3600.0,
        items={k: ProbeItem(command=k, exit_code=0, stdout=v) for k, v in items.items()},
    )


def to_json(doc: ProbeDocument) -> str:
    """Serialise a document exactly as ``probe.sh`` prints it."""
    return json.dumps(
        {
            "schema_version": doc.schema_version,
            "hostname": doc.hostname,
            "collected_at": doc.collected_at.strftime("%Y-%m-%dT%H:%M:%SZ") if doc.collected_at else None,
            "uptime_s": doc.uptime_s,
            "items": {
                k: {
                    "command": i.command,
                    "exit_code": i.exit_code,
                    "stdout": i.stdout,
                    "stderr": i.stderr,
                    "truncated": i.truncated,
                }
                for k, i in doc.items.items()
            },
        }
    )
