"""Benchmark: the monitor's cold import time per handler module, the Lambda layer's size, and the
findings store's writes per steady-state sweep of an unchanged cluster.

    make bench            # or: .venv/bin/python bench/monitor_bench.py --nodes 1000

Targets (issue 7): import under 1 s cold; layer under 50 MB unzipped beyond boto3/botocore; no write
per unchanged finding beyond the bounded heartbeat (one refresh per finding per hour).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime, timedelta

from hyperpod_debugger.aws.clients import AwsClients
from hyperpod_debugger.aws.store import FindingStore, create_table
from hyperpod_debugger.model import (
    CheckCoverage,
    CheckStatus,
    ClusterRef,
    Coverage,
    Finding,
    Priority,
    Tag,
    TriageReport,
)
from hyperpod_debugger.sim.server import simulated_aws
from hyperpod_debugger.store_logic import plan_sweep

ROOT = pathlib.Path(__file__).resolve().parents[1]
ARN = "arn:aws:sagemaker:us-west-2:123456789012:cluster/abcd1234efgh"
WRITES = ("PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem")


def import_seconds(module: str) -> float:
    """Wall time of importing ``module`` in a fresh interpreter (what a Lambda cold start pays)."""
    code = f"import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True, cwd=ROOT)
    return float(out.stdout.strip())


def tree_bytes(path: pathlib.Path, skip: tuple[str, ...] = ()) -> int:
    total = 0
    for item in path.rglob("*"):
        if item.is_file() and not any(part.startswith(skip) for part in item.relative_to(path).parts[:1]):
            total += item.stat().st_size
    return total


def report_for(nodes: int, now: datetime) -> TriageReport:
    """A cluster where one node in ten has a GPU finding, plus a few cluster-level findings."""
    findings = [
        Finding(
            tag=Tag.FAIL, priority=Priority.P0, check="probe.xid", section="G.1", cluster_arn=ARN,
            instance_id=f"i-{n:017x}", message=f"Xid 79 (GPU fell off the bus) on i-{n:017x}",
            evidence=["NVRM: Xid (PCI:0000:53:00): 79, pid=1234, GPU has fallen off the bus."],
        )
        for n in range(0, nodes, 10)
    ]
    findings += [
        Finding(tag=Tag.WARN, priority=Priority.P2, check=f"vpc.check{n}", section="B.1", cluster_arn=ARN,
                message=f"cluster-level warning {n}")
        for n in range(5)
    ]
    checks = sorted({f.check for f in findings} | {"probe.ecc", "probe.disk", "cluster.status"})
    return TriageReport(
        tool_version="bench",
        generated_at=now.isoformat(),
        cluster=ClusterRef(name="bench-cluster", arn=ARN, region="us-west-2"),
        findings=findings,
        coverage=Coverage(checks=[CheckCoverage(check=c, status=CheckStatus.RAN) for c in checks]),
        exit_code=TriageReport.exit_code_for(findings),
    )


def store_writes(nodes: int) -> list[tuple[str, int, int]]:
    """(sweep, findings, write calls) for a first sweep, then unchanged sweeps at 15 min and after an hour."""
    rows = []
    with simulated_aws():
        clients = AwsClients("us-west-2", max_attempts=2)
        create_table(clients, "bench-findings")
        store = FindingStore(clients, "bench-findings")
        t0 = datetime.now(UTC)
        for label, at in (("first sweep", t0), ("unchanged, +15 min", t0 + timedelta(minutes=15)),
                          ("unchanged, +30 min", t0 + timedelta(minutes=30)),
                          ("unchanged, +75 min (heartbeat due)", t0 + timedelta(minutes=75))):
            report = report_for(nodes, at)
            before = Counter(clients.calls)
            store.apply(plan_sweep(store.open_findings(ARN), report, at), at)
            delta = Counter(clients.calls) - before
            writes = sum(n for op, n in delta.items() if op.rsplit(":", 1)[-1] in WRITES)
            rows.append((label, len(report.findings), writes))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    args = parser.parse_args()

    print("monitor: cold import per handler module (fresh interpreter)")
    for module in ("functions.monitor.handlers", "hyperpod_debugger.triage", "hyperpod_debugger.notify"):
        print(f"  {module:32s} {import_seconds(module):6.2f} s   (target < 1 s)")

    layer = ROOT / "build" / "layer" / "python"
    if layer.is_dir():
        whole = tree_bytes(layer)
        beyond = tree_bytes(layer, skip=("boto3", "botocore", "s3transfer", "jmespath", "urllib3", "dateutil"))
        print(
            f"monitor: layer {whole / 2**20:.1f} MiB unzipped, "
            f"{beyond / 2**20:.1f} MiB beyond the AWS SDK (target < 50)"
        )
    else:
        print("monitor: layer not built (run `make layer` first to measure its size)")

    print(f"monitor: findings-store writes per sweep of an unchanged {args.nodes}-node cluster")
    for label, findings, writes in store_writes(args.nodes):
        print(f"  {label:36s} {findings:5d} open findings  {writes:5d} write calls")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
