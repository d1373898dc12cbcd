"""The workflow side of Fig. 1b and Table 1: the tables of evaluation.smk / scaling.smk
(the lmsat.products.*_tables modules, lmsat.saturation.scaling), the scripts that need a model, and the plan they add to a dry run."""

import math
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import yaml
from snakemake.iocontainers import Namedlist

from lmsat.core.integrity import csv_with_checksum
from lmsat.core.io import read_json, write_json
from lmsat.core.plan import ModelEntry
from lmsat.figures.saturation import law_curve, plot_scaling_fit
from lmsat.products.saturation_tables import loss_table, model_sizes, scaling_tables, select_checkpoints, table1
from lmsat.products.table_files import write_csv
from lmsat.saturation.scaling import count_model_parameters, count_parameters

from conftest import ROOT, clone_like, script

TRUE_A, TRUE_ALPHA = 119.09, 0.246  # the paper's fit
HOFFMANN = dict(B=410.7, beta=0.28, E=1.69)
SETTINGS = dict(params="non_embedding", min_params=3e8, fit_on="final", A=None, alpha=None, bootstrap=0, **HOFFMANN)


def law(n_params, tokens, A=TRUE_A, alpha=TRUE_ALPHA):
    """Brute-force reference of L(N, T) = A/N^alpha + B/T^beta + E, Hoffmann's B, beta, E."""
    return A / n_params**alpha + 410.7 / tokens**0.28 + 1.69


def selection(sizes: dict[str, float], excess: dict[str, tuple[float, float]]) -> pd.DataFrame:
    """best_final.csv rows: final at step 143000, best at step 99000, each model's loss the
    law's times (1 + excess) for (best, final)."""
    rows = []
    for model, n_params in sizes.items():
        for kind, step, factor in (("best", 99000, excess[model][0]), ("final", 143000, excess[model][1])):
            tokens = step * 2_097_152
            rows.append(dict(suite="pythia", model=model, kind=kind, revision=f"step{step}", step=step,
                             tokens=tokens, loss=law(n_params, tokens) * (1 + factor), loss_sem=0.01))
    return pd.DataFrame(rows)


SIZES = {"160m": 8.5e7, "410m": 3.02e8, "1b": 8.05e8, "2.8b": 2.52e9}
EXCESS = {"160m": (0.04, 0.08), "410m": (0.0, 0.0), "1b": (0.0, 0.0), "2.8b": (0.0, 0.0)}


# ---------------------------------------------------------------- select_checkpoints


def test_select_checkpoints_matches_brute_force():
    rng = np.random.default_rng(0)
    records = [
        dict(suite="toy", model=model, revision=f"step{step}", step=step, tokens=step * 2048,
             loss=float(rng.uniform(3, 5)), loss_sem=0.01)
        for model in ("a", "b") for step in (0, 1, 2, 4, 250, 500)
    ]
    table = select_checkpoints(loss_table(records))
    assert list(table.columns) == ["suite", "model", "kind", "revision", "step", "tokens", "loss", "loss_sem",
                                   "implausible_loss"]
    for model in ("a", "b"):
        mine = [r for r in records if r["model"] == model]
        best = min(mine, key=lambda r: r["loss"])["revision"]
        rows = table[table["model"] == model].set_index("kind")["revision"]
        assert rows.to_dict() == {"best": best, "final": "step500"}


