"""EleutherAI's published Pythia evaluations (lmsat.published): the packaged CSV equals the
published JSONs, and a run's own lm-eval results are shown beside them, on the summary too.

tests/data/pythia_evals/ holds three of the published JSONs as they are in
https://github.com/EleutherAI/pythia (Apache-2.0) at the commit the CSV names, under
evals/pythia-v1/<model>/<setting>/<file> (the file name here: model_setting_file).
"""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from lmsat.io import write_json
from lmsat.published import COLUMNS, compare, published_evals, rows_of, source
from lmsat.tables import write_csv

from conftest import ROOT, script

DATA = ROOT / "tests" / "data" / "pythia_evals"
SAMPLES = {  # file -> (model, shots, step)
    "pythia-160m_zero-shot_160m_step143000.json": ("pythia-160m", 0, 143000),
    "pythia-160m_five-shot_160m-5shot_step3000.json": ("pythia-160m", 5, 3000),
    "pythia-70m-deduped_zero-shot_70m-deduped_step0.json": ("pythia-70m-deduped", 0, 0),
}


@pytest.fixture(scope="module")
def published():
    return published_evals()


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_the_packaged_csv_equals_the_published_json(published, name):
    model, shots, step = SAMPLES[name]
    document = json.loads((DATA / name).read_text())
    expected = pd.DataFrame(rows_of(document, model, shots, step), columns=COLUMNS)
    found = published[(published["model"] == model) & (published["shots"] == shots) & (published["step"] == step)]
    found = found.reset_index(drop=True)
    assert list(found[["task", "metric"]].itertuples(index=False)) == list(expected[["task", "metric"]].itertuples(index=False))
    np.testing.assert_allclose(found["value"], expected["value"], rtol=1e-15)
    np.testing.assert_allclose(found["stderr"], expected["stderr"], rtol=1e-15)
    # read back by hand, not through rows_of: a few values as the JSON has them
    results = document["results"]
    for task, metric, key in (("sciq", "acc", "acc"), ("lambada_openai", "perplexity", "ppl"), ("piqa", "acc_norm", "acc_norm")):
        row = found[(found["task"] == task) & (found["metric"] == metric)]
        assert float(row["value"].iloc[0]) == pytest.approx(results[task][key], rel=1e-15)
    assert not found["task"].str.startswith(("hendrycksTest-", "crows_pairs", "blimp_")).any()


def test_the_csv_covers_every_published_model_and_step(published):
    assert published.groupby(["model", "shots"])["step"].nunique().to_dict() == {
        (model, shots): 27 if shots == 0 else 15
        for model in set(published["model"]) for shots in (0, 5)
    }
    assert sorted(set(published["model"])) == sorted(
        [f"pythia-{s}" for s in ("70m", "160m", "410m", "1.4b", "2.8b", "6.9b", "12b")]
        + [f"pythia-{s}-deduped" for s in ("70m", "160m", "410m", "1b", "1.4b", "2.8b", "6.9b", "12b")]
    )
    assert len(source()["commit"]) == 40 and "Apache-2.0" in source()["license"]


def own_record(model, kind, revision, task, metrics, version="0.4.13"):
    """An evaluate_checkpoint JSON (lmsat.evaluation.run_lmeval's dict inside the record)."""
    return dict(model=model, checkpoint=kind, revision=revision, task=task, status="done", message="",
                results={"results": {task: {f"{k},none": v for k, v in metrics.items()} | {"alias": task}},
                         "versions": {task: 1.0}, "lm_eval_version": version, "lmsat": {"num_fewshot": 0}})


def checkpoints_of(model, revisions, best, final):
    return pd.DataFrame(dict(model=model, revision=revisions,
                             checkpoint=["best" if r == best else "final" if r == final else "" for r in revisions]))


def test_own_results_are_shown_beside_the_published_ones(published):
    records = [own_record("pythia-160m", "final", "step143000", "sciq", {"acc": 0.75, "acc_stderr": 0.01}),
               own_record("pythia-160m", "final", "step143000", "lambada_openai", {"perplexity": 40.0, "acc": 0.33}),
               own_record("pythia-160m", "final", "step143000", "wikitext", {"word_perplexity": 30.0})]
    identical = pd.DataFrame([dict(suite="pythia", model="pythia-160m", revision="step3000", step=3000, tensor="head",
                                   group="step2000", group_size=2, identical_to="step2000", sha256="ab")])
    checkpoints = checkpoints_of("pythia-160m", ["step3000", "step143000", "step1500"], "step3000", "step143000")
    table = compare(records, published, checkpoints, identical)
    sciq = table[(table["revision"] == "step143000") & (table["task"] == "sciq") & (table["metric"] == "acc")
                 & (table["shots"] == 0)].iloc[0]
    assert sciq["published"] == pytest.approx(0.741) and sciq["difference"] == pytest.approx(0.75 - 0.741)
    assert sciq["harness"] == "lm-eval 0.4.13 (task version 1.0)" and sciq["published_harness"] == "lm-eval < 0.4 (task version 0)"
    assert sciq["checkpoint"] == "final" and sciq["identical_weights"] == ""
    ppl = table[(table["revision"] == "step143000") & (table["task"] == "lambada_openai")
                & (table["metric"] == "perplexity") & (table["shots"] == 0)].iloc[0]
    assert ppl["measured"] == 40.0 and ppl["published"] == pytest.approx(38.064877017771195)
    five = table[(table["revision"] == "step143000") & (table["task"] == "sciq") & (table["metric"] == "acc")
                 & (table["shots"] == 5)].iloc[0]
    assert math.isnan(five["measured"])  # the run scored zero-shot only
    flagged = table[table["revision"] == "step3000"]
    assert len(flagged) and (flagged["identical_weights"] == "head").all() and (flagged["checkpoint"] == "best").all()
    assert "wikitext" not in set(table["task"])  # nothing published to compare with
    assert "step1500" not in set(table["revision"])  # no published evaluation of that step


