"""End to end: the default config (embedded toy suite) through Snakemake, in a temp directory.

One run of the whole default pipeline (a few minutes on 2 CPUs), then assertions on the
files and numbers it produced, and a second dry run that must find nothing to do.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import pytest
import yaml
from report_browser import CHROMIUM, WINDOW, measure_landing, png_size, screenshot

from lmsat.figures.saturation import plot_loss_curves

from conftest import ROOT

pytestmark = pytest.mark.slow


# default_run: tests/conftest.py (one run per session, shared with every test that reads it)


def test_loss_table_and_figure(default_run):
    workdir, elapsed = default_run
    table = pd.read_csv(workdir / "results/default/tables/loss.csv")
    assert list(table.columns[:9]) == ["suite", "model", "revision", "step", "tokens", "loss", "loss_sem", "is_best", "is_final"]
    assert set(table["model"]) == {"toy-d16", "toy-d32", "toy-d64", "toy-d128"}
    assert len(table) == 4 * 9  # toy schedule, log_base 4: steps 0, 1, 4, 16, 64, 200, 400, 600, 800
    assert (table.groupby("model")["is_best"].sum() == 1).all() and (table.groupby("model")["is_final"].sum() == 1).all()
    for name in ("fig1a_loss.png", "fig1a_loss.pdf"):
        assert (workdir / "results/default/figures" / name).exists()
    fig = plot_loss_curves(table, [])  # what the rule drew from this table: a panel per model, by size
    assert [ax.get_title(loc="left") for ax in fig.axes if ax.get_visible()] == ["toy-d16", "toy-d32", "toy-d64", "toy-d128"]
    for ax, (model, rows) in zip(fig.axes, table[table["tokens"] > 0].groupby("model", sort=False)):
        np.testing.assert_array_equal(ax.lines[0].get_xdata(), rows["tokens"])


def test_toy_losses_fall_and_stay_above_the_entropy_rate(default_run):
    workdir, _ = default_run
    table = pd.read_csv(workdir / "results/default/tables/loss.csv")
    with h5py.File(workdir / "results/default/toy/language.h5") as f:
        entropy_rate = float(f.attrs["entropy_rate"])
    final = {}
    for model, rows in table.groupby("model"):
        rows = rows.sort_values("step")
        assert rows["loss"].iloc[-1] < rows["loss"].iloc[0] - 1.0, model  # training helped
        assert (rows["loss"].diff().dropna() < 0).all(), (model, rows["loss"].tolist())
        assert rows["loss"].min() > entropy_rate, model
        final[model] = rows["loss"].iloc[-1]
    # Wider models end lower (measured here: d16 3.17, d32 3.05, d64 3.00, d128 2.95, each
    # +-0.013 standard error; the rank-d softmax floors are 3.00, 2.80, 2.76, 2.76).
    widths = ["toy-d16", "toy-d32", "toy-d64", "toy-d128"]
    assert [final[m] for m in widths] == sorted(final.values(), reverse=True), final


def test_cache_files_are_complete_and_consistent(default_run):
    workdir, _ = default_run
    with h5py.File(workdir / "results/default/samples/synthetic/toy.h5") as f:
        sha = f.attrs["sha256"]
        n_seq, seq_len = f["tokens"].shape
    table = pd.read_csv(workdir / "results/default/tables/loss.csv")
    final = table[(table["model"] == "toy-d64") & table["is_final"]]["revision"].item()
    with h5py.File(workdir / f"results/default/cache/toy-d64/{final}.h5") as f:
        assert f.attrs["complete"] and f.attrs["sample_sha256"] == sha and f.attrs["revision"] == final
        assert f["hidden"].shape == (n_seq * seq_len, 64) and f["loss"].shape == (n_seq, seq_len - 1)
        assert np.isfinite(f["loss"][...]).all()
    assert not list((workdir / "results/default/cache").rglob("*.parts"))


def test_lm_eval_scores_every_toy_item_whole(default_run):
    """Issue 50, item 10: synthetic_mc's contexts are built within the toy models' context, so
    lm-eval cuts none (it warned 400 times: "Combined length of context (255) and
    continuation (1) exceeds model's maximum length (64)")."""
    workdir, _ = default_run
    logs = sorted((workdir / "logs" / "default" / "evaluate_checkpoint").rglob("*.log"))
    assert logs
    for log in logs:
        assert "exceeds model's maximum length" not in log.read_text(), log


def test_rerun_has_nothing_left_to_do(default_run):
    workdir, _ = default_run
    dry = subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(workdir),
         "--configfile", str(ROOT / "config" / "config.yaml"), "-n"],
        capture_output=True, text=True, timeout=300,
    )
    assert dry.returncode == 0 and "Nothing to be done" in dry.stdout + dry.stderr


