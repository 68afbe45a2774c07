"""What travels to AWS: the layer (built as `make layer` builds it, from layers/requirements.lock) holds
the core and its locked runtime dependencies and nothing of the simulator, every native file in it is
built for ARM64, and each function's asset holds only ``functions/``.

Building a layer downloads the locked wheels from the package index (pip's cache keeps them): the layers
`make test` built first are used when nothing they are built from changed since; otherwise one build per
machine per session, skipped only when the index cannot be reached.
"""

from __future__ import annotations

import ast
import email.parser
import json
import os
import pathlib
import struct
import subprocess
import sys
import tomllib
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from infra.layer import (
    FUNCTION_MOUNT,
    LAYER_MOUNT,
    LOCK,
    PYTHON_VERSION,
    LayerError,
    Pin,
    build_layer,
    check_architecture,
    compare_with_lock,
    compile_functions,
    installed_distributions,
    merge_resolutions,
    read_lock,
    runtime_python,
)
from tests.infrastructure.conftest import synth_again

FORBIDDEN = ("moto", "hyperpod_sim", "functions", "pytest")
ROOT = pathlib.Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
OWN = canonicalize_name(PROJECT["name"])
MACHINES = ("aarch64", "x86_64")
# The System V ABI's e_machine values.
EM_X86_64, EM_AARCH64 = 62, 183
# Where the `lambda` extra runs: CPython 3.12 on Amazon Linux, ARM64 (markers are evaluated against it).
LAMBDA_ENVIRONMENT = {
    "python_version": "3.12",
    "python_full_version": "3.12.0",
    "implementation_name": "cpython",
    "implementation_version": "3.12.0",
    "platform_python_implementation": "CPython",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "os_name": "posix",
    "platform_machine": "aarch64",
}


def pyproject_lambda_requirements() -> list[Requirement]:
    """What pyproject.toml says the layer needs: the core's dependencies and its `lambda` extra."""
    return [Requirement(r) for r in [*PROJECT["dependencies"], *PROJECT["optional-dependencies"]["lambda"]]]


def index_unreachable(tmp: pathlib.Path) -> str | None:
    """Why PyPI cannot be reached (None when it can): one wheel of the lock, uncached, from PyPI alone."""
    name, entry = next(iter(read_lock().items()))
    result = subprocess.run(
        [
            *(sys.executable, "-m", "pip", "--isolated", "download", "--no-cache-dir", "--no-deps"),
            *("--only-binary=:all:", "--platform", "manylinux2014_x86_64", "--implementation", "cp"),
            *("--python-version", "3.12", "-d", str(tmp), f"{name}=={entry.version}"),
        ],
        env={**os.environ, "PIP_CONFIG_FILE": os.devnull},
        capture_output=True,
        text=True,
    )
    return None if result.returncode == 0 else (result.stderr.strip().splitlines() or ["pip failed"])[-1]


#: What `make layer` and `make layer-host` build from (the Makefile's LAYER_SRC).
LAYER_SOURCES = [
    ROOT / "pyproject.toml",
    LOCK,
    ROOT / "infra" / "layer.py",
    *(p for p in (ROOT / "layers" / "hyperpod_debugger").rglob("*") if p.suffix in (".py", ".sh")),
]
MADE_LAYERS = {"aarch64": ROOT / "build" / "layer", "x86_64": ROOT / "build" / "layer-x86_64"}


def made_layer(platform: str) -> pathlib.Path | None:
    """The layer the Makefile built for ``platform``, when it was built after every file it is built from."""
    stamp = MADE_LAYERS[platform] / ".built"
    if not stamp.exists():
        return None
    built = stamp.stat().st_mtime
    return MADE_LAYERS[platform] if all(p.stat().st_mtime <= built for p in LAYER_SOURCES) else None


def build_or_skip(tmp_path_factory: pytest.TempPathFactory, platform: str) -> pathlib.Path:
    made = made_layer(platform)
    if made is not None:
        return made
    out = tmp_path_factory.mktemp(f"layer-{platform}") / "layer"
    try:
        build_layer(out, platform=platform)
    except subprocess.CalledProcessError:
        reason = index_unreachable(tmp_path_factory.mktemp("probe"))
        if reason:
            pytest.skip(f"cannot build the {platform} layer: PyPI is unreachable ({reason})")
        raise
    return out


