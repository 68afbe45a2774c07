"""Run every benchmark, print every figure, and fail at the end if any benchmark missed a target.

    make bench            # or: .venv/bin/python bench/run_all.py

Each benchmark runs in its own interpreter (so one's imports and memory do not colour another's figures)
and its output streams through as it comes. A benchmark that misses a target, or crashes, does not stop
the others: the summary at the end names each one with its exit status, and the exit status is non-zero
when any of them was.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]

# (script, arguments): the sizes the targets are stated for.
BENCHMARKS: list[tuple[str, list[str]]] = [
    ("triage_bench.py", ["--nodes", "20000"]),
    ("probe_bench.py", ["--documents", "20000"]),
    ("ssm_bench.py", ["--nodes", "300", "--rate", "50", "--delay", "0.5"]),
    ("monitor_bench.py", ["--nodes", "1000"]),
    ("sweep_bench.py", []),
    ("timing_bench.py", []),
    # every scenario, the storm at its stated size (1,000 Node Health Events in 10 minutes, 2,000 nodes)
    ("alert_bench.py", []),
    # the courier's targets are stated for 8 clusters x 10 messages (its docstring, references/decisions.md)
    ("courier_bench.py", ["--clusters", "8", "--messages", "10"]),
    # every Lambda entry point as deployed (Python 3.12, the built layer's bytecode) against `import boto3`
    ("import_bench.py", ["--without-bytecode"]),
]


def main(argv: list[str] | None = None) -> int:
    only = set(argv if argv is not None else sys.argv[1:])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    results: list[tuple[str, int, float]] = []
    for script, args in BENCHMARKS:
        if only and script.removesuffix(".py") not in only and script not in only:
            continue
        command = [sys.executable, str(ROOT / "bench" / script), *args]
        print(f"\n=== {script} {' '.join(args)}".rstrip(), flush=True)
        began = time.monotonic()
        code = subprocess.run(command, cwd=ROOT, env=env, check=False).returncode
        results.append((script, code, time.monotonic() - began))
    print("\n=== summary")
    for script, code, took in results:
        verdict = "met its targets" if code == 0 else f"MISSED a target (exit {code})"
        print(f"  {script:20s} {verdict:32s} {took:7.1f} s")
    missed = [script for script, code, _ in results if code != 0]
    if missed:
        print(f"{len(missed)} of {len(results)} benchmarks missed a target: {', '.join(missed)}")
        return 1
    print(f"all {len(results)} benchmarks met their targets")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