def test_operational_changes_rerun_nothing(default_run, tmp_path):
    """What a user does after an OOM, a time limit or a hub outage: raise resources, threads
    and retries, or move to another device. None of these changes a result, so a finished
    run must stay finished (at paper scale a rerun is 1,540 GPU jobs and 7.6 TB fetched)."""
    workdir, _ = default_run
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    config["run"] = "default"  # tmp/config.yaml would otherwise name the run "config"
    config["threads"] = 2
    config["device"] = "cpu"
    config["extraction"].update(mem_mb=config["extraction"].get("mem_mb", 4000) * 2, runtime=15)
    config.setdefault("fetch", {}).update(retries=5, attempts=3, min_free_mb=1)
    config.setdefault("bottleneck", {}).update(head_mem_mb=9000, cache_runtime=99)
    changed = tmp_path / "config.yaml"
    changed.write_text(yaml.safe_dump(config))
    dry = subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(workdir),
         "--configfile", str(changed), "-n"],
        capture_output=True, text=True, timeout=300,
    )
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert "Nothing to be done" in dry.stdout + dry.stderr, (dry.stdout + dry.stderr)[-3000:]


def test_tables_record_the_library_source(default_run):
    """A library edit reruns nothing; every table names the lmsat source that built it, and
    each row the source that computed its checkpoint (lmsat.products.table_files.with_provenance)."""
    from lmsat.core.io import source_sha256

    workdir, _ = default_run
    for name in ("loss", "anisotropy_training", "singular_entropy", "attention_lowrank"):
        table = pd.read_csv(workdir / f"results/default/tables/{name}.csv")
        assert (table["lmsat_source_sha256"] == source_sha256()).all(), name
        assert (table["row_lmsat_source"] == source_sha256()).all(), name


def report_data(path) -> tuple[dict, dict, str]:
    """(results, categories, landing page HTML) of a Snakemake HTML report."""
    text = Path(path).read_text(encoding="utf-8")
    results = json.loads(re.search(r"var results = (\{.*?\});\n", text, re.S).group(1))
    categories = json.loads(re.search(r"var categories = (\{.*?\});\n", text, re.S).group(1))
    landing = json.loads(re.search(r'var workflow_desc = (".*?");\n', text, re.S).group(1))
    return results, categories, landing


def embedded(result: dict) -> str:
    return base64.b64decode(result["data_uri"].split(",", 1)[1]).decode("utf-8")


def check_report(workdir: Path, html: Path) -> None:
    """Every figure the run made is in the report (PNG and PDF), and every table a caption
    cites is there rendered - its rows in an HTML <table> - in the section of a figure (or
    table) whose caption cites it; the landing page shows the summary."""
    results, categories, landing = report_data(html)
    section = {path: sub for subs in categories.values() for sub, paths in subs.items() for path in paths}
    cited_by = {}
    for caption in sorted((ROOT / "workflow" / "report").glob("*.rst")):
        if caption.stem in ("workflow", "figure", "table", "summary"):
            continue
        figure = f"results/default/figures/{caption.stem}.png"
        if (workdir / figure).exists():
            assert figure in results and figure.replace(".png", ".pdf") in results, caption.stem
        own = figure if (workdir / figure).exists() else f"results/default/report/{caption.stem}.html"
        for table in set(re.findall(r"([a-z0-9_]+)\.csv", caption.read_text())):
            if (workdir / "results" / "default" / "tables" / f"{table}.csv").exists() and own in section:
                cited_by.setdefault(table, set()).add(section[own])
    assert cited_by, "no caption cites a table the run made"
    for table, sections in cited_by.items():
        page = f"results/default/report/{table}.html"
        assert page in results, f"{table}.csv is cited by a caption but not in the report"
        assert section[page] in sections, f"{table} is in {section[page]}, not beside a figure citing it"
        rows = len(pd.read_csv(workdir / "results" / "default" / "tables" / f"{table}.csv"))
        shown = embedded(results[page]).split("<tbody>")[1].count("<tr>")
        assert shown == min(rows, 2000), table
    assert "run summary" in landing and "Compared with the paper" in landing
    # issue 50, item 7: no caption renders as docutils' red "System Message" block
    shown = [landing, *(result["caption"] for result in results.values())]
    assert not any("System Message" in text or "system-message" in text for text in shown)


