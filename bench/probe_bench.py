"""Benchmark: evaluate many probe documents (default 20,000, mixed healthy and faulty) in one process.

Target on the project's 2-core machine: under 2 ms per document for all evaluators together.

    make bench            # or: .venv/bin/python bench/probe_bench.py --documents 20000
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime, timedelta

from hyperpod_debugger.probe.base import ProbeContext
from hyperpod_debugger.probe.document import ProbeDocument, ProbeItem
from hyperpod_debugger.probe.registry import evaluate

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
UPTIME = 3 * 86400.0
GPU_HEADER = (
    "index, pci.bus_id, name, uuid, temperature.gpu, power.draw [W], clocks_event_reasons.active, "
    "clocks_event_reasons.hw_slowdown, clocks_event_reasons.hw_thermal_slowdown, "
    "clocks_event_reasons.sw_thermal_slowdown, clocks_event_reasons.hw_power_brake_slowdown, "
    "ecc.errors.corrected.volatile.total, ecc.errors.uncorrected.volatile.total, "
    "ecc.errors.corrected.aggregate.total, ecc.errors.uncorrected.aggregate.total, "
    "retired_pages.single_bit_ecc.count, retired_pages.double_bit.count, retired_pages.pending"
)


def _gpu_csv(gpus: int, hot: int | None = None, uce_gpu: int | None = None) -> str:
    rows = [GPU_HEADER]
    for i in range(gpus):
        temp = 91 if i == hot else 38 + i
        uce = 2 if i == uce_gpu else 0
        rows.append(
            f"{i}, 00000000:{0x18 + 0x10 * i:02X}:00.0, NVIDIA H100 80GB HBM3, "
            f"GPU-{i:08x}-0000-0000-0000-000000000000, "
            f"{temp}, 70.12 W, 0x0000000000000000, Not Active, Not Active, Not Active, Not Active, 0, {uce}, 0, {uce}, "
            "[N/A], [N/A], [N/A]"
        )
    return "\n".join(rows) + "\n"


def _remap(gpus: int, pending_gpu: int | None = None) -> str:
    rows = [
        "gpu_bus_id, gpu_uuid, remapped_rows.correctable, remapped_rows.uncorrectable, remapped_rows.pending, "
        "remapped_rows.failure"
    ]
    for i in range(gpus):
        pending = "Yes" if i == pending_gpu else "No"
        rows.append(
            f"00000000:{0x18 + 0x10 * i:02X}:00.0, GPU-{i:08x}-0000-0000-0000-000000000000, 0, "
            f"{1 if i == pending_gpu else 0}, {pending}, No"
        )
    return "\n".join(rows) + "\n"


def _kernel(faulty: bool) -> str:
    lines = [
        "2026-11-30T08:00:01.000000+00:00 ip-10-1-2-3 kernel: efa 0000:36:00.0: Setup irq:0x... name:efa-mgmnt@pci",
        "2026-11-30T08:10:11.000000+00:00 ip-10-1-2-3 kernel: nvidia-peermem: loading out-of-tree module",
    ] * 20
    if faulty:
        lines += [
            "2026-11-30T11:00:00.100000+00:00 ip-10-1-2-3 kernel: NVRM: Xid (PCI:0000:b9:00): 79, pid=1234, "
            "name=python, GPU has fallen off the bus.",
            "2026-11-30T11:05:00.200000+00:00 ip-10-1-2-3 kernel: Memory cgroup out of memory: Killed process 4242 "
            "(python3) total-vm:123456kB, anon-rss:65432kB",
            "2026-11-30T11:05:00.200001+00:00 ip-10-1-2-3 kernel: oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),"
            "cpuset=/,mems_allowed=0-1,oom_memcg=/kubepods/burstable/pod1,task_memcg=/kubepods/burstable/pod1,"
            "task=python3,pid=4242,uid=0",
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


FINDMNT = json.dumps(
    {
        "filesystems": [
            {"target": "/", "source": "/dev/nvme0n1p1", "fstype": "xfs", "size": "100G"},
            {"target": "/dev/shm", "source": "tmpfs", "fstype": "tmpfs", "size": "999G"},
            {"target": "/opt/sagemaker", "source": "/dev/nvme1n1", "fstype": "ext4", "size": "500G"},
            {"target": "/opt/dlami/nvme", "source": "/dev/md0", "fstype": "ext4", "size": "25T"},
        ]
    }
)
CHRONY = (
    "Reference ID    : A9FEA97B (169.254.169.123)\nStratum         : 4\n"
    "Ref time (UTC)  : Mon Nov 30 11:59:00 2026\nSystem time     : 0.000012345 seconds fast of NTP time\n"
    "Last offset     : +0.000001000 seconds\nRMS offset      : 0.000010000 seconds\nFrequency       : 1.0 ppm slow\n"
    "Residual freq   : +0.000 ppm\nSkew            : 0.010 ppm\nRoot delay      : 0.000300000 seconds\n"
    "Root dispersion : 0.000100000 seconds\nUpdate interval : 16.0 seconds\nLeap status     : Normal\n"
)
SERVICES = "amazon-ssm-agent active\ncontainerd active\nkubelet active\nslurmd inactive\nnvidia-dcgm active\n"


def make_document(index: int) -> ProbeDocument:
    faulty = index % 4 == 0
    gpus = 7 if index % 50 == 0 else 8
    items = {
        "nvidia_smi_query_gpu": _gpu_csv(gpus, hot=3 if faulty else None, uce_gpu=5 if index % 8 == 0 else None),
        "nvidia_smi_remapped_rows": _remap(gpus, pending_gpu=2 if faulty else None),
        "kernel_log": _kernel(faulty),
        "kernel_log_previous_boot": "",
        "efa_devices": "\n".join(f"rdmap{16 + i}s27" for i in range(32)) + "\n",
        "efa_module": "2.13.0g\n",
        "fi_info_efa": "provider: efa\n    fabric: efa\n    domain: rdmap16s27-rdm\n    version: 122.0\n"
        "    type: FI_EP_RDM\n    protocol: FI_PROTO_EFA\n",
        "df": _df(93 if faulty else 41),
        "findmnt": FINDMNT,
        "chronyc_tracking": CHRONY,
        "systemctl_is_active": SERVICES,
        "meminfo": "MemTotal:       2097152000 kB\nMemFree:        1500000000 kB\nMemAvailable:   1900000000 kB\n"
        "HugePages_Total:       0\nHugePages_Free:        0\n",
    }
    return ProbeDocument(
        hostname=f"ip-10-1-{index // 250}-{index % 250}",
        collected_at=NOW,
        uptime_s=UPTIME,
        items={k: ProbeItem(command=k, exit_code=0, stdout=v) for k, v in items.items()},
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=20_000)
    args = parser.parse_args()
    ctx = ProbeContext(instance_type="ml.p5.48xlarge", now=NOW, orchestrator="EKS", window=timedelta(hours=24))
    findings = 0
    elapsed = 0.0
    # One document at a time, as a sweep handles them: build it (untimed), evaluate it (timed), drop it.
    for index in range(args.documents):
        doc = make_document(index)
        started = time.perf_counter()
        produced, _ = evaluate(doc, ctx)
        elapsed += time.perf_counter() - started
        findings += sum(1 for f in produced if f.is_problem)
    per_doc_ms = elapsed / args.documents * 1000
    print(f"documents                    {args.documents}")
    print(f"total seconds                {elapsed:.2f}")
    print(f"per document (ms)            {per_doc_ms:.3f}")
    print(f"problem findings             {findings}")
    ok = per_doc_ms < 2.0
    print(f"targets:\n  [{'PASS' if ok else 'FAIL'}] < 2 ms per document")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
