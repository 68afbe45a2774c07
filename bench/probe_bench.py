"""Benchmark: evaluate many probe documents (default 20,000, mixed healthy and faulty) in one process.

Target on the project's 2-core machine: under 2 ms per document for all evaluators together.

    make bench            # or: .venv/bin/python bench/probe_bench.py --documents 20000
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime, timedelta

from hyperpod_debugger.probe.base import ProbeContext
from hyperpod_debugger.probe.registry import evaluate
from hyperpod_sim.probe_docs import node_document

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
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