def test_report_shows_every_caption_figure_and_table(default_run, default_report, tmp_path):
    workdir, _ = default_run
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(workdir),
         "--configfile", str(ROOT / "config" / "config.yaml"), "--report", str(tmp_path / "report.zip")],
        capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    check_report(workdir, default_report)
    names = zipfile.ZipFile(tmp_path / "report.zip").namelist()
    assert any(name.endswith("fig1a_loss.pdf") for name in names), names[:20]


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (Debian: apt-get install -y chromium)")
def test_report_summary_reads_at_1400_px(default_report, tmp_path):
    """Debian's chromium, headless, at 1400 x 1000: the landing page's summary spans the page
    (not a narrow column), no table of it is cut off, one click on a figure link shows the
    figure, and no caption or job parameter shows an escape sequence."""
    report = default_report
    found = measure_landing(report, tmp_path)
    assert found["innerWidth"] == WINDOW[0]
    assert found["summaryWidth"] > 0.7 * WINDOW[0], found  # beside the menu, not a ~470 px column
    assert len(found["tables"]) >= 2 and found["clipped"] == [], found
    for table in found["tables"]:
        assert 0 <= table["left"] and table["right"] <= WINDOW[0], table
    results, _, _ = report_data(report)
    figures = [path for path in results if path.endswith(".png") and "/figures/" in path]
    assert len(found["links"]) == len(figures), (found["links"], figures)
    assert found["shown"] > 1000  # after one click, the first figure is on screen
    for escape in ("\\n", '\\"'):  # a literal backslash-n or backslash-quote
        for path, result in results.items():
            shown = [result["caption"], *map(str, result["job_properties"].values())]
            assert not any(escape in text for text in shown), (escape, path)
        assert escape not in found["page"]  # what the figure's view shows: caption, job parameters
    assert png_size(screenshot(report, tmp_path / "landing.png")) == WINDOW


def test_the_default_run_forks_its_jobs_from_the_warm_interpreter(default_run):
    """Issue 35: every job of the default run (each writes its own log) ran in a process
    forked from the run's warm interpreter (lmsat.runtime.warm), none declined, each ended with exit
    0, and the warm interpreter stopped with the run. Its results are the recorded ones
    (test_tables_match_the_recorded_default_run)."""
    workdir, _ = default_run
    lines = (workdir / "logs" / "default" / "warm_interpreter.log").read_text().splitlines()
    job_logs = [p for p in (workdir / "logs" / "default").rglob("*.log") if p.name != "warm_interpreter.log"]
    served = [line for line in lines if ": exit " in line]
    assert len(served) == len(job_logs) > 200
    assert all(": exit 0," in line for line in served)
    assert not [line for line in lines if "declined" in line or "left " in line]
    assert "stopping (asked)" in lines[-1]