def test_a_model_under_no_published_name_gets_no_rows(published):
    checkpoints = checkpoints_of("toy-d16", ["step0", "step16"], "step16", "step16")
    assert compare([], published, checkpoints).empty


def test_the_summary_of_a_run_with_a_pythia_named_model_shows_them(tmp_path):
    """Rule summarize_run's script on the tables of a run whose tiny local model is registered
    as pythia-160m (revisions step0, step3000, step143000)."""
    root = tmp_path / "results"
    tables = root / "tables"
    tables.mkdir(parents=True)
    loss = pd.DataFrame([dict(suite="local", model="pythia-160m", revision=f"step{s}", step=s, tokens=s * 2097152,
                              loss=value, loss_sem=0.01, is_best=s == 3000, is_final=s == 143000)
                         for s, value in ((0, 10.9), (3000, 3.1), (143000, 3.2))])
    write_csv(loss, tables / "loss.csv")
    write_csv(pd.DataFrame([dict(A=1.0, alpha=0.3, B=1.0, beta=0.3, E=1.5, min_params=1e9, params="non_embedding",
                       source="fixed", mean_shortfall_final_pct=math.nan, mean_shortfall_best_pct=math.nan)]
                 ), tables / "scaling_fit.csv")
    write_csv(pd.DataFrame(columns=["model", "n_params", "kind", "tokens", "measured", "predicted", "shortfall_pct", "fitted"]
                 ), tables / "scaling_shortfall.csv")
    write_csv(pd.DataFrame([dict(suite="local", model="pythia-160m", revision="step3000", step=3000, tensor="head",
                       group="step3000", group_size=2, identical_to="step143000", sha256="ab")]
                 ), tables / "identical_weights.csv")
    record = root / "evaluation" / "pythia-160m" / "final" / "sciq.json"
    record.parent.mkdir(parents=True)
    write_json(record, own_record("pythia-160m", "final", "step143000", "sciq", {"acc": 0.70}))
    from snakemake.iocontainers import Namedlist

    job = SimpleNamespace(
        input=Namedlist(fromdict=dict(loss=str(tables / "loss.csv"), fit=str(tables / "scaling_fit.csv"),
                                      shortfall=str(tables / "scaling_shortfall.csv"),
                                      identical=str(tables / "identical_weights.csv"), evaluations=[str(record)])),
        output=Namedlist(fromdict=dict(html=str(root / "report" / "summary.html"),
                                       comparison=str(tables / "paper_comparison.csv"),
                                       published=str(tables / "published_evals.csv"))),
        log=[str(tmp_path / "summarize_run.log")],
        params=SimpleNamespace(suites={"pythia-160m": "local"}, hidden_sizes={"pythia-160m": 16}, eval_tokens=1000,
                               corpus="words", config_sha256="0" * 64, num_fewshot=0,
                               figures=[["Fig. 1a: loss along training", "results/figures/fig1a_loss.png"]]),
    )
    script("summarize_run").main(job)
    page = (root / "report" / "summary.html").read_text()
    assert "<h2>Published Pythia evaluations</h2>" in page and "a19eecb807ec" in page
    table = pd.read_csv(tables / "published_evals.csv", keep_default_na=False, na_values=[""])
    sciq = table[(table["revision"] == "step143000") & (table["task"] == "sciq") & (table["metric"] == "acc")
                 & (table["shots"] == 0)].iloc[0]
    assert sciq["measured"] == 0.70 and sciq["published"] == pytest.approx(0.741)
    shown = page.split("<h2>Published Pythia evaluations</h2>")[1]
    assert "0.741" in shown and "-0.041" in shown  # published value and difference on the summary
    assert "step3000" in shown and ">head<" in shown  # the flagged best checkpoint beside its published evals
    assert "step0" not in shown  # neither best nor final, nor flagged, nor evaluated: in the CSV only
    assert set(table["revision"]) == {"step0", "step3000", "step143000"}
    assert ">Fig. 1a: loss along training</a>" in page  # and each figure one click away
