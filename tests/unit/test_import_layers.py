"""The core's imports run one way: each unit of ``hyperpod_debugger`` (a subpackage, or a top-level module)
has a rank, a unit imports only units of its own rank or below, and the units' import graph has no cycle.

Every import counts: at module level, inside a function (a lazy import) and under ``if TYPE_CHECKING:``.
A cycle that only a lazy import closes still ties the two packages together: neither can be read, tested or
moved without the other. The ranks, lowest first, and why they are in this order: references/style.md.
"""

from __future__ import annotations

import ast
import pathlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

ROOT = pathlib.Path(__file__).resolve().parents[2]
LAYERS = ROOT / "layers"
PACKAGE = "hyperpod_debugger"

#: unit → rank. ``__init__`` is the package's own module (``__version__``); the runs are top-level modules.
RANKS: dict[str, int] = {
    "__init__": 0,
    "domain": 0,
    "aws": 1,
    "checks": 2,
    "probe": 2,
    "slurm": 2,
    "remediation": 3,
    "lifecycle": 4,
    "store": 5,
    "triage": 6,  # the runs: a cluster triage, a probe batch of the sweep, and the report every run hands back
    "probe_batch": 6,
    "run_report": 6,
    "job_diagnosis": 6,
    "notify": 6,
    "report": 6,
    "cli": 7,
    "agent": 7,
}
#: what sits above the core: the core never imports it (the Lambda code)
ABOVE_THE_CORE = ("functions",)


@dataclass(frozen=True, slots=True)
class Import:
    """One import statement: where it is (a path relative to the scanned folder, a line), the module it names
    and, for ``from module import a, b``, the names."""

    source: str
    line: int
    module: str
    names: tuple[str, ...] = ()

    @property
    def at(self) -> str:
        return f"{self.source}:{self.line}"

    @property
    def targets(self) -> list[str]:
        """The dotted names it reaches: ``module.a`` for each name (a name may be a submodule)."""
        return [f"{self.module}.{n}" for n in self.names] if self.names else [self.module]

    def __str__(self) -> str:
        return f"from {self.module} import {', '.join(self.names)}" if self.names else f"import {self.module}"


@dataclass(frozen=True, slots=True)
class Edge:
    """One unit importing another, and every import that does it (in file order)."""

    source: str
    target: str
    imports: tuple[Import, ...]

    @property
    def witness(self) -> Import:
        return self.imports[0]


# --------------------------------------------------------------------------- the finder


def module_name(path: pathlib.Path, root: pathlib.Path) -> str:
    """The dotted name of the module at ``path`` under ``root`` (a package's ``__init__.py``: the package)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: pathlib.Path, root: pathlib.Path) -> Iterator[Import]:
    """Every import statement of the file, anywhere in it (in a function, under ``if TYPE_CHECKING:``),
    relative imports resolved to absolute module names."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    source = path.relative_to(root).as_posix()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(source, node.lineno, alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            yield Import(source, node.lineno, base, tuple(alias.name for alias in node.names))


def units(root: pathlib.Path, package: str) -> set[str]:
    """The package's units: its subpackages and top-level modules, and ``__init__`` (the package itself)."""
    top = root / package
    found = {p.name for p in top.iterdir() if (p / "__init__.py").is_file()}
    found |= {p.stem for p in top.glob("*.py")}
    return found


def unit_of(module: str, package: str, known: set[str]) -> str | None:
    """The unit a dotted name belongs to, None outside the package. A name the package's ``__init__``
    defines (``hyperpod_debugger.__version__``) belongs to ``__init__``."""
    parts = module.split(".")
    if parts[0] != package:
        return None
    if len(parts) > 1 and parts[1] in known:
        return parts[1]
    return "__init__"


