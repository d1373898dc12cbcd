"""EleutherAI's published record as a run (config/published.yaml, a suite with
`source: published`; lmsat.products.published_run): a dry run plans no fetch, the real run
finishes offline in seconds, its tables hold the CSV's values, and the README quotes its log."""

import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from lmsat.data.published_evals import published_evals
from lmsat.errors import ConfigError
from lmsat.planning.load import load_plan
from lmsat.products.published_run import verdict_line
from lmsat.products.table_files import read_table

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "config" / "published.yaml"
README_COMMAND = "snakemake --configfile config/published.yaml --cores 2"
NETWORK_JOBS = ("fetch_checkpoint", "stage_", "train_toy_model", "sample_eval_tokens", "evaluate_checkpoint")


def snakemake(workdir, *args, timeout=600):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "NO_PROXY": "*",
           "HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9"}  # nothing reachable
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(workdir),
         "--configfile", str(CONFIG), "--cores", "2", *args],
        capture_output=True, text=True, timeout=timeout, env=env,
    )


@pytest.fixture(scope="module")
def published_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("published_run")
    result = snakemake(workdir)
    assert result.returncode == 0, result.stderr[-4000:]
    return workdir, workdir / "results" / "published"


def test_a_dry_run_plans_no_fetch_and_no_model_job(tmp_path):
    result = snakemake(tmp_path, "-n", "--quiet", "rules")
    assert result.returncode == 0, result.stderr[-3000:]
    planned = result.stdout + result.stderr
    assert "summarize_published" in planned
    for job in NETWORK_JOBS:
        assert job not in planned, f"a published run plans {job}"


def test_the_run_finishes_offline_with_its_figures_tables_and_summary(published_run):
    _, results = published_run
    for name in ("published_fig1a", "published_fig1b"):
        assert (results / "figures" / f"{name}.png").stat().st_size > 10_000
    page = (results / "report" / "published_summary.html").read_text()
    assert "4 of 15 published Pythia models saturate" in page or "published Pythia models saturate" in page
    assert "not this run" in page


def test_the_tables_hold_the_published_values(published_run):
    _, results = published_run
    evals = published_evals()
    zero = evals[evals["shots"] == 0].set_index(["model", "step", "task", "metric"])
    loss = read_table(results / "tables" / "published_loss.csv")
    rng = np.random.default_rng(0)
    for row in loss.iloc[rng.choice(len(loss), 20, replace=False)].itertuples():
        cell = zero.loc[(row.model, row.step, "lambada_openai", "perplexity")]
        assert math.isclose(row.perplexity, cell["value"], rel_tol=1e-12)
        assert math.isclose(row.perplexity_stderr, cell["stderr"], rel_tol=1e-12)
        assert math.isclose(row.loss, math.log(cell["value"]), rel_tol=1e-12)
        assert math.isclose(row.loss_se, cell["stderr"] / cell["value"], rel_tol=1e-12)
    table1 = read_table(results / "tables" / "published_table1.csv")
    assert set(table1["model"]) == set(loss["model"]) and len(set(table1["task"])) == 8 and len(table1) == 15 * 2 * 14
    for row in table1.iloc[rng.choice(len(table1), 30, replace=False)].itertuples():
        cell = zero.loc[(row.model, row.step, row.task, row.metric)]
        assert math.isclose(row.value, cell["value"], rel_tol=1e-12)
        assert math.isclose(row.stderr, cell["stderr"], rel_tol=1e-12) or (
            math.isnan(row.stderr) and math.isnan(cell["stderr"]))
    for row in table1.drop_duplicates(["model", "checkpoint"]).itertuples():  # best: lowest trained ppl
        curve = loss[(loss["model"] == row.model) & (loss["step"] > 0)]
        step = curve.loc[curve["perplexity"].idxmin(), "step"] if row.checkpoint == "best" else curve["step"].max()
        assert row.step == step
    # the paper's 160M values stand beside the published ones, in the CSV's unit
    paper = table1[table1["paper_note"].fillna("") != ""]
    assert set(paper["model"]) == {"pythia-160m"} and len(paper) == 8
    final_ppl = paper[(paper["checkpoint"] == "final") & (paper["metric"] == "perplexity")].iloc[0]
    assert math.isclose(final_ppl["paper"], 32.9) and not final_ppl["paper_agrees"]


def test_the_verdicts_and_the_fit(published_run):
    _, results = published_run
    verdicts = read_table(results / "tables" / "published_verdicts.csv")
    assert list(verdicts.columns[:2]) == ["model", "verdict"]
    saturating = set(verdicts.loc[verdicts["verdict"] == "saturates", "model"])
    assert {"pythia-70m", "pythia-160m"} <= saturating
    assert not saturating & {"pythia-1.4b", "pythia-6.9b", "pythia-12b"}
    assert (verdicts["checkpoints"] == 26).all()  # 27 published steps, step 0 left out
    fit = read_table(results / "tables" / "published_scaling_fit.csv").iloc[0]
    assert fit["B"] == 0 and fit["E"] == 0 and fit["n_sizes"] == 6  # 410M, 1B (deduped), 1.4B, 2.8B, 6.9B, 12B
    assert fit["mean_shortfall_final_pct"] > fit["mean_shortfall_best_pct"] > 0


