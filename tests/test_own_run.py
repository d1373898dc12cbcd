"""Your own training run: a real transformers.Trainer run, `lmsat init` on its folder, the
whole workflow on the config it writes, offline and with no hand edit, and the next
`snakemake` after the run has saved more checkpoints analysing only those.

Fast: init reads steps, architecture, tokens per step (trainer_state.json's total_flos) and
the tokenizer of a 6-step Trainer run; planning discovers checkpoints, reads and checks
width/depth/vocabulary, suggests a step pattern, keeps an offline suite offline, decides
the scaling fit; each error names its key and the fix.
Slow: the end-to-end run (tiny model, 2 CPU cores).
"""

from __future__ import annotations

import copy
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from lmsat.checkpoints import trainer_runs
from lmsat.errors import ConfigError
from lmsat.planning.config_files import load_yaml
from lmsat.planning.load import load_plan

from conftest import ROOT, SCHEMA

slow = pytest.mark.slow
WORDS = "the a cat dog sat ran on under mat rug big small red blue and then it was very".split()
SEQ = 32  # training sequence length; the model's context is 64


def write_text(path: Path, n_lines: int, seed: int) -> Path:
    """n_lines of 4-14 words drawn from WORDS with a first-order pattern (learnable)."""
    rng = np.random.default_rng(seed)
    lines = []
    for _ in range(n_lines):
        word = rng.integers(len(WORDS))
        words = []
        for _ in range(int(rng.integers(4, 15))):
            words.append(WORDS[word])
            word = (word * 3 + int(rng.integers(0, 3))) % len(WORDS)
        lines.append(" ".join(words))
    path.write_text("\n".join(lines) + "\n")
    return path


def write_noise(path: Path, n_lines: int, seed: int) -> Path:
    """n_lines of 4-14 words of WORDS drawn uniformly: no pattern to learn."""
    rng = np.random.default_rng(seed)
    lines = [" ".join(WORDS[i] for i in rng.integers(len(WORDS), size=int(rng.integers(4, 15)))) for _ in range(n_lines)]
    path.write_text("\n".join(lines) + "\n")
    return path


