"""The library's layers: every import of an lmsat module, even one inside a function, goes down.

Each module of src/lmsat (subpackages too) is read with `ast`, and every import it makes is
collected: top-level and nested in functions, classes, `try` or `if` (`import lmsat.x`,
`from lmsat.x import y`, `from lmsat import x`, relative imports), `importlib.import_module`
with a literal name, an f-string name such as f"lmsat.commands.{name}" (it may import any
module of that package), and the names of the lazy public API (`lmsat.PUBLIC`). The test
fails on an import cycle (printing it), on a private name (leading underscore) imported
from another lmsat module, on an import from a higher layer, and on a module that LAYERS
does not place (a new module must be given its layer here).

A package's `__init__` runs whenever one of its submodules is imported, so that is not an
edge of the graph; instead a package `__init__` may import no lmsat module at its top level
(lmsat and lmsat.commands import theirs when a function runs; lmsat.figures, the figure
registry, imports its modules so that each registers its figures: REGISTERS_ITS_MODULES).

The layers, bottom to top (lmsat/__init__.py's docstring says the same). A module imports
only from its own layer or below, and the graph has no cycle, so within a layer too the
imports form a strict order:

0 leaves: exceptions (errors), retry with backoff (retry), plan types (plan: ModelEntry,
  Plan), path-name checks (names), file writing and records (io, integrity), progress logs,
  weights fingerprints, revision schedules, offline switches, the lm-eval task templates.
1 data access: the hub cache, checkpoints and models (and the formats converted at load),
  downloads (fetch), corpora with their staged reader, the representation cache, run
  folders, architecture adapters, published reference data.
2 compute: the maths of every analysis (anisotropy, spectra, attention, degeneration,
  heads and their cache, n-grams, W-error, scaling, lm-eval, the bottleneck grid, the
  synthetic language and its toy models).
3 registries: per-checkpoint metrics, tables, figures (and their plot modules), report pages.
4 orchestration: config loading and planning, staging, the one-checkpoint analysis, the
  command line and its commands, the lazy public API.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import lmsat

SRC = Path(__file__).resolve().parents[1] / "src"

LEAF, DATA, COMPUTE, REGISTRY, ORCHESTRATION = range(5)
LAYER_NAMES = ("leaf", "data access", "compute", "registry", "orchestration")

LAYERS = {
    # 0 leaves: import nothing of lmsat but other leaves
    "lmsat.errors": LEAF,
    "lmsat.retry": LEAF,
    "lmsat.plan": LEAF,
    "lmsat.names": LEAF,
    "lmsat.io": LEAF,
    "lmsat.integrity": LEAF,
    "lmsat.progress": LEAF,
    "lmsat.fingerprint": LEAF,
    "lmsat.schedules": LEAF,
    "lmsat.offline": LEAF,
    "lmsat.lazy": LEAF,
    "lmsat.tasks": LEAF,
    "lmsat.warm": LEAF,
    "lmsat.warm_start": LEAF,
    # 1 data access: files, caches, the hub
    "lmsat.hub": DATA,
    "lmsat.checkpoints": DATA,
    "lmsat.fetch": DATA,
    "lmsat.models": DATA,
    "lmsat.corpus": DATA,
    "lmsat.cache": DATA,
    "lmsat.rundir": DATA,
    "lmsat.adapters": DATA,
    "lmsat.published": DATA,
    "lmsat.pins": DATA,
    "lmsat.formats": DATA,
    # 2 compute: the analyses' maths
    "lmsat.anisotropy": COMPUTE,
    "lmsat.spectra": COMPUTE,
    "lmsat.attention": COMPUTE,
    "lmsat.degeneration": COMPUTE,
    "lmsat.heads": COMPUTE,
    "lmsat.headcache": COMPUTE,
    "lmsat.ngrams": COMPUTE,
    "lmsat.werror": COMPUTE,
    "lmsat.ngram_werror": COMPUTE,
    "lmsat.scaling": COMPUTE,
    "lmsat.evaluation": COMPUTE,
    "lmsat.bottleneck": COMPUTE,
    "lmsat.synthetic": COMPUTE,
    "lmsat.toy": COMPUTE,
    "lmsat.verdict": COMPUTE,
    "lmsat.similarity": COMPUTE,  # representation similarity across checkpoints (CKA, SVCCA, PWCCA)
    "lmsat.weight_diagnostics": COMPUTE,  # WeightWatcher's and pico-analyze's per-layer weight measures
    "lmsat.gradient_bottleneck": COMPUTE,
    # 3 registries: products by name
    "lmsat.metrics": REGISTRY,
    "lmsat.tables": REGISTRY,
    "lmsat.report": REGISTRY,
    "lmsat.published_record": REGISTRY,  # the published record's tables (tables, report, verdict)
    "lmsat.figures": REGISTRY,  # and every module in it (PACKAGE_LAYERS)
    # 4 orchestration: planning and entry points
    "lmsat.config": ORCHESTRATION,
    "lmsat.staging": ORCHESTRATION,
    "lmsat.analysis": ORCHESTRATION,
    "lmsat.callbacks": ORCHESTRATION,
    "lmsat.schema_doc": ORCHESTRATION,
    "lmsat.commands": ORCHESTRATION,
    "lmsat.commands.init": ORCHESTRATION,
    "lmsat.commands.plan": ORCHESTRATION,
    "lmsat.commands.analyse": ORCHESTRATION,
    "lmsat.commands.pin": ORCHESTRATION,
    "lmsat.cli": ORCHESTRATION,
    "lmsat.__main__": ORCHESTRATION,
    "lmsat": ORCHESTRATION,
}


def library_modules() -> dict[str, Path]:
    """Dotted module name -> file, for every .py file under src/lmsat."""
    modules = {}
    for path in sorted((SRC / "lmsat").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


MODULES = library_modules()
# Packages whose every module shares the package's layer: a figure module is an entry of the
# figure registry, so adding a figure (its module and caption) touches no list here.
PACKAGE_LAYERS = {"lmsat.figures": REGISTRY}
PLACED = {
    **{module: layer for package, layer in PACKAGE_LAYERS.items() for module in MODULES if module.startswith(package + ".")},
    **LAYERS,
}


def is_package(module: str) -> bool:
    return MODULES[module].name == "__init__.py"


class Import:
    """One import statement (or import_module call) of an lmsat module."""

    def __init__(self, source: str, target: str, names: tuple[str, ...], line: int, top_level: bool):
        self.source, self.target, self.names, self.line, self.top_level = source, target, names, line, top_level

    def __repr__(self):
        return f"{MODULES[self.source].relative_to(SRC)}:{self.line}: {self.target} {', '.join(self.names)}".rstrip()


def resolved(module: str, level: int, name: str | None) -> str:
    """The absolute module of `from <level dots><name> import ...` written in `module`."""
    if not level:
        return name or ""
    package = module.split(".") if is_package(module) else module.split(".")[:-1]
    base = package[: len(package) - level + 1]
    return ".".join(base + ([name] if name else []))


def imports_of(module: str) -> list[Import]:
    """Every import of an lmsat module that `module` makes, wherever it stands."""
    tree = ast.parse(MODULES[module].read_text(), filename=str(MODULES[module]))
    top = {id(node) for node in tree.body}
    found = []

    def add(target: str, names: tuple[str, ...], node: ast.AST):
        if target == "lmsat" or target.startswith("lmsat."):
            found.append(Import(module, target, names, node.lineno, id(node) in top))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, (), node)
        elif isinstance(node, ast.ImportFrom):
            target = resolved(module, node.level, node.module)
            names = tuple(alias.name for alias in node.names)
            submodules = [n for n in names if f"{target}.{n}" in MODULES]
            for name in submodules:  # `from lmsat import hub`: the module lmsat.hub
                add(f"{target}.{name}", (), node)
            if len(submodules) < len(names):
                add(target, tuple(n for n in names if n not in submodules), node)
        elif isinstance(node, ast.Call) and node.args and _is_import_module(node.func):
            name = node.args[0]
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                add(name.value, (), node)
            elif isinstance(name, ast.JoinedStr) and name.values and isinstance(name.values[0], ast.Constant):
                prefix = name.values[0].value  # f"lmsat.figures.{module}": any module of the package
                for other in MODULES:
                    if other.startswith(prefix) and other != module:
                        add(other, (), node)
    return found


def _is_import_module(func: ast.expr) -> bool:
    return (isinstance(func, ast.Attribute) and func.attr == "import_module") or (
        isinstance(func, ast.Name) and func.id in ("import_module", "__import__")
    )


def import_graph() -> dict[str, list[Import]]:
    graph = {module: imports_of(module) for module in MODULES}
    for name, target in lmsat.PUBLIC.items():  # the lazy public API imports its modules on first use
        graph["lmsat"].append(Import("lmsat", target, (name,), 0, False))
    return graph


def find_cycle(graph: dict[str, list[Import]]) -> list[Import] | None:
    """The imports of one cycle of the module graph, or None (depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[Import] = []

    def visit(module: str) -> list[Import] | None:
        state[module] = 1
        for edge in graph.get(module, []):
            if edge.target not in MODULES or edge.target == module:
                continue
            if state.get(edge.target) == 1:
                start = next(i for i, e in enumerate(path) if e.source == edge.target) if path else 0
                return [*path[start:], edge]
            if edge.target not in state:
                path.append(edge)
                cycle = visit(edge.target)
                if cycle:
                    return cycle
                path.pop()
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state:
            cycle = visit(module)
            if cycle:
                return cycle
    return None


def test_every_module_is_found():
    for module in ("lmsat", "lmsat.config", "lmsat.figures", "lmsat.figures.style", "lmsat.commands.plan"):
        assert module in MODULES
    graph = import_graph()
    # nested, relative-free and dynamic imports are all seen
    assert any(e.target == "lmsat.commands.plan" for e in graph["lmsat.cli"])  # import_module(f"...")
    assert any(e.target == "lmsat.hub" and not e.top_level for e in graph["lmsat.checkpoints"])
    assert any(e.target == "lmsat.analysis" for e in graph["lmsat"])  # lmsat.PUBLIC


def test_the_walker_reads_every_kind_of_import(tmp_path, monkeypatch):
    """The collector on a module written for it: nothing it should see is missed."""
    package = tmp_path / "lmsat"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text(
        "import lmsat.b\n"
        "def f():\n    from . import c\n"
        "class K:\n    try:\n        from lmsat.d import x\n    except ImportError:\n        pass\n"
        "if True:\n    import importlib\n    importlib.import_module('lmsat.e')\n"
        "from .f import _private\n"
    )
    for name in "bcdef":
        (package / f"{name}.py").write_text("x = _private = 1\n")
    here = sys.modules[__name__]
    monkeypatch.setattr(here, "SRC", tmp_path)
    monkeypatch.setattr(here, "MODULES", library_modules())
    edges = imports_of("lmsat.a")
    assert sorted(e.target for e in edges) == [f"lmsat.{n}" for n in "bcdef"]
    assert [e.names for e in edges if e.target == "lmsat.f"] == [("_private",)]
    assert [e.top_level for e in sorted(edges, key=lambda e: e.target)] == [True, False, False, False, True]
    graph = {"lmsat.a": edges, "lmsat.b": [Import("lmsat.b", "lmsat.a", (), 1, False)]}
    assert [e.target for e in find_cycle(graph)] == ["lmsat.b", "lmsat.a"]


def test_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle " + " -> ".join([cycle[0].source] + [e.target for e in cycle]) + ":\n  " + (
        "\n  ".join(map(repr, cycle))
    )