def test_an_untrained_final_is_flagged_in_every_table_that_shows_its_loss(tmp_path):
    """Issue 49, item 10: a final back at ln V after the run had learned (untrained weights
    saved in its place) is flagged in loss.csv; best_final.csv (the rows behind Table 1 and
    Fig. 1b), scaling_shortfall.csv and the summary's key numbers carry the flag with the
    loss, through the CSVs the rules write and read."""
    from lmsat.products.report import key_numbers
    from lmsat.products.table_files import read_table

    uniform = math.log(520)  # 6.254: the toy head's V rows
    losses = {"toy-d16": (6.25, 3.5, 3.3, 6.255), "toy-d32": (6.25, 3.4, 3.2, 3.1)}  # d16's final: untrained
    records = [dict(suite="toy", model=model, revision=f"step{step}", step=step, tokens=step * 1024, loss=loss,
                    loss_sem=0.01, uniform_loss=uniform)
               for model, values in losses.items() for step, loss in zip((0, 100, 400, 800), values)]
    write_csv(loss_table(records, ["toy-d16", "toy-d32"]), tmp_path / "loss.csv")
    loss = read_table(tmp_path / "loss.csv")
    assert loss.loc[loss["implausible_loss"], "revision"].tolist() == ["step800"]
    write_csv(select_checkpoints(loss), tmp_path / "best_final.csv")
    selection = read_table(tmp_path / "best_final.csv")
    flagged = selection.set_index(["model", "kind"])["implausible_loss"].to_dict()
    assert flagged == {("toy-d16", "best"): False, ("toy-d16", "final"): True,
                       ("toy-d32", "best"): False, ("toy-d32", "final"): False}
    sizes = {"toy-d16": 6592.0, "toy-d32": 25000.0}
    _, shortfall = scaling_tables(selection, sizes, dict(SETTINGS, A=1.0, alpha=0.1, min_params=1e12))
    marked = shortfall[shortfall["implausible_loss"].astype(bool)]
    assert marked[["model", "kind", "measured"]].values.tolist() == [["toy-d16", "final", 6.255]]
    numbers = key_numbers(loss, {"toy-d16": 16, "toy-d32": 32})
    assert numbers.set_index("model")["final_implausible_loss"].to_dict() == {"toy-d16": True, "toy-d32": False}


def test_select_checkpoints_rejects_table_without_a_best_row():
    records = [dict(suite="toy", model="a", revision=f"step{s}", step=s, tokens=s, loss=1.0, loss_sem=0.0) for s in (1, 2)]
    loss = loss_table(records)
    loss["is_best"] = False
    with pytest.raises(ValueError, match=r"\['a'\] need exactly one is_best row"):
        select_checkpoints(loss)


# ---------------------------------------------------------------- fit_scaling_law


def test_scaling_tables_recover_the_law_and_the_shortfall():
    fit_row, table = scaling_tables(selection(SIZES, EXCESS), SIZES, SETTINGS)
    fit = fit_row.iloc[0]
    assert fit["source"] == "fit" and fit["n_sizes"] == 3 and fit["n_points"] == 3  # final points, >= 3e8
    assert fit["A"] == pytest.approx(TRUE_A, rel=1e-6)
    assert fit["alpha"] == pytest.approx(TRUE_ALPHA, rel=1e-6)
    assert fit["A_ci_low"] <= fit["A"] <= fit["A_ci_high"]
    assert fit["fitted_models"] == "1b;2.8b;410m"
    # 160m sits 8% (final) and 4% (best) above the law by construction
    assert fit["mean_shortfall_final_pct"] == pytest.approx(8.0, rel=1e-6)
    assert fit["mean_shortfall_best_pct"] == pytest.approx(4.0, rel=1e-6)
    assert len(table) == 8 and list(table["model"][:2]) == ["160m", "160m"]
    expected = law(table["n_params"], table["tokens"])
    np.testing.assert_allclose(table["predicted"], expected, rtol=1e-6)
    np.testing.assert_allclose(table["shortfall_pct"], (table["measured"] - expected) / expected * 100, atol=1e-4)
    assert table.loc[table["fitted"], "model"].tolist() == ["410m", "1b", "2.8b"]
    assert set(table.loc[table["fitted"], "kind"]) == {"final"}


def test_scaling_tables_with_a_published_law_fit_nothing():
    settings = dict(SETTINGS, A=TRUE_A, alpha=TRUE_ALPHA, min_params=1e12)  # nothing above it
    fit_row, table = scaling_tables(selection(SIZES, EXCESS), SIZES, settings)
    fit = fit_row.iloc[0]
    assert fit["source"] == "fixed" and fit["n_points"] == 0 and math.isnan(fit["A_ci_low"])
    assert not table["fitted"].any()
    np.testing.assert_allclose(table["predicted"], law(table["n_params"], table["tokens"]), rtol=1e-12)
    # every model is below min_params: the mean covers 160m (8%) and three exact ones (0%)
    assert fit["mean_shortfall_final_pct"] == pytest.approx(2.0, rel=1e-6)


