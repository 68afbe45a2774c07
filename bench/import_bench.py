"""Benchmark: the CPU each Lambda entry point spends importing, as deployed, against ``import boto3``.

    make bench            # or: .venv/bin/python bench/import_bench.py

As deployed means: Python 3.12 (the runtime's version), the layer as ``make layer-host`` builds it (the same
lock and recipe as the ARM64 layer, with its bytecode), the functions' sources with the bytecode their asset
ships, and nothing written while importing (Lambda's file system is read-only: ``-B``). Each import runs in
a fresh interpreter; the figure is the best of three, in this one run, of the CPU the import took
(``time.process_time`` around it, so the interpreter's own start is not counted).

Target: every entry point at most twice the CPU of ``import boto3`` from the same layer (issue 32). The
second column shows what the same import costs without bytecode (every module compiled first), which is
what each cold start paid before the layer carried it.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from infra.layer import runtime_python  # noqa: E402

LAYER = ROOT / "build" / "layer-x86_64" / "python"
HANDLERS = ROOT / "functions" / "monitor" / "handlers"
RATIO_TARGET = 2.0
TRIES = 3

#: What the function's configuration sets (infra/constructs/python_function.py) and Lambda itself provides.
_LAMBDA_ENV = {
    "AWS_REGION": "us-west-2",
    "AWS_DEFAULT_REGION": "us-west-2",
    "AWS_LAMBDA_FUNCTION_NAME": "import-bench",
    "POWERTOOLS_SERVICE_NAME": "hyperpod-debugger",
    "POWERTOOLS_METRICS_NAMESPACE": "HyperPodDebugger",
    "POWERTOOLS_LOG_LEVEL": "INFO",
    "POWERTOOLS_TRACE_DISABLED": "true",
    "LANG": "C.UTF-8",
}

_CHILD = """
import sys, time
sys.path[:0] = {paths!r}
began = time.process_time()
import {module}
print(time.process_time() - began)
"""


def entry_points() -> list[str]:
    """Every module a function's ``handler`` setting names (one per file under functions/monitor/handlers)."""
    return sorted(
        f"functions.monitor.handlers.{path.stem}" for path in HANDLERS.glob("*.py") if path.stem != "__init__"
    )


def import_cpu(python: str, module: str, *, bytecode: bool = True) -> float:
    """CPU seconds one fresh interpreter spends importing ``module``, best of ``TRIES``."""
    command = [python, "-I", "-B"]
    if not bytecode:
        # look for bytecode in an empty folder only: every module is compiled, as without any
        command += ["-X", f"pycache_prefix={ROOT / 'build' / 'no-bytecode'}"]
    code = _CHILD.format(paths=[str(LAYER), str(ROOT)], module=module)
    best = float("inf")
    for _ in range(TRIES):
        done = subprocess.run(
            [*command, "-c", code], env=_LAMBDA_ENV, capture_output=True, text=True, check=False, cwd="/"
        )
        if done.returncode != 0:
            raise SystemExit(f"import {module} failed:\n{done.stderr}")
        best = min(best, float(done.stdout.strip().splitlines()[-1]))
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--without-bytecode", action="store_true", help="also measure each import compiled")
    options = parser.parse_args(argv)
    python = runtime_python()
    if python is None or not LAYER.is_dir():
        print("needs Python 3.12 and the host layer (make layer-host)", file=sys.stderr)
        return 2
    baseline = import_cpu(python, "boto3")
    print(f"Python {python}; layer {LAYER.relative_to(ROOT)}; best of {TRIES}, CPU of the import alone")
    print(f"  {'import boto3':44s} {baseline * 1000:7.0f} ms   (the yardstick)")
    missed = []
    for module in entry_points():
        took = import_cpu(python, module)
        ratio = took / baseline
        line = f"  {module:44s} {took * 1000:7.0f} ms   {ratio:4.2f}x boto3"
        if options.without_bytecode:
            line += f"   without bytecode {import_cpu(python, module, bytecode=False) * 1000:6.0f} ms"
        if ratio > RATIO_TARGET:
            missed.append(module)
            line += "   MISSED"
        print(line)
    if missed:
        print(f"{len(missed)} entry points import in more than {RATIO_TARGET}x boto3's CPU: {', '.join(missed)}")
        return 1
    print(f"every entry point imports in at most {RATIO_TARGET}x the CPU of import boto3")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
