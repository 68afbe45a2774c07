"""Every pydantic model of the core and the Lambda code builds: its annotations resolve at run time.

Imports used only in annotations live under ``if TYPE_CHECKING:`` (ruff's TC001/TC002, so a cold start does not
load them), and the models build their schemas on first use (``defer_build``). A model whose field names a type
that was moved under ``TYPE_CHECKING`` would import fine and fail only at its first validation, in production.
This builds each one now.
"""

from __future__ import annotations

import importlib
import inspect
import pathlib

import pytest
from pydantic import BaseModel

ROOT = pathlib.Path(__file__).resolve().parents[2]
TREES = ((ROOT / "layers" / "hyperpod_debugger", "hyperpod_debugger"), (ROOT / "functions", "functions"))


def _modules() -> list[str]:
    names = []
    for folder, package in TREES:
        for path in sorted(folder.rglob("*.py")):
            parts = [package, *path.relative_to(folder).with_suffix("").parts]
            if parts[-1] == "__main__":
                continue  # runs the CLI
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def _models() -> list[type[BaseModel]]:
    found: dict[str, type[BaseModel]] = {}
    for name in _modules():
        for _, value in inspect.getmembers(importlib.import_module(name), inspect.isclass):
            if issubclass(value, BaseModel) and value.__module__ == name:
                found[f"{name}.{value.__qualname__}"] = value
    return [found[key] for key in sorted(found)]


MODELS = _models()


def test_the_scan_finds_the_models_it_is_about():
    names = {m.__name__ for m in MODELS}
    assert {"Finding", "TriageReport", "SuggestedCommand"} <= names and len(MODELS) > 40


@pytest.mark.parametrize("model", MODELS, ids=lambda m: f"{m.__module__}.{m.__qualname__}")
def test_the_model_builds_with_its_annotations_resolved(model: type[BaseModel]):
    assert model.model_rebuild(force=True, raise_errors=True) is not False
    assert model.model_json_schema()["title"]
