"""Benchmark: CPU per probe document for all on-node evaluators together (default 20,000 documents, mixed
healthy and faulty, evaluated one at a time as a sweep's probe function does).

The documents are split into rounds after a warm-up (a probe function evaluates thousands in one warm
process); the figure is the median round's CPU per document, with the fastest and slowest rounds beside it
so a noisy machine shows as a wide spread. Target on the project's 2-core machine: under 1 ms.

    make bench            # or: .venv/bin/python bench/probe_bench.py --documents 20000
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta

from hyperpod_debugger.probe.base import ProbeContext
from hyperpod_debugger.probe.registry import evaluate
from hyperpod_sim.probe_docs import node_document

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
TARGET_MS = 1.0
WARM_UP = 200
#: A mix: three quarters healthy, the rest with a spread of faults.
FAULT_MIX = (
    (),
    (),
    (),
    ("xid79", "hot_gpu", "remap_pending", "root_full", "oom_job"),
    (),
    (),
    ("gpu_missing", "uce"),
    ("xid13", "clock_unsynced"),
)


def make_document(index: int):
    return node_document(
        f"ip-10-1-{index // 250}-{index % 250}", NOW, orchestrator="EKS", faults=FAULT_MIX[index % len(FAULT_MIX)]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    ctx = ProbeContext(instance_type="ml.p5.48xlarge", now=NOW, orchestrator="EKS", window=timedelta(hours=24))
    for index in range(WARM_UP):
        evaluate(make_document(index), ctx)
    per_round = max(1, args.documents // args.rounds)
    findings = 0
    rounds_ms: list[float] = []
    # One document at a time, as a sweep handles them: build it (untimed), evaluate it (timed), drop it.
    for round_ in range(args.rounds):
        cpu = 0.0
        for index in range(round_ * per_round, (round_ + 1) * per_round):
            doc = make_document(index)
            started = time.process_time()
            produced, _ = evaluate(doc, ctx)
            cpu += time.process_time() - started
            findings += sum(1 for f in produced if f.is_problem)
        rounds_ms.append(cpu / per_round * 1000)
    median = statistics.median(rounds_ms)
    print(f"documents                    {per_round * args.rounds} ({args.rounds} rounds after {WARM_UP} warm-up)")
    print(
        f"CPU per document (ms)        {median:.3f} median round (fastest {min(rounds_ms):.3f}, "
        f"slowest {max(rounds_ms):.3f})"
    )
    print(f"problem findings             {findings}")
    ok = median < TARGET_MS
    print(f"targets:\n  [{'PASS' if ok else 'FAIL'}] < {TARGET_MS:g} ms CPU per document (median round)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
