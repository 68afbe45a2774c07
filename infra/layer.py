"""The Lambda layer, built offline without Docker from a lock: the core package and its runtime
dependencies as cp312 wheels for one Linux machine (aarch64 for Lambda: the functions run on ARM64;
x86_64 for a rehearsal on this machine), into ``<out>/python``.

    python -m infra.layer build/layer                            # what `make layer` runs
    python -m infra.layer --platform x86_64 build/layer-x86_64   # what `make layer-host` runs
    python -m infra.layer functions                              # `make functions-bytecode`: beside functions/
    python -m infra.layer lock                                   # what `make lock` runs (needs PyPI)
    python -m infra.layer --print-manifest build/layer           # the built layer's MANIFEST.txt

The dependencies come from ``layers/requirements.lock`` only (``--require-hashes --no-deps``): the lock
pins every runtime dependency of the root distribution and its ``lambda`` extra, resolved for CPython
3.12 on both machines to the same versions, with the sha256 of each machine's wheel. After installing,
the layer's distributions are checked against the lock and written to ``<out>/MANIFEST.txt``, and every
native file is checked to be built for the target machine (``check_architecture``).

Only the root distribution (``hyperpod-debugger``, with its ``lambda`` extra) goes in: the simulator is
a distribution of its own (``sim/``) and the Lambda entry points travel as the functions' own asset.
"""

from __future__ import annotations

import argparse
import dataclasses
import email.parser
import hashlib
import json
import os
import pathlib
import re
import shutil
import struct
import subprocess
import sys
import tomllib
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence

from infra.constants import REPO_ROOT

PYTHON_VERSION = "3.12"
#: The machine Lambda runs the functions on (ARM64), and the one the host rehearsal builds for.
TARGET_MACHINE = "aarch64"
HOST_MACHINE = "x86_64"
#: ELF ``e_machine`` of each machine we build for (the System V ABI's EM_AARCH64 and EM_X86_64).
ELF_MACHINES = {"aarch64": 183, "x86_64": 62}
#: Names for the ``e_machine`` values an error message may meet.
_ELF_MACHINE_NAMES = {3: "i386", 8: "mips", 20: "ppc", 21: "ppc64", 22: "s390", 40: "arm", 62: "x86_64", 183: "aarch64"}
#: The lock pins what these two resolutions agree on, in this order.
LOCK_MACHINES = (TARGET_MACHINE, HOST_MACHINE)

LOCK = REPO_ROOT / "layers" / "requirements.lock"
PYPROJECT = REPO_ROOT / "pyproject.toml"
MANIFEST = "MANIFEST.txt"
#: 1980-01-01, the earliest date a zip can hold
WHEEL_EPOCH = "315532800"
EXTRA = "lambda"

# e_ident (magic, class, data, version, OS ABI, ABI version, padding) then e_type and e_machine.
_ELF_IDENT = struct.Struct("<4sBBBBB7xHH")
_ELF64_HEADER_SIZE = 64
_ELF_MAGIC = b"\x7fELF"
_ELFCLASS64 = 2
_ELFDATA2LSB = 1
_SHARED_OBJECT = re.compile(r"\.so(\.\d+)*$")


class LayerError(RuntimeError):
    """The layer or its lock is not what it should be; the message names every offending item."""


