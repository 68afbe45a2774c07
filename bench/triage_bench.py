"""Benchmark: triage of one large simulated cluster (default 20,000 nodes).

Seeds the cluster into the embedded moto server, runs the real triage over HTTP through
boto3, and reports wall time, peak memory and API calls per operation. Targets on the
project's 2-core machine: < 60 s, < 500 MB, ListClusterNodes = ceil(nodes / 100), and no
per-node DescribeClusterNode call.

    make bench            # or: .venv/bin/python bench/triage_bench.py --nodes 20000
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import sys
import time
import tracemalloc
from datetime import UTC, datetime, timedelta

from hyperpod_debugger.aws.clients import AwsClients
from hyperpod_debugger.triage import TriageRequest, run_triage
from hyperpod_sim import seed
from hyperpod_sim.seed import GroupSpec, NodeState
from hyperpod_sim.server import simulated_aws

REGION = "us-west-2"


def seed_large(clients: AwsClients, nodes: int, now: datetime) -> seed.SeededCluster:
    ec2 = clients.client("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.30.0.0/16")["Vpc"]["VpcId"]
    ec2.modify_vpc_attribute(VpcId=vpc, EnableDnsHostnames={"Value": True})
    subnets = [
        ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.30.{64 * i}.0/18", AvailabilityZone=f"us-west-2{az}")["Subnet"][
            "SubnetId"
        ]
        for i, az in enumerate("abc")
    ]
    sg = ec2.create_security_group(GroupName="bench-efa", Description="bench", VpcId=vpc)["GroupId"]
    rule = [{"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": sg}]}]
    ec2.authorize_security_group_ingress(GroupId=sg, IpPermissions=rule)
    ec2.authorize_security_group_egress(GroupId=sg, IpPermissions=rule)
    controllers = 1
    workers = nodes - controllers
    failures = {
        ("workers", i): NodeState("Failure", "Node failed health checks: hardware failure detected")
        for i in range(0, workers, 100)
    }
    failures.update({("workers", i): NodeState("SystemUpdating", "patching") for i in range(50, workers, 100)})
    cluster = seed.create_cluster(
        clients.client("sagemaker"),
        REGION,
        "bench-20k",
        [GroupSpec("controller", "ml.c5.xlarge", controllers), GroupSpec("workers", "ml.p5.48xlarge", workers)],
        {"sgs": [sg], "subnets": subnets},
        orchestrator=None,
        node_recovery="Automatic",
        provisioning_mode="Continuous",
        launch_time=now - timedelta(days=1),
        node_states=failures,
    )
    for hours in range(1, 21):
        seed.add_event(
            cluster,
            when=now - timedelta(hours=hours),
            level="Info",
            group="workers",
            description="Instance scaling in progress",
        )
    return cluster


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=20_000)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()

    now = datetime.now(UTC)
    with simulated_aws():
        started = time.perf_counter()
        cluster = seed_large(AwsClients(REGION, max_attempts=2), args.nodes, now)
        seeded_s = time.perf_counter() - started

        request = TriageRequest(cluster=cluster.name, region=REGION, now=now)
        # Run 1 times the triage; run 2 traces memory (tracing slows every thread, moto's too).
        started, cpu = time.perf_counter(), time.thread_time()
        report = run_triage(request)
        wall, client_cpu = time.perf_counter() - started, time.thread_time() - cpu
        tracemalloc.start()
        run_triage(request)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()

    calls = report.coverage.api_calls
    expected_pages = math.ceil(args.nodes / 100)
    figures = {
        "nodes": args.nodes,
        "seed_seconds": round(seeded_s, 2),
        "triage_wall_seconds": round(wall, 2),
        "triage_client_cpu_seconds": round(client_cpu, 2),
        # Python allocations during one triage, moto's server threads included (same process).
        "triage_peak_python_mb": round(peak / 2**20, 1),
        "process_max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "api_calls": calls,
        "findings": len(report.findings),
        "node_count_reported": report.cluster.node_count,
    }
    checks = {
        "wall < 60 s": wall < 60,
        "peak < 500 MB": peak < 500 * 2**20,
        f"ListClusterNodes == {expected_pages}": calls.get("sagemaker:ListClusterNodes") == expected_pages,
        "no DescribeClusterNode": calls.get("sagemaker:DescribeClusterNode", 0) == 0,
        "all nodes listed": report.cluster.node_count == args.nodes,
    }
    figures["targets"] = checks
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        for key, value in figures.items():
            if key in ("api_calls", "targets"):
                continue
            print(f"{key:28} {value}")
        print("api calls:")
        for op, count in sorted(calls.items()):
            print(f"  {op:40} {count}")
        print("targets:")
        for name, ok in checks.items():
            print(f"  [{'PASS' if ok else 'FAIL'}] {name}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
