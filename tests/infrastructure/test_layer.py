"""What travels to AWS: the layer (built as `make layer` builds it) holds the core and its runtime
dependencies and nothing of the simulator; each function's asset holds only ``functions/``."""

from __future__ import annotations

import ast
import pathlib

import pytest

from infra.layer import build_layer

FORBIDDEN = ("moto", "hyperpod_sim", "functions", "pytest")


@pytest.fixture(scope="module")
def layer(tmp_path_factory) -> pathlib.Path:
    return build_layer(tmp_path_factory.mktemp("layer") / "layer")


def imported_roots(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_the_layer_holds_the_core_and_no_simulator(layer: pathlib.Path):
    top = {p.name for p in layer.iterdir()}
    assert "hyperpod_debugger" in top and "aws_lambda_powertools" in top and "pydantic" in top
    assert not top & {"hyperpod_sim", "moto", "functions", "tests", "infra"}
    assert not (layer / "hyperpod_debugger" / "sim").exists()


def test_nothing_in_the_layers_core_imports_the_simulator_moto_or_the_functions(layer: pathlib.Path):
    offenders = {
        str(path.relative_to(layer)): sorted(imported_roots(path) & set(FORBIDDEN))
        for path in (layer / "hyperpod_debugger").rglob("*.py")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_each_function_asset_holds_only_the_entry_points(synthesized):
    _, template, outdir = synthesized
    functions = template.find_resources("AWS::Lambda::Function").values()
    keys = {f["Properties"]["Code"]["S3Key"].split(".")[0] for f in functions}
    assert len(keys) == 1  # one asset, shared by every function
    (asset,) = [p for p in pathlib.Path(outdir).glob("asset.*") if p.name.split(".")[1] in keys]
    assert sorted(p.name for p in asset.iterdir()) == ["functions"]
    assert (asset / "functions" / "monitor").is_dir()