def _canonical(name: str) -> str:
    """PEP 503's normalized name (``Typing_Extensions`` → ``typing-extensions``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def platform_tag(machine: str) -> str:
    if machine not in ELF_MACHINES:
        raise ValueError(f"unknown machine {machine!r}: one of {', '.join(ELF_MACHINES)}")
    return f"manylinux2014_{machine}"


def _pip(python: str) -> list[str]:
    return [python, "-m", "pip", "--disable-pip-version-check"]


def _target_options(machine: str) -> list[str]:
    return [
        "--platform",
        platform_tag(machine),
        "--implementation",
        "cp",
        "--python-version",
        PYTHON_VERSION,
        "--only-binary=:all:",
    ]


# ----------------------------------------------------------------------------------------------- the lock


@dataclasses.dataclass(frozen=True)
class Pin:
    """One resolved distribution for one machine: the wheel pip chose and its sha256."""

    name: str
    version: str
    wheel: str
    sha256: str


@dataclasses.dataclass(frozen=True)
class LockEntry:
    """One line of the lock: a version, its hashes, and the wheel each machine installs."""

    name: str
    version: str
    hashes: tuple[str, ...]
    #: machine → the wheel's file name, from the comments under the entry
    wheels: dict[str, str] = dataclasses.field(default_factory=dict)


def project_requirements(pyproject: pathlib.Path = PYPROJECT, extra: str = EXTRA) -> list[str]:
    """The root distribution's runtime requirements with ``extra``, its self-references expanded."""
    project = tomllib.loads(pyproject.read_text())["project"]
    own = _canonical(project["name"])
    optional = project.get("optional-dependencies", {})
    out: list[str] = []
    seen: set[str] = set()

    def add(requirements: Iterable[str]) -> None:
        for requirement in requirements:
            match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?", requirement)
            if match and _canonical(match.group(1)) == own:
                for name in (e.strip() for e in (match.group(2) or "").split(",") if e.strip()):
                    if name not in seen:
                        seen.add(name)
                        add(optional[name])
            elif requirement not in out:
                out.append(requirement)

    add(project.get("dependencies", []))
    seen.add(extra)
    add(optional[extra])
    return out


def project_version(pyproject: pathlib.Path = PYPROJECT) -> tuple[str, str]:
    project = tomllib.loads(pyproject.read_text())["project"]
    return _canonical(project["name"]), str(project["version"])


