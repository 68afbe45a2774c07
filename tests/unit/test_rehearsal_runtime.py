"""The rehearsal's stand-in for the arm64 layer: accepted only when it is the same recipe."""

from __future__ import annotations

import pathlib

import pytest

from hyperpod_sim.rehearsal.runtime import host_layer


def _layer(root: pathlib.Path, core: str, version: str = "2.14.4") -> pathlib.Path:
    (root / "python" / "hyperpod_debugger").mkdir(parents=True)
    (root / "python" / "hyperpod_debugger" / "__init__.py").write_text(core)
    (root / "python" / f"pydantic-{version}.dist-info").mkdir()
    (root / "python" / "native.so").write_bytes(b"\x7fELF" + root.name.encode())  # native files may differ
    return root


def test_the_same_recipe_built_for_another_machine_stands_in(tmp_path: pathlib.Path):
    deployed = _layer(tmp_path / "arm64", "VERSION = 1\n")
    host = _layer(tmp_path / "x86_64", "VERSION = 1\n")
    assert host_layer(deployed, host) == host


def test_a_different_core_file_or_version_is_refused(tmp_path: pathlib.Path):
    deployed = _layer(tmp_path / "arm64", "VERSION = 1\n")
    with pytest.raises(ValueError, match="hyperpod_debugger/__init__.py"):
        host_layer(deployed, _layer(tmp_path / "edited", "VERSION = 2\n"))
    with pytest.raises(ValueError, match="pydantic-2.13.0"):
        host_layer(deployed, _layer(tmp_path / "older", "VERSION = 1\n", version="2.13.0"))


def test_a_missing_host_build_says_how_to_make_it(tmp_path: pathlib.Path):
    deployed = _layer(tmp_path / "arm64", "VERSION = 1\n")
    with pytest.raises(FileNotFoundError, match="make layer-host"):
        host_layer(deployed, tmp_path / "absent")