def train_tokenizer(text: Path):
    """A byte-level BPE trained with `tokenizers` on the local text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    core.train([str(text)], trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|endoftext|>", bos_token="<|endoftext|>",
                                   pad_token="<|endoftext|>")


class Windows:
    """Consecutive SEQ-token windows of the text, as a map-style dataset for Trainer."""

    def __init__(self, tokenizer, text: Path):
        import torch

        ids = [i for line in text.read_text().splitlines() for i in tokenizer(line)["input_ids"] + [tokenizer.eos_token_id]]
        n = len(ids) // SEQ
        self.tokens = torch.tensor(ids[: n * SEQ]).view(n, SEQ)

    def __len__(self):
        return len(self.tokens)

    def __getitem__(self, i):
        return {"input_ids": self.tokens[i], "labels": self.tokens[i]}


def train(out: Path, text: Path, max_steps: int, save_steps: int, resume: bool = False, tokenizer=None,
          hidden_size: int = 16, save_total_limit: int | None = None):
    """Train (or go on training) a tiny GPT-NeoX with the real Trainer, saving checkpoints
    `checkpoint-{N}` every save_steps steps, the tokenizer in each (processing_class);
    save_total_limit: the Trainer deletes all but that many of the latest checkpoints."""
    import torch
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM, Trainer, TrainingArguments, default_data_collator

    torch.manual_seed(0)
    torch.set_num_threads(1)
    if tokenizer is None:
        tokenizer = train_tokenizer(text)
    tokenizer.save_pretrained(out.parent / f"{out.name}-tokenizer")  # Trainer saves it in each checkpoint
    config = GPTNeoXConfig(vocab_size=len(tokenizer) + 4, hidden_size=hidden_size, num_hidden_layers=2, num_attention_heads=2,
                           intermediate_size=32, max_position_embeddings=64, tie_word_embeddings=False,
                           eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.eos_token_id)
    args = TrainingArguments(
        output_dir=str(out), max_steps=max_steps, save_steps=save_steps, per_device_train_batch_size=4,
        learning_rate=3e-3, warmup_steps=2, logging_steps=1000, report_to="none", use_cpu=True, seed=0,
        dataloader_num_workers=0, disable_tqdm=True, save_strategy="steps", save_total_limit=save_total_limit,
    )
    trainer = Trainer(model=GPTNeoXForCausalLM(config), args=args, train_dataset=Windows(tokenizer, text),
                      processing_class=tokenizer, data_collator=default_data_collator)
    trainer.train(resume_from_checkpoint=True if resume else None)
    return tokenizer


def init(*args, cwd=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, "-m", "lmsat", "init", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    """A 6-step Trainer run: checkpoint-2, -4, -6, tokens 4 x 32 a step, text for the sample."""
    base = tmp_path_factory.mktemp("own")
    text = write_text(base / "train.txt", 400, seed=0)
    write_text(base / "eval.txt", 200, seed=1)
    train(base / "out", text, max_steps=6, save_steps=2)
    return base


def test_init_reads_steps_architecture_tokens_and_tokenizer_of_a_trainer_run(small_run, tmp_path):
    out = small_run / "out"
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4", "checkpoint-6"]
    # no num_input_tokens_seen (Trainer's default): read from total_flos, never training_args.bin
    assert json.loads((out / "checkpoint-6" / "trainer_state.json").read_text()).get("num_input_tokens_seen", 0) == 0
    count, how = trainer_runs.tokens_per_step(out / "checkpoint-6")
    assert count == 4 * SEQ and "total_flos" in how
    done = init(out, "--text", small_run / "eval.txt", "-o", tmp_path / "mine.yaml")
    assert done.returncode == 0, done.stderr
    assert "-- fig3" in done.stdout and "snakemake" in done.stdout and "--configfile" in done.stdout
    # issue 44, item 5: where the run writes, named after the checkpoint folder (out), not `mine`
    assert "results: results/out/" in done.stdout and "eval sample: results/out/samples/text/own.h5" in done.stdout
    written = (tmp_path / "mine.yaml").read_text()
    assert written.startswith("# lmsat config") and "discover" in written
    config = yaml.safe_load(written)
    (suite,) = config["suites"].values()
    (model,) = suite["models"]
    assert suite["tokens_per_step"] == 4 * SEQ
    assert model["revisions"] == {"discover": "checkpoint-*"} and model["source"] == "local"
    assert (model["hidden_size"], model["num_layers"], model["tied_head"]) == (16, 2, False)
    assert config["tokenizers"]["own"]["id"] == str((out / "checkpoint-6").resolve())  # saved beside the weights
    assert config["evaluation"]["tasks"] == [] and config["scaling"] == {"enabled": False}
    assert config["sample"]["seq_len"] == 64 and config["sample"]["n_tokens"] % 64 == 0
    plan = load_plan(config, SCHEMA)
    assert plan.models["out"].revisions == ("checkpoint-2", "checkpoint-4", "checkpoint-6")
    assert plan.models["out"].steps == (2, 4, 6) and plan.models["out"].vocab_size == model["vocab_size"]
    # the one-target command init prints (`--` ends --configfile's list) plans, offline
    line = next(line for line in done.stdout.splitlines() if "-- fig3" in line).split("#")[0].split()
    assert line[line.index("--configfile") + 1] == str(tmp_path / "mine.yaml") and line[-2:] == ["--", "fig3"]
    dry = snakemake(tmp_path, tmp_path / "mine.yaml", "-n", "--", "fig3")
    assert dry.returncode == 0 and "plot_figure" in dry.stdout, dry.stdout[-3000:]
    assert not re.search(r"rule (stage_|fetch_)", dry.stdout)
    # an existing config is not overwritten
    again = init(out, "--text", small_run / "eval.txt", "-o", tmp_path / "mine.yaml")
    assert again.returncode == 2 and "exists" in again.stderr and "--force" in again.stderr


def test_init_without_a_record_of_tokens_per_step_names_the_key(small_run, tmp_path):
    run = tmp_path / "run"
    for name in ("checkpoint-2", "checkpoint-4"):
        shutil.copytree(small_run / "out" / name, run / name, ignore=shutil.ignore_patterns("trainer_state.json"))
    done = init(run, "--text", small_run / "eval.txt", "-o", tmp_path / "x.yaml")
    assert done.returncode == 2 and not (tmp_path / "x.yaml").exists()
    assert "config key 'suites.run.tokens_per_step'" in done.stderr and "--tokens-per-step" in done.stderr
    given = init(run, "--text", small_run / "eval.txt", "-o", tmp_path / "x.yaml", "--tokens-per-step", "128")
    assert given.returncode == 0, given.stderr
    assert yaml.safe_load((tmp_path / "x.yaml").read_text())["suites"]["run"]["tokens_per_step"] == 128
    no_text = init(run, "-o", tmp_path / "y.yaml", "--tokens-per-step", "128")
    assert no_text.returncode == 2 and "--text" in no_text.stderr


def test_init_on_runs_of_two_widths_plans_a_scaling_fit(small_run, tmp_path):
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast.from_pretrained(small_run / "out-tokenizer")
    runs = tmp_path / "runs"
    for d in (16, 32):
        train(runs / f"d{d}", small_run / "train.txt", max_steps=4, save_steps=2, tokenizer=tokenizer, hidden_size=d)
    done = init(runs, "--text", small_run / "eval.txt", "-o", tmp_path / "two.yaml", "--run", "widths")
    assert done.returncode == 0, done.stderr
    config = yaml.safe_load((tmp_path / "two.yaml").read_text())
    assert [m["hidden_size"] for m in config["suites"]["widths"]["models"]] == [16, 32]
    scaling = config["scaling"]
    assert scaling["enabled"] and scaling["B"] == scaling["E"] == 0 and "fit" in (tmp_path / "two.yaml").read_text()
    plan = load_plan(config, SCHEMA)
    assert list(plan.models) == ["d16", "d32"] and plan.models["d32"].steps == (2, 4)
    assert scaling["min_params"] <= min(scaling_counts(plan).values())


def scaling_counts(plan):
    from lmsat.saturation.scaling import count_model_parameters

    return {name: count_model_parameters(m)["non_embedding"] for name, m in plan.models.items()}


def local_config(folder: Path, text: Path, tokenizer: Path, **model) -> dict:
    """A hand-written config of a local run folder, the way the README shows it."""
    return {
        "suites": {"mine": {"tokenizer": "own", "tokens_per_step": 128,
                            "revisions": {"discover": "checkpoint-*"},
                            "models": [{"name": "mine", "source": "local", "id": str(folder), **model}]}},
        "tokenizers": {"own": {"source": "local", "id": str(tokenizer)}},
        "corpora": {"text": {"type": "text_files", "files": [str(text)]}},
        "sample": {"corpus": "text", "n_tokens": 256, "seq_len": 64},
        "scaling": {"enabled": False},
    }


def test_planning_discovers_checkpoints_reads_and_checks_the_architecture(small_run, tmp_path):
    out, text, tokenizer = small_run / "out", small_run / "eval.txt", small_run / "out-tokenizer"
    plan = load_plan(local_config(out, text, tokenizer), SCHEMA)
    model = plan.models["mine"]
    assert model.revisions == ("checkpoint-2", "checkpoint-4", "checkpoint-6") and model.steps == (2, 4, 6)
    assert (model.hidden_size, model.num_layers, model.tied_head) == (16, 2, False) and model.vocab_size > 0
    # honest offline defaults: no hub tasks, no toy ground truth, for a suite without hub/toy models
    assert plan.config["evaluation"]["tasks"] == [] and plan.config["ngrams"]["ground_truth"]["sample_sizes"] == []
    # issue 50, item 6: the steps per epoch the latest checkpoint's trainer_state.json records, for the
    # verdict's notes (past one epoch the data repeat); a fact of the plan, never of the entries (job params)
    state = json.loads((out / "checkpoint-6" / "trainer_state.json").read_text())
    assert state["epoch"] > 0 and plan.steps_per_epoch == {"mine": round(6 / state["epoch"], 3)}
    (out_copy := tmp_path / "no-state").mkdir()
    for name in ("checkpoint-2", "checkpoint-4", "checkpoint-6"):
        shutil.copytree(out / name, out_copy / name, ignore=shutil.ignore_patterns("trainer_state.json"))
    assert load_plan(local_config(out_copy, text, tokenizer), SCHEMA).steps_per_epoch == {}
    # a width that config.json contradicts fails planning, naming both values
    with pytest.raises(ConfigError, match=r"suites.mine.models\[0\].hidden_size': hidden_size=32 in the config, but "
                                          r".*checkpoint-\d/config.json states 16. Fix: set hidden_size: 16"):
        load_plan(local_config(out, text, tokenizer, hidden_size=32), SCHEMA)
    with pytest.raises(ConfigError, match=r"models\[0\].num_layers': num_layers=3 .* states 2"):
        load_plan(local_config(out, text, tokenizer, num_layers=3), SCHEMA)
    # a checkpoint still being written (no weights yet) waits for the next planning
    (out / "checkpoint-8").mkdir()
    try:
        assert load_plan(local_config(out, text, tokenizer), SCHEMA).models["mine"].revisions[-1] == "checkpoint-6"
    finally:
        (out / "checkpoint-8").rmdir()


def test_step_patterns_of_the_trainers_and_a_suggestion_when_one_fails(small_run, tmp_path):
    out, text, tokenizer = small_run / "out", small_run / "eval.txt", small_run / "out-tokenizer"
    schema = yaml.safe_load(SCHEMA.read_text())
    assert schema["$defs"]["revisions"]["properties"]["step_regex"]["default"] == trainer_runs.DEFAULT_STEP_REGEX
    for name in ("checkpoint-500", "checkpoint_5", "step500", "step-500", "iter_0000500", "global_step500"):
        assert int(re.search(trainer_runs.DEFAULT_STEP_REGEX, name).group(1)) in (5, 500)
    run = tmp_path / "ckpts"
    for step in (2, 4):
        shutil.copytree(out / f"checkpoint-{step}", run / f"model_{step:03d}")
    config = local_config(run, text, tokenizer)
    config["suites"]["mine"]["revisions"] = {"discover": "model_*"}
    with pytest.raises(ConfigError, match=r"revisions.step_regex': .* reads no training step from model_002.*"
                                          r"Fix: set step_regex: 'model_\(\\d\+\)'"):
        load_plan(config, SCHEMA)
    config["suites"]["mine"]["revisions"]["step_regex"] = r"model_(\d+)"
    assert load_plan(config, SCHEMA).models["mine"].steps == (2, 4)
    # a glob matching nothing suggests the trainer's pattern that matches
    config["suites"]["mine"]["revisions"] = {"discover": "checkpoint-*"}
    with pytest.raises(ConfigError, match=r"revisions.discover': 'checkpoint-\*' matches no checkpoint .*model_002"):
        load_plan(config, SCHEMA)
    # an explicit list whose names the default pattern cannot read
    config["suites"]["mine"]["revisions"] = {"list": ["model_002", "model_004"]}
    with pytest.raises(ConfigError, match=r"step_regex'.*Fix: set step_regex: 'model_\(\\d\+\)'"):
        load_plan(config, SCHEMA)


def test_the_config_alone_decides_the_scaling_fit_and_hub_models_state_their_width(small_run, default_config):
    out, text, tokenizer = small_run / "out", small_run / "eval.txt", small_run / "out-tokenizer"
    config = local_config(out, text, tokenizer)
    config["scaling"] = {}  # a fit (the default), but one model size: not planned, with a note naming the model
    plan = load_plan(config, SCHEMA)
    assert not plan.config["scaling"]["enabled"]
    (note,) = [n for n in plan.notes if "scaling fit" in n]
    assert re.search(r"needs two model sizes .* 0 of this plan's sizes reach it \(mine \d+\)\. To plan it: add a model "
                     r"size, or set scaling.A and scaling.alpha", note), note
    two = copy.deepcopy(config)
    bigger = small_run / "bigger"  # a second run of its own (one weights directory per model)
    if not bigger.exists():
        shutil.copytree(out, bigger)
    two["suites"]["mine"]["models"].append({"name": "bigger", "source": "local", "id": str(bigger), "n_params": 10**6})
    (note,) = [n for n in load_plan(copy.deepcopy(two), SCHEMA).notes if "scaling fit" in n]
    assert re.search(r"but 0 of this plan's sizes reach it \(mine \d+, bigger 1e\+06\)\. To plan it: lower "
                     r"scaling.min_params to at most \d+", note), note
    two["scaling"] = {"min_params": 100}
    assert load_plan(two, SCHEMA).config["scaling"]["enabled"]
    # the default toy suite still plans its fit; a hub model states its width
    load_plan(copy.deepcopy(default_config), SCHEMA)
    hub = copy.deepcopy(default_config)
    hub["suites"]["toy"]["models"].append({"name": "pythia-14m", "id": "EleutherAI/pythia-14m"})
    with pytest.raises(ConfigError, match=r"models\[4\].hidden_size': hub model pythia-14m has no hidden size"):
        load_plan(hub, SCHEMA)


def test_local_example_config_plans(tmp_path, small_run):
    """config/local-example.yaml plans once its paths point at a run (as the README says)."""
    example = yaml.safe_load((ROOT / "config" / "local-example.yaml").read_text())
    (suite,) = example["suites"].values()
    suite["models"][0]["id"] = str(small_run / "out")
    example["tokenizers"]["own"]["id"] = str(small_run / "out-tokenizer")
    example["corpora"]["text"]["files"] = [str(small_run / "eval.txt")]
    plan = load_plan(example, SCHEMA)
    assert plan.models[suite["models"][0]["name"]].steps == (2, 4, 6)


# ------------------------------------------------------------------ the whole workflow


def snakemake(workdir: Path, config: Path, *args, offline: bool = True) -> subprocess.CompletedProcess:
    """The workflow on `config`; offline: inside a network namespace without network
    (`unshare -n`, as tests/test_offline.py) and with an empty HF_HOME."""
    from test_offline import unshare_works

    wrap = ("unshare", "-n") if offline and unshare_works() else ()
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "HF_HOME")}
    env.update(PYTHONPATH=str(ROOT / "src"), HF_HOME=str(workdir / "empty_hf_home"))
    command = [*wrap, sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(workdir),
               "--configfile", str(config), "--cores", "2", *args]
    return subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1500)


def jobs_by_rule(output: str) -> dict[str, list[str]]:
    """rule -> the `wildcards:` lines of its jobs, from Snakemake's log."""
    jobs: dict[str, list[str]] = {}
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", output):
        match = re.match(r"(?:local)?rule (\w+):", block.strip())
        if match:
            wildcards = re.search(r"wildcards: (.*)", block)
            jobs.setdefault(match.group(1), []).append(wildcards.group(1) if wildcards else "")
    return jobs