def resolve(requirements: Sequence[str], machine: str, *, python: str = sys.executable) -> dict[str, Pin]:
    """What pip would install for ``machine`` (CPython 3.12, wheels only), from its dry-run report."""
    result = subprocess.run(
        [
            *_pip(python),
            "install",
            "--dry-run",
            "--ignore-installed",
            "--quiet",
            "--report",
            "-",
            *_target_options(machine),
            *requirements,
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    pins: dict[str, Pin] = {}
    for item in json.loads(result.stdout)["install"]:
        name = _canonical(item["metadata"]["name"])
        info = item["download_info"]
        archive = info.get("archive_info", {})
        sha256 = archive.get("hashes", {}).get("sha256")
        if sha256 is None and str(archive.get("hash", "")).startswith("sha256="):
            sha256 = archive["hash"].removeprefix("sha256=")
        if not sha256:
            raise LayerError(f"pip's report gives no sha256 for {name} ({info.get('url')})")
        wheel = urllib.parse.unquote(info["url"].rsplit("/", 1)[-1].split("#", 1)[0])
        pins[name] = Pin(name, item["metadata"]["version"], wheel, sha256)
    return pins


def merge_resolutions(resolutions: Mapping[str, Mapping[str, Pin]]) -> list[LockEntry]:
    """One entry per distribution, if every machine resolved the same names to the same versions."""
    names = sorted(set().union(*(r.keys() for r in resolutions.values())))
    problems = []
    for name in names:
        versions = {m: r[name].version if name in r else "(absent)" for m, r in resolutions.items()}
        if len(set(versions.values())) > 1:
            problems.append(f"{name}: " + ", ".join(f"{v} for {m}" for m, v in versions.items()))
    if problems:
        raise LayerError("the machines' resolutions differ, so one lock cannot serve both:\n  " + "\n  ".join(problems))
    entries = []
    for name in names:
        pins = {machine: r[name] for machine, r in resolutions.items()}
        by_wheel: dict[str, str] = {}
        for pin in pins.values():
            if by_wheel.setdefault(pin.wheel, pin.sha256) != pin.sha256:
                raise LayerError(f"{name}: {pin.wheel} resolved with two different sha256")
        hashes = tuple(dict.fromkeys(pin.sha256 for pin in pins.values()))
        version = next(iter(pins.values())).version
        entries.append(LockEntry(name, version, hashes, {m: p.wheel for m, p in pins.items()}))
    return entries


LOCK_HEADER = """\
# The Lambda layer's runtime dependencies: hyperpod-debugger's own and its `{extra}` extra's (pyproject.toml),
# every one of them, resolved for CPython {python} on {platforms} to the same
# versions, with the sha256 of the wheel each of those machines installs (one hash where both use the same
# pure-Python wheel). infra/layer.py installs the layer from this file only:
#   pip install --require-hashes --no-deps --only-binary=:all: --platform … -t build/layer/python -r {lock}
# Do not edit by hand. Regenerate it (PyPI needed) after changing a dependency in pyproject.toml:
#   make lock        (python -m infra.layer lock)
"""


def render_lock(entries: Iterable[LockEntry]) -> str:
    lines = [
        LOCK_HEADER.format(
            extra=EXTRA,
            python=PYTHON_VERSION,
            platforms=" and ".join(platform_tag(m) for m in LOCK_MACHINES),
            lock="layers/requirements.lock",
        )
    ]
    for entry in entries:
        lines.append(f"{entry.name}=={entry.version} \\")
        lines.extend(f"    --hash=sha256:{h} \\" for h in entry.hashes[:-1])
        lines.append(f"    --hash=sha256:{entry.hashes[-1]}")
        lines.extend(f"    # {machine}: {wheel}" for machine, wheel in entry.wheels.items())
    return "\n".join(lines) + "\n"


def _logical_lines(path: pathlib.Path) -> Iterable[tuple[int, str]]:
    """(line number, line) with backslash continuations joined; comment lines end a continuation, as
    in pip."""
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if line.endswith("\\") and not line.startswith("#"):
            start = start or number
            pending.append(line[:-1].strip())
            continue
        if pending and not line.startswith("#"):
            yield start, " ".join([*pending, line]).strip()
        else:
            if pending:
                yield start, " ".join(pending)
            if line:
                yield number, line
        pending, start = [], 0
    if pending:
        yield start, " ".join(pending)


def read_lock(path: pathlib.Path = LOCK) -> dict[str, LockEntry]:
    """The lock's entries by normalized name (the subset of pip's requirements format we write)."""
    entries: list[LockEntry] = []
    for number, line in _logical_lines(path):
        if line.startswith("#"):
            wheel = re.fullmatch(r"#\s*([\w-]+):\s*(\S+\.whl)", line)
            if wheel and entries:
                entries[-1].wheels[wheel.group(1)] = wheel.group(2)
            continue
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)((?:\s+--hash=sha256:[0-9a-f]{64})*)", line)
        if not match:
            raise LayerError(f"{path}:{number}: not a `name==version --hash=sha256:…` line: {line}")
        hashes = tuple(re.findall(r"--hash=sha256:([0-9a-f]{64})", match.group(3)))
        entries.append(LockEntry(_canonical(match.group(1)), match.group(2), hashes))
    return {entry.name: entry for entry in entries}


def write_lock(path: pathlib.Path = LOCK, *, python: str = sys.executable) -> list[LockEntry]:
    requirements = project_requirements()
    resolutions = {machine: resolve(requirements, machine, python=python) for machine in LOCK_MACHINES}
    own, _ = project_version()
    for machine, pins in resolutions.items():
        if own in pins:
            raise LayerError(f"the {machine} resolution pulled in {own} itself")
    entries = merge_resolutions(resolutions)
    path.write_text(render_lock(entries))
    return entries


# ------------------------------------------------------------------------------------------- the manifest


@dataclasses.dataclass(frozen=True)
class Installed:
    """One distribution found in a built layer."""

    name: str
    version: str
    tags: tuple[str, ...]

    def line(self) -> str:
        return f"{self.name}=={self.version} {','.join(self.tags)}"


def installed_distributions(layer: pathlib.Path) -> dict[str, Installed]:
    """Every ``*.dist-info`` in ``layer``: its name and version (METADATA) and wheel tags (WHEEL)."""
    found: dict[str, Installed] = {}
    parser = email.parser.HeaderParser()
    for info in sorted(layer.glob("*.dist-info")):
        metadata = parser.parsestr((info / "METADATA").read_text(encoding="utf-8", errors="replace"))
        wheel = info / "WHEEL"
        tags = parser.parsestr(wheel.read_text()).get_all("Tag", []) if wheel.is_file() else []
        name = _canonical(str(metadata["Name"]))
        found[name] = Installed(name, str(metadata["Version"]), tuple(sorted(str(t).strip() for t in tags)))
    return found


def compare_with_lock(installed: Mapping[str, Installed], expected: Mapping[str, str]) -> None:
    """Raise naming every distribution missing from the layer, extra in it, or at another version."""
    problems = [
        f"missing: {name}=={version} is locked but not in the layer"
        for name, version in sorted(expected.items())
        if name not in installed
    ]
    problems += [
        f"extra: {name}=={dist.version} is in the layer but not in the lock"
        for name, dist in sorted(installed.items())
        if name not in expected
    ]
    problems += [
        f"version: {name} is {dist.version} in the layer, {expected[name]} in the lock"
        for name, dist in sorted(installed.items())
        if name in expected and dist.version != expected[name]
    ]
    if problems:
        raise LayerError("the layer does not match layers/requirements.lock:\n  " + "\n  ".join(problems))


def write_manifest(out: pathlib.Path, installed: Mapping[str, Installed], machine: str) -> pathlib.Path:
    header = (
        f"# The layer's distributions (name==version wheel-tags), cp{PYTHON_VERSION.replace('.', '')} "
        f"{platform_tag(machine)}, installed from layers/requirements.lock\n"
    )
    path = out / MANIFEST
    path.write_text(header + "".join(installed[name].line() + "\n" for name in sorted(installed)))
    return path


# --------------------------------------------------------------------------------------- the architecture


def elf_machine(path: pathlib.Path) -> int:
    """``e_machine`` of a 64-bit little-endian ELF file; LayerError when it is not one."""
    with path.open("rb") as file:
        header = file.read(_ELF64_HEADER_SIZE)
    if not header.startswith(_ELF_MAGIC):
        raise LayerError(f"{path}: not an ELF file")
    if len(header) < _ELF64_HEADER_SIZE:
        raise LayerError(f"{path}: truncated ELF header ({len(header)} bytes)")
    _, elf_class, data, *_, e_machine = _ELF_IDENT.unpack_from(header)
    if elf_class != _ELFCLASS64 or data != _ELFDATA2LSB:
        raise LayerError(f"{path}: not a 64-bit little-endian ELF file (class {elf_class}, data {data})")
    return int(e_machine)


def _is_native(path: pathlib.Path) -> bool:
    if _SHARED_OBJECT.search(path.name):
        return True
    with path.open("rb") as file:
        return file.read(len(_ELF_MAGIC)) == _ELF_MAGIC


def _platform_fits(platform: str, machine: str) -> bool:
    return platform == "any" or (platform.startswith("manylinux") and platform.endswith(f"_{machine}"))


def check_architecture(layer_dir: pathlib.Path, machine: str = TARGET_MACHINE) -> list[pathlib.Path]:
    """Check that everything native in ``layer_dir`` runs on ``machine``: each shared object's (and any
    other ELF file's) header says so, and each wheel's tags name that machine (or ``any``).

    Returns the native files checked; raises LayerError naming every offending file.
    """
    wanted = ELF_MACHINES.get(machine)
    if wanted is None:
        raise ValueError(f"unknown machine {machine!r}: one of {', '.join(ELF_MACHINES)}")
    problems: list[str] = []
    checked: list[pathlib.Path] = []
    for path in sorted(p for p in layer_dir.rglob("*") if p.is_file() and not p.is_symlink()):
        if not _is_native(path):
            continue
        checked.append(path)
        try:
            found = elf_machine(path)
        except LayerError as error:
            problems.append(str(error))
            continue
        if found != wanted:
            name = _ELF_MACHINE_NAMES.get(found, "unknown")
            problems.append(f"{path}: built for {name} (e_machine {found}), not {machine} ({wanted})")
    for wheel in sorted(layer_dir.glob("*.dist-info/WHEEL")):
        tags = email.parser.HeaderParser().parsestr(wheel.read_text()).get_all("Tag", [])
        if not tags:
            problems.append(f"{wheel}: no Tag")
        for tag in tags:
            platform = str(tag).strip().rsplit("-", 1)[-1]
            if not _platform_fits(platform, machine):
                problems.append(f"{wheel}: wheel tag {str(tag).strip()} is not for {machine}")
    if problems:
        raise LayerError(f"not a layer for {machine}:\n  " + "\n  ".join(problems))
    return checked


# ---------------------------------------------------------------------------------------------- bytecode

#: Where Lambda puts a layer's ``python/`` folder and a function's code: tracebacks name these paths.
LAYER_MOUNT = "/opt/python"
FUNCTION_MOUNT = "/var/task"


def runtime_python(environ: Mapping[str, str] = os.environ) -> str | None:
    """A CPython of the runtime's version (``PYTHON_VERSION``), to write bytecode Lambda's interpreter reads:
    ``$LAYER_PYTHON``, else ``python3.12`` on the PATH, else one under pyenv's versions; None when none runs."""
    on_path = shutil.which(f"python{PYTHON_VERSION}", path=environ.get("PATH", os.defpath))
    candidates = [environ.get("LAYER_PYTHON", ""), on_path or ""]
    pyenv = pathlib.Path(environ.get("PYENV_ROOT") or pathlib.Path.home() / ".pyenv") / "versions"
    candidates += [str(p) for p in sorted(pyenv.glob(f"{PYTHON_VERSION}.*/bin/python{PYTHON_VERSION}"), reverse=True)]
    for candidate in filter(None, candidates):
        probe = subprocess.run(
            [candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            check=False,
        )
        if probe.returncode == 0 and probe.stdout.strip() == PYTHON_VERSION:
            return candidate
    return None


def compile_bytecode(tree: pathlib.Path, mount: str, python: str, *, checked: bool) -> int:
    """Write ``__pycache__/*.cpython-312.pyc`` for every module under ``tree`` with ``python`` (the runtime's
    version), naming ``mount`` as the files' home in tracebacks; returns how many modules have bytecode.

    Lambda's file system is read-only, so without these every cold start compiles every module it imports
    before running (three to four times the import's CPU: bench/import_bench.py). ``checked`` bytecode is used
    only while its source is unchanged (for a tree people edit: functions/); unchecked bytecode skips that read
    (a built layer)."""
    mode = "checked-hash" if checked else "unchecked-hash"
    command = [python, "-m", "compileall", "-q", "-j", "0", "--invalidation-mode", mode, "-s", str(tree)]
    subprocess.run([*command, "-p", mount, str(tree)], check=True)
    tag = f"cpython-{PYTHON_VERSION.replace('.', '')}"
    return sum(1 for _ in tree.rglob(f"__pycache__/*.{tag}.pyc"))


def compile_functions(python: str | None = None, environ: Mapping[str, str] = os.environ) -> int:
    """Bytecode beside the functions' sources (their asset is ``functions/``; ``infra/constructs/python_function.py``
    ships the runtime's ``.pyc`` files with them). Checked: an edit made after this step is read from source."""
    python = python or runtime_python(environ)
    if python is None:
        raise LayerError(_NO_RUNTIME_PYTHON)
    return compile_bytecode(REPO_ROOT / "functions", FUNCTION_MOUNT + "/functions", python, checked=True)


_NO_RUNTIME_PYTHON = (
    f"no Python {PYTHON_VERSION} found (set LAYER_PYTHON, or put python{PYTHON_VERSION} on the PATH): the Lambda "
    f"runtime is python{PYTHON_VERSION} and only that version can write the bytecode it reads"
)


# ------------------------------------------------------------------------------------------------- build


def build_layer(
    out: pathlib.Path,
    *,
    platform: str = TARGET_MACHINE,
    python: str = sys.executable,
    lock: pathlib.Path = LOCK,
) -> pathlib.Path:
    """Build the layer for ``platform`` (a machine: aarch64 or x86_64) into ``out`` (emptied first),
    from ``lock`` only; check it against the lock and the machine, write ``out/MANIFEST.txt``; returns
    ``out / "python"``."""
    platform_tag(platform)  # an unknown machine fails before anything is removed
    wheels = out.parent / f"{out.name}-wheel"
    # setuptools reuses build/lib of an earlier build, files since deleted included: start clean
    for path in (out, wheels, REPO_ROOT / "build" / "lib", *REPO_ROOT.glob("build/bdist.*")):
        shutil.rmtree(path, ignore_errors=True)
    pip = _pip(python)
    # a fixed date inside our wheel (zip timestamps), so its hash, recorded in the layer, is the same each build
    env = {**os.environ, "SOURCE_DATE_EPOCH": WHEEL_EPOCH}
    subprocess.run([*pip, "wheel", "--quiet", "--no-deps", "-w", str(wheels), str(REPO_ROOT)], check=True, env=env)
    (wheel,) = wheels.glob("hyperpod_debugger-*.whl")
    target = out / "python"
    # One install for the lock and our own wheel (hashed here): a second `pip install -t` would not merge
    # into directories the first one made (bin/).
    own_requirement = wheels / "own.txt"
    own_requirement.write_text(f"{wheel} --hash=sha256:{hashlib.sha256(wheel.read_bytes()).hexdigest()}\n")
    subprocess.run(
        [
            *pip,
            "install",
            "--quiet",
            "--no-compile",
            "--no-deps",
            "--require-hashes",
            *_target_options(platform),
            "-t",
            str(target),
            "-r",
            str(lock),
            "-r",
            str(own_requirement),
        ],
        check=True,
    )
    shutil.rmtree(wheels, ignore_errors=True)

    own, version = project_version()
    expected = {name: entry.version for name, entry in read_lock(lock).items()} | {own: version}
    installed = installed_distributions(target)
    compare_with_lock(installed, expected)
    check_architecture(target, platform)
    runtime = runtime_python()
    if runtime is None:
        raise LayerError(_NO_RUNTIME_PYTHON)
    compile_bytecode(target, LAYER_MOUNT, runtime, checked=False)
    write_manifest(out, installed, platform)
    return target


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if args[:1] == ["functions"]:
            print(f"functions/: bytecode for {compile_functions()} modules")
            return 0
        if args[:1] == ["lock"]:
            parser = argparse.ArgumentParser(prog="python -m infra.layer lock", description="Regenerate the lock.")
            parser.add_argument("--output", type=pathlib.Path, default=LOCK)
            options = parser.parse_args(args[1:])
            entries = write_lock(options.output)
            print(f"{options.output}: {len(entries)} distributions")
            return 0
        parser = argparse.ArgumentParser(prog="python -m infra.layer", description="Build the Lambda layer.")
        parser.add_argument("out", nargs="?", type=pathlib.Path, default=REPO_ROOT / "build" / "layer")
        parser.add_argument("--platform", choices=sorted(ELF_MACHINES), default=TARGET_MACHINE)
        parser.add_argument("--print-manifest", action="store_true", help="print the built layer's manifest")
        options = parser.parse_args(args)
        if options.print_manifest:
            print((options.out / MANIFEST).read_text(), end="")
            return 0
        build_layer(options.out, platform=options.platform)
        return 0
    except (LayerError, subprocess.CalledProcessError) as error:
        print(f"infra.layer: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
