"""The one registry of figures (lmsat.figures.FIGURES): each figure declared once beside its
plot function, with its caption under workflow/report/, and cheap to read at DAG time."""

import os
import subprocess
import sys

import pandas as pd
import pytest

from lmsat.figures import FIGURES, figure
from lmsat.figures.registry import Figure

from conftest import ROOT


def test_every_figure_has_its_caption_and_a_real_draw_function():
    for stem, entry in FIGURES.items():
        assert entry.stem == stem and entry.tables and entry.target and entry.category and entry.title, stem
        assert entry.draw.__module__.startswith("lmsat.figures."), stem  # the function itself, not a name
        caption = ROOT / "workflow" / "report" / f"{stem}.rst"
        assert caption.is_file() and caption.read_text().startswith("**"), stem
    assert list(FIGURES)[:2] == ["fig1a_loss", "fig1b_scaling"]  # the paper's sections first


def test_no_figure_title_holds_a_quote():
    """The run summary's job takes the figures' titles as a parameter, and Snakemake's report
    shows a parameter's str(): a title holding ' is shown in double quotes, escaped (\\")."""
    quoted = {name: spec.title for name, spec in FIGURES.items() if "'" in spec.title or '"' in spec.title}
    assert not quoted, quoted


def test_the_registries_import_without_matplotlib_scipy_or_torch():
    """The workflow imports lmsat.products.metrics (with the lmsat.products.*_tables modules) and every figure module at DAG
    time, in every planning process: matplotlib and scipy take a good part of a second each."""
    code = (
        "import sys, lmsat.products.metrics, lmsat.figures; "
        "print(sorted(m for m in ('matplotlib', 'scipy', 'torch') if m in sys.modules))"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert found.stdout.strip() == "[]", found.stdout


def test_figure_is_drawn_from_its_tables_by_name_and_refuses_a_second_entry(tmp_path):
    seen = {}

    def draw(first, second, extra, paths, scale=1):
        seen.update(first=first, second=second, extra=extra, paths=paths, scale=scale)
        return "drawn"

    entry = Figure(stem="probe", draw=draw, tables=("b", "a"), target="probe", category="c", title="t",
                   optional=("missing",))
    frames = {"a": pd.DataFrame({"x": [1]}), "b": pd.DataFrame({"x": [2]})}
    assert entry.plot(frames, ["p.png"], scale=3) == "drawn"
    assert seen["first"] is frames["b"] and seen["second"] is frames["a"] and seen["extra"] is None
    assert seen["paths"] == ["p.png"] and seen["scale"] == 3
    with pytest.raises(ValueError, match="registered twice"):
        figure("fig1a_loss", tables=("loss",), target="x", category="c", title="t")(draw)
    with pytest.raises(ValueError, match="entropy_rate must be one of"):
        figure("probe", tables=("loss",), target="x", category="c", title="t", entropy_rate="toy")
    assert "probe" not in FIGURES