@slow
def test_own_run_end_to_end_offline_and_the_next_snakemake_analyses_only_new_checkpoints(tmp_path):
    from test_faults import job_counts

    text = write_text(tmp_path / "train.txt", 600, seed=0)
    write_text(tmp_path / "eval.txt", 300, seed=1)
    out = tmp_path / "out"
    tokenizer = train(out, text, max_steps=24, save_steps=8)  # checkpoint-8, -16, -24
    workdir = tmp_path / "work"
    workdir.mkdir()
    done = init(out, "--text", tmp_path / "eval.txt", "-o", workdir / "mine.yaml", cwd=workdir)
    assert done.returncode == 0, done.stderr
    config = workdir / "mine.yaml"
    # the dry run and the one-target command as init prints them (a target after `--`)
    target_line = next(line for line in done.stdout.splitlines() if "-- fig3" in line)
    target = target_line.split("#")[0].split()[-1]
    dry = snakemake(workdir, config, "-n", "--", target)
    assert dry.returncode == 0, dry.stdout[-3000:]
    first = snakemake(workdir, config)
    assert first.returncode == 0, first.stdout[-6000:]
    printed = re.search(r"eval sample: (\S+\.h5)", done.stdout).group(1)  # the path init printed is the run's sample
    assert (workdir / printed).is_file() and re.search(r"results: (\S+)/", done.stdout).group(1) == "results/out"
    counts = job_counts(first.stdout)
    assert not {r for r in counts if r.startswith(("stage_", "fetch_"))}, counts  # nothing needs the network
    assert "evaluate_checkpoint" not in counts and "fit_scaling_law" not in counts and "ngram_ground_truth" not in counts
    assert counts["analyse_checkpoint"] == 3
    results = workdir / "results" / "out"
    assert (results / "report" / "summary.html").is_file() and not (results / "tables" / "table1.csv").exists()
    loss = pd.read_csv(results / "tables" / "loss.csv", comment="#")
    assert sorted(loss["step"]) == [8, 16, 24] and set(loss["tokens"]) == {8 * 128, 16 * 128, 24 * 128}
    for stem in ("fig1a_loss", "fig3_anisotropy_training", "fig4_head_spectra"):
        assert (results / "figures" / f"{stem}.png").is_file()
    before = {name: pd.read_csv(results / "tables" / f"{name}.csv", comment="#")
              for name in ("loss", "anisotropy_training")}

    # the run goes on training: checkpoint-32 and -40 appear; the next snakemake analyses only those
    train(out, text, max_steps=40, save_steps=8, resume=True, tokenizer=tokenizer)
    second = snakemake(workdir, config)
    assert second.returncode == 0, second.stdout[-6000:]
    jobs = jobs_by_rule(second.stdout)
    per_checkpoint = [w for rule, ws in jobs.items() for w in ws if "revision=" in w and rule != "compare_checkpoint_caches"]
    assert per_checkpoint and all(re.search(r"revision=checkpoint-(32|40)\b", w) for w in per_checkpoint), jobs
    # each checkpoint's representations are compared with the final one's, which is now checkpoint-40: every
    # comparison is made again (one cheap job per checkpoint, from the caches; no checkpoint is loaded)
    assert len(jobs.get("compare_checkpoint_caches", [])) == 5, jobs
    assert job_counts(second.stdout)["analyse_checkpoint"] == 2
    loss = pd.read_csv(results / "tables" / "loss.csv", comment="#")
    assert sorted(loss["step"]) == [8, 16, 24, 32, 40]
    for name, old in before.items():  # the rebuilt tables keep the first checkpoints' numbers
        new = pd.read_csv(results / "tables" / f"{name}.csv", comment="#")
        merged = old.merge(new, on=[c for c in old.columns if c in ("model", "revision", "layer")], suffixes=("", "_new"))
        assert len(merged) == len(old)
        for column in ("loss", "anisotropy"):
            if column in old.columns:
                assert np.allclose(merged[column], merged[f"{column}_new"], rtol=1e-6, atol=1e-7)
    nothing = snakemake(workdir, config, "-n")
    assert "Nothing to be done" in nothing.stdout, nothing.stdout[-3000:]