@pytest.fixture(scope="session")
def built_layer(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """The aarch64 layer's output folder (``python/`` and ``MANIFEST.txt``), built once per session."""
    return build_or_skip(tmp_path_factory, "aarch64")


@pytest.fixture(scope="session")
def host_layer(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    return build_or_skip(tmp_path_factory, "x86_64")


@pytest.fixture
def layer(built_layer: pathlib.Path) -> pathlib.Path:
    return built_layer / "python"


def imported_roots(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def elf_header(e_machine: int, *, elf_class: int = 2, data: int = 1) -> bytes:
    """An Elf64_Ehdr of a shared object (ET_DYN) for ``e_machine``, laid out as the System V ABI says."""
    ident = b"\x7fELF" + bytes([elf_class, data, 1, 0]) + bytes(8)
    return struct.pack("<16sHHIQQQIHHHHHH", ident, 3, e_machine, 1, 0, 64, 0, 0, 64, 56, 0, 64, 0, 0)


def fake_layer(root: pathlib.Path, modules: dict[str, bytes], tags: dict[str, list[str]]) -> pathlib.Path:
    """A layer with the given files and, per distribution (``name-version``), a WHEEL with its tags."""
    for relative, content in modules.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_bytes(content)
    for dist, dist_tags in tags.items():
        info = root / f"{dist}.dist-info"
        info.mkdir(parents=True)
        name, version = dist.rsplit("-", 1)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        lines = "".join(f"Tag: {t}\n" for t in dist_tags)
        (info / "WHEEL").write_text(f"Wheel-Version: 1.0\nRoot-Is-Purelib: false\n{lines}")
    return root


# ----------------------------------------------------------------------------------------------- the lock


def test_every_requirement_of_the_lambda_extra_is_locked_within_its_specifiers():
    lock = read_lock()
    requirements = pyproject_lambda_requirements()
    assert {canonicalize_name(r.name) for r in requirements} == {
        "boto3",
        "botocore",
        "pydantic",
        "websockets",
        "aws-lambda-powertools",
    }
    problems = {
        r.name: lock[canonicalize_name(r.name)].version if canonicalize_name(r.name) in lock else "not locked"
        for r in requirements
        if canonicalize_name(r.name) not in lock
        or not r.specifier.contains(lock[canonicalize_name(r.name)].version, prereleases=True)
    }
    assert problems == {}


def test_the_lock_holds_the_whole_closure_of_the_lambda_extra_and_nothing_else(layer: pathlib.Path):
    """Walk the Requires-Dist of the distributions actually installed (their own METADATA, as Lambda
    would evaluate the markers) from pyproject's requirements: every one reached is locked at a version
    its requirers accept, and the lock holds nothing unreached."""
    lock = read_lock()
    metadata = {
        canonicalize_name(str(m["Name"])): m
        for m in (email.parser.HeaderParser().parsestr(p.read_text()) for p in layer.glob("*.dist-info/METADATA"))
    }
    reached: dict[str, list[Requirement]] = {}
    pending = [(r, frozenset(r.extras)) for r in pyproject_lambda_requirements()]
    expanded: set[tuple[str, str]] = set()
    while pending:
        requirement, extras = pending.pop()
        name = canonicalize_name(requirement.name)
        reached.setdefault(name, []).append(requirement)
        for extra in {"", *extras}:
            if (name, extra) in expanded or name not in metadata:
                continue
            expanded.add((name, extra))
            for line in metadata[name].get_all("Requires-Dist", []):
                dependency = Requirement(str(line))
                marker = dependency.marker
                if marker is None or marker.evaluate({**LAMBDA_ENVIRONMENT, "extra": extra}):
                    pending.append((dependency, frozenset(dependency.extras)))
    assert sorted(reached) == sorted(lock)
    unsatisfied = [
        f"{r} (locked {lock[name].version})"
        for name, requirements in reached.items()
        for r in requirements
        if not r.specifier.contains(lock[name].version, prereleases=True)
    ]
    assert unsatisfied == []
    assert {"pydantic-core", "typing-extensions", "jmespath", "aws-xray-sdk"} <= set(reached)  # transitive


def test_each_lock_entry_carries_the_hash_of_each_machines_wheel():
    """A pure-Python wheel is the same file for both machines (one hash); a native one is two files."""
    lock = read_lock()
    native = []
    for name, entry in lock.items():
        assert set(entry.wheels) == set(MACHINES), name
        for machine, wheel in entry.wheels.items():
            wheel_name, version, _, tags = parse_wheel_filename(wheel)
            assert (wheel_name, version) == (name, Version(entry.version)), wheel
            assert all(t.platform == "any" or t.platform.endswith(f"_{machine}") for t in tags), wheel
            assert all(t.interpreter in ("py3", "py2", "cp312") for t in tags), wheel
        files = set(entry.wheels.values())
        assert len(entry.hashes) == len(set(entry.hashes)) == len(files) >= 1, name
        if len(files) > 1:
            native.append(name)
    assert {"pydantic-core", "websockets", "wrapt"} <= set(native)  # these two-hash entries exist
    assert all(len(lock[name].hashes) >= 2 for name in native)


def test_the_lock_refuses_machines_that_resolve_to_different_versions():
    def pin(name: str, version: str, machine: str) -> Pin:
        return Pin(name, version, f"{name}-{version}-cp312-cp312-manylinux2014_{machine}.whl", machine[0] * 64)

    same = pin("six", "1.17.0", "any")
    merged = merge_resolutions(
        {
            "aarch64": {"six": same, "wrapt": pin("wrapt", "2.5.2", "aarch64")},
            "x86_64": {"six": same, "wrapt": pin("wrapt", "2.5.2", "x86_64")},
        }
    )
    assert [(e.name, len(e.hashes)) for e in merged] == [("six", 1), ("wrapt", 2)]
    with pytest.raises(LayerError) as raised:
        merge_resolutions(
            {
                "aarch64": {"six": same, "wrapt": pin("wrapt", "2.5.2", "aarch64"), "only-arm": same},
                "x86_64": {"six": same, "wrapt": pin("wrapt", "2.4.0", "x86_64")},
            }
        )
    message = str(raised.value)
    assert "wrapt: 2.5.2 for aarch64, 2.4.0 for x86_64" in message
    assert "only-arm: 1.17.0 for aarch64, (absent) for x86_64" in message
    assert "six" not in message


def test_the_lock_says_how_to_regenerate_it():
    header = LOCK.read_text().split("\n\n", 1)[0]
    assert "make lock" in header and "python -m infra.layer lock" in header


# ------------------------------------------------------------------------------------------- the manifest


def test_the_built_layers_manifest_matches_the_lock_and_the_layer(built_layer: pathlib.Path):
    lines = [
        line.split() for line in (built_layer / "MANIFEST.txt").read_text().splitlines() if not line.startswith("#")
    ]
    manifest = {pin.split("==")[0]: (pin.split("==")[1], tags) for pin, tags in lines}
    expected = {name: entry.version for name, entry in read_lock().items()} | {OWN: PROJECT["version"]}
    assert {name: version for name, (version, _) in manifest.items()} == expected
    # read the layer's folders here, without the code under test: `<name>-<version>.dist-info`
    folders = {
        tuple(p.name.removesuffix(".dist-info").rsplit("-", 1)) for p in (built_layer / "python").glob("*.dist-info")
    }
    assert {(canonicalize_name(n), Version(v)) for n, v in folders} == {(n, Version(v)) for n, v in expected.items()}
    assert manifest["pydantic-core"][1].split(",")[0].startswith("cp312-cp312-manylinux")
    assert manifest["pydantic-core"][1].endswith("_aarch64")
    assert manifest[OWN][1] == "py3-none-any"


def test_a_layer_that_differs_from_the_lock_is_refused_naming_each_difference(tmp_path: pathlib.Path):
    layer = fake_layer(
        tmp_path,
        {},
        {"boto3-1.44.8": ["py3-none-any"], "six-1.16.0": ["py3-none-any"], "moto-5.2.5": ["py3-none-any"]},
    )
    installed = installed_distributions(layer)
    compare_with_lock(installed, {"boto3": "1.44.8", "six": "1.16.0", "moto": "5.2.5"})  # matches: no error
    with pytest.raises(LayerError) as raised:
        compare_with_lock(installed, {"boto3": "1.44.8", "six": "1.17.0", "jmespath": "1.1.0"})
    message = str(raised.value)
    assert "missing: jmespath==1.1.0" in message
    assert "extra: moto==5.2.5" in message
    assert "version: six is 1.16.0 in the layer, 1.17.0 in the lock" in message
    assert "boto3" not in message


# --------------------------------------------------------------------------------------- the architecture


def test_check_architecture_refuses_an_x86_64_module_in_an_aarch64_layer_naming_it(tmp_path: pathlib.Path):
    layer = fake_layer(
        tmp_path,
        {
            "good/_ok.cpython-312-aarch64-linux-gnu.so": elf_header(EM_AARCH64),
            "bad/_speedups.cpython-312-x86_64-linux-gnu.so": elf_header(EM_X86_64),
            "bad/pure.py": b"",
        },
        {"good-1.0": ["cp312-cp312-manylinux_2_17_aarch64"], "bad-1.0": ["cp312-cp312-manylinux_2_17_aarch64"]},
    )
    with pytest.raises(LayerError) as raised:
        check_architecture(layer, "aarch64")
    message = str(raised.value)
    assert "bad/_speedups.cpython-312-x86_64-linux-gnu.so" in message and "e_machine 62" in message
    assert "_ok.cpython" not in message and "pure.py" not in message


def test_check_architecture_accepts_aarch64_modules_and_pure_wheels(tmp_path: pathlib.Path):
    layer = fake_layer(
        tmp_path,
        {
            "native/_core.cpython-312-aarch64-linux-gnu.so": elf_header(EM_AARCH64),
            "native.libs/libz-1a2b.so.1.3": elf_header(EM_AARCH64),
            "pure/__init__.py": b"",
        },
        {
            "native-1.0": ["cp312-cp312-manylinux2014_aarch64", "cp312-cp312-manylinux_2_17_aarch64"],
            "pure-1.0": ["py3-none-any"],
        },
    )
    checked = check_architecture(layer, "aarch64")
    assert sorted(p.name for p in checked) == ["_core.cpython-312-aarch64-linux-gnu.so", "libz-1a2b.so.1.3"]
    with pytest.raises(LayerError, match="_core.cpython-312-aarch64-linux-gnu.so"):
        check_architecture(layer, "x86_64")  # the same files are not an x86_64 layer


def test_check_architecture_refuses_a_foreign_wheel_tag_and_what_is_not_a_64_bit_little_endian_elf(
    tmp_path: pathlib.Path,
):
    layer = fake_layer(
        tmp_path,
        {
            "arm32/_m.so": elf_header(EM_AARCH64, elf_class=1),
            "big/_m.so": elf_header(EM_AARCH64, data=2),
            "text/_m.so": b"not an ELF file at all, though named like one",
            "cut/_m.so": elf_header(EM_AARCH64)[:20],
        },
        {"mac-1.0": ["cp312-cp312-macosx_11_0_arm64"], "x86-1.0": ["cp312-cp312-manylinux_2_17_x86_64"]},
    )
    with pytest.raises(LayerError) as raised:
        check_architecture(layer, "aarch64")
    message = str(raised.value)
    for offender in (
        "arm32/_m.so",
        "big/_m.so",
        "text/_m.so",
        "cut/_m.so",
        "macosx_11_0_arm64",
        "manylinux_2_17_x86_64",
    ):
        assert offender in message


def test_the_built_aarch64_layer_is_all_aarch64(layer: pathlib.Path):
    checked = check_architecture(layer, "aarch64")
    assert any(p.parent.name == "pydantic_core" for p in checked)  # the check read a real native module
    with pytest.raises(LayerError, match="pydantic_core"):
        check_architecture(layer, "x86_64")


# ----------------------------------------------------------------------------------------- the contents


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


def test_the_host_layer_imports_under_python_3_12_in_a_clean_process(host_layer: pathlib.Path):
    python = runtime_python()
    assert python is not None  # the layer's build needed it
    layer = host_layer / "python"
    script = (
        "import sys; sys.path[:0] = [sys.argv[1]]\n"
        "import hyperpod_debugger, pydantic_core, boto3, aws_lambda_powertools\n"
        "for m in (hyperpod_debugger, pydantic_core, boto3): print(m.__file__)\n"
    )
    result = subprocess.run([python, "-I", "-c", script, str(layer)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert all(pathlib.Path(f).is_relative_to(layer) for f in result.stdout.split()), result.stdout


def test_the_host_layer_has_the_locks_versions_for_x86_64(host_layer: pathlib.Path):
    lines = [line.split() for line in (host_layer / "MANIFEST.txt").read_text().splitlines() if line[:1] != "#"]
    expected = {f"{name}=={entry.version}" for name, entry in read_lock().items()} | {f"{OWN}=={PROJECT['version']}"}
    assert {pin for pin, _ in lines} == expected
    assert all(tag.endswith(("-any", "_x86_64")) for _, tags in lines for tag in tags.split(","))
    assert check_architecture(host_layer / "python", "x86_64") != []


# ------------------------------------------------------------------------------------------- the assets


@pytest.fixture(scope="module")
def function_asset(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """The functions' asset as `make synth` stages it: bytecode written beside the sources first
    (``python -m infra.layer functions``, a step of `make test` too), then the app synthesized."""
    compile_functions()
    _, template, outdir = synth_again(tmp_path_factory)
    functions = template.find_resources("AWS::Lambda::Function").values()
    keys = {f["Properties"]["Code"]["S3Key"].split(".")[0] for f in functions}
    assert len(keys) == 1  # one asset, shared by every function
    (asset,) = [p for p in pathlib.Path(outdir).glob("asset.*") if p.name.split(".")[1] in keys]
    return asset


def test_each_function_asset_holds_only_the_entry_points(function_asset: pathlib.Path):
    assert sorted(p.name for p in function_asset.iterdir()) == ["functions"]
    assert (function_asset / "functions" / "monitor").is_dir()
    assert {p.suffix for p in function_asset.rglob("*") if p.is_file()} == {".py", ".pyc"}


# ----------------------------------------------------------------------------------------------- bytecode

#: Run by the runtime's Python over one tree: each module's bytecode as that interpreter reads it (PEP 552's
#: header: magic, flags, then the source's hash), and where its code says it lives.
_READ_BYTECODE = """
import importlib.util, json, marshal, pathlib, sys
root = pathlib.Path(sys.argv[1])
out = {}
for source in root.rglob("*.py"):
    cached = pathlib.Path(importlib.util.cache_from_source(str(source)))
    if not cached.exists():
        out[str(source.relative_to(root))] = None
        continue
    data = cached.read_bytes()
    out[str(source.relative_to(root))] = {
        "magic": data[:4] == importlib.util.MAGIC_NUMBER,
        "flags": int.from_bytes(data[4:8], "little"),
        "hash": data[8:16] == importlib.util.source_hash(source.read_bytes()),
        "file": marshal.loads(data[16:]).co_filename,
    }
print(json.dumps(out))
"""
HASH_BASED, CHECK_SOURCE = 0b01, 0b10


def read_bytecode(tree: pathlib.Path) -> dict[str, Any]:
    """Each module under ``tree`` → its bytecode's header (magic, flags, hash, file), None if it has none."""
    python = runtime_python()
    assert python is not None, f"no Python {PYTHON_VERSION}: the layer's build needs one"
    result = subprocess.run([python, "-I", "-c", _READ_BYTECODE, str(tree)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize("machine", MACHINES)
def test_every_module_in_the_layer_ships_bytecode_lambdas_python_reads_without_compiling(machine: str, request):
    layer = request.getfixturevalue("built_layer" if machine == "aarch64" else "host_layer") / "python"
    modules = read_bytecode(layer)
    assert len(modules) > 500  # the core, Powertools, pydantic, boto3 and botocore
    assert [m for m, b in modules.items() if b is None] == []
    assert [m for m, b in modules.items() if not b["magic"]] == []
    # hash-based and unchecked: the interpreter neither reads the source nor compares times (a zip keeps
    # times to two seconds, so time-stamped bytecode would look stale and be compiled again)
    assert {b["flags"] for b in modules.values()} == {HASH_BASED}
    assert [m for m, b in modules.items() if not b["hash"]] == []
    assert {m: b["file"] for m, b in modules.items() if b["file"] != f"{LAYER_MOUNT}/{m}"} == {}


def test_the_function_asset_ships_bytecode_checked_against_its_sources(function_asset: pathlib.Path):
    modules = read_bytecode(function_asset)
    assert "functions/monitor/handlers/sweep.py" in modules
    assert [m for m, b in modules.items() if b is None] == []
    # checked: an edit after the bytecode step is read from its source, never from stale bytecode
    assert {b["flags"] for b in modules.values()} == {HASH_BASED | CHECK_SOURCE}
    assert [m for m, b in modules.items() if not (b["magic"] and b["hash"])] == []
    assert {m: b["file"] for m, b in modules.items() if b["file"] != f"{FUNCTION_MOUNT}/{m}"} == {}
    # no other interpreter's bytecode travels (the tests' own Python writes some beside the sources)
    tag = f"cpython-{PYTHON_VERSION.replace('.', '')}"
    assert [p.name for p in function_asset.rglob("*.pyc") if not p.name.endswith(f".{tag}.pyc")] == []


def test_the_functions_bytecode_step_refuses_to_guess_without_the_runtimes_python(tmp_path: pathlib.Path):
    with pytest.raises(LayerError, match=f"no Python {PYTHON_VERSION} found"):
        compile_functions(python=None, environ={"PATH": str(tmp_path), "PYENV_ROOT": str(tmp_path)})
