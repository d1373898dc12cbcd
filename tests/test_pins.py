"""Checkpoints that are commits on one branch, not branches (Pico): pinned by a file that
`lmsat pin-revisions` writes from the branch, read offline at planning, each revision
downloaded and loaded at its commit (lmsat.checkpoints.pins).

The branch is a real git repository with one commit per step the way pico-train pushes them
("Saving HF Model -- Step N", then evaluation results, learning dynamics), real tiny
GPT-NeoX weights in each, and a resumed run that pushed one step twice; the hub cache holds
each commit's files as a download leaves them (snapshots/<commit>/), and from_pretrained
loads them by that commit, offline.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lmsat.checkpoints import local_hub as hub
from lmsat.checkpoints import pins
from lmsat.errors import ConfigError
from lmsat.planning.load import load_plan

from conftest import ROOT, SCHEMA, plan_refused

REPO_ID = "pico-lm/toy-pico"
MODEL = "toy-pico"
STEPS = (0, 100, 200, 300)
RESUMED = 200  # the run restarted from step 100: step 200 was pushed twice, the second one counts
GIT = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
           GIT_COMMITTER_EMAIL="t@t")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True, env=GIT).stdout


def tiny(step: int, pushed: int = 0):
    """A tiny GPT-NeoX whose weights say which step (and which push of it) they are."""
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    torch.manual_seed(step * 10 + pushed)
    config = GPTNeoXConfig(vocab_size=40, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                           intermediate_size=32, max_position_embeddings=64, tie_word_embeddings=False)
    return GPTNeoXForCausalLM(config).eval()


@pytest.fixture(scope="module")
def branch(tmp_path_factory) -> tuple[Path, dict[int, str], dict[int, torch.Tensor]]:
    """(clone, step -> the commit holding its model, step -> its head) of branch toy-pico-1."""
    repo = tmp_path_factory.mktemp("toy-pico")
    git(repo, "init", "-q", "-b", "main")
    (repo / "README.md").write_text("toy\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "initial commit")
    git(repo, "checkout", "-q", "-b", f"{MODEL}-1")
    commits, heads = {}, {}
    pushes = [(s, 0) for s in STEPS[:3]] + [(RESUMED, 1), (STEPS[3], 0)]  # ..., 200, restart: 200 again, 300
    for step, pushed in pushes:
        model = tiny(step, pushed)
        model.save_pretrained(repo)
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"Saving HF Model -- Step {step}")
        commits[step] = git(repo, "rev-parse", "HEAD").strip()
        heads[step] = model.get_output_embeddings().weight.detach().clone()
        (repo / "eval_results").mkdir(exist_ok=True)
        (repo / "eval_results" / f"step_{step}.json").write_text('{"paloma": 42.0}')
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "--allow-empty", "-m", f"Saving Evaluation Results -- Step {step}")
        (repo / "learning_dynamics.txt").write_text(f"{step}\n")
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "--allow-empty", "-m", f"Saving Learning Dynamics Data (val) -- Step {step}")
    return repo, commits, heads


def config(tmp_path: Path, **revisions) -> dict:
    """A suite of one hub model whose checkpoints are commits, pinned in tmp_path/pins."""
    spec = {"pins": str(tmp_path / "pins" / "{model}.csv"), "branch": "{model}-1", **revisions}
    return {
        "run": "pinned", "device": "cpu",
        "suites": {"pico": {"hub_org": "pico-lm", "tokenizer": "toy", "tokens_per_step": 2048, "revisions": spec,
                            "models": [{"name": MODEL, "hidden_size": 16, "num_layers": 2, "vocab_size": 40}]}},
        "tokenizers": {"toy": {"source": "hub", "id": "pico-lm/toy-pico"}},
        "corpora": {"pile": {"type": "hf", "path": "monology/pile-uncopyrighted", "split": "train",
                             "text_field": "text", "streaming": True}},
        "sample": {"corpus": "pile", "n_tokens": 50000, "seq_len": 64},
        "scaling": {"enabled": False},
    }


def write_config(tmp_path: Path, cfg: dict) -> Path:
    import yaml

    path = tmp_path / "pinned.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def pin_revisions(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT / "src"))
    return subprocess.run([sys.executable, "-m", "lmsat", "pin-revisions", *args], cwd=cwd, capture_output=True,
                          text=True, env=env, timeout=300)


def test_pin_revisions_pins_each_step_at_the_commit_of_its_model(tmp_path, branch):
    clone, commits, _ = branch
    path = write_config(tmp_path, config(tmp_path))
    result = pin_revisions("--configfile", str(path), "--clone", f"{MODEL}={clone}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert f"{MODEL}: 4 commits pinned in {tmp_path / 'pins' / (MODEL + '.csv')} (steps 0 .. 300)" in result.stdout
    pinned = pins.read_pins(tmp_path / "pins" / f"{MODEL}.csv", REPO_ID, "k")
    assert [(p.step, p.commit) for p in pinned] == [(s, commits[s]) for s in STEPS]
    assert all(p.source == f"Saving HF Model -- Step {p.step}" for p in pinned)
    # the resumed step is pinned at its second push, the one the branch went on from
    second_push = git(clone, "log", "--format=%H", "--grep", f"Saving HF Model -- Step {RESUMED}").split()[0]
    assert pinned[STEPS.index(RESUMED)].commit == second_push
    header = (tmp_path / "pins" / f"{MODEL}.csv").read_text().splitlines()[0]
    assert f"branch {MODEL}-1" in header and f"git clone {clone}" in header

    plan = load_plan(config(tmp_path), SCHEMA)
    entry = plan.models[MODEL]
    assert entry.revisions == tuple(f"step{s}" for s in STEPS) and entry.steps == STEPS
    assert entry.commits == tuple(commits[s] for s in STEPS)
    assert entry.hub_revision("step200") == commits[RESUMED] and entry.final_revision == "step300"
    narrowed = entry.at("step100")  # a job's param: its own revision and commit only
    assert (narrowed.revisions, narrowed.commits) == (("step100",), (commits[100],))
    with pytest.raises(ValueError, match="step150"):
        entry.hub_revision("step150")


def test_a_pinned_revision_downloads_and_loads_at_its_commit(tmp_path, branch, monkeypatch):
    """snapshot_download(revision=commit) finds the commit's files in the hub cache offline, and
    from_pretrained(id, revision=commit) loads them: step 200's second push, bit for bit."""
    from dataclasses import replace

    from huggingface_hub import constants

    from lmsat.checkpoints.fetch import fetch_checkpoint
    from lmsat.checkpoints.loading import load_causal_lm
    from lmsat.checkpoints.validation import checkpoint_dir

    clone, commits, heads = branch
    pins.write_pins(tmp_path / "pins" / f"{MODEL}.csv", REPO_ID,
                    {s: (commits[s], f"Saving HF Model -- Step {s}") for s in STEPS}, "test")
    entry = load_plan(config(tmp_path), SCHEMA).models[MODEL]
    entry = replace(entry, hub_cache=str(tmp_path / "weights" / "{revision}"))
    for step in (100, RESUMED):
        snapshot = hub.repo_dir(entry.cache_dir(f"step{step}"), REPO_ID) / "snapshots" / commits[step]
        snapshot.mkdir(parents=True)  # the commit's files, as a download of revision=<commit> leaves them
        archive = subprocess.run(["git", "-C", str(clone), "archive", commits[step]], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(snapshot)], input=archive.stdout, check=True)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    for step in (100, RESUMED):
        revision = f"step{step}"
        folder = fetch_checkpoint(entry, revision, entry.cache_dir(revision))
        assert folder.name == commits[step] and checkpoint_dir(entry, revision) == folder
        model = load_causal_lm(entry, revision)
        assert torch.equal(model.get_output_embeddings().weight, heads[step]), revision
    first_push = git(clone, "log", "--format=%H", "--grep", f"Saving HF Model -- Step {RESUMED}").split()[1]
    assert first_push != commits[RESUMED]