def test_the_readme_quotes_the_runs_verdict_lines(published_run):
    """The README's command that shows the verdict lines (in the summary's log, which the
    README names with the table: Snakemake's own output does not show them) shows them."""
    workdir, _ = published_run
    text = (ROOT / "README.md").read_text()
    found = re.search(re.escape("$ " + README_COMMAND) + r"\n\$ (.*?)\n(.*?)\n```", text, re.S)
    assert found, f"README.md quotes no output of `{README_COMMAND}` and a command showing its verdicts"
    command, output = found.groups()
    assert "logs/published/summarize_published.log" in command
    assert "results/published/tables/published_verdicts.csv" in text
    shown = subprocess.run(command, shell=True, cwd=workdir, capture_output=True, text=True, check=True).stdout
    quoted = [line for line in output.splitlines() if line and line != "..."]
    assert quoted and all(line in shown.splitlines() for line in quoted), set(quoted) - set(shown.splitlines())


def test_building_the_plan_raises_no_input_function_error(tmp_path):
    """Issue 44: the published run printed 13 `InputFunctionException in rule tabulate_metric
    ... KeyError: 'published_loss'` blocks while building its DAG (the rule's table wildcard
    was unconstrained when the run plans no metric table)."""
    result = snakemake(tmp_path, "-n")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert "summarize_published" in output
    assert "InputFunctionException" not in output and "KeyError" not in output, output[-3000:]


def test_an_unknown_published_model_is_refused_naming_it():
    config = yaml.safe_load(CONFIG.read_text())
    config["suites"]["pythia-published"]["models"].append({"name": "pythia-1b"})  # no zero-shot files
    with pytest.raises(ConfigError, match=r"pythia-published\.models\[15\]\.name.*pythia-1b"):
        load_plan(config, ROOT / "workflow" / "schemas" / "config.schema.yaml")


def test_verdict_line_of_too_few_checkpoints():
    row = dict(model="m", verdict="too few checkpoints", checkpoints=1)
    assert verdict_line(row) == "m: too few checkpoints (1 checkpoints)"


def test_the_published_figures_are_legible():
    """Both figures, drawn from the library's tables of the whole record: no two tick labels
    overlap, and Fig. 1a's counterpart has one line per model (deduped dashed)."""
    from lmsat.figures import FIGURES
    from lmsat.products.published_run import tables

    from test_figure_legibility import assert_no_overlap

    config = yaml.safe_load(CONFIG.read_text())["suites"]["pythia-published"]
    products = tables("pythia-published", [m["name"] for m in config["models"]], config["min_params"])
    for stem in ("published_fig1a", "published_fig1b"):
        fig = FIGURES[stem].plot(products, [])
        assert_no_overlap(fig, stem)
        if stem == "published_fig1a":
            lines = [line for line in fig.axes[0].get_lines() if line.get_xdata().size > 1]
            assert len(lines) == 15
            assert sum(line.get_linestyle() == "--" for line in lines) == 8  # 7 Pile-trained (no pythia-1b), 8 deduped
            assert fig.axes[0].get_yscale() == "log" and fig.axes[0].get_xscale() == "log"


def test_the_default_run_plans_the_published_record_as_a_section_of_its_own(tmp_path):
    """`make run`'s config plans the published record (its one cheap job, both figures,
    Table 1) beside the toy suite, under a report category of its own whose captions say
    whose measurements they are."""
    from lmsat.figures import FIGURES

    (tmp_path / "config").mkdir()
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(tmp_path),
         "--configfile", str(ROOT / "config" / "config.yaml"), "-n", "--quiet", "rules"],
        capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    planned = result.stdout + result.stderr
    assert "summarize_published" in planned and "train_toy_model" in planned
    for stem in ("published_fig1a", "published_fig1b"):  # a section of their own, whose captions say whose data
        assert FIGURES[stem].category == "Published record (EleutherAI)"
        caption = (ROOT / "workflow" / "report" / f"{stem}.rst").read_text()
        assert "EleutherAI's published record (not this run's measurements)" in caption


def checkout_copy(destination: Path) -> Path:
    """The files of this checkout a run needs (Snakefile, workflow/, src/, config/, envs/), copied
    to `destination` as a clone elsewhere would hold them."""
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in ("workflow", "src", "config", "envs"):
        shutil.copytree(ROOT / name, destination / name, ignore=skip)
    shutil.copy2(ROOT / "Snakefile", destination / "Snakefile")
    return destination


@pytest.mark.slow
def test_a_finished_run_copied_elsewhere_plans_nothing(tmp_path):
    """Issue 44: after `cp -a` of a checkout with a finished run, `snakemake -n` replanned
    summarize_published and 8 jobs after it ("Set of input files has changed since last
    execution"): its input was the packaged CSV by its absolute path in the checkout. It is
    now the CSV's content hash, a param; no input or param holds a path of the checkout."""
    original = checkout_copy(tmp_path / "original")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    command = [sys.executable, "-m", "snakemake", "--configfile", "config/published.yaml", "--cores", "2"]
    done = subprocess.run(command, cwd=original, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    copied = tmp_path / "copied"
    subprocess.run(["cp", "-a", str(original), str(copied)], check=True)
    dry = subprocess.run([*command, "-n"], cwd=copied, capture_output=True, text=True, timeout=600, env=env)
    output = dry.stdout + dry.stderr
    assert dry.returncode == 0, output[-4000:]
    assert "Nothing to be done" in output, output[-4000:]
    records = copied / ".snakemake" / "metadata"
    for record in records.iterdir():  # what Snakemake recorded of each output's job
        assert str(original) not in record.read_text(errors="replace"), f"{record.name} holds a path of the checkout"
