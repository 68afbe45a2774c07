"""The Lambda layer, built offline without Docker: the core package and its runtime dependencies as
cp312 / manylinux2014_aarch64 wheels (the functions run on ARM64), into ``<out>/python``.

    python -m infra.layer build/layer        # what `make layer` runs

Only the root distribution (``hyperpod-debugger``, with its ``lambda`` extra) goes in: the simulator is
a distribution of its own (``sim/``) and the Lambda entry points travel as the functions' own asset.
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

from infra.constants import REPO_ROOT

PLATFORM = "manylinux2014_aarch64"
PYTHON_VERSION = "3.12"


def build_layer(out: pathlib.Path, *, python: str = sys.executable) -> pathlib.Path:
    """Build the layer into ``out`` (emptied first); returns ``out / "python"``."""
    wheels = out.parent / f"{out.name}-wheel"
    # setuptools reuses build/lib of an earlier build, files since deleted included: start clean
    for path in (out, wheels, REPO_ROOT / "build" / "lib", *REPO_ROOT.glob("build/bdist.*")):
        shutil.rmtree(path, ignore_errors=True)
    pip = [python, "-m", "pip", "--disable-pip-version-check"]
    subprocess.run([*pip, "wheel", "--quiet", "--no-deps", "-w", str(wheels), str(REPO_ROOT)], check=True)
    (wheel,) = wheels.glob("hyperpod_debugger-*.whl")
    target = out / "python"
    subprocess.run(
        [
            *pip,
            "install",
            "--quiet",
            "--no-compile",
            "--platform",
            PLATFORM,
            "--implementation",
            "cp",
            "--python-version",
            PYTHON_VERSION,
            "--only-binary=:all:",
            "-t",
            str(target),
            f"{wheel}[lambda]",
        ],
        check=True,
    )
    shutil.rmtree(wheels, ignore_errors=True)
    return target


if __name__ == "__main__":
    build_layer(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else REPO_ROOT / "build" / "layer"))
