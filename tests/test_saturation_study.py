"""Best vs final on DIFFERENT revisions: the pipeline's own selection, Fig. 1b shortfall and
Table 1 code fed the loss table of a real toy run whose narrow model's best checkpoint is
not its final one: setting conv-wd1, seed 0 of docs/saturation-study.md (d=8: best step 917,
final step 1000; d=64: best == final), written by
`benchmarks/saturation_study.py --export conv-wd1 0 tests/data/saturation_loss.csv`.

The search found no setting that saturates significantly (final - best > 3 SE in every
seed): this run's d=8 rise is +0.4 SE, so it exercises the code path, not the phenomenon."""

import importlib.util
import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from lmsat.products.saturation_tables import loss_table

from conftest import ROOT

SCRIPTS = ROOT / "workflow" / "scripts"
DATA = ROOT / "tests" / "data" / "saturation_loss.csv"
NARROW, WIDE = "toy-d8", "toy-d64"
LAW = dict(params="non_embedding", min_params=1e9, fit_on="final", A=119.09, alpha=0.246,
           bootstrap=0, B=410.7, beta=0.28, E=1.69)  # fmt: skip  (a published law: no fit)
N_PARAMS = {NARROW: 2.0e3, WIDE: 1.0e5}  # any sizes: the shortfall compares checkpoints


def script(name):
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def selection():
    records = pd.read_csv(DATA, comment="#").to_dict("records")
    return script("select_checkpoints").select_checkpoints(loss_table(records, [NARROW, WIDE]))


def row(table, model, kind):
    (found,) = table[(table["model"] == model) & (table["kind"] == kind)].itertuples()
    return found


def test_narrow_best_checkpoint_is_before_final(selection):
    best, final = row(selection, NARROW, "best"), row(selection, NARROW, "final")
    assert (best.revision, final.revision) == ("step917", "step1000")
    assert best.step < final.step and best.loss < final.loss
    assert 0 < (final.loss - best.loss) / final.loss_sem < 3  # a rise, not a significant one
    wide_best, wide_final = row(selection, WIDE, "best"), row(selection, WIDE, "final")
    assert wide_best.revision == wide_final.revision  # the wide model keeps improving


def test_fig1b_shortfall_of_best_and_final_differ(selection):
    _, table = script("fit_scaling_law").scaling_tables(selection, N_PARAMS, LAW)
    best, final = row(table, NARROW, "best"), row(table, NARROW, "final")
    assert best.revision != final.revision and best.tokens < final.tokens
    assert best.measured < final.measured
    assert not math.isclose(best.shortfall_pct, final.shortfall_pct)
    wide_best, wide_final = row(table, WIDE, "best"), row(table, WIDE, "final")
    assert wide_best.shortfall_pct == wide_final.shortfall_pct


def test_table1_best_row_is_another_revision_than_the_final_row(selection):
    """make_table1 of per-checkpoint records at the selected revisions; the metric stands in
    for the offline synthetic_ppl task: word perplexity exp(loss) of that checkpoint."""
    records = [
        dict(model=r.model, checkpoint=r.kind, revision=r.revision, task="synthetic_ppl",
             status="done", message="",
             results={"results": {"synthetic_ppl": {"word_perplexity,none": float(np.exp(r.loss))}}})
        for r in selection.itertuples()
    ]  # fmt: skip
    table = script("make_table1").table1(records, ["synthetic_ppl"])
    rows = {key[:2]: (key[2], value) for key, value in table.iloc[:, 0].items()}
    (best_rev, best_ppl), (final_rev, final_ppl) = rows[(NARROW, "best")], rows[(NARROW, "final")]
    assert best_rev != final_rev and best_ppl < final_ppl
    assert rows[(WIDE, "best")] == rows[(WIDE, "final")]


# ---------------------------------------------------------------- the search script


def study():
    spec = importlib.util.spec_from_file_location("saturation_study", ROOT / "benchmarks" / "saturation_study.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_one_tiny_run_records_best_final_and_exports_a_loss_table(tmp_path):
    mod = study()
    p = mod.setting_params("base", dict(vocab=32, groups=1, support=8, seq_len=8, batch=4, steps=8))
    args = SimpleNamespace(eval_tokens=512, n_checkpoints=4)
    r = mod.run_one("tiny", p, seed=0, width=8, args=args)
    assert r["steps"] == [2, 4, 6, 8] and r["final_step"] == 8 and r["rank"] == 32
    assert r["train_tokens"] == 8 * 4 * 9 and r["eval_tokens"] >= 512  # fresh windows, each used once
    assert r["z"] >= 0 and r["saturated"] == (r["best_step"] < 8 and r["z"] > 3)
    path = tmp_path / "loss.csv"
    mod.export_loss_table([r], "tiny", 0, path)
    table = loss_table(pd.read_csv(path, comment="#").to_dict("records"))
    assert list(table["step"]) == [2, 4, 6, 8] and table["is_final"].sum() == table["is_best"].sum() == 1
    fake = [dict(r, seed=s, width=w, saturated=(w == 8)) for w in (8, 64) for s in (0, 1, 2)]
    assert mod.verdict(fake) == ["tiny"]  # narrow saturates in all 3 seeds, wide in none
    assert mod.verdict([f for f in fake if f["seed"] < 2]) == []  # 2 seeds are not enough
    assert mod.verdict([dict(f, saturated=True) for f in fake]) == []  # the wide one too
