"""The library's layers: every import of an lmsat module, even one inside a function, goes down.

Each module of src/lmsat (subpackages too) is read with `ast`, and every import it makes is
collected: top-level and nested in functions, classes, `try` or `if` (`import lmsat.x`,
`from lmsat.x import y`, `from lmsat import x`, relative imports), `importlib.import_module`
with a literal name, an f-string name such as f"lmsat.commands.{name}" (it may import any
module of that package), and the names of the lazy public API (`lmsat.PUBLIC`). The test
fails on an import cycle (printing it), on a private name (leading underscore) imported
from another lmsat module, on an import from a higher layer, and on a module that no
folder (PACKAGE_LAYERS) or TOP_LEVEL entry places.

A module's layer is its folder's: the layers are the subpackages of src/lmsat
(docs/layout.md draws the tree). A package's `__init__` runs whenever one of its
submodules is imported, so that is not an edge of the graph; instead a package `__init__`
may import no lmsat module at its top level but lmsat.compat (the old module paths, a leaf
that imports nothing of lmsat until an old path is used); lmsat.figures, the figure
registry, imports its modules so that each registers its figures (REGISTERS_ITS_MODULES).

The layers, bottom to top (lmsat/__init__.py's docstring says the same). A module imports
only from its own layer or below, and the graph has no cycle, so within a layer too the
imports form a strict order:

0 leaves: core/ (plan types, path names, schedules, records and checksums, fingerprints,
  retries, lazy imports), runtime/ (offline switches, the warm interpreter, progress logs),
  tasks/ (lm-eval templates), errors, compat.
1 data access: checkpoints/ (where each family keeps its weights, formats, fetch, pins,
  the local hub, checks and loading), data/ (corpora and samples, the hidden-state cache,
  published evaluations).
2 compute: saturation/, degeneration/, bottleneck/ (the maths of each part of the paper),
  toy/ (the synthetic language and its tiny models).
3 registries: products/ (metrics, tables, report pages, the published run), figures/.
4 orchestration: planning/ (config to plan), standalone/ (analyse, monitor, the Trainer
  callback), commands/, the command line and the lazy public API.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import lmsat

SRC = Path(__file__).resolve().parents[1] / "src"

LEAF, DATA, COMPUTE, REGISTRY, ORCHESTRATION = range(5)
LAYER_NAMES = ("leaf", "data access", "compute", "registry", "orchestration")

# a folder of src/lmsat -> the layer of its package and of every module in it
PACKAGE_LAYERS = {
    "lmsat.core": LEAF,
    "lmsat.runtime": LEAF,
    "lmsat.tasks": LEAF,
    "lmsat.checkpoints": DATA,
    "lmsat.data": DATA,
    "lmsat.saturation": COMPUTE,
    "lmsat.degeneration": COMPUTE,
    "lmsat.bottleneck": COMPUTE,
    "lmsat.toy": COMPUTE,
    "lmsat.products": REGISTRY,
    "lmsat.figures": REGISTRY,
    "lmsat.planning": ORCHESTRATION,
    "lmsat.standalone": ORCHESTRATION,
    "lmsat.commands": ORCHESTRATION,
}
# the few modules at the top of src/lmsat
TOP_LEVEL = {
    "lmsat.errors": LEAF,
    "lmsat.compat": LEAF,
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


def layer_of(module: str) -> int | None:
    if module in TOP_LEVEL:
        return TOP_LEVEL[module]
    package = ".".join(module.split(".")[:2])
    return PACKAGE_LAYERS.get(package)


PLACED = {module: layer_of(module) for module in MODULES if layer_of(module) is not None}


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
            for name in submodules:  # `from lmsat import hub`: the module lmsat.checkpoints.local_hub
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
    for module in ("lmsat", "lmsat.planning.load", "lmsat.figures", "lmsat.figures.style", "lmsat.commands.plan"):
        assert module in MODULES
    graph = import_graph()
    # nested, relative-free and dynamic imports are all seen
    assert any(e.target == "lmsat.commands.plan" for e in graph["lmsat.cli"])  # import_module(f"...")
    assert any(e.target == "lmsat.checkpoints.local_hub" and not e.top_level for e in graph["lmsat.checkpoints.validation"])
    assert any(e.target == "lmsat.standalone.analyse" for e in graph["lmsat"])  # lmsat.PUBLIC


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


def test_every_module_has_a_layer_and_every_folder_is_a_layer():
    unplaced = sorted(set(MODULES) - set(PLACED))
    assert not unplaced, f"modules without a layer: {unplaced}; put each in a folder of PACKAGE_LAYERS"
    folders = {p.parent.name for p in (SRC / "lmsat").glob("*/__init__.py")}
    assert {f"lmsat.{f}" for f in folders} == set(PACKAGE_LAYERS), "a folder of src/lmsat without a layer, or a gone one"
    gone = sorted(set(TOP_LEVEL) - set(MODULES))
    assert not gone, f"TOP_LEVEL names modules that do not exist: {gone}"


def test_few_modules_at_the_top_and_none_over_600_lines():
    """Issue 40: the tree shows the layers; a module long enough to hold two roles is split."""
    top = [p for p in (SRC / "lmsat").glob("*.py")]
    assert len(top) <= 14, sorted(p.name for p in top)
    long = {name: n for name, path in MODULES.items() if (n := len(path.read_text().splitlines())) > 600}
    assert not long, f"modules over 600 lines: {long}"


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
        if edge.top_level and edge.target != "lmsat.compat"
    ]
    assert not eager, "package __init__ importing lmsat modules at import time:\n  " + "\n  ".join(map(repr, eager))


def test_the_package_docstring_states_the_layers():
    doc = lmsat.__doc__
    for name in ("leaves", "data access", "compute", "registries", "orchestration"):
        assert name in doc.lower(), f"lmsat/__init__.py's docstring does not name the layer {name!r}"


def test_docs_layout_draws_every_folder_and_module():
    """docs/layout.md's tree names each folder of src/lmsat and each module in it."""
    text = (SRC.parent / "docs" / "layout.md").read_text(encoding="utf-8")
    tree = text.split("```text", 1)[1].split("```", 1)[0]
    for module, path in MODULES.items():
        name = path.parent.name + "/" if path.name == "__init__.py" else path.name
        if module != "lmsat":
            assert name in tree.split(), f"docs/layout.md's tree does not name {path.relative_to(SRC)}"


def test_paths_taken_from_a_module_s_file_reach_what_they_name():
    """A module moved a folder down (issue 40) still finds the package, src/ and the workflow."""
    from lmsat.core import io
    from lmsat.runtime import warm
    from lmsat.standalone import analyse

    assert io.PACKAGE_ROOT == SRC / "lmsat"
    hashed = {p.relative_to(io.PACKAGE_ROOT).parts[0] for p in io.PACKAGE_ROOT.rglob("*.py")}
    assert {"core", "products", "planning", "__init__.py"} <= hashed  # source_sha256 reads every folder
    assert warm.SRC == SRC and (warm.SRC / "lmsat" / "__init__.py").is_file()
    assert analyse.SCHEMA.is_file()