def test_a_checkpoint_whose_trainer_state_contradicts_its_name_is_refused(small_run, tmp_path):
    """Issue 31, case 5: checkpoint-4's trainer_state.json copied into a folder named checkpoint-2
    (global_step 4 inside checkpoint-2) was analysed as step 2 with no word. init refuses, naming
    the folder, both steps and the fixes; so does planning a config that discovers it."""
    run = tmp_path / "run"
    for name in ("checkpoint-4", "checkpoint-6"):
        shutil.copytree(small_run / "out" / name, run / name)
    shutil.copytree(small_run / "out" / "checkpoint-2", run / "checkpoint-2", ignore=shutil.ignore_patterns("trainer_state.json"))
    shutil.copy(small_run / "out" / "checkpoint-4" / "trainer_state.json", run / "checkpoint-2" / "trainer_state.json")
    assert json.loads((run / "checkpoint-2" / "trainer_state.json").read_text())["global_step"] == 4
    done = init(run, "--text", small_run / "eval.txt", "-o", tmp_path / "x.yaml")
    assert done.returncode == 2 and not (tmp_path / "x.yaml").exists() and "Traceback" not in done.stderr, done.stderr
    assert f"{run / 'checkpoint-2'}: step 2 by its name, global_step 4 in its trainer_state.json" in done.stderr
    assert "rename the folder" in done.stderr and "Fix:" in done.stderr
    # a config that discovers the folder again (the next checkpoint of a run still training): refused at planning
    (run / "checkpoint-2" / "trainer_state.json").unlink()
    assert init(run, "--text", small_run / "eval.txt", "-o", tmp_path / "x.yaml").returncode == 0
    shutil.copy(small_run / "out" / "checkpoint-4" / "trainer_state.json", run / "checkpoint-2" / "trainer_state.json")
    with pytest.raises(ConfigError) as info:
        load_plan(load_yaml(tmp_path / "x.yaml"), SCHEMA)
    assert "suites.run.models[0].revisions.discover" in str(info.value) and "global_step 4" in str(info.value)