def test_a_config_without_its_pins_file_says_how_to_write_it(tmp_path):
    plan_refused(config(tmp_path), "suites.pico.revisions.pins", f"pins file {tmp_path / 'pins' / MODEL}.csv does not exist",
                 REPO_ID, "python -m lmsat pin-revisions --configfile", "--clone MODEL=DIR")


@pytest.mark.parametrize("row, fragment", [
    (f"{REPO_ID},100,abc123,x", "commit 'abc123' is not a full 40-digit commit hash"),
    (f"pico-lm/other,100,{'b' * 40},x", "pins repository 'pico-lm/other', not the model's 'pico-lm/toy-pico'"),
    (f"{REPO_ID},0,{'c' * 40},x", "step 0 is pinned twice"),
    (f"{REPO_ID},1e3,{'c' * 40},x", "step '1e3' is not a whole number"),
])
def test_a_broken_pins_row_is_refused_naming_file_and_line(tmp_path, row, fragment):
    path = tmp_path / "pins" / f"{MODEL}.csv"
    path.parent.mkdir()
    path.write_text(f"# a comment\nrepo,step,commit,source\n{REPO_ID},0,{'a' * 40},x\n\n{row}\n")
    plan_refused(config(tmp_path), "suites.pico.revisions.pins", f"pins file {path}, line 5", fragment)


def test_pins_exclude_schedules_and_steps_and_other_sources(tmp_path):
    plan_refused(config(tmp_path, schedule="pythia"), "suites.pico.revisions.pins", "set together with a schedule")
    plan_refused(config(tmp_path, steps=[0]), "suites.pico.revisions.steps", "set together with `pins`")
    no_pins = config(tmp_path)
    del no_pins["suites"]["pico"]["revisions"]["pins"]
    no_pins["suites"]["pico"]["revisions"]["list"] = ["step0"]
    plan_refused(no_pins, "suites.pico.revisions.branch", "no `pins` file is set")
    local = config(tmp_path)
    local["suites"]["pico"]["models"][0].update(source="local", id=str(tmp_path))
    with pytest.raises(ConfigError, match="hub models only"):
        load_plan(local, SCHEMA)