def scan(root: pathlib.Path, package: str) -> tuple[list[Import], list[Edge]]:
    """Every import in the package's files, and the edges between its units."""
    known = units(root, package)
    imports: list[Import] = []
    between: dict[tuple[str, str], list[Import]] = {}
    for path in sorted((root / package).rglob("*.py")):
        source = unit_of(module_name(path, root), package, known)
        assert source is not None
        for found in sorted(imported_modules(path, root), key=lambda i: i.line):
            imports.append(found)
            reached = {unit_of(t, package, known) for t in found.targets} - {None, source}
            for target in sorted(t for t in reached if t is not None):
                between.setdefault((source, target), []).append(found)
    return imports, [Edge(source, target, tuple(found)) for (source, target), found in between.items()]


def upward(edges: Iterable[Edge], ranks: Mapping[str, int]) -> list[str]:
    """Each import that reaches a higher rank, where it is and the two units with their ranks."""
    return [
        f"{i.at}: {e.source} (rank {ranks[e.source]}) -> {e.target} (rank {ranks[e.target]}): {i}"
        for e in edges
        if ranks[e.target] > ranks[e.source]
        for i in e.imports
    ]


def cycles(edges: Iterable[Edge]) -> list[tuple[list[str], list[Edge]]]:
    """Each strongly connected component of more than one unit (Tarjan's algorithm): its units, and one
    cycle through them as the edges that close it."""
    graph: dict[str, dict[str, Edge]] = {}
    for e in edges:
        graph.setdefault(e.source, {})[e.target] = e
        graph.setdefault(e.target, {})
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components: list[set[str]] = []

    def connect(unit: str) -> None:
        index[unit] = low[unit] = len(index)
        stack.append(unit)
        for nxt in graph[unit]:
            if nxt not in index:
                connect(nxt)
                low[unit] = min(low[unit], low[nxt])
            elif nxt in stack:
                low[unit] = min(low[unit], index[nxt])
        if low[unit] == index[unit]:
            component = set()
            while True:
                member = stack.pop()
                component.add(member)
                if member == unit:
                    break
            components.append(component)

    for unit in sorted(graph):
        if unit not in index:
            connect(unit)
    return [(sorted(c), _cycle_in(graph, c)) for c in components if len(c) > 1]


def _cycle_in(graph: Mapping[str, Mapping[str, Edge]], component: set[str]) -> list[Edge]:
    """A path that leaves the component's first unit and comes back to it, inside the component."""
    start = min(component)
    paths: dict[str, list[Edge]] = {start: []}
    frontier = [start]
    while frontier:
        unit = frontier.pop(0)
        for nxt, edge in sorted(graph[unit].items()):
            if nxt == start:
                return [*paths[unit], edge]
            if nxt in component and nxt not in paths:
                paths[nxt] = [*paths[unit], edge]
                frontier.append(nxt)
    raise AssertionError(f"no cycle through {start} in {sorted(component)}")  # a component always has one


def describe(component: list[str], cycle: list[Edge]) -> str:
    """The units tied together, then one cycle among them, each edge with the first import that makes it."""
    path = " -> ".join([cycle[0].source, *(e.target for e in cycle)])
    lines = [f"{', '.join(component)} import each other; one cycle: {path}"]
    for e in cycle:
        more = f" (and {len(e.imports) - 1} more)" if len(e.imports) > 1 else ""
        lines.append(f"    {e.source} -> {e.target}: {e.witness.at} {e.witness}{more}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- the core


def test_every_unit_of_the_core_has_a_rank():
    # a new subpackage or top-level module is placed in the order on purpose, not left out of the check
    assert units(LAYERS, PACKAGE) == set(RANKS)


def test_the_core_imports_nothing_of_a_higher_rank():
    _, edges = scan(LAYERS, PACKAGE)
    assert upward(edges, RANKS) == []


def test_the_cores_units_import_each_other_without_a_cycle():
    _, edges = scan(LAYERS, PACKAGE)
    assert [describe(*c) for c in cycles(edges)] == []


def test_the_core_never_imports_what_sits_above_it():
    imports, _ = scan(LAYERS, PACKAGE)
    assert [f"{i.at}: {i}" for i in imports if i.module.split(".")[0] in ABOVE_THE_CORE] == []


def test_the_scan_sees_the_whole_core():
    # not vacuous: every file is read, and the imports every layer makes are found
    imports, edges = scan(LAYERS, PACKAGE)
    assert len({i.source for i in imports}) > 100
    pairs = {(e.source, e.target) for e in edges}
    assert {("aws", "domain"), ("probe", "aws"), ("remediation", "checks"), ("cli", "report")} <= pairs
    assert ("aws", "__init__") in pairs  # `from hyperpod_debugger import __version__`


# --------------------------------------------------------------------------- the finder on small trees


def tree(root: pathlib.Path, files: Mapping[str, str]) -> pathlib.Path:
    for relative, text in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)
    return root