def test_a_local_model_of_another_family_is_sized_and_its_metrics_planned_without_a_fit(small_run, tmp_path):
    """Issue 31, case 6: one local Llama run and a fit implied was refused, naming no model (only
    GPT-NeoX configs were sized). Now its size comes from config.json (the instantiated model's),
    and the plan leaves the fit out with a note naming the model; its metric tables are planned."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from lmsat.saturation.scaling import count_parameters

    text, tokenizer = small_run / "eval.txt", small_run / "out-tokenizer"
    vocab = len(AutoTokenizer.from_pretrained(tokenizer))
    model = LlamaForCausalLM(LlamaConfig(vocab_size=vocab, hidden_size=16, num_hidden_layers=2, num_attention_heads=4,
                                         num_key_value_heads=2, intermediate_size=40, max_position_embeddings=64))
    for step in (1, 2):
        model.save_pretrained(tmp_path / "llama" / f"checkpoint-{step}")
    size = count_parameters(model, "non_embedding")  # sum(p.numel()) of every non-embedding parameter
    config = local_config(tmp_path / "llama", text, tokenizer)
    config["scaling"] = {}  # a fit (the default), one model size
    plan = load_plan(copy.deepcopy(config), SCHEMA)
    assert not plan.config["scaling"]["enabled"] and plan.models["mine"].steps == (1, 2)
    assert any("but 0 of this plan's sizes reach it " + f"(mine {size:.4g})" in note for note in plan.notes), plan.notes
    config["scaling"] = {"params": "total"}
    notes = load_plan(copy.deepcopy(config), SCHEMA).notes
    assert any(f"(mine {count_parameters(model, 'total'):.4g})" in note for note in notes), notes


@slow
def test_init_bottleneck_plans_and_draws_figs_6_and_8_of_an_own_run(small_run, tmp_path):
    """Issue 44, item 14: init wrote `bottleneck: models: []`, so an own run never got Figs. 6
    and 8. `init --bottleneck` sizes a section from the text: heads of the models narrower
    than d=1000, trained on the eval text outside its sample (or on the files given), ranks
    below d; the run draws both figures for real."""
    from lmsat.products.table_files import read_table

    from test_faults import job_counts

    out, work = small_run / "out", tmp_path / "work"
    work.mkdir()
    plain = init(out, "--text", small_run / "eval.txt", "-o", work / "plain.yaml", cwd=work)
    assert plain.returncode == 0, plain.stderr
    assert yaml.safe_load((work / "plain.yaml").read_text())["bottleneck"] == {"models": []}
    assert "`lmsat init --bottleneck` plans them" in (work / "plain.yaml").read_text()
    done = init(out, "--text", small_run / "eval.txt", "--bottleneck", "-o", work / "mine.yaml", cwd=work)
    assert done.returncode == 0, done.stderr
    config = yaml.safe_load((work / "mine.yaml").read_text())
    bottleneck, sample = config["bottleneck"], config["sample"]
    assert bottleneck["models"] == ["out"] and bottleneck["ranks"] == [1, 2, 4, 8] and bottleneck["train_corpus"] == ""
    # the text's windows: half are the sample's, a quarter of the rest the heads' eval pairs, the others their train pairs
    free = bottleneck["train_tokens"] // sample["seq_len"] + bottleneck["eval_tokens"] // sample["seq_len"]
    n_seq = sample["n_tokens"] // sample["seq_len"]
    assert n_seq <= free <= n_seq + 1 and bottleneck["eval_tokens"] // sample["seq_len"] == free // 4
    with_text = init(out, "--text", small_run / "eval.txt", "--bottleneck", small_run / "train.txt", "-o",
                     work / "trained.yaml", cwd=work)
    assert with_text.returncode == 0, with_text.stderr
    trained = yaml.safe_load((work / "trained.yaml").read_text())
    assert trained["bottleneck"]["train_corpus"] == "bottleneck-train"
    assert trained["corpora"]["bottleneck-train"]["files"] == [str((small_run / "train.txt").resolve())]
    dry = snakemake(work, work / "trained.yaml", "-n", "--", "fig6", "fig8")
    assert dry.returncode == 0 and job_counts(dry.stdout).get("train_rank_head") == 5 * 4, dry.stdout[-3000:]
    ran = snakemake(work, work / "mine.yaml", "--", "fig6", "fig8")
    assert ran.returncode == 0, ran.stdout[-6000:]
    figures = work / "results" / "out" / "figures"
    assert (figures / "fig6_rank_heads.png").is_file() and (figures / "fig8_werror_loss.png").is_file()
    heads = read_table(work / "results" / "out" / "tables" / "bottleneck_heads.csv")
    assert sorted(set(heads["rank"])) == [1, 2, 4, 8, 16]

# ------------------------------------------------------------------ checkpoints that break or leave (issue 46)


@pytest.fixture(scope="module")
def rising_run(tmp_path_factory):
    """A Trainer run whose eval loss falls, then rises: checkpoint-40 and -80 trained on text
    with the eval text's pattern, checkpoint-120 after 40 more steps on words without it.
    -> (folder holding out/, out-tokenizer/, eval.txt, noise.txt; the tokenizer)."""
    base = tmp_path_factory.mktemp("rising")
    text = write_text(base / "train.txt", 600, seed=0)
    write_text(base / "eval.txt", 300, seed=1)
    noise = write_noise(base / "noise.txt", 600, seed=2)
    tokenizer = train(base / "out", text, max_steps=80, save_steps=40)
    train(base / "out", noise, max_steps=120, save_steps=40, resume=True, tokenizer=tokenizer)
    return base, tokenizer


def rising_config(base: Path, workdir: Path) -> Path:
    """The README's hand-written config of a run folder (discover: checkpoint-*), loss only,
    on an eval sample of 32 sequences. (lmsat init refuses this folder: its checkpoints'
    trainer states give 127 and 128 tokens per step, and it ignores --tokens-per-step then.)"""
    config = local_config(base / "out", base / "eval.txt", base / "out-tokenizer")
    config.update(run="out", metrics=["loss"])
    config["sample"]["n_tokens"] = 2048
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "mine.yaml").write_text(yaml.safe_dump(config))
    return workdir / "mine.yaml"


def table(workdir: Path, name: str) -> pd.DataFrame:
    from lmsat.products.table_files import read_table

    return read_table(workdir / "results" / "out" / "tables" / f"{name}.csv")


@slow
def test_checkpoints_rotated_away_keep_their_records_and_the_verdict_its_best(rising_run, tmp_path):
    """Issue 46, case 2: the Trainer's save_total_limit deletes old checkpoints as new ones
    come; before, the rerun the README advises dropped their rows from every table and the
    verdict went from saturates (best 800, rise 0.416) to no evidence (rise 0.0)."""
    source, tokenizer = rising_run
    base = tmp_path / "run"
    shutil.copytree(source, base)
    workdir = tmp_path / "work"
    config = rising_config(base, workdir)
    first = snakemake(workdir, config)
    assert first.returncode == 0, first.stdout[-6000:]
    before = table(workdir, "saturation_verdicts").iloc[0]
    assert before["best_step"] == 80 and before["final_step"] == 120 and before["verdict"] == "saturates", before
    assert before["notes"] != before["notes"] or before["notes"] == ""  # empty (NaN once read back)

    # training goes on with save_total_limit=3: checkpoint-160, -200 come, -40 and -80 are deleted
    train(base / "out", base / "noise.txt", max_steps=200, save_steps=40, resume=True, tokenizer=tokenizer, save_total_limit=3)
    assert sorted(p.name for p in (base / "out").glob("checkpoint-*")) == ["checkpoint-120", "checkpoint-160", "checkpoint-200"]
    second = snakemake(workdir, config)
    assert second.returncode == 0, second.stdout[-6000:]
    assert ("lmsat: note: model mine: 2 checkpoint(s) this run measured are no longer in " in second.stdout
            and "(checkpoint-40, checkpoint-80; rotated away" in second.stdout), second.stdout[-6000:]
    jobs = jobs_by_rule(second.stdout)
    per_checkpoint = [w for ws in jobs.values() for w in ws if "revision=" in w]
    assert per_checkpoint and all(re.search(r"revision=checkpoint-(160|200)\b", w) for w in per_checkpoint), jobs
    loss = table(workdir, "loss")
    assert list(loss["step"]) == [40, 80, 120, 160, 200]
    assert list(loss["on_disk"]) == [False, False, True, True, True] and list(loss["is_best"])[1]
    after = table(workdir, "saturation_verdicts").iloc[0]
    assert after["verdict"] == "saturates" and after["best_step"] == 80 and after["final_step"] == 200, after
    assert after["notes"].startswith("its best checkpoint checkpoint-80 (step 80) is no longer on disk; 2 of its 5 "
                                     "checkpoints are no longer on disk (checkpoint-40, checkpoint-80)"), after["notes"]
    summary = (workdir / "logs" / "out" / "summarize_run.log").read_text()
    assert "WARNING" in summary and "mine: saturates; its best checkpoint checkpoint-80" in summary
    # nothing is planned for the checkpoints that left: no job could remake their records
    assert "Nothing to be done" in snakemake(workdir, config, "-n").stdout
    # dropped knowingly: their files deleted, they leave the tables
    for path in (workdir / "results" / "out").rglob("checkpoint-40.*"):
        path.unlink()
    third = snakemake(workdir, config)
    assert third.returncode == 0, third.stdout[-6000:]
    assert list(table(workdir, "loss")["step"]) == [80, 120, 160, 200]


@slow
def test_a_zero_filled_checkpoint_stops_its_job_and_untrained_weights_are_flagged(rising_run, tmp_path):
    """Issue 46, case 1: checkpoint-120's model.safetensors zero-filled with its header intact
    (before: rc 0, its loss ln V, and the verdict flipped to saturates) stops its job naming
    the file and the tensors; a fresh initialisation saved in its place loads (random
    matrices), and its loss, at ln V after the run got well below it, is flagged in the loss
    table and beside the verdict."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    source, _ = rising_run
    base = tmp_path / "run"
    shutil.copytree(source, base)
    weights = base / "out" / "checkpoint-120" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    start = 8 + int.from_bytes(data[:8], "little")  # the header: its length, then its JSON
    data[start:] = bytes(len(data) - start)
    weights.write_bytes(bytes(data))
    workdir = tmp_path / "work"
    config = rising_config(base, workdir)
    broken = snakemake(workdir, config)
    assert broken.returncode != 0
    log = (workdir / "logs" / "out" / "analyse_checkpoint" / "mine" / "checkpoint-120.log").read_text()
    assert f"{weights} holds 10 all-zero matrices: embed_out.weight" in log, log[-3000:]
    assert "the file was zero-filled or overwritten" in log and "Fix: replace" in log
    assert not (workdir / "results" / "out" / "tables" / "loss.csv").exists()

    torch_config = AutoConfig.from_pretrained(base / "out" / "checkpoint-120")
    torch.manual_seed(1)  # a fresh draw scores ln V within hundredths, either side of it
    AutoModelForCausalLM.from_config(torch_config).save_pretrained(base / "out" / "checkpoint-120")  # untrained
    flagged = snakemake(workdir, config)
    assert flagged.returncode == 0, flagged.stdout[-6000:]
    loss = table(workdir, "loss")
    assert list(loss["implausible_loss"]) == [False, False, True], loss
    verdict = table(workdir, "saturation_verdicts").iloc[0]
    assert verdict["notes"].startswith(f"checkpoint-120 (step 120): loss {loss['loss'].iloc[-1]:.3f} is back near "
                                       f"ln V = {math.log(torch_config.vocab_size):.3f}"), verdict["notes"]
    summary = (workdir / "logs" / "out" / "summarize_run.log").read_text()
    assert "checkpoint-120 (step 120): loss" in summary


