"""Finished work is never lost or overwritten (issue 22): each case is made to happen on the
files of a real finished run.

1. slices          a selection (`select`) writes under a run directory of its own
                   (results/<run>-<hash>/), its toy training takes every revision of the
                   schedule, and the finished full run stays "Nothing to be done"
2. copied configs  shipped configs name no `run:`; a copy is named after its file
3. foreign inputs  a local checkpoint and a hub cache staged by hand are fingerprinted
                   (rule record_weights) and never deleted; changed files rerun their jobs;
                   toy hub files replaced after training stop the plan, naming the model
4. moved runs      nothing under results/ holds an absolute path; a copy of a run evaluates
                   from its own files after the original's are cut, writing nothing there

The workflow tests share one finished run (a toy model, a local checkpoint, a hub cache
staged by hand, one lm-eval task) and work on copies of it where they change files.
"""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml

from lmsat.checkpoints import local_hub as hub
from lmsat.core.fingerprint import FETCHED_MARKER, changed_files, weights_fingerprint
from lmsat.core.io import read_json
from lmsat.errors import ConfigError
from lmsat.planning.config_files import load_yaml
from lmsat.planning.load import load_plan
from lmsat.planning.slicing import run_of_config_file, slice_run

from conftest import ROOT, SCHEMA, shipped_configs, small_toy_config

slow = pytest.mark.slow  # runs Snakemake (tens of seconds)
SNAKEMAKE = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile")]
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
MIRROR_ID, REVISION = "lmsat-test/mirror", "step1"
LOCAL_DIR = "checkpoints/loc"  # relative to the run's working directory: copies carry it
EVAL_JSON = "results/default/evaluation/toy-d16/final/synthetic_ppl.json"
TARGETS = ["fig1a", EVAL_JSON]
SLICE = ["select={models: [toy-d16], revisions: [step16]}", "toy={max_steps: 16}"]


def tiny_neox(seed: int):
    """A 1-block GPT-NeoX over the toy tokenizer (258 ids, 264 head rows)."""
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    torch.manual_seed(seed)
    config = GPTNeoXConfig(vocab_size=264, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                           intermediate_size=32, max_position_embeddings=64, tie_word_embeddings=False)
    return GPTNeoXForCausalLM(config)


def stage_by_hand(workdir: Path, seed: int) -> Path:
    """The hub checkpoint lmsat-test/mirror@step1 placed by hand where rule fetch_checkpoint
    would put it (no fetch marker: the pipeline did not download it)."""
    cache = workdir / f"results/default/weights/mirror/{REVISION}"
    hub.publish_revision(tiny_neox(seed), None, cache, MIRROR_ID, REVISION)
    return cache


def save_local(workdir: Path, seed: int) -> Path:
    directory = workdir / LOCAL_DIR / REVISION
    tiny_neox(seed).save_pretrained(directory)
    return directory


def run_config() -> dict:
    """One toy model (step0, step16), a local and a hand-staged hub checkpoint, one lm-eval task."""
    config = small_toy_config(("toy-d16",), n_seq=16, chunk=4)
    listed = dict(tokenizer="toy", tokens_per_step=256, revisions={"schedule": "list", "list": [REVISION]})
    config["suites"]["local"] = dict(listed, models=[dict(name="loc", source="local", id=LOCAL_DIR, hidden_size=16,
                                                          vocab_size=264)])
    config["suites"]["hub"] = dict(listed, models=[dict(name="mirror", id=MIRROR_ID, hidden_size=16, vocab_size=264)])
    config["evaluation"].update(models=["toy-d16"], tasks=["synthetic_ppl"])
    return config


def snakemake(workdir: Path, config: dict, *args, name="config.yaml", timeout=900):
    configfile = workdir / name
    configfile.write_text(yaml.safe_dump(config, sort_keys=False))
    return subprocess.run(
        SNAKEMAKE + ["--directory", str(workdir), "--configfile", str(configfile), "--cores", "2", *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout, env={**os.environ, **OFFLINE},
    )


def job_counts(output: str) -> dict[str, int]:
    """Snakemake's own 'Job stats' table: jobs per rule, and the total."""
    table = output.split("Job stats:", 1)[1].split("\n\n", 1)[0]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M)}