def test_a_list_and_a_selection_keep_pinned_revisions(tmp_path, branch):
    clone, commits, _ = branch
    pins.write_pins(tmp_path / "pins" / f"{MODEL}.csv", REPO_ID,
                    {s: (commits[s], f"Saving HF Model -- Step {s}") for s in STEPS}, "test")
    listed = load_plan(config(tmp_path, list=["step0", "step300"]), SCHEMA).models[MODEL]
    assert listed.revisions == ("step0", "step300") and listed.commits == (commits[0], commits[300])
    plan_refused(config(tmp_path, list=["step0", "step150"]), "suites.pico.revisions.list",
                 "revisions ['step150'] of model toy-pico are not in its pins file")
    selected = copy.deepcopy(config(tmp_path))
    selected["select"] = {"revisions": ["step100", "step300"]}
    entry = load_plan(selected, SCHEMA).models[MODEL]
    assert entry.revisions == ("step100", "step300") and entry.commits == (commits[100], commits[300])


def test_pin_revisions_refuses_a_title_pattern_that_matches_nothing(tmp_path, branch):
    clone, _, _ = branch
    path = write_config(tmp_path, config(tmp_path, commit_regex="Uploading checkpoint (\\d+)"))
    result = pin_revisions("--configfile", str(path), "--clone", f"{MODEL}={clone}", cwd=tmp_path)
    assert result.returncode == 2 and not (tmp_path / "pins").exists()
    assert "config key 'suites.pico.revisions.commit_regex'" in result.stderr
    assert "Saving Learning Dynamics Data (val) -- Step 300" in result.stderr  # the titles it saw
    offline = pin_revisions("--configfile", str(path), cwd=tmp_path)  # no clone, no network: the hub's own words
    assert offline.returncode == 2 and f"cannot list the commits of branch {MODEL}-1 of {REPO_ID}" in offline.stderr


def test_a_relative_pins_path_is_written_and_read_beside_the_config_file(tmp_path, branch):
    """`pins: pins/{model}.csv` in configs/pinned.yaml is configs/pins/<model>.csv, for
    pin-revisions run from another directory and for planning (config_dir), not <cwd>/pins."""
    clone, commits, _ = branch
    cfg = config(tmp_path)
    cfg["suites"]["pico"]["revisions"]["pins"] = "pins/{model}.csv"
    (tmp_path / "configs").mkdir()
    path = write_config(tmp_path / "configs", cfg)
    (tmp_path / "elsewhere").mkdir()
    result = pin_revisions("--configfile", str(path), "--clone", f"{MODEL}={clone}", cwd=tmp_path / "elsewhere")
    assert result.returncode == 0, result.stderr
    written = tmp_path / "configs" / "pins" / f"{MODEL}.csv"
    assert written.is_file() and not (tmp_path / "elsewhere" / "pins").exists()
    entry = load_plan(cfg, SCHEMA, config_dir=tmp_path / "configs").models[MODEL]
    assert entry.commits == tuple(commits[s] for s in STEPS)


def test_two_steps_pinned_to_one_commit_are_refused_naming_both_and_the_commit(tmp_path, branch):
    """A pasted row, half edited: step 300's row holds step 100's commit. One checkpoint would
    be fetched twice and tabulated at two steps."""
    _, commits, _ = branch
    path = tmp_path / "pins" / f"{MODEL}.csv"
    pinned = {s: (commits[100 if s == 300 else s], f"Saving HF Model -- Step {s}") for s in STEPS}
    pins.write_pins(path, REPO_ID, pinned, "test")
    plan_refused(config(tmp_path), "suites.pico.revisions.pins", f"pins file {path}, line 7",
                 f"commit {commits[100]} is pinned for step 300 and, on line 5, for step 100")


def test_a_pinned_commit_read_again_under_another_name_is_refused(tmp_path, branch):
    """Shared weights are compared by the commit a pin resolves a revision to, not by its name:
    a second model of the same repository listing step 100's commit as a revision reads the
    checkpoint that toy-pico's step100 is pinned to."""
    _, commits, _ = branch
    pins.write_pins(tmp_path / "pins" / f"{MODEL}.csv", REPO_ID,
                    {s: (commits[s], f"Saving HF Model -- Step {s}") for s in STEPS}, "test")
    cfg = config(tmp_path)
    cfg["suites"]["pico"]["models"].append({"name": "toy-pico-again", "id": REPO_ID, "hidden_size": 16, "num_layers": 2,
                                            "vocab_size": 40, "revisions": {"list": [commits[100]], "steps": [100]}})
    plan_refused(cfg, "suites.pico.models[name=toy-pico-again].id", f"models {MODEL}@step100 and toy-pico-again@"
                 f"{commits[100]} read the same hub checkpoint {REPO_ID} at revision {commits[100]} (steps 100 and 100)")