def test_the_order_of_events_says_no_rise_for_the_toy(default_run):
    """Issue 53: the default run's event_order table, its figure and a summary line per model.
    The toy models' losses do not rise (each final is its best), so every row says `no rise`
    and no lead is given: nothing is forced into an order."""
    workdir, _ = default_run
    results = workdir / "results/default"
    table = pd.read_csv(results / "tables/event_order.csv")
    models = ["toy-d16", "toy-d32", "toy-d64", "toy-d128"]
    assert list(dict.fromkeys(table["model"])) == models
    assert set(table["verdict"]) == {"no rise"} and table["lead_steps"].isna().all()
    assert list(table[table["series"] == "loss"]["onset_step"]) == [800] * 4  # each best is its final
    assert {"anisotropy", "effective_rank", "gradient_energy_kept", "head_singular_entropy", "head_stable_rank",
            "head_alpha"} <= set(table["series"])
    prediction = pd.read_csv(results / "tables/event_prediction.csv")
    assert set(prediction["verdict"]) == {"no power"}  # four sizes, one model each: no comparison within a size
    assert (results / "figures/event_order.png").stat().st_size > 0
    summary = (results / "report/summary.html").read_text(encoding="utf-8")
    for model in models:
        assert f"Order of events, {model}: no rise" in summary


def test_tables_match_the_recorded_default_run(default_run):
    """Every table of the default run as recorded in tests/data/default_tables/ (CSV) comes
    out again: same columns, rows and order; keys, names and integers equal; each float
    within its quantity's tolerance (tests/golden_tables.py TOLERANCES: the measured spread
    of threads and CPU kernels, benchmarks/numeric_variants.py, with margin). A table the recording lacks (a
    metric added since) is not compared. A change that means to change results records the
    new tables with `python tests/golden_tables.py record <run>/results/default/tables`."""
    from golden_tables import compare_tables

    differences = compare_tables(default_run[0] / "results/default/tables")
    assert differences == [], "\n".join(differences[:40])


def descendants(pid: int) -> list[int]:
    """Every process under `pid`, children of each of its threads (Snakemake starts its jobs
    from worker threads)."""
    found = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            for child in map(int, (task / "children").read_text().split()):
                found += [child] + descendants(child)
    except FileNotFoundError:
        pass  # ended meanwhile
    return found


def running_scripts(pid: int, name: str) -> list[int]:
    """The processes under `pid` running the workflow script `name` (Snakemake's copy)."""
    found = []
    for child in descendants(pid):
        try:
            if name in Path(f"/proc/{child}/cmdline").read_text():
                found.append(child)
        except FileNotFoundError:
            pass
    return found


