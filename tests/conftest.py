"""Shared fixtures: the repository root, the schema, a tiny GPT-NeoX, a shrunk toy config, and
the one run of the default pipeline that every end-to-end test reading it shares."""

from __future__ import annotations

import copy
import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lmsat.planning.config_files import load_yaml

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"
# As Snakemake does for a local script: its directory on sys.path (for `import _lmsat_src`).
sys.path.append(str(ROOT / "workflow" / "scripts"))


@pytest.fixture
def default_config() -> dict:
    """config/config.yaml, its run named: written to another file (tmp/config.yaml), it
    would be named after that file (lmsat.planning.slicing.run_of_config_file)."""
    return dict(copy.deepcopy(load_yaml(ROOT / "config" / "config.yaml")), run="default")


def clone_like(workdir: Path) -> Path:
    """`workdir` laid out as a fresh clone's root for a Snakemake run of this checkout's
    workflow (`-s ROOT/Snakefile --directory workdir`): config/config.yaml, the file the
    Snakefile's `configfile:` reads, and nothing of the checkout's results/, logs/ or
    .snakemake/ (a user runs `make test` after `make run`)."""
    (workdir / "config").mkdir(parents=True, exist_ok=True)
    (workdir / "config" / "config.yaml").write_bytes((ROOT / "config" / "config.yaml").read_bytes())
    return workdir


def shipped_configs() -> list[Path]:
    """The configs the repository ships: config/*.yaml tracked by git, not a user's own
    (config/mine.yaml, as the README suggests writing). [] outside a git checkout."""
    done = subprocess.run(["git", "ls-files", "-z", "--", "config/*.yaml"], cwd=ROOT, capture_output=True)
    if done.returncode != 0:
        return []
    return sorted(ROOT / name for name in done.stdout.decode().split("\0") if name)


# The slowest files first. `make test` runs the files on two pytest-xdist workers, a file
# per worker (`--dist loadfile`: a file's session fixtures, such as the default run, are made
# once), taking them in collection order: a long file collected last would run alone at the
# end. Stable sort: the other files, and the tests within a file, keep their order.
SLOWEST_FILES = ("test_workflow.py", "test_slurm.py", "test_faults.py", "test_own_run.py", "test_storage.py", "test_callbacks.py",
                 "test_bottleneck_workflow.py", "test_saturation_workflow.py", "test_degeneration_workflow.py",
                 "test_runs.py", "test_trainer_layouts.py", "test_trainer_runs_workflow.py", "test_published_run.py",
                 "test_verdict.py", "test_module.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(SLOWEST_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


@pytest.fixture(scope="session")
def default_run(tmp_path_factory) -> tuple[Path, float]:
    """(working directory, seconds) of one run of the whole default pipeline (config/config.yaml,
    `--cores 2`), made once per session for every test that reads it (the longest fixture of
    the suite: about 3 minutes on 2 idle CPUs, its jobs forked from the warm interpreter). Tests only read it: one that changes files works
    on a copy, or plans dry runs (`-n`)."""
    workdir = tmp_path_factory.mktemp("default_run")
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(workdir),
         "--configfile", str(ROOT / "config" / "config.yaml"), "--cores", "2"],
        capture_output=True, text=True, timeout=1800, env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"},
    )  # fmt: skip
    elapsed = time.perf_counter() - started
    assert result.returncode == 0, result.stderr[-5000:]
    print(f"default pipeline: {elapsed:.0f} s")
    return workdir, elapsed


@pytest.fixture(scope="session")
def default_report(default_run, tmp_path_factory) -> Path:
    """The default run's Snakemake HTML report (`--report report.html`), made once for the
    tests that read it."""
    workdir, _ = default_run
    report = tmp_path_factory.mktemp("default_report") / "report.html"
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(workdir),
         "--configfile", str(ROOT / "config" / "config.yaml"), "--report", str(report)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return report


