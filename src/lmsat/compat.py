"""The module paths of lmsat 0.1 before its layers became folders (docs/layout.md), kept
importable for a release: `from lmsat.callbacks import SaturationCallback` still works and
warns (DeprecationWarning) where the name lives now.

A module that moved whole is the new module itself under its old name (so a monkeypatch
through either name patches the same object). A module that was split (config, tables,
heads, callbacks) is a small module whose attributes are looked up in its successors. The
four old modules whose names are now packages (checkpoints, degeneration, bottleneck, toy)
forward through their package's `__getattr__` (forward_from).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
import warnings

# old module -> its one new home
MOVED = {
    "lmsat.plan": "lmsat.core.plan",
    "lmsat.names": "lmsat.core.names",
    "lmsat.schedules": "lmsat.core.schedules",
    "lmsat.io": "lmsat.core.io",
    "lmsat.integrity": "lmsat.core.integrity",
    "lmsat.fingerprint": "lmsat.core.fingerprint",
    "lmsat.retry": "lmsat.core.retry",
    "lmsat.lazy": "lmsat.core.lazy",
    "lmsat.offline": "lmsat.runtime.offline",
    "lmsat.warm": "lmsat.runtime.warm",
    "lmsat.warm_start": "lmsat.runtime.warm_start",
    "lmsat.progress": "lmsat.runtime.progress",
    "lmsat.adapters": "lmsat.checkpoints.adapters",
    "lmsat.models": "lmsat.checkpoints.loading",
    "lmsat.formats": "lmsat.checkpoints.formats",
    "lmsat.fetch": "lmsat.checkpoints.fetch",
    "lmsat.hub": "lmsat.checkpoints.local_hub",
    "lmsat.pins": "lmsat.checkpoints.pins",
    "lmsat.rundir": "lmsat.checkpoints.trainer_runs",
    "lmsat.corpus": "lmsat.data.corpus",
    "lmsat.cache": "lmsat.data.hidden_states",
    "lmsat.published": "lmsat.data.published_evals",
    "lmsat.verdict": "lmsat.saturation.verdict",
    "lmsat.scaling": "lmsat.saturation.scaling",
    "lmsat.evaluation": "lmsat.saturation.downstream",
    "lmsat.anisotropy": "lmsat.degeneration.anisotropy",
    "lmsat.spectra": "lmsat.degeneration.spectra",
    "lmsat.attention": "lmsat.degeneration.attention",
    "lmsat.similarity": "lmsat.degeneration.similarity",
    "lmsat.weight_diagnostics": "lmsat.degeneration.weight_diagnostics",
    "lmsat.headcache": "lmsat.bottleneck.representation_cache",
    "lmsat.werror": "lmsat.bottleneck.werror",
    "lmsat.ngrams": "lmsat.bottleneck.ngrams",
    "lmsat.ngram_werror": "lmsat.bottleneck.corpus_werror",
    "lmsat.gradient_bottleneck": "lmsat.bottleneck.gradient",
    "lmsat.synthetic": "lmsat.toy.language",
    "lmsat.metrics": "lmsat.products.metrics",
    "lmsat.report": "lmsat.products.report",
    "lmsat.published_record": "lmsat.products.published_run",
    "lmsat.staging": "lmsat.planning.staging",
    "lmsat.schema_doc": "lmsat.planning.schema_doc",
    "lmsat.analysis": "lmsat.standalone.analyse",
}

# old module -> the modules its names went to (looked up in this order)
SPLIT = {
    "lmsat.config": (
        "lmsat.planning.load", "lmsat.planning.config_files", "lmsat.planning.run_claim",
        "lmsat.planning.model_entries", "lmsat.planning.refusals", "lmsat.planning.discovery",
        "lmsat.planning.slicing",
    ),
    "lmsat.tables": (
        "lmsat.products.table_files", "lmsat.products.table_rows", "lmsat.products.saturation_tables",
        "lmsat.products.degeneration_tables", "lmsat.products.bottleneck_tables",
    ),
    "lmsat.heads": ("lmsat.bottleneck.rank_heads", "lmsat.bottleneck.head_loss", "lmsat.bottleneck.representation_cache"),
    "lmsat.callbacks": ("lmsat.standalone.callback", "lmsat.standalone.watch", "lmsat.standalone.monitor",
                        "lmsat.standalone.callback_files"),
}
RENAMED = {("lmsat.config", "revisions"): "expand_revisions", ("lmsat.config", "models"): "model_entries"}

# old module whose name is now a package -> the module its names went to
SHADOWED = {
    "lmsat.checkpoints": "lmsat.checkpoints.validation",
    "lmsat.degeneration": "lmsat.degeneration.weight_files",
    "lmsat.bottleneck": "lmsat.bottleneck.rank_grid",
    "lmsat.toy": "lmsat.toy.suite",
}


def _warn(old: str, new: str) -> None:
    warnings.warn(f"{old} is an old path of lmsat 0.1: import from {new} (docs/layout.md)", DeprecationWarning, stacklevel=4)


def _lookup(old: str, name: str):
    new_name = RENAMED.get((old, name), name)
    for module in SPLIT[old]:
        value = getattr(importlib.import_module(module), new_name, _lookup)
        if value is not _lookup:
            return module, value
    raise AttributeError(f"module {old!r} (an old path of lmsat 0.1) has no attribute {name!r}; see docs/layout.md")


def _split_module(old: str) -> types.ModuleType:
    module = types.ModuleType(old, f"{old} of lmsat 0.1, split into {', '.join(SPLIT[old])} (docs/layout.md)")

    def __getattr__(name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        home, value = _lookup(old, name)
        _warn(f"{old}.{name}", home)
        return value

    module.__getattr__ = __getattr__  # `from old import name` needs only attributes
    return module


class _OldPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self):
        self.own_specs: dict[str, importlib.machinery.ModuleSpec] = {}

    def find_spec(self, fullname, path=None, target=None):
        if fullname in MOVED or fullname in SPLIT:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        if spec.name in MOVED:
            _warn(spec.name, MOVED[spec.name])
            module = importlib.import_module(MOVED[spec.name])
            self.own_specs[module.__name__] = module.__spec__
            return module
        return _split_module(spec.name)

    def exec_module(self, module):
        # the new module ran already (a split module has nothing to run); the import system
        # gave it the old path's spec, which its own must replace
        if module.__name__ in self.own_specs:
            module.__spec__ = self.own_specs.pop(module.__name__)


def forward_from(package: str):
    """The `__getattr__` of a package that took an old module's name: the old module's
    names, with a DeprecationWarning, from the module they moved to."""
    target = SHADOWED[package]

    def __getattr__(name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        value = getattr(importlib.import_module(target), name, forward_from)
        if value is forward_from:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        _warn(f"{package}.{name}", target)
        return value

    return __getattr__


def install() -> None:
    # one finder, this module's: a workflow that forgets an imported lmsat and imports it
    # again (workflow/rules/common.smk) replaces the earlier one
    sys.meta_path[:] = [finder for finder in sys.meta_path if type(finder).__name__ != _OldPaths.__name__]
    sys.meta_path.append(_OldPaths())  # last: a real module of the name always wins