def files_of(root: Path) -> dict[str, int]:
    """{relative path: mtime_ns} of every file under root."""
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}


def copy_of(workdir: Path, tmp_path: Path) -> Path:
    """The whole finished run (results, logs, Snakemake's records, the local checkpoint)."""
    copy = tmp_path / "copy"
    shutil.copytree(workdir, copy, symlinks=True)  # keeps mtimes, like cp -a
    return copy


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("finished")
    stage_by_hand(workdir, seed=7)
    save_local(workdir, seed=11)
    config = run_config()
    result = snakemake(workdir, config, *TARGETS)
    assert result.returncode == 0, result.stdout[-4000:]
    return workdir, config


# ------------------------------------------------------------------ 1. slices


def test_a_slice_is_a_run_of_its_own(default_config):
    sliced = dict(default_config, select={"models": ["toy-d32"], "revisions": ["step0", "step800"]})
    plan, full = load_plan(sliced, SCHEMA), load_plan(default_config, SCHEMA)
    assert full.run == "default"
    assert re.fullmatch(r"default-[0-9a-f]{8}", plan.run)
    assert plan.run == load_plan(sliced, SCHEMA).run  # the same selection finds its directory again
    assert load_plan(dict(sliced, run="default"), SCHEMA).run == plan.run  # naming the full run: still its own
    other = dict(default_config, select={"models": ["toy-d32"], "revisions": ["step800"]})
    assert load_plan(other, SCHEMA).run != plan.run
    assert plan.models["toy-d32"].revisions == ("step0", "step800")
    # training: every revision of the schedule, whichever the slice reads
    assert plan.trained["toy-d32"].revisions == full.models["toy-d32"].revisions
    assert set(plan.trained) == {"toy-d32"} and full.trained == full.models
    assert slice_run("default", {"models": ["a"]}) != slice_run("default", {"models": ["b"]})
    with pytest.raises(ConfigError, match="select.models"):
        load_plan(dict(default_config, select={"models": ["toy-d7"]}), SCHEMA)


@slow
def test_the_readme_slice_leaves_the_full_run_finished(finished):
    workdir, config = finished
    tables = workdir / "results/default/tables"
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in tables.glob("*.csv")}
    default_files = files_of(workdir / "results/default")
    result = snakemake(workdir, config, "--config", *SLICE, "--", "fig1a")
    assert result.returncode == 0, result.stdout[-4000:]
    run = load_plan(dict(config, select={"models": ["toy-d16"], "revisions": ["step16"]}), SCHEMA).run
    assert f"it writes under results/{run}/" in result.stdout
    loss = pd.read_csv(workdir / f"results/{run}/tables/loss.csv")
    assert list(zip(loss["model"], loss["revision"])) == [("toy-d16", "step16")]
    # its toy model was trained with every revision of the schedule, not only the selected one
    assert read_json(workdir / f"results/{run}/toy/models/toy-d16.json")["revisions"] == ["step0", "step16"]
    assert files_of(workdir / "results/default") == default_files  # nothing written, moved or deleted
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in tables.glob("*.csv")} == before
    dry = snakemake(workdir, config, "-n", *TARGETS)
    assert dry.returncode == 0, dry.stdout[-4000:]
    assert "Nothing to be done" in dry.stdout, dry.stdout[-4000:]


# ------------------------------------------------------------------ 2. copied configs


def test_shipped_configs_name_no_run(tmp_path):
    shipped = shipped_configs()  # tracked by git: a user's own config/mine.yaml may name its run
    if not shipped:
        pytest.skip("not a git checkout: git ls-files says which configs are shipped")
    for path in shipped:
        assert "run" not in load_yaml(path), f"{path.name} names its run: an edited copy would write into it"
    shipped = ROOT / "config" / "config.yaml"
    assert run_of_config_file(shipped, shipped) == "default"
    assert run_of_config_file(ROOT / "config" / "pythia.yaml", shipped) == "pythia"
    copy = tmp_path / "config.yaml"  # a copy under the same name elsewhere is not the default run
    shutil.copy(shipped, copy)
    assert run_of_config_file(copy, shipped) == "config"
    assert run_of_config_file(tmp_path / "wide.yaml", shipped) == "wide"


