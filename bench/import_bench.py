"""Benchmark: the CPU each Lambda entry point spends importing, as deployed, against ``import boto3``.

    make bench            # or: .venv/bin/python bench/import_bench.py

As deployed means: Python 3.12 (the runtime's version), the layer as ``make layer-host`` builds it (the same
lock and recipe as the ARM64 layer, with its bytecode), the functions' sources with the bytecode their asset
ships, and nothing written while importing (Lambda's file system is read-only: ``-B``). Each import runs in
a fresh interpreter; the figures are the best of three, in this one run, of the CPU the import took
(``time.process_time`` around it, so the interpreter's own start is not counted).

Each entry point's import is split in two: the libraries it loads (boto3, pydantic, Powertools and the
standard modules they pull in, imported first, in the order the entry point loads them) and our own code
(``hyperpod_debugger`` and ``functions``). A module an entry point loads only when it first runs it (the
probe runner and its evaluators, in the probe function) is measured after the import, as "first run adds".

Targets (issue 32, restated in references/decisions.md, 2026-12-04): our code imports in at most the CPU of
``import boto3`` (the gate); the whole import is shown against twice ``import boto3``, the issue's first
target, which the libraries alone nearly fill (1.5 to 1.75 times). ``--without-bytecode`` adds what the same
import costs with every module compiled first, which is what each cold start paid before the layer carried
bytecode.
"""

from __future__ import annotations

import argparse
import json
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
#: our code's import, at most this many times ``import boto3`` (the gate)
OURS_TARGET = 1.0
#: the whole import, shown against this many times ``import boto3``
RATIO_TARGET = 2.0
TRIES = 3
#: what an entry point imports only when it first runs it: measured after the import
FIRST_RUN: dict[str, tuple[str, ...]] = {
    "functions.monitor.handlers.probes": ("hyperpod_debugger.probe.runner",),
}
OURS = ("hyperpod_debugger", "functions")

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

#: which modules importing ``module`` loads, in order (one line of JSON)
_LOADS = """
import json, sys
sys.path[:0] = {paths!r}
before = list(sys.modules)
import {module}
print(json.dumps([name for name in sys.modules if name not in before]))
"""

#: the libraries first, then our code, then what the first run adds: three CPU figures
_SPLIT = """
import importlib, sys, time
sys.path[:0] = {paths!r}
began = time.process_time()
for name in {libraries!r}:
    try:
        importlib.import_module(name)
    except Exception:
        pass  # a module that only imports as part of its package's own import: loaded with it
libraries = time.process_time()
import {module}
ours = time.process_time()
for name in {later!r}:
    importlib.import_module(name)
print(libraries - began, ours - libraries, time.process_time() - ours)
"""


def entry_points() -> list[str]:
    """Every module a function's ``handler`` setting names (one per file under functions/monitor/handlers)."""
    return sorted(
        f"functions.monitor.handlers.{path.stem}" for path in HANDLERS.glob("*.py") if path.stem != "__init__"
    )


def _run(python: str, code: str, *, bytecode: bool = True) -> str:
    command = [python, "-I", "-B"]
    if not bytecode:
        # look for bytecode in an empty folder only: every module is compiled, as without any
        command += ["-X", f"pycache_prefix={ROOT / 'build' / 'no-bytecode'}"]
    done = subprocess.run([*command, "-c", code], env=_LAMBDA_ENV, capture_output=True, text=True, check=False, cwd="/")
    if done.returncode != 0:
        raise SystemExit(f"the import failed:\n{done.stderr}")
    return done.stdout.strip().splitlines()[-1]


def import_cpu(python: str, module: str, *, bytecode: bool = True) -> float:
    """CPU seconds one fresh interpreter spends importing ``module``, best of ``TRIES``."""
    code = _CHILD.format(paths=[str(LAYER), str(ROOT)], module=module)
    return min(float(_run(python, code, bytecode=bytecode)) for _ in range(TRIES))


def libraries_of(python: str, module: str) -> list[str]:
    """The modules not ours that importing ``module`` loads, in the order it loads them."""
    loaded = json.loads(_run(python, _LOADS.format(paths=[str(LAYER), str(ROOT)], module=module)))
    return [name for name in loaded if name.split(".")[0] not in OURS]


def split_cpu(python: str, module: str) -> tuple[float, float, float]:
    """(libraries, our code, what the first run adds) in CPU seconds: the try with the least in all, of ``TRIES``."""
    code = _SPLIT.format(
        paths=[str(LAYER), str(ROOT)],
        module=module,
        libraries=libraries_of(python, module),
        later=list(FIRST_RUN.get(module, ())),
    )
    tries = [tuple(float(x) for x in _run(python, code).split()) for _ in range(TRIES)]
    libraries, ours, later = min(tries, key=sum)
    return libraries, ours, later


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
    print(f"  {'import boto3':36s} {baseline * 1000:5.0f} ms   (the yardstick)")
    print(f"  {'entry point':36s} {'whole':>5s}         {'libraries':>9s}    {'our code':>13s}    first run adds")
    missed = []
    for module in entry_points():
        took = import_cpu(python, module)
        libraries, ours, later = split_cpu(python, module)
        line = (
            f"  {module.removeprefix('functions.monitor.handlers.'):36s} {took * 1000:5.0f} ms "
            f"{took / baseline:4.2f}x   {libraries * 1000:5.0f} ms   {ours * 1000:5.0f} ms {ours / baseline:4.2f}x"
        )
        line += f"    {later * 1000:5.0f} ms" if FIRST_RUN.get(module) else " " * 12
        if options.without_bytecode:
            line += f"   without bytecode {import_cpu(python, module, bytecode=False) * 1000:5.0f} ms"
        if ours / baseline > OURS_TARGET:
            missed.append(module)
            line += "   MISSED"
        elif took / baseline > RATIO_TARGET:
            line += f"   (whole over {RATIO_TARGET}x)"
        print(line)
    if missed:
        print(f"{len(missed)} entry points' own code imports in over {OURS_TARGET}x boto3's CPU: {', '.join(missed)}")
        return 1
    print(f"every entry point's own code imports in at most {OURS_TARGET}x the CPU of import boto3")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
