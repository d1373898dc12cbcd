"""Start-up of a job (issue 35): each workflow script, imported as its job imports it (a fresh
interpreter, Snakemake's preamble, then the script's top level), loads only the heavy
libraries its rule uses; lmsat.core.lazy imports a module on first use, and fails as `import` does."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "lm_eval", "scipy", "matplotlib", "pandas", "jsonschema", "datasets")

# rule script -> heavy libraries it may load before its main runs (the rest: inside main, when used)
ALLOWED = {
    "compute_checkpoint_metric": {"h5py"},  # 108 jobs of the default run: reads a cache, no table, no model
    "compare_checkpoint_caches": {"h5py"},  # 36 jobs of the default run: reads three caches, no table, no model
    "analyse_checkpoint": {"torch", "h5py"},  # transformers: when the model loads
    "evaluate_checkpoint": set(),  # torch, lm-eval: in main, after the reuse of a final checkpoint's record
    "tabulate_metric": {"pandas", "h5py"},
    "plot_figure": {"pandas", "h5py"},  # scipy: only for a figure drawing the entropy rate
    "fetch_checkpoint": set(),
}


def loaded_before_main(script: str) -> set[str]:
    path = ROOT / "workflow" / "scripts" / f"{script}.py"
    code = (
        "import sys, json, runpy, pickle, snakemake.iocontainers; "
        f"sys.path.insert(0, {str(path.parent)!r}); runpy.run_path({str(path)!r}, run_name='job'); "
        f"print(json.dumps([m for m in {(*HEAVY, 'h5py')!r} "
        "if m in sys.modules and type(sys.modules[m]).__name__ != '_LazyModule']))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    return set(json.loads(done.stdout))


@pytest.mark.parametrize("script", sorted(ALLOWED))
def test_a_job_loads_only_the_libraries_its_rule_uses(script):
    extra = loaded_before_main(script) - ALLOWED[script]
    assert not extra, f"{script} imports {sorted(extra)} before its main: import them where they are used"


def run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT / "src"), "PATH": ""}, cwd=ROOT)


def test_a_lazy_module_is_imported_on_first_use_and_is_the_real_module():
    done = run(
        "import sys; from lmsat.core.lazy import lazy_module; pd = lazy_module('pandas'); "
        "before = type(sys.modules['pandas']).__name__; frame = pd.DataFrame({'a': [1, 2]}); "
        "import pandas; print(before, type(sys.modules['pandas']).__name__, int(frame.a.sum()), pandas is pd)"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["_LazyModule", "module", "3", "True"]


def test_the_tables_module_builds_tables_with_its_lazy_pandas():
    done = run(
        "import sys; from lmsat.products import saturation_tables as tables; "
        "loaded = type(sys.modules['pandas']).__name__ != '_LazyModule'; "
        "t = tables.loss_table([dict(suite='s', model='m', revision='step1', step=1, tokens=8, loss=2.0, loss_sem=0.1)]); "
        "print(loaded, list(t.columns)[:3])"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False ['suite', 'model', 'revision']"


def test_an_absent_package_or_a_submodule_is_refused_by_name():
    from lmsat.core.lazy import lazy_module

    with pytest.raises(ModuleNotFoundError, match="no_such_package_lmsat"):
        lazy_module("no_such_package_lmsat")
    with pytest.raises(ValueError, match="scipy.sparse.*top-level packages only"):
        lazy_module("scipy.sparse")