@slow
def test_an_edited_copy_of_a_config_plans_its_own_run(finished):
    workdir, config = finished
    copy = {key: value for key, value in config.items() if key != "run"}
    copy["seed"] = 1  # another experiment
    dry = snakemake(workdir, copy, "-n", "fig1a", name="wide.yaml")
    assert dry.returncode == 0, dry.stdout[-4000:]
    assert "results/wide/tables/loss.csv" in dry.stdout
    assert "results/default/" not in dry.stdout


# ------------------------------------------------------------------ 3. inputs the pipeline did not make


def test_fingerprints_follow_the_files(tmp_path):
    directory = save_local(tmp_path, seed=1)
    first = weights_fingerprint(directory.parent)
    assert first == weights_fingerprint(directory.parent)
    assert {f"{REVISION}/config.json", f"{REVISION}/model.safetensors"} <= set(first)
    save_local(tmp_path, seed=2)  # same shapes, other values
    assert changed_files(first, weights_fingerprint(directory.parent)) == [f"{REVISION}/model.safetensors"]
    (directory / FETCHED_MARKER).write_text("{}")  # our own marker is not part of the weights
    assert FETCHED_MARKER not in "".join(weights_fingerprint(directory.parent))
    assert weights_fingerprint(tmp_path / "absent") == {}


@slow
def test_a_hand_staged_cache_is_kept(finished):
    workdir, _ = finished
    cache = workdir / f"results/default/weights/mirror/{REVISION}"
    assert (cache / "models--lmsat-test--mirror").is_dir()  # remove_after_use deletes downloads only
    assert not (cache / FETCHED_MARKER).exists()
    for model, directory in (("mirror", cache), ("loc", workdir / LOCAL_DIR / REVISION)):
        record = read_json(workdir / f"results/default/weights/records/{model}/{REVISION}.json")
        assert record["fingerprint"] == weights_fingerprint(directory)
        assert not Path(record["directory"]).is_absolute()


@slow
def test_a_hand_staged_cache_removed_after_use_reruns_nothing(finished, tmp_path):
    workdir, config = finished
    copy = copy_of(workdir, tmp_path)
    shutil.rmtree(copy / f"results/default/weights/mirror/{REVISION}")  # space freed by hand
    dry = snakemake(copy, config, "-n", *TARGETS)
    assert dry.returncode == 0, dry.stdout[-4000:]
    assert "Nothing to be done" in dry.stdout, dry.stdout[-4000:]


@slow
def test_weights_changed_after_a_run_rerun_their_jobs(finished, tmp_path):
    workdir, config = finished
    copy = copy_of(workdir, tmp_path)
    for path in (copy / LOCAL_DIR).rglob("*"):  # touched, same bytes: small files are hashed whole
        os.utime(path)
    dry = snakemake(copy, config, "-n", *TARGETS)
    assert dry.returncode == 0 and "Nothing to be done" in dry.stdout, dry.stdout[-4000:]
    stage_by_hand(copy, seed=8)  # another checkpoint of the same shape, staged over the first
    save_local(copy, seed=12)
    dry = snakemake(copy, config, "-n", *TARGETS)
    assert dry.returncode == 0, dry.stdout[-4000:]
    counts = job_counts(dry.stdout)
    assert counts["record_weights"] == 2 and counts["analyse_checkpoint"] == 2, counts  # mirror and loc
    assert "train_toy_model" not in counts and "evaluate_checkpoint" not in counts
    assert "weights/records/mirror/step1.json" in dry.stdout and "weights/records/loc/step1.json" in dry.stdout


@slow
def test_replaced_toy_hub_files_stop_the_plan(finished, tmp_path):
    workdir, config = finished
    copy = copy_of(workdir, tmp_path)
    final, first = (hub.snapshot_path(copy / "results/default/toy/hub", "lmsat-toy/toy-d16", r) for r in ("step16", "step0"))
    shutil.copy(first / "model.safetensors", final / "model.safetensors")  # step16 is now step0's weights
    dry = snakemake(copy, config, "-n", *TARGETS)
    assert dry.returncode != 0
    assert "toy model toy-d16: 1 file(s) of its published checkpoints" in dry.stdout, dry.stdout[-3000:]
    assert "changed after its training job (train_toy_model) wrote them (snapshots/" in dry.stdout
    assert "Fix: delete results/default/toy/models/toy-d16.json" in dry.stdout


# ------------------------------------------------------------------ 4. moved and copied runs