def test_no_private_name_crosses_a_module():
    crossing = [
        edge
        for edges in import_graph().values()
        for edge in edges
        if edge.target != edge.source and any(name.startswith("_") and not name.startswith("__") for name in edge.names)
    ]
    assert not crossing, "private names imported from another module:\n  " + "\n  ".join(map(repr, crossing))


def test_every_module_has_a_layer():
    unplaced = sorted(set(MODULES) - set(PLACED))
    assert not unplaced, f"modules without a layer: {unplaced}; place each in tests/test_layers.py LAYERS"
    gone = sorted(set(LAYERS) - set(MODULES))
    assert not gone, f"LAYERS names modules that do not exist: {gone}"


def test_imports_go_down():
    upward = [
        f"{edge!r} ({LAYER_NAMES[PLACED[edge.source]]} imports {LAYER_NAMES[PLACED[edge.target]]})"
        for edges in import_graph().values()
        for edge in edges
        if edge.source in PLACED and edge.target in PLACED and PLACED[edge.target] > PLACED[edge.source]
    ]
    assert not upward, "imports from a higher layer:\n  " + "\n  ".join(upward)


# The figure registry's package imports its modules on purpose: each declares its figures
# with @figure, so a new module registers them by being there (no list to keep). They import
# no matplotlib at import time (tests/test_figure_registry.py), so this costs the DAG nothing.
REGISTERS_ITS_MODULES = {"lmsat.figures"}


def test_packages_import_nothing_at_import_time():
    """A package's __init__ runs on every import of its submodules: a top-level import of an
    lmsat module there would be an import of every submodule."""
    eager = [
        edge
        for module in MODULES
        if is_package(module) and module not in REGISTERS_ITS_MODULES
        for edge in imports_of(module)
        if edge.top_level
    ]
    assert not eager, "package __init__ importing lmsat modules at import time:\n  " + "\n  ".join(map(repr, eager))


def test_the_package_docstring_states_the_layers():
    doc = lmsat.__doc__
    for name in ("leaves", "data access", "compute", "registries", "orchestration"):
        assert name in doc.lower(), f"lmsat/__init__.py's docstring does not name the layer {name!r}"
