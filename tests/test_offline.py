"""Compute nodes without internet: staging rules fetch, every other job runs offline.

Fast: a staged corpus prefix gives the documents (and the token pool) the stream gives, a
reader that would run past it fails, a staged tokenizer encodes as the original, a job whose
staged file is missing fails in seconds naming it, and every script is on the right side.
Slow: a run whose staging jobs run first and whose other jobs then run inside a network
namespace without network (`unshare -n`), with an empty HF_HOME, gives the results of a
run without the split.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import time
from types import SimpleNamespace

import h5py
import numpy as np
import pandas as pd
import pytest
import yaml

from lmsat.checkpoints import local_hub as hub
from lmsat.checkpoints.loading import load_tokenizer
from lmsat.data.corpus import CorpusError, build_token_pool, hf_documents, iter_documents, staged_documents
from lmsat.planning.staging import READ_AHEAD_DOCUMENTS, StagingMissing, stage_corpus, stage_tokenizer

from conftest import ROOT, script, small_toy_config, word_tokenizer

slow = pytest.mark.slow
WORDS = [f"w{i}" for i in range(64)]
STAGING_SCRIPTS = {"fetch_checkpoint", "stage_tokenizer", "stage_corpus", "stage_lmeval_task"}


def write_documents(path, n_docs, seed=0):
    """n_docs JSON-lines documents of 1-12 words over WORDS, some empty (as in real dumps)."""
    rng = np.random.default_rng(seed)
    with open(path, "w") as out:
        for i in range(n_docs):
            words = rng.choice(WORDS, size=int(rng.integers(0, 13)))
            out.write(json.dumps({"text": " ".join(words), "id": i}) + "\n")
    return path


def hf_spec(path):
    """A `type: hf` corpus read through the real datasets.load_dataset, no network needed."""
    return dict(type="hf", path="json", name="", split="train", streaming=True, data_files=[str(path)],
                text_field="text", max_documents=0)


def test_a_staged_prefix_reads_as_the_stream_and_refuses_to_run_past(tmp_path):
    spec = hf_spec(write_documents(tmp_path / "docs.jsonl", 900))
    tokenizer = word_tokenizer(WORDS)
    stream = list(hf_documents(spec, "c", None, time.sleep))
    consumers = [dict(job="sample_eval_tokens", tokenizer="words", tokens=500),
                 dict(job="count_corpus_ngrams", tokenizer="words", tokens=300)]
    footer = stage_corpus(spec, "c", consumers, {"words": tokenizer}, tmp_path / "c.jsonl")
    # 500 tokens (documents + eos) need ~70 documents; then the read-ahead; the split is longer
    assert not footer["complete"] and READ_AHEAD_DOCUMENTS < footer["documents"] < len(stream)
    assert [c["tokens"] >= c["budget"] for c in footer["consumers"]] == [True, True]
    staged = {**spec, "staged": str(tmp_path / "c.jsonl")}
    reader = iter_documents(staged, "c")
    prefix = [next(reader) for _ in range(footer["documents"])]
    assert prefix == stream[: footer["documents"]] and "" in prefix  # empty documents kept
    with pytest.raises(CorpusError, match=r"corpus c: a job read past the \d+ documents staged in .*c.jsonl"):
        next(reader)
    # the consumer's pool is the one it builds from the stream
    for n_pool in (500, 300):
        from_stream = build_token_pool(iter_documents(spec, "c"), tokenizer, n_pool)
        assert np.array_equal(build_token_pool(iter_documents(staged, "c"), tokenizer, n_pool), from_stream)
    # a budget of 0 (the whole split) stages it all, and reading it to the end is fine
    stage_corpus(spec, "c", [dict(job="count_corpus_ngrams", tokenizer="words", tokens=0)], {"words": tokenizer},
                 tmp_path / "all.jsonl")
    assert list(staged_documents(tmp_path / "all.jsonl", "c")) == stream


def test_a_staged_tokenizer_encodes_as_the_original(tmp_path):
    original = word_tokenizer(WORDS)
    original.save_pretrained(tmp_path / "repo")  # from_pretrained(id, revision=...) of a directory
    spec = dict(source="hub", id=str(tmp_path / "repo"), revision="main")
    stage_tokenizer(spec, "words", tmp_path / "staged")
    staged = load_tokenizer({**spec, "staged": str(tmp_path / "staged")}, "words")
    text = "w1 w2 w63 nope w7"
    assert staged(text)["input_ids"] == original(text)["input_ids"] and len(staged) == len(original)
    assert staged.eos_token_id == original.eos_token_id


def test_a_job_whose_staged_file_is_missing_fails_in_seconds_naming_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    missing_tokenizer = "results/staged/tokenizers/words"
    with pytest.raises(StagingMissing, match=rf"tokenizer words .*{missing_tokenizer} is missing.*stage_tokenizer"):
        load_tokenizer(dict(source="hub", id="lmsat-test/words", revision="main", staged=missing_tokenizer), "words")
    # the real script of rule sample_eval_tokens, its tokenizer there, its corpus not staged
    word_tokenizer(WORDS).save_pretrained(tmp_path / "tok")
    missing = "results/staged/corpora/c.jsonl"
    job = SimpleNamespace(
        log=[str(tmp_path / "job.log")], output=[str(tmp_path / "sample.h5")],
        input=[missing],  # as the rule declares it (a job reads its files as its inputs: lmsat.core.job_inputs)
        wildcards=SimpleNamespace(corpus="c", tokenizer="words"),
        params=SimpleNamespace(
            corpus={**hf_spec(tmp_path / "nowhere.jsonl"), "staged": missing},
            tokenizer=dict(source="local", id=str(tmp_path / "tok"), revision="main"),
            sample=dict(n_tokens=64, seq_len=8, pool_factor=2), seed=0,
        ),
    )
    start = time.monotonic()
    with pytest.raises(StagingMissing, match=rf"corpus c: staged file {missing} is missing.*run the staging rules"):
        script("sample_eval_tokens").main(job)
    assert time.monotonic() - start < 10
    assert not (tmp_path / "sample.h5").exists()


def test_an_lmeval_task_is_staged_through_lmeval_into_the_staged_datasets_cache(tmp_path):
    from lmsat.saturation.downstream import write_offline_tasks

    docs = [" ".join(WORDS[i : i + 5]) for i in range(40)]
    write_offline_tasks(tmp_path / "tasks", docs, n_docs=12, n_choices=3, seed=0)
    task = tmp_path / "tasks" / "synthetic_ppl.yaml"  # its own cache_dir out: the staged one is used
    spec = yaml.safe_load(task.read_text())
    del spec["dataset_kwargs"]["cache_dir"]
    header = task.read_text().splitlines()[0]  # lmsat's header: its relative data paths are resolved
    task.write_text(header + "\n" + yaml.safe_dump(spec, sort_keys=False))
    cache, manifest = tmp_path / "staged" / "datasets", tmp_path / "staged" / "lmeval" / "synthetic_ppl.json"
    code = ("import sys; from lmsat.planning.staging import stage_lmeval_task; "
            "stage_lmeval_task('synthetic_ppl', sys.argv[1], sys.argv[2], include_path=sys.argv[3])")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HF_DATASETS_CACHE": str(cache), "HF_DATASETS_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", code, str(cache), str(manifest), str(tmp_path / "tasks")], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    staged = json.loads(manifest.read_text())
    assert staged["splits"] == {"synthetic_ppl": {"test": 12}} and staged["datasets_cache"] == str(cache)
    assert any(path.suffix == ".arrow" for path in cache.rglob("*"))  # the prepared dataset is there
    # a datasets cache other than the one datasets was imported with is refused
    other = subprocess.run([sys.executable, "-c", code, str(tmp_path / "other"), str(manifest), str(tmp_path / "tasks")],
                           env=env, capture_output=True, text=True, timeout=300)
    assert other.returncode != 0 and "set HF_DATASETS_CACHE before importing datasets" in other.stderr


def first_import(path):
    """The first import of a script after the shim that puts the workflow's src/ on sys.path."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import) and node.names[0].name != "_lmsat_src":
            return node.names[0].name
        if isinstance(node, ast.ImportFrom):
            return node.module


