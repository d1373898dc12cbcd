"""The effective-rank metric end to end through the registry: its per-checkpoint values
against a float64 SVD, its table, its figure, and its planning."""

import h5py
import numpy as np
import pytest

from lmsat.core.io import write_json
from lmsat.degeneration.spectra import effective_rank, singular_entropy
from lmsat.errors import ConfigError
from lmsat.figures import FIGURES
from lmsat.planning.load import load_plan
from lmsat.products.metrics import METRICS, table_metric

from conftest import SCHEMA


def _hidden(tmp_path, rows: np.ndarray, n_seq: int):
    """A cache's `hidden` (n_seq sequences of len(rows) / n_seq tokens) and the `loss` of its sequences."""
    path = tmp_path / "cache.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("hidden", data=rows.astype(np.float32))
        f.create_dataset("loss", data=np.ones((n_seq, len(rows) // n_seq - 1), dtype=np.float32))
    return path


def test_effective_rank_equals_a_float64_svd(tmp_path):
    rng = np.random.default_rng(0)
    # a common direction (anisotropy) over a rank-5 spread in d = 12: centring must reveal it
    rows = 4.0 + rng.normal(size=(3000, 5)) @ rng.normal(size=(5, 12)) * np.linspace(1, 0.2, 12)
    with h5py.File(_hidden(tmp_path, rows, 30), "r") as cache:
        values = METRICS["effective_rank"].compute(cache)
    stored = rows.astype(np.float32).astype(np.float64)
    s = np.linalg.svd(stored, compute_uv=False)
    s_centered = np.linalg.svd(stored - stored.mean(axis=0), compute_uv=False)
    assert values["effective_rank"] == pytest.approx(effective_rank(s), rel=1e-6)
    assert values["effective_rank_centered"] == pytest.approx(effective_rank(s_centered), rel=1e-5)
    assert values["singular_entropy"] == pytest.approx(singular_entropy(s), rel=1e-6)
    assert values["n_tokens"] == 3000 and values["hidden_size"] == 12
    assert values["effective_rank"] < values["effective_rank_centered"] <= 5 + 1e-6  # rank 5 once centred
    assert len(values["effective_rank_influence"]) == 30  # one per sequence (tests/test_event_order.py checks them)


def test_effective_rank_refuses_nan(tmp_path):
    from lmsat.data.hidden_states import CacheError

    rows = np.ones((10, 4))
    rows[7, 2] = np.nan
    with h5py.File(_hidden(tmp_path, rows, 2), "r") as cache, pytest.raises(CacheError, match="row 7"):
        METRICS["effective_rank"].compute(cache)


def _records(tmp_path):
    """Records as rule compute_checkpoint_metric writes them, in its path layout."""
    files = []
    for model, ranks in (("big", [9.0, 7.0, 6.5]), ("small", [3.0, 2.5, 2.0])):
        for step, value in zip((0, 10, 20), ranks):
            path = tmp_path / "metrics" / "effective_rank" / model / f"step{step}.json"
            write_json(path, dict(suite="s", model=model, revision=f"step{step}", step=step, tokens=100 * step,
                                  metric="effective_rank", effective_rank=value, effective_rank_centered=value + 1,
                                  singular_entropy=1 / value, hidden_size=8, n_tokens=64))
            files.append(str(path))
    return files


def test_effective_rank_table_and_figure_draw_the_records(tmp_path):
    assert table_metric()["effective_rank"] == "effective_rank"
    table = METRICS["effective_rank"].tables["effective_rank"].build(_records(tmp_path), {}, ["small", "big"])
    assert list(table.columns) == ["suite", "model", "revision", "step", "tokens", "is_final", "effective_rank",
                                   "effective_rank_centered", "singular_entropy", "n_tokens"]
    assert list(table["model"]) == ["small"] * 3 + ["big"] * 3  # the plan's order (by size)
    assert list(table["is_final"]) == [False, False, True] * 2
    figure = FIGURES["effective_rank"]
    assert figure.tables == ("effective_rank",)
    fig = figure.plot({"effective_rank": table}, [tmp_path / "effective_rank.png"])
    assert (tmp_path / "effective_rank.png").stat().st_size > 0
    left, right = fig.axes[:2]
    # the models by colour, then what solid and dashed mean (issue 50: the dashed curves were in no legend)
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["small", "big", "effective rank as is",
                                                          "effective rank centred (mean row removed)"]
    assert [handle.get_linestyle() for handle in legend.legend_handles[2:]] == ["-", "--"]
    drawn = table[table["tokens"] > 0]  # log axis: step 0 left out
    for model, solid, dashed, entropy in zip(("small", "big"), left.lines[0::2], left.lines[1::2], right.lines):
        rows = drawn[drawn["model"] == model]
        assert list(solid.get_xdata()) == list(rows["tokens"]) and list(solid.get_ydata()) == list(rows["effective_rank"])
        assert list(dashed.get_ydata()) == list(rows["effective_rank_centered"]) and dashed.get_linestyle() == "--"
        assert list(entropy.get_ydata()) == list(rows["singular_entropy"])
    assert left.get_ylabel() == "effective rank"
    assert right.get_ylabel() == "KL(p || uniform) (nats), $p \\propto \\sigma$\n0 = flat; higher = more degenerate"


def test_metrics_key_plans_exactly_the_named_metrics(default_config):
    assert load_plan(default_config, SCHEMA).config["metrics"] is None  # null: every registered metric
    bottleneck_off = dict(default_config, bottleneck=dict(default_config.get("bottleneck", {}), models=[]))
    plan = load_plan(dict(bottleneck_off, metrics=["loss", "effective_rank"]), SCHEMA)
    assert plan.config["metrics"] == ["loss", "effective_rank"]
    with pytest.raises(ConfigError, match=r"metrics\[1\].*unknown metric 'rank'"):
        load_plan(dict(default_config, metrics=["loss", "rank"]), SCHEMA)
    with pytest.raises(ConfigError, match="metric 'attention' needs table 'identical_weights' of metric 'spectra'"):
        load_plan(dict(default_config, metrics=["loss", "attention"]), SCHEMA)
    with pytest.raises(ConfigError, match="loss is not planned"):
        load_plan(dict(default_config, metrics=["effective_rank"]), SCHEMA)
    load_plan(dict(bottleneck_off, metrics=["loss"]), SCHEMA)
    # a metrics list without spectra drops the bottleneck section (it reads the final head's
    # spectrum) from the plan, with a note naming it and the fix (issue 31, case 7)
    plan = load_plan(dict(default_config, metrics=["loss"]), SCHEMA)
    assert plan.config["bottleneck"]["models"] == [] and plan.config["metrics"] == ["loss"]
    (note,) = plan.notes
    assert "bottleneck section (rank-constrained heads of toy-d32, toy-d64" in note and "add spectra to metrics" in note
    assert load_plan(default_config, SCHEMA).notes == ()
    assert load_plan(dict(default_config, metrics=["loss", "spectra"]), SCHEMA).config["bottleneck"]["models"]


def test_table_names_are_unique_and_builders_are_functions():
    table_metric()  # raises on a table name registered twice
    for metric in METRICS.values():
        assert metric.reads in ("cache", "weights", "cache_pairs")
        for name, table in metric.tables.items():
            build = getattr(table.build, "func", table.build)  # a partial's function
            module = build.__module__
            assert callable(build) and module.startswith("lmsat.products.") and module.endswith(("_tables", "table_rows")), (metric, name)
    for stem, figure in FIGURES.items():
        assert figure.stem == stem and callable(figure.draw) and figure.tables, stem