def test_a_rerun_completes_a_run_after_an_interrupted_forcerun(default_run, tmp_path):
    """Issue 46, case 8: `snakemake --forcerun analyse_checkpoint -- results/default/tables/loss.csv`
    killed with SIGKILL, its jobs with it, while two checkpoints' jobs ran (Snakemake had removed
    their outputs), left their cache, spectra and attention files missing, with 6 incomplete
    markers, and every rerun, plain or with profiles/local, said "Nothing to be done": Snakemake
    makes a missing file again only for a target or for a job that runs, and the metric records
    and tables after them were up to date. `all` now names every per-checkpoint file, so a plain
    rerun brings the run back to complete."""
    import os
    import shutil
    import signal
    import time

    workdir = tmp_path / "run"
    shutil.copytree(default_run[0], workdir, symlinks=True)  # keeps mtimes, like cp -a
    command = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(workdir),
               "--configfile", str(ROOT / "config" / "config.yaml"), "--cores", "2"]
    forced = subprocess.Popen(command + ["--forcerun", "analyse_checkpoint", "--", "results/default/tables/loss.csv"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 600
    while len(running_scripts(forced.pid, "analyse_checkpoint.py")) < 2 and time.monotonic() < deadline:
        assert forced.poll() is None, "the forced run ended before two of its jobs were running"
        time.sleep(0.02)
    os.kill(forced.pid, signal.SIGSTOP)  # no job starts meanwhile
    for pid in descendants(forced.pid):  # its jobs and warm interpreter, as a node's OOM kill or power cut
        os.kill(pid, signal.SIGKILL)
    os.kill(forced.pid, signal.SIGKILL)
    forced.wait()
    caches = [p.relative_to(default_run[0]) for p in (default_run[0] / "results/default/cache").glob("*/*.h5")]
    missing = [path for path in caches if not (workdir / path).exists()]
    assert len(missing) == 2, missing  # removed by Snakemake for the two killed jobs
    unlocked = subprocess.run(command + ["--unlock"], capture_output=True, text=True, timeout=600)
    assert unlocked.returncode == 0, unlocked.stderr[-3000:]  # as Snakemake asks after a SIGKILL

    rerun = subprocess.run(command, capture_output=True, text=True, timeout=1800)  # plainly
    assert rerun.returncode == 0, rerun.stderr[-4000:]
    assert "Nothing to be done" not in rerun.stdout + rerun.stderr
    for path in missing:
        for kind in ("cache", "spectra", "attention"):
            assert (workdir / str(path).replace("/cache/", f"/{kind}/")).exists(), (kind, path)
    assert not list(workdir.glob("results/**/*.parts")) and not list((workdir / ".snakemake/incomplete").iterdir())
    done = subprocess.run(command + ["-n"], capture_output=True, text=True, timeout=600)
    assert "Nothing to be done" in done.stdout + done.stderr, done.stdout[-3000:]


def test_the_profiles_rerun_completes_a_run_after_snakemake_was_killed(tmp_path):
    """Issue 49, item 8: the README's rerun after a killed forced re-analysis: `--forcerun
    analyse_checkpoint -- .../loss.csv`, `kill -9` of Snakemake (its process alone) once jobs
    have finished and others run, `--unlock`, then make run's command `snakemake --profile
    profiles/local` stopped with `ProtectedOutputException ... metrics/loss/toy-d32/step0.json`
    and left 2 caches missing. The killed Snakemake's running jobs lived on (one whose warm
    interpreter had gone ran in its own interpreter) and wrote into results/ while the rerun
    made the same files. Now they die with it, and the profile's rerun completes the run. A
    shrunk toy config (two models, two revisions, loss and anisotropy) keeps it cheap."""
    import os
    import time

    from conftest import small_toy_config

    config = small_toy_config(("toy-d16", "toy-d32"), n_seq=16, chunk=4)
    config.update(metrics=["loss", "anisotropy"])
    config["bottleneck"]["models"] = []
    config["evaluation"]["tasks"] = []
    config["ngrams"]["ground_truth"]["sample_sizes"] = []
    config["scaling"]["enabled"] = False
    (tmp_path / "small.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    command = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(tmp_path),
               "--configfile", str(tmp_path / "small.yaml")]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    first = subprocess.run(command + ["--cores", "2"], capture_output=True, text=True, timeout=1800, env=env)
    assert first.returncode == 0, first.stderr[-4000:]

    log = tmp_path / "forced.log"
    with open(log, "w") as out:
        forced = subprocess.Popen(command + ["--cores", "2", "--forcerun", "analyse_checkpoint", "--",
                                             "results/default/tables/loss.csv"], stdout=out, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 900
    while not (log.read_text().count("Finished jobid") >= 2 and running_scripts(forced.pid, ".snakemake/scripts/")):
        assert forced.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.02)
    forced.kill()  # SIGKILL of Snakemake alone, as `kill -9 PID`: its jobs get no signal from it
    forced.wait()
    scripts = str(tmp_path / ".snakemake" / "scripts")
    wait = time.monotonic() + 30
    while time.monotonic() < wait and any(scripts in cmdline for cmdline in process_cmdlines()):
        time.sleep(0.1)
    assert not [c for c in process_cmdlines() if scripts in c]  # none of its jobs lives on

    unlocked = subprocess.run(command + ["--unlock"], capture_output=True, text=True, timeout=600, env=env)
    assert unlocked.returncode == 0, unlocked.stderr[-3000:]
    rerun = subprocess.run(command + ["--profile", str(ROOT / "profiles" / "local")], capture_output=True, text=True,
                           timeout=1800, env=env)
    assert rerun.returncode == 0, (rerun.stdout + rerun.stderr)[-4000:]
    assert "Write-protected" not in rerun.stdout + rerun.stderr
    for model in ("toy-d16", "toy-d32"):
        assert {p.name for p in (tmp_path / "results/default/cache" / model).glob("*.h5")} == {"step0.h5", "step16.h5"}
    done = subprocess.run(command + ["-n"], capture_output=True, text=True, timeout=600, env=env)
    assert "Nothing to be done" in done.stdout + done.stderr, done.stdout[-3000:]


def process_cmdlines() -> list[str]:
    """The command lines of every process of this machine."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                found.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
            except OSError:
                pass
    return found