def test_every_script_but_the_staging_ones_goes_offline_before_any_other_import():
    scripts = sorted(p for p in (ROOT / "workflow" / "scripts").glob("*.py") if p.stem != "_lmsat_src")
    offline = {p.stem for p in scripts if first_import(p) == "lmsat.runtime.offline"}
    assert offline == {p.stem for p in scripts} - STAGING_SCRIPTS
    for name in STAGING_SCRIPTS:
        assert "lmsat.runtime.offline" not in (ROOT / "workflow" / "scripts" / f"{name}.py").read_text()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    env.pop("HF_HUB_OFFLINE", None)
    code = ("import lmsat.runtime.offline, huggingface_hub.constants as c, datasets.config as d; "
            "print(c.HF_HUB_OFFLINE, d.HF_DATASETS_OFFLINE)")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "True"]


# ------------------------------------------------------------------ the split run


def unshare_works():
    try:
        return subprocess.run(["unshare", "-n", "true"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


HUB_TOKENIZER = "lmsat-test/words"
TARGETS = ["results/default/tables/loss.csv", "results/default/ngrams/docs/words.h5", "results/default/samples/docs/toy.h5"]


def publish_tokenizer(hf_home):
    """The tokenizer, with the model config beside it (AutoTokenizer reads both), as a hub
    download would leave them in HF_HOME (read with HF_HUB_OFFLINE=1)."""
    from transformers import GPTNeoXConfig

    root = hub.repo_dir(hf_home / "hub", HUB_TOKENIZER)
    snapshot = root / "snapshots" / ("b" * 40)
    word_tokenizer(WORDS).save_pretrained(snapshot)
    GPTNeoXConfig(vocab_size=len(WORDS) + 2, hidden_size=16, num_attention_heads=2).save_pretrained(snapshot)
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text("b" * 40)


def split_config(documents) -> dict:
    config = small_toy_config(("toy-d16",), n_seq=16, chunk=4)
    config["tokenizers"]["words"] = dict(source="hub", id=HUB_TOKENIZER, revision="main")
    config["corpora"]["docs"] = hf_spec(documents)
    config["sample"]["corpus"] = "docs"
    config["ngrams"].update(corpora=["docs"], tokenizers=["words"], max_tokens=1500)
    config["bottleneck"]["models"] = []
    config["evaluation"]["tasks"] = []
    return config


def run(workdir, config, *args, env, wrap=()):
    (workdir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    command = [*wrap, sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(workdir),
               "--configfile", str(workdir / "config.yaml"), "--cores", "2", *args]
    # HF_*_OFFLINE only where `env` sets them: compute jobs must set them themselves (lmsat.runtime.offline)
    base = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "HF_HOME")}
    base["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])
    return subprocess.run(command, env={**base, **env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=900)


@pytest.fixture(scope="module")
def split_runs(tmp_path_factory):
    if not unshare_works():
        pytest.skip("`unshare -n` is not permitted here (needs root or user namespaces)")
    base = tmp_path_factory.mktemp("offline")
    hub_home, empty_home = base / "hub_home", base / "empty_home"
    publish_tokenizer(hub_home)
    empty_home.mkdir()
    source = write_documents(base / "docs.jsonl", 1200, seed=1)
    config = split_config(source)
    simulated_hub = {"HF_HOME": str(hub_home), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    # 1. staging, on a node with "network" (the hub cache stands in for the hub)
    split = base / "split"
    split.mkdir()
    staged = run(split, config, "stage_all", env=simulated_hub)
    if staged.returncode:
        pytest.fail(f"staging failed:\n{staged.stdout[-4000:]}")
    # 2. the rest without network, an empty HF_HOME, and the corpus source moved away
    hidden = source.with_suffix(".away")
    source.rename(hidden)
    try:
        offline = run(split, config, *TARGETS, env={"HF_HOME": str(empty_home)}, wrap=("unshare", "-n"))
    finally:
        hidden.rename(source)
    # 3. the same plan in one go, with the (simulated) hub reachable
    whole = base / "whole"
    whole.mkdir()
    together = run(whole, config, *TARGETS, env=simulated_hub)
    return SimpleNamespace(split=split, whole=whole, staged=staged, offline=offline, together=together,
                           empty_home=empty_home)


@slow
def test_compute_jobs_without_network_give_the_results_of_a_run_without_the_split(split_runs):
    from test_faults import job_counts

    r = split_runs
    for result in (r.staged, r.offline, r.together):
        assert result.returncode == 0, result.stdout[-4000:]
    staged_jobs = job_counts(r.staged.stdout)
    assert staged_jobs.get("stage_tokenizer") == 1 and staged_jobs.get("stage_corpus") == 1
    # and what they need from the pipeline: the toy tokenizer, built with the synthetic language
    assert set(staged_jobs) <= {"stage_all", "stage_tokenizer", "stage_corpus", "build_synthetic_language", "total"}
    offline_jobs = job_counts(r.offline.stdout)
    assert not {"stage_tokenizer", "stage_corpus"} & set(offline_jobs) and offline_jobs["count_corpus_ngrams"] == 1
    assert not any(r.empty_home.iterdir()), "an offline job wrote into HF_HOME"
    with h5py.File(r.split / TARGETS[1]) as a, h5py.File(r.whole / TARGETS[1]) as b:
        assert np.array_equal(a["singular_values"][...], b["singular_values"][...])
        assert a.attrs["n_tokens"] == b.attrs["n_tokens"] == 1500
    with h5py.File(r.split / TARGETS[2]) as a, h5py.File(r.whole / TARGETS[2]) as b:
        assert a.attrs["sha256"] == b.attrs["sha256"]
    a, b = (pd.read_csv(d / TARGETS[0]) for d in (r.split, r.whole))
    pd.testing.assert_frame_equal(a, b)
    footer = json.loads((r.split / "results/default/staged/corpora/docs.jsonl").read_text().splitlines()[-1])["lmsat_staged"]
    assert not footer["complete"]  # a prefix: the read-ahead past the budgets, not the split