@slow
def test_a_copied_run_reads_and_writes_only_its_own_files(finished, tmp_path):
    workdir, config = finished
    for path in (workdir / "results").rglob("*"):
        if path.is_file():
            assert str(workdir).encode() not in path.read_bytes(), f"{path} holds an absolute path into the run"
    copy = copy_of(workdir, tmp_path)
    before = read_json(workdir / EVAL_JSON)["results"]["results"]["synthetic_ppl"]["word_perplexity,none"]
    for data in (workdir / "results/default/evaluation/tasks").glob("*.jsonl"):
        data.unlink()  # the original's task data is gone
    original = files_of(workdir)
    result = snakemake(copy, config, "--forcerun", "evaluate_checkpoint", "--", EVAL_JSON)
    assert result.returncode == 0, result.stdout[-4000:]
    after = read_json(copy / EVAL_JSON)["results"]["results"]["synthetic_ppl"]["word_perplexity,none"]
    assert after == pytest.approx(before, rel=1e-6)
    assert files_of(workdir) == original  # nothing read into being, written or touched there


# ------------------------------------------------------------------ 5. a run name is a claim on its directory


def contents_of(root: Path) -> dict[str, tuple[int, bytes]]:
    """{relative path: (mtime_ns, bytes)} of every file under root."""
    return {str(p.relative_to(root)): (p.stat().st_mtime_ns, p.read_bytes()) for p in root.rglob("*") if p.is_file()}


CLAIMED_TARGET = "results/loc/tables/loss.csv"


@pytest.fixture(scope="module")
def claimed(tmp_path_factory):
    """A finished run `loc` (one toy model, loss and spectra) made by first.yaml, which its claim
    (results/loc/run_config.json) records; -> (its directory, first.yaml's config, a second
    config naming the same run with another sample.n_tokens). Tests read it or work on copies."""
    workdir = tmp_path_factory.mktemp("claimed")
    first = small_toy_config(("toy-d16",), n_seq=16, chunk=4)
    first.update(run="loc", metrics=["loss", "spectra"])
    done = snakemake(workdir, first, CLAIMED_TARGET, name="first.yaml")
    assert done.returncode == 0, done.stdout[-4000:]
    second = copy.deepcopy(first)
    second["sample"]["n_tokens"] = 32 * 32
    return workdir, first, second


@slow
def test_a_second_config_naming_a_finished_run_is_refused_and_changes_nothing(claimed):
    """Issue 31, case 1: a second config with `run: loc` and another sample.n_tokens planned into
    the finished results/loc, and replaced its sample, caches and loss table. Now planning
    refuses, naming both configs and what differs; results/loc stays as it was, byte for byte
    and mtime for mtime. Adding a metric is no conflict; replace_results: true is the override."""
    tmp_path, first, second = claimed
    target = CLAIMED_TARGET
    claim = read_json(tmp_path / "results/loc/run_config.json")
    assert claim["sources"] == "first.yaml" and claim["result_config"]["sample"]["n_tokens"] == 16 * 32
    before = contents_of(tmp_path / "results" / "loc")

    for args in (["-n", target], [target]):  # the dry run and the run itself
        refused = snakemake(tmp_path, second, *args, name="second.yaml")
        assert refused.returncode != 0, refused.stdout[-4000:]
        out = " ".join(refused.stdout.split())
        assert "config key 'run': results/loc/ holds the finished outputs of run 'loc' made by first.yaml" in out, out[-3000:]
        assert "this plan (second.yaml) would change what they mean: sample.n_tokens: 512 there, 1024 now" in out
        assert "another `run:`" in out and "replace_results: true (e.g. --config replace_results=true)" in out
    assert contents_of(tmp_path / "results" / "loc") == before  # nothing read into being, written or touched

    more = dict(first, metrics=["loss", "spectra", "anisotropy"])  # one metric more: the same run, grown
    grown = snakemake(tmp_path, more, "-n", "results/loc/metrics/anisotropy/toy-d16/step16.json", name="first.yaml")
    assert grown.returncode == 0 and "rule analyse_checkpoint" not in grown.stdout, grown.stdout[-4000:]
    replaced = snakemake(tmp_path, second, "-n", target, "--config", "replace_results=true", name="second.yaml")
    assert replaced.returncode == 0 and "rule sample_eval_tokens" in replaced.stdout, replaced.stdout[-4000:]
    assert contents_of(tmp_path / "results" / "loc") == before