def pairs_of(root: pathlib.Path) -> set[tuple[str, str]]:
    return {(e.source, e.target) for e in scan(root, "pkg")[1]}


def test_a_lazy_import_makes_an_edge(tmp_path):
    root = tree(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/low/__init__.py": "",
            "pkg/low/a.py": "def f():\n    from pkg.high import b\n    return b\n",
            "pkg/high/__init__.py": "",
            "pkg/high/b.py": "",
        },
    )
    assert pairs_of(root) == {("low", "high")}
    assert upward(scan(root, "pkg")[1], {"__init__": 0, "low": 0, "high": 1}) == [
        "pkg/low/a.py:2: low (rank 0) -> high (rank 1): from pkg.high import b"
    ]


def test_an_import_for_type_checking_makes_an_edge(tmp_path):
    root = tree(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/low/__init__.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.high.b import B\n",
            "pkg/high/__init__.py": "",
            "pkg/high/b.py": "class B: ...\n",
        },
    )
    assert pairs_of(root) == {("low", "high")}


def test_relative_imports_and_names_of_the_package_resolve_to_their_units(tmp_path):
    root = tree(
        tmp_path,
        {
            "pkg/__init__.py": "__version__ = '1'\n",
            "pkg/top.py": "from pkg import __version__\nfrom pkg import low\n",
            "pkg/low/__init__.py": "from . import a\n",
            "pkg/low/a.py": "from ..high import b\nfrom .sub.c import C\n",
            "pkg/low/sub/__init__.py": "",
            "pkg/low/sub/c.py": "from ...high.b import B\nclass C: ...\n",
            "pkg/high/__init__.py": "",
            "pkg/high/b.py": "class B: ...\n",
        },
    )
    assert pairs_of(root) == {("top", "__init__"), ("top", "low"), ("low", "high")}


def test_a_planted_cycle_is_reported_with_each_import_that_closes_it(tmp_path):
    root = tree(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a/__init__.py": "from pkg.b import x\n",
            "pkg/b/__init__.py": "\n\ndef g():\n    from pkg.c import y\n    from pkg.c import w\n",
            "pkg/c/__init__.py": "import pkg.a\n",
            "pkg/d/__init__.py": "from pkg.a import z\n",  # into the cycle, not part of it
        },
    )
    found = cycles(scan(root, "pkg")[1])
    assert [describe(*c) for c in found] == [
        "a, b, c import each other; one cycle: a -> b -> c -> a"
        "\n    a -> b: pkg/a/__init__.py:1 from pkg.b import x"
        "\n    b -> c: pkg/b/__init__.py:4 from pkg.c import y (and 1 more)"
        "\n    c -> a: pkg/c/__init__.py:1 import pkg.a"
    ]


def test_a_graph_that_only_runs_downhill_has_no_cycle(tmp_path):
    root = tree(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a/__init__.py": "from pkg.b import x\nfrom pkg.c import y\n",
            "pkg/b/__init__.py": "from pkg.c import y\n",
            "pkg/c/__init__.py": "",
        },
    )
    assert pairs_of(root) == {("a", "b"), ("a", "c"), ("b", "c")}
    assert cycles(scan(root, "pkg")[1]) == []


def test_an_import_of_the_functions_is_found(tmp_path):
    root = tree(tmp_path, {"pkg/__init__.py": "", "pkg/a.py": "def f():\n    import functions.monitor.app\n"})
    imports, _ = scan(root, "pkg")
    assert [f"{i.at}: {i}" for i in imports if i.module.split(".")[0] in ABOVE_THE_CORE] == [
        "pkg/a.py:2: import functions.monitor.app"
    ]