def test_scaling_tables_degenerate_input_fails_clearly():
    one_size = {model: (3e7 if model != "2.8b" else n) for model, n in SIZES.items()}
    with pytest.raises(ValueError, match="at least two distinct model sizes with n_params >= min_params"):
        scaling_tables(selection(one_size, EXCESS), one_size, SETTINGS)
    broken = selection(SIZES, EXCESS)
    broken.loc[broken["model"] == "1b", "loss"] = np.nan
    with pytest.raises(ValueError, match="loss must be finite"):
        scaling_tables(broken, SIZES, SETTINGS)


def test_model_sizes_prefer_the_configured_count():
    counts = [dict(model="a", non_embedding=10, total=30), dict(model="b", non_embedding=20, total=50)]
    assert model_sizes({"a": 0, "b": 7}, counts, "total") == {"a": 30.0, "b": 7.0}
    with pytest.raises(ValueError, match="model c: no parameter count"):
        model_sizes({"c": 0}, counts, "total")


def test_count_model_parameters_of_a_local_model(tmp_path, tiny_neox):
    tiny_neox.save_pretrained(tmp_path / "step8")
    model = ModelEntry(
        name="tiny", suite="s", source="local", id=str(tmp_path), hidden_size=16, vocab_size=40, n_params=0,
        tokenizer="t", tokens_per_step=1, revisions=("step8",), steps=(8,), allow_pickle=False,
        trust_remote_code=False, key="suites.s.models[0]",
    )
    counts = count_model_parameters(model)
    # brute force: every parameter tensor of the instantiated model, by name
    sizes = {name: p.numel() for name, p in tiny_neox.named_parameters()}
    embedding = sum(n for name, n in sizes.items() if "embed_in" in name or "embed_out" in name or "lm_head" in name)
    assert counts["total"] == sum(sizes.values())
    assert counts["non_embedding"] == sum(sizes.values()) - embedding
    assert counts["revision"] == "step8" and counts["model_type"] == "gpt_neox"
    assert counts["non_embedding"] == count_parameters(tiny_neox, "non_embedding")


# ---------------------------------------------------------------- Fig. 1b


def test_law_curve_interpolates_token_counts_geometrically():
    constants = dict(A=TRUE_A, alpha=TRUE_ALPHA, **HOFFMANN)
    grid = np.geomspace(1e6, 1e10, 9)
    flat = law_curve([1e7, 1e9], [3e11, 3e11], grid, **constants)
    np.testing.assert_allclose(flat, law(grid, 3e11), rtol=1e-12)
    # halfway in log N between two models, T is the geometric mean of theirs
    middle = law_curve([1e7, 1e9], [1e10, 1e12], np.array([1e8, 1e6, 1e10]), **constants)
    np.testing.assert_allclose(middle, law(np.array([1e8, 1e6, 1e10]), np.array([1e11, 1e10, 1e12])), rtol=1e-12)


def test_plot_scaling_fit_draws_the_shortfall_table():
    fit_row, table = scaling_tables(selection(SIZES, EXCESS), SIZES, SETTINGS)
    ax = plot_scaling_fit(table, fit_row.iloc[0], []).axes[0]
    kinds = [kind for kind in ("final", "best") if kind in set(table["kind"])]
    assert len(ax.collections) == len(kinds)
    for kind, points in zip(kinds, ax.collections):
        rows = table[table["kind"] == kind].sort_values("n_params")
        np.testing.assert_allclose(points.get_offsets(), rows[["n_params", "measured"]].to_numpy())
    finals = table[table["kind"] == "final"].sort_values("n_params")["model"].tolist()
    assert [t.get_text() for t in ax.texts if t.get_text() in finals] == finals


# ---------------------------------------------------------------- Table 1


def record(model, kind, revision, task, value, status="done"):
    key = {"synthetic_ppl": "word_perplexity,none", "synthetic_mc": "acc,none"}[task]
    results = {"results": {task: {key: value}}} if status == "done" else {}
    return dict(model=model, checkpoint=kind, revision=revision, task=task, status=status, message="", results=results)