@slow
def test_a_damaged_or_deleted_claim_over_finished_outputs_is_refused_and_changes_nothing(claimed, tmp_path):
    """Issue 46, case 7: a results/<run>/run_config.json truncated, empty or `{` made the claim check
    pass silently, and a config with another sample.n_tokens ran 65 jobs, replacing the finished
    run's sample, caches and tables, then rewrote the claim. A deleted claim was no claim at all.
    Now both are refusals naming the file and the fixes; a deleted claim is a pass only for the
    config the tables' provenance records, and replace_results: true still replaces knowingly."""
    workdir = copy_of(claimed[0], tmp_path)
    first, second = claimed[1], claimed[2]
    claim_path = workdir / "results" / "loc" / "run_config.json"
    claim = claim_path.read_text()
    damages = {"truncated": claim[: len(claim) // 2], "empty": "", "{": "{", "not lmsat's record": "{}"}
    for name, text in damages.items():
        claim_path.write_text(text)
        before = contents_of(workdir / "results" / "loc")
        for args in (["-n", CLAIMED_TARGET], [CLAIMED_TARGET]) if name == "truncated" else (["-n", CLAIMED_TARGET],):
            refused = snakemake(workdir, second, *args, name="second.yaml")
            out = " ".join(refused.stdout.split())
            assert refused.returncode != 0 and "Job stats" not in out, (name, out[-3000:])
            assert (f"config key 'run': {claim_path.relative_to(workdir)}, the claim of the finished outputs in "
                    "results/loc/" in out and "cannot be read" in out), (name, out[-3000:])
            assert "Fix: put the claim back" in out and "replace_results: true" in out, out[-3000:]
        assert contents_of(workdir / "results" / "loc") == before, name  # nothing run, written or touched
    claim_path.unlink()
    before = contents_of(workdir / "results" / "loc")
    refused = snakemake(workdir, second, "-n", CLAIMED_TARGET, name="second.yaml")
    out = " ".join(refused.stdout.split())
    assert refused.returncode != 0, out[-3000:]
    assert "results/loc/ holds finished outputs (" in out and "but no claim (results/loc/run_config.json is missing)" in out
    assert "its tables record another config (config_sha256" in out, out[-3000:]
    same = snakemake(workdir, first, "-n", CLAIMED_TARGET, name="first.yaml")  # the tables' own config: a pass
    assert same.returncode == 0 and "Nothing to be done" in same.stdout, same.stdout[-3000:]
    assert contents_of(workdir / "results" / "loc") == before
    claim_path.write_text("{")
    replaced = snakemake(workdir, second, "-n", CLAIMED_TARGET, "--config", "replace_results=true", name="second.yaml")
    assert replaced.returncode == 0 and "rule sample_eval_tokens" in replaced.stdout, replaced.stdout[-4000:]


def test_what_grows_a_run_is_no_conflict_and_what_changes_its_outputs_is(default_config):
    from lmsat.planning.config_files import result_config
    from lmsat.planning.run_claim import claim_differences

    schema = load_yaml(SCHEMA)
    old = result_config(load_plan(default_config, SCHEMA).config, schema)
    grown = copy.deepcopy(default_config)
    grown.update(metrics=["loss", "spectra"], threads=4, device="cpu")  # fewer metrics, operational keys
    grown["evaluation"]["tasks"] = ["synthetic_ppl"]  # one task fewer
    grown["bottleneck"]["ranks"] = [1, 4, 8, 16]  # one rank more
    grown["suites"]["toy"]["models"] = grown["suites"]["toy"]["models"][:3]  # a model left out
    grown["bottleneck"]["models"] = ["toy-d32"]
    assert claim_differences(old, result_config(load_plan(grown, SCHEMA).config, schema)) == []
    changed = copy.deepcopy(grown)
    changed["toy"]["max_steps"] = 400
    changed["suites"]["toy"]["models"][0]["hidden_size"] = 24
    found = {key for key, _, _ in claim_differences(old, result_config(load_plan(changed, SCHEMA).config, schema))}
    assert {"toy.max_steps", "suites.toy.models.toy-d16.hidden_size"} <= found, found
