"""EleutherAI's published Pythia evaluations (lmsat.data.published_evals): the packaged CSV equals the
published JSONs, and a run's own lm-eval results are shown beside them, on the summary too.

tests/data/pythia_evals/ holds three of the published JSONs as they are in
https://github.com/EleutherAI/pythia (Apache-2.0) at the commit the CSV names, under
evals/pythia-v1/<model>/<setting>/<file> (the file name here: model_setting_file).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import shutil
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from lmsat.core.io import write_json
from lmsat.data.published_evals import (
    CELLS,
    COLUMNS,
    CSV_NAME,
    CSV_SHA256,
    FIVE_SHOT_STEPS,
    PUBLISHED_MODELS,
    ZERO_SHOT_STEPS,
    compare,
    packaged_csv,
    published_evals,
    read_record,
    rows_of,
    source,
)
from lmsat.errors import PublishedRecordError
from lmsat.products.table_files import write_csv

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
    """An evaluate_checkpoint JSON (lmsat.saturation.downstream.run_lmeval's dict inside the record)."""
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
        params=SimpleNamespace(run="default",  # the page links figures between the run's planned paths
                               suites={"pythia-160m": "local"}, hidden_sizes={"pythia-160m": 16}, eval_tokens=1000,
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


# ------------------------------------------------------------------ a damaged record (issue 46, cases 5 and 11)
# Each fault is made on a real copy of the packaged CSV, as an editor, a cut download or a
# spreadsheet round trip leaves it; before, each ran through with other verdicts (rc 0) or
# failed on a raw ValueError / AttributeError / pandas tokenizer error naming no file or model.


def damaged_copy(tmp_path, change) -> tuple:
    """A copy of the packaged CSV after `change(comments, header, rows)` -> (comments, header,
    rows) on its lines (each with its line end); -> (path, the first data row's line number)."""
    lines = packaged_csv().read_text(encoding="utf-8").splitlines(keepends=True)
    comments = [line for line in lines if line.startswith("#")]
    header, rows = lines[len(comments)], lines[len(comments) + 1:]
    comments, header, rows = change(list(comments), header, list(rows))
    path = tmp_path / CSV_NAME
    path.write_text("".join(comments + [header] + rows), encoding="utf-8")
    return path, len(comments) + 2


def row_of(rows, model, shots, step, task, metric) -> int:
    return next(i for i, row in enumerate(rows) if row.startswith(f"{model},{shots},{step},{task},{metric},"))


def set_field(column: str, value: str, model="pythia-70m", step=3000, task="lambada_openai", metric="perplexity"):
    def change(comments, header, rows):
        i = row_of(rows, model, 0, step, task, metric)
        fields = rows[i].rstrip("\n").split(",")
        fields[COLUMNS.index(column)] = value
        rows[i] = ",".join(fields) + "\n"
        return comments, header, rows
    return change


def ppl_row(rows) -> int:
    return row_of(rows, "pythia-70m", 0, 3000, "lambada_openai", "perplexity")


def decimal_comma(comments, header, rows):
    i = ppl_row(rows)
    fields = rows[i].split(",")
    fields[5] = fields[5].replace(".", ",")
    rows[i] = ",".join(fields)
    return comments, header, rows


def duplicated_row(comments, header, rows):
    i = ppl_row(rows)
    return comments, header, rows[: i + 1] + [rows[i]] + rows[i + 1:]


def duplicated_step(comments, header, rows):
    """pythia-70m's zero-shot step 3000, all 14 rows of it, twice."""
    step = [row for row in rows if row.startswith("pythia-70m,0,3000,")]
    i = rows.index(step[-1])
    return comments, header, rows[: i + 1] + step + rows[i + 1:]


def row_cut_mid_line(comments, header, rows):
    i = ppl_row(rows)
    rows[i] = rows[i][: len(rows[i]) // 2] + "\n"
    return comments, header, rows


BAD_VALUES = {  # name -> (change, what the message says)
    "nan ppl": (set_field("value", "nan"), "lambada_openai perplexity is nan, outside [1, inf]"),
    "ppl -5": (set_field("value", "-5"), "lambada_openai perplexity is -5.0, outside [1, inf]"),
    "ppl 0": (set_field("value", "0"), "lambada_openai perplexity is 0.0, outside [1, inf]"),
    "nan stderr": (set_field("stderr", "nan"), "the standard error of lambada_openai perplexity is nan"),
    "empty stderr": (set_field("stderr", ""), "stderr '' is not a number"),
    "accuracy 1.5": (set_field("value", "1.5", task="sciq", metric="acc"), "sciq acc is 1.5, outside [0, 1]"),
    "decimal comma": (decimal_comma, "it holds 9 fields, not the 8 of model,shots,step,task,metric,value,stderr,"
                      "task_version (a line cut short or joined to another, or a decimal comma"),
    "row cut mid-line": (row_cut_mid_line, "it holds 5 fields, not the 8"),
    "duplicated row": (duplicated_row, "zero-shot step 3000 lambada_openai perplexity is there twice (also line"),
    "duplicated step": (duplicated_step, "zero-shot step 3000 arc_challenge acc is there twice (also line"),
}


@pytest.mark.parametrize("name", sorted(BAD_VALUES))
def test_a_bad_value_of_the_record_is_named_with_file_line_and_model(tmp_path, name):
    """Before: `ValueError: points: loss must be finite`, `ValueError: steps must increase ...`,
    `Error tokenizing data. C error: Expected 8 fields in line 7824, saw 9`, or a verdict."""
    change, says = BAD_VALUES[name]
    path, _ = damaged_copy(tmp_path, change)
    rows = path.read_text().splitlines()
    with pytest.raises(PublishedRecordError) as info:
        published_evals(path)
    message = str(info.value)
    line = int(re.search(rf"^{re.escape(str(path))}, line (\d+) \(model pythia-70m\): ", message).group(1))
    assert rows[line - 1].startswith("pythia-70m,0,3000,"), (line, rows[line - 1])
    assert says in message and "Fix: restore the file lmsat ships" in message, message


@pytest.mark.parametrize("name, change, says", [
    ("no header", lambda c, h, r: (c, "", r), ", line 6: the published record's header should be model,shots,step,"
     "task,metric,value,stderr,task_version, not 'pythia-1.4b,0,0,arc_challenge,acc,"),
    ("no comment header", lambda c, h, r: ([], h, r), ": the published record has no header line `# source: "
     "https://github.com/EleutherAI/pythia at commit <40 hex digits>`"),
])
def test_a_record_without_its_header_is_named(tmp_path, name, change, says):
    """Before: a verdict from the first row taken as the header, or `AttributeError: 'NoneType'
    object has no attribute 'group'` from the provenance line."""
    path, _ = damaged_copy(tmp_path, change)
    calls = [published_evals, source] if name == "no comment header" else [published_evals]
    for call in calls:
        with pytest.raises(PublishedRecordError) as info:
            call(path)
        assert str(info.value).startswith(f"{path}{says}") and "Fix: restore" in str(info.value), str(info.value)


def cut_at_line_end(comments, header, rows):
    """pythia-70m-deduped (the file's last model) cut after its zero-shot step 83000: the
    issue's "final 143000 with 26 checkpoints becomes final 93000 with 21"."""
    first = next(i for i, row in enumerate(rows) if row.startswith("pythia-70m-deduped,0,"))
    return comments, header, rows[: first + 21 * len(CELLS)]


def early_rows_removed(comments, header, rows):
    first = next(i for i, row in enumerate(rows) if row.startswith("pythia-70m-deduped,0,"))
    return comments, header, rows[:first] + rows[first + 15:]


@pytest.mark.parametrize("change, says", [
    (cut_at_line_end, "(model pythia-70m-deduped): 6 of its 27 promised zero-shot steps are missing (93000, 103000, "
                      "113000, 123000, 133000, 143000); the file ends at line"),
    (lambda c, h, r: (c, h, r[:-1]), "(model pythia-70m-deduped): 1 cell(s) of its five-shot step(s) 143000 are "
                                     "missing (step 143000 wsc acc)"),
    (early_rows_removed, "(model pythia-70m-deduped): 1 of its 27 promised zero-shot steps are missing (0); 1 cell(s) "
                         "of its zero-shot step(s) 1 are missing (step 1 arc_challenge acc)"),
    (lambda c, h, r: (c, h, [row for row in r if not row.startswith("pythia-12b,")]),
     "(model pythia-12b): 27 of its 27 promised zero-shot steps are missing"),
])
def test_a_record_with_rows_missing_is_refused_naming_model_and_steps(tmp_path, change, says):
    """Case 5: each of these ran through with rc 0 and other verdicts (70m-deduped: final step
    93000 with 21 checkpoints instead of 143000 with 26)."""
    path, _ = damaged_copy(tmp_path, change)
    with pytest.raises(PublishedRecordError) as info:
        published_evals(path)
    assert says in str(info.value) and str(path) in str(info.value), str(info.value)


def test_a_file_cut_mid_line_or_a_value_edited_is_refused_by_the_pinned_checksum(tmp_path):
    path, _ = damaged_copy(tmp_path, lambda c, h, r: (c, h, r))
    assert published_evals(path).equals(published_evals())  # an exact copy passes
    text = path.read_text()
    path.write_text(text[:-5])  # the last stderr cut short still reads as a number
    with pytest.raises(PublishedRecordError, match=r"line 8826 \(model pythia-70m-deduped\): the last line has no "
                                                   r"line end: the file was cut mid-line"):
        published_evals(path)
    path.write_text(text.replace("0.36538461538461536,0.047447", "0.46538461538461536,0.047447"))  # plausible, wrong
    with pytest.raises(PublishedRecordError, match=r"holds every model, step and cell it promises, but its SHA-256 is "
                                                   r"[0-9a-f]{64}, not the " + CSV_SHA256):
        published_evals(path)
    assert len(published_evals(path, sha256=None)) == len(published_evals())  # a rebuilt file, checked but not pinned


def test_the_shipped_record_keeps_its_promise(published):
    """The pinned file is read without the line-by-line check (planning reads it): the check
    must accept it and read the same table."""
    text = packaged_csv().read_text(encoding="utf-8")
    assert hashlib.sha256(text.encode()).hexdigest() == CSV_SHA256
    pd.testing.assert_frame_equal(read_record(packaged_csv(), text), published)
    zero = published[published["shots"] == 0]
    assert {model: tuple(sorted(set(steps))) for model, steps in zero.groupby("model")["step"]} == {
        model: ZERO_SHOT_STEPS for model in PUBLISHED_MODELS}
    assert len(ZERO_SHOT_STEPS) == 27 and len(FIVE_SHOT_STEPS) == 15 and len(CELLS) == 14
    assert sorted(set(published["model"])) == sorted(PUBLISHED_MODELS)


def test_a_damaged_record_stops_the_workflow_at_planning_naming_file_line_and_model(tmp_path):
    """The published run (config/published.yaml) on a checkout whose packaged CSV was cut at a
    line end: before, rc 0 and pythia-70m-deduped's verdict from 21 checkpoints, final 83000."""
    tree = tmp_path / "lmsat"
    for part in ("src", "workflow", "config"):
        shutil.copytree(ROOT / part, tree / part, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copy(ROOT / "Snakefile", tree / "Snakefile")
    csv = tree / "src" / "lmsat" / "data" / CSV_NAME
    damaged, _ = damaged_copy(tmp_path, cut_at_line_end)
    shutil.copy(damaged, csv)
    result = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(tree / "Snakefile"), "--directory",
                             str(tmp_path / "work"), "--configfile", str(tree / "config" / "published.yaml"),
                             "--cores", "1"], capture_output=True, text=True, timeout=600)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "PublishedRecordError" in output and f"{csv}, line " in output, output[-3000:]
    assert "(model pythia-70m-deduped): 6 of its 27 promised zero-shot steps are missing" in output, output[-3000:]
    assert not (tmp_path / "work" / "results").exists()  # refused at planning: nothing made
