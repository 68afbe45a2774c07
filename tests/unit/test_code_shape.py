"""The core stays small enough to read: no module over 900 lines, no function over 80 lines (from its ``def`` to
its last line, docstring and decorators' arguments included), and (ruff's C901, configured in pyproject.toml
and run by `make test`) no function more complex than 20. The core is the diagnostic package and the Lambda
code; the simulator, the tests and the CDK app are held to ruff's rule only.

A limit that bites means a function or module does more than one thing: split it along what it decides.
"""

from __future__ import annotations

import ast
import pathlib
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]
CORE = [ROOT / "layers" / "hyperpod_debugger", ROOT / "functions"]
MODULE_LINES = 900
FUNCTION_LINES = 80
COMPLEXITY = 20


def core_modules() -> list[pathlib.Path]:
    return sorted(p for root in CORE for p in root.rglob("*.py"))


def long_functions(path: pathlib.Path, limit: int = FUNCTION_LINES) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            lines = (node.end_lineno or node.lineno) - first + 1
            if lines > limit:
                where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
                found.append(f"{where}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_the_core_is_found():
    modules = core_modules()
    assert len(modules) > 100
    assert ROOT / "functions" / "monitor" / "handlers" / "sweep.py" in modules


def test_no_core_module_is_longer_than_900_lines():
    too_long = {
        str(p.relative_to(ROOT)): n for p in core_modules() if (n := len(p.read_text().splitlines())) > MODULE_LINES
    }
    assert too_long == {}


def test_no_core_function_is_longer_than_80_lines():
    assert [f for p in core_modules() for f in long_functions(p)] == []


def test_the_measure_counts_a_function_from_its_decorators_to_its_last_line(tmp_path: pathlib.Path):
    body = "\n".join(f"    x{i} = {i}" for i in range(77))
    sample = tmp_path / "sample.py"
    # 1 decorator + def + 77 statements + return = 80 lines: at the limit
    sample.write_text(f"@decorator\ndef at_the_limit():\n{body}\n    return x0\n")
    assert long_functions(sample) == []
    sample.write_text(f"@decorator(\n    argument=1,\n)\ndef over_it():\n{body}\n    return x0\n")
    assert long_functions(sample) == ["sample.py:4 over_it (82 lines)"]


def test_ruff_holds_every_function_to_complexity_20_and_only_tests_are_spared():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["lint"]
    assert "C901" in config["select"]
    assert config["mccabe"]["max-complexity"] == COMPLEXITY
    spared = {pattern for pattern, rules in config["per-file-ignores"].items() if "C901" in rules}
    assert spared == {"tests/**"}