def script(name):
    """A workflow script (workflow/scripts/<name>.py) as a module, to call its main(job)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "workflow" / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def perturbed(model, scale: float):
    """A copy of `model` with N(0, scale^2) noise (torch's global generator) added to every parameter."""
    import torch

    later = copy.deepcopy(model)
    with torch.no_grad():
        for parameter in later.parameters():
            parameter.add_(scale * torch.randn_like(parameter))
    return later


@pytest.fixture(scope="session")
def tiny_neox():
    """A tiny randomly initialised GPT-NeoX (d=16, 2 layers, V=40 incl. padding rows)."""
    import torch
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    torch.manual_seed(0)
    config = GPTNeoXConfig(
        vocab_size=40,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
        tie_word_embeddings=False,
    )
    return GPTNeoXForCausalLM(config).eval()


def word_tokenizer(words):
    """A real `tokenizers` WordLevel tokenizer over `words` (id = index), eos = <|endoftext|>."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(words)}
    vocab["<|endoftext|>"] = len(words)
    vocab["<unk>"] = len(words) + 1
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|endoftext|>", bos_token="<|endoftext|>", unk_token="<unk>")


def small_toy_config(models=("toy-d16", "toy-d32"), n_seq=256, chunk=2) -> dict:
    """The default toy config, shrunk for workflow tests: `models` x 2 revisions (step0 and
    the final step16), an eval sample of `n_seq` sequences of 32 tokens cached `chunk`
    sequences at a time, short training, and small later stages."""
    config = copy.deepcopy(load_yaml(ROOT / "config" / "config.yaml"))
    config.update(run="default", device="cpu", threads=1, metrics=None)  # every registered metric
    config["toy"].update(
        language={"vocab_size": 256, "order": 2, "groups": 4, "support": 24},
        train_tokens=20000,
        eval_tokens=20000,
        doc_tokens=256,
        num_layers=1,
        seq_len=32,
        batch_size=8,
        max_steps=16,
    )
    suite = config["suites"]["toy"]
    suite["tokens_per_step"] = 8 * 32
    suite["revisions"] = {"schedule": "toy", "subsample": 2}  # step0 and the final step
    suite["models"] = [m for m in suite["models"] if m["name"] in models]
    for section in config.values():  # sections naming models (bottleneck, evaluation): kept ones only
        if isinstance(section, dict) and isinstance(section.get("models"), list):
            section["models"] = [m for m in section["models"] if m in models]
    config["sample"].update(n_tokens=n_seq * 32, seq_len=32, pool_factor=2)
    # batch 1, `chunk` sequences per chunk: many chunks, so an extraction can be caught mid-way
    config["extraction"].update(batch_size=1, chunk_sequences=chunk, layer_sample=256)
    config.setdefault("scaling", {})["min_params"] = 1  # both tiny models enter a fit
    if len(models) < 2:  # one size: no Fig. 1b fit (planning would leave it out, with a note)
        config["scaling"]["enabled"] = False
    # later stages, small (they run once the workflow's final outputs include them)
    if "evaluation" in config:
        config["evaluation"].update(offline_docs=20)
    if "bottleneck" in config:
        config["bottleneck"].update(
            ranks=[1, 4], train_tokens=8192, eval_tokens=2048, shard_tokens=8192, seq_len=32,
            batch_sequences=4, steps=10, lr_count=1, save_every=5,
        )
    if "ngrams" in config:
        config["ngrams"].update(max_tokens=20000)
        config["ngrams"].setdefault("ground_truth", {})["sample_sizes"] = [1000, 10000]
    return config


def plan_refused(config: dict, key: str, *fragments: str) -> str:
    """The ConfigError of planning `config`: it names config key `key`, a fix, and `fragments`."""
    from lmsat.errors import ConfigError
    from lmsat.planning.load import load_plan

    with pytest.raises(ConfigError) as info:
        load_plan(config, SCHEMA)
    message = str(info.value)
    assert message.startswith(f"config key '{key}'"), message
    assert "Fix:" in message
    for fragment in fragments:
        assert fragment in message, message
    return message

