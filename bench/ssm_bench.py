"""Benchmark: probe 300 simulated nodes through the fake Session Manager service.

The fake allows 50 StartSession calls per second and each node takes 0.5 s to answer. Reports the
StartSession rate the fan-out achieved (target: at least 90 % of the limit), wall time and peak
memory.

    make bench            # or: .venv/bin/python bench/ssm_bench.py --nodes 300 --rate 50 --delay 0.5
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import resource
import sys
import time
import tracemalloc
from datetime import UTC, datetime
from functools import partial

from hyperpod_debugger.aws.clients import AwsClients
from hyperpod_debugger.aws.ssm_session import run_command
from hyperpod_debugger.aws.ssm_types import session_target
from hyperpod_debugger.domain.observations import ClusterNode
from hyperpod_debugger.probe.delivery import decode_command, probe_command
from hyperpod_debugger.probe.fleet import probe_fleet
from hyperpod_sim.fake_ssm import FakeSsm, NodeReply, marker_aware
from hyperpod_sim.probe_docs import node_document, to_json

ARN = "arn:aws:sagemaker:us-west-2:123456789012:cluster/abcd1234efgh"


def _serve(conn, nodes: int, rate: float, delay: float) -> None:
    """The fake service in its own process, so the client under test has a CPU of its own (as it
    would against the real service) instead of sharing one interpreter with the fake."""
    now = datetime.now(UTC)
    body = to_json(node_document("ip-10-1-2-3", now, orchestrator="EKS")).encode()

    def respond(command: str) -> NodeReply:
        if decode_command(command) is None:
            return NodeReply(stdout=b"", stderr=b"unexpected command\n", exit_code=127)
        return NodeReply(stdout=body, stderr=b"", exit_code=0, delay=delay)

    with FakeSsm(start_session_rate=rate) as ssm:
        for index in range(nodes):
            ssm.add_node(session_target(ARN, "workers", f"i-{index:017x}"), marker_aware(respond))
        conn.send(ssm.endpoint_url)
        conn.recv()  # the parent is done
        ssm.wait_idle()
        conn.send(
            {
                "starts": sorted(t for t, _ in ssm.started),
                "refused": sum(1 for c in ssm.start_calls if c.error),
                "open": ssm.open_sessions(),
            }
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=300)
    parser.add_argument("--rate", type=float, default=50.0, help="StartSession limit of the fake (per second)")
    parser.add_argument("--delay", type=float, default=0.5, help="seconds each node takes to answer")
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args()

    parent, child = multiprocessing.Pipe()
    server = multiprocessing.get_context("spawn").Process(
        target=_serve, args=(child, args.nodes, args.rate, args.delay), daemon=True
    )
    server.start()
    try:
        endpoint = parent.recv()
        os.environ.update(
            {
                "AWS_ENDPOINT_URL_SSM": endpoint,
                "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_DEFAULT_REGION": "us-west-2",
            }
        )
        now = datetime.now(UTC)
        nodes = [
            (
                ClusterNode(f"i-{i:017x}", "workers", "ml.p5.48xlarge", "Running", "", now),
                session_target(ARN, "workers", f"i-{i:017x}"),
            )
            for i in range(args.nodes)
        ]
        clients = AwsClients("us-west-2", max_attempts=1)
        runner = partial(
            run_command, clients.client("ssm"), credentials=clients.credentials(), region="us-west-2", timeout=60
        )
        tracemalloc.start()
        started = time.perf_counter()
        probes = asyncio.run(
            probe_fleet(nodes, probe_command(), runner, rate=args.rate, concurrency=args.concurrency, seed=7)
        )
        wall = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        parent.send("done")
        record = parent.recv()
    finally:
        server.join(timeout=30)
        if server.is_alive():
            server.terminate()

    starts = record["starts"]
    achieved = (len(starts) - 1) / (starts[-1] - starts[0]) if len(starts) > 1 else 0.0
    ok = sum(p.outcome == "OK" for p in probes)
    print(f"nodes                        {args.nodes}")
    print(f"probed OK                    {ok}")
    print(f"StartSession limit (/s)      {args.rate:g}")
    print(f"achieved StartSession (/s)   {achieved:.1f} ({achieved / args.rate:.0%} of the limit)")
    print(f"StartSession refused         {record['refused']}")
    print(f"wall seconds                 {wall:.2f}")
    print(f"peak Python memory (MB)      {peak / 2**20:.1f} (client process)")
    print(f"process max RSS (MB)         {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.1f}")
    print(f"sessions left open           {record['open']}")
    targets = {
        "achieved rate >= 90% of the limit": achieved >= 0.9 * args.rate,
        "every node probed": ok == args.nodes,
        "no session left open": record["open"] == 0,
    }
    print("targets:")
    for name, passed in targets.items():
        print(f"  [{'PASS' if passed else 'FAIL'}] {name}")
    return 0 if all(targets.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