@slow
def test_a_final_checkpoint_that_left_the_disk_stays_every_tables_final(rising_run, tmp_path):
    """Issue 49, item 5: checkpoint-120, the final, leaves the run folder (a bad final deleted,
    or a rotation). Before, the next run compared every checkpoint's representations with
    checkpoint-80 as "the final" while loss.csv and the verdict kept checkpoint-120: one run,
    two finals. Now every comparison stays with the loss table's final, through its cache (no
    job reruns), the rows say their reference left the disk, and Table 1 refuses to evaluate
    a final that is gone. Once that cache is gone too, the records made against it are kept
    and a checkpoint measured since has no rows "final", never another checkpoint's."""
    source, _ = rising_run
    base = tmp_path / "run"
    shutil.copytree(source, base)
    workdir = tmp_path / "work"
    config = rising_config(base, workdir)
    settings = yaml.safe_load(config.read_text())
    settings.update(metrics=["loss", "representation_similarity"], extraction={"layer_sample": 256})
    config.write_text(yaml.safe_dump(settings))
    first = snakemake(workdir, config)
    assert first.returncode == 0, first.stdout[-6000:]
    before = table(workdir, "representation_similarity")
    assert set(before.loc[before["reference"] == "final", "reference_revision"]) == {"checkpoint-120"}

    shutil.move(base / "out" / "checkpoint-120", tmp_path / "away")
    second = snakemake(workdir, config)
    assert second.returncode == 0, second.stdout[-6000:]
    assert "compare_checkpoint_caches" not in jobs_by_rule(second.stdout), second.stdout[-6000:]
    loss = table(workdir, "loss")
    assert loss.loc[loss["is_final"], "revision"].tolist() == ["checkpoint-120"]
    after = table(workdir, "representation_similarity")
    final = after[after["reference"] == "final"]
    assert set(final["reference_revision"]) == {"checkpoint-120"} and not final["reference_on_disk"].any()
    assert after.loc[after["reference"] == "previous", "reference_on_disk"].all()
    assert not after.loc[after["revision"] == "checkpoint-120", "on_disk"].any()
    keys = ["revision", "reference", "layer"]
    merged = before.merge(after, on=keys, suffixes=("", "_after"))
    assert len(merged) == len(before) == len(after)
    np.testing.assert_array_equal(merged["cka"], merged["cka_after"])  # the same records, kept

    evaluated = yaml.safe_load(config.read_text())
    evaluated["evaluation"] = {"tasks": ["wikitext"]}
    (workdir / "evaluated.yaml").write_text(yaml.safe_dump(evaluated))
    refused = snakemake(workdir, workdir / "evaluated.yaml", "-n", "--", "table1")
    assert refused.returncode != 0
    assert ("model mine: its final checkpoint checkpoint-120 is no longer in" in refused.stdout
            and "so Table 1 cannot evaluate it" in refused.stdout), refused.stdout[-4000:]

    results = workdir / "results" / "out"
    (results / "cache" / "mine" / "checkpoint-120.h5").unlink()
    (results / "metrics" / "representation_similarity" / "mine" / "checkpoint-80.json").unlink()
    third = snakemake(workdir, config)
    assert third.returncode == 0, third.stdout[-6000:]
    assert "the cache of its final checkpoint checkpoint-120 (no longer on disk) is gone too" in third.stdout
    [remade] = jobs_by_rule(third.stdout)["compare_checkpoint_caches"]
    assert "revision=checkpoint-80" in remade
    last = table(workdir, "representation_similarity")
    assert set(last.loc[last["reference"] == "final", "reference_revision"]) == {"checkpoint-120"}
    assert set(last.loc[last["reference"] == "final", "revision"]) == {"checkpoint-40", "checkpoint-120"}
    assert set(last.loc[last["revision"] == "checkpoint-80", "reference_revision"]) == {"checkpoint-40"}