def test_table1_has_revisions_and_marks_skipped_tasks(tmp_path):
    records = [
        record("toy-d16", "final", "step1000", "synthetic_ppl", 40.0),
        record("toy-d16", "final", "step1000", "synthetic_mc", 0.5),
        record("toy-d16", "best", "step750", "synthetic_ppl", 38.0),
        record("toy-d16", "best", "step750", "synthetic_mc", None, status="skipped"),
    ]
    table = table1(records, ["synthetic_ppl", "synthetic_mc"])
    assert list(table.index) == [("toy-d16", "best", "step750"), ("toy-d16", "final", "step1000")]
    assert table.loc[("toy-d16", "final", "step1000"), "Synthetic last word ↑"] == 50.0
    assert math.isnan(table.loc[("toy-d16", "best", "step750"), "Synthetic last word ↑"])
    from lmsat.products.table_files import table_to_markdown

    markdown = table_to_markdown(table)
    assert "| model | checkpoint | revision |" in markdown and "| toy-d16 | best | step750 | 38.00 | – |" in markdown
    write_csv(table.reset_index(), tmp_path / "table1.csv")  # rule make_table1's CSV: the index as columns
    # the bytes of the old writer, with the checksum column (lmsat.core.integrity) last
    assert (tmp_path / "table1.csv").read_text(encoding="utf-8") == csv_with_checksum(table.to_csv())
    with pytest.raises(ValueError, match="evaluated at revisions step750 and step500"):
        table1(records + [record("toy-d16", "best", "step500", "synthetic_ppl", 1.0)], ["synthetic_ppl"])


def test_best_job_reuses_the_final_json_when_they_coincide(tmp_path):
    final = tmp_path / "m" / "final" / "synthetic_mc.json"  # the rule's layout, checked against the record
    write_json(final, record("m", "final", "step1000", "synthetic_mc", 0.25))
    out = tmp_path / "best.json"
    snakemake = SimpleNamespace(
        input=Namedlist(fromdict={"selection": str(tmp_path / "best_final.csv"), "same_as": str(final)}),
        output=[str(out)],
        log=[str(tmp_path / "best.log")],
        params=SimpleNamespace(revision="step1000"),
        wildcards=SimpleNamespace(model="m", kind="best", task="synthetic_mc"),
    )
    script("evaluate_checkpoint").main(snakemake)
    copied = read_json(out)
    assert copied["checkpoint"] == "best" and copied["revision"] == "step1000" and copied["reused_from"] == str(final)
    assert copied["results"] == read_json(final)["results"]


# ---------------------------------------------------------------- the plan


def snakemake_dry_run(workdir, *args):
    """A dry run of this checkout's workflow in `workdir`, laid out as a fresh clone: never in
    the checkout, where `make run` leaves nothing to be done."""
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "-s", str(ROOT / "Snakefile"), "--directory", str(clone_like(workdir)),
         *args],
        capture_output=True, text=True, timeout=300,
    )
    return result.returncode, result.stdout + result.stderr


def test_default_plan_evaluates_best_and_final_behind_the_checkpoint(tmp_path):
    targets = ["results/default/tables/table1.csv", "results/default/tables/scaling_fit.csv", "results/default/figures/fig1b_scaling.png"]
    code, output = snakemake_dry_run(tmp_path, *targets, "--quiet", "rules")
    assert code == 0, output[-2000:]
    counts = dict(line.split() for line in output.splitlines() if len(line.split()) == 2 and line.split()[1].isdigit())
    assert counts["evaluate_checkpoint"] == str(4 * 2 * 2)  # toy models x {best, final} x 2 offline tasks
    assert counts["select_checkpoints"] == "1" and counts["build_offline_tasks"] == "1"
    assert counts["count_model_parameters"] == "4"
    assert "DAG of jobs will be updated after completion" in output  # the checkpoint


def test_unknown_evaluation_task_fails_before_any_job(tmp_path, default_config):
    default_config["evaluation"]["tasks"] = ["synthetic_ppl", "hellaswag"]
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(default_config))
    code, output = snakemake_dry_run(tmp_path, "--configfile", str(bad))
    assert code != 0
    assert "evaluation.tasks[1]" in output and "has no Table 1 metric" in output
    assert "Job stats" not in output
