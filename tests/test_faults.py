"""Fault injection (issue 7): every fault is made to happen, and the pipeline must fail
loudly and locally, keep finished work, never aggregate garbage, and resume.

1. bad config and input   bad config keys fail before any job; an empty corpus and a sample
                          larger than its corpus fail their job first thing; an unknown
                          architecture fails its load naming model and revision
2. hub faults             backoff on transient errors only; an unfetchable model fails its
                          fetch job only under --keep-going, and the rerun resumes
3. killed jobs            extraction and head training killed with SIGKILL resume to the
                          uninterrupted result
4. corrupt caches         truncated, non-finite and foreign caches fail the jobs that read
                          them, naming the file
5. disk                   fetched checkpoints are deleted after their last consumer (or kept),
                          fetch jobs declare disk_mb and wait for free space
6. untrusted weights      pickle-only revisions are not fetched, repository code is not run,
                          a token never reaches a config, a log or Snakemake's output
7. determinism            the same config and seed give identical caches and tables, which
                          record the config hash and library versions

The workflow tests share three small runs (one toy model, one hub model whose checkpoint is
staged in its fetch directory, one hub model that cannot be fetched offline): a faulted run
with --keep-going, the rerun without the broken model, and a clean run elsewhere.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import h5py
import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from lmsat.checkpoints import local_hub as hub
from lmsat.checkpoints.fetch import (
    FetchError,
    RetryPolicy,
    allow_patterns,
    checkpoint_disk_mb,
    estimated_parameters,
    fetch_checkpoint,
    free_mb,
    is_transient,
    wait_for_space,
    with_backoff,
)
from lmsat.checkpoints.loading import ModelLoadError, load_causal_lm
from lmsat.core.fingerprint import FETCHED_MARKER
from lmsat.core.io import setup_logging
from lmsat.core.plan import ModelEntry
from lmsat.data.corpus import CorpusError, build_sample
from lmsat.errors import ConfigError
from lmsat.planning.config_files import config_sha256, load_yaml, result_config
from lmsat.planning.load import load_plan

from conftest import ROOT, SCHEMA, small_toy_config, word_tokenizer
from test_cache import read_all  # the child jobs below import its IDENTITY and SETTINGS too
from test_heads import _teacher, _write_shards

slow = pytest.mark.slow  # runs Snakemake (tens of seconds)
SNAKEMAKE = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile")]
TOKEN = "hf_lmsatFaultInjectionSecret0123456789"  # must never be written anywhere
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_TOKEN": TOKEN}
MIRROR_ID, MIRROR_REVISION = "lmsat-test/mirror", "step1"
CHECKPOINTS = [("toy-d16", "step0"), ("toy-d16", "step16"), ("mirror", MIRROR_REVISION)]
# The loss table (every checkpoint's cache and loss record) and the hub checkpoint's weight
# analysis: every job that reads its fetched files.
TARGETS = ["results/default/tables/loss.csv", f"results/default/spectra/mirror/{MIRROR_REVISION}.h5"]


def entry(**kwargs) -> ModelEntry:
    base = dict(
        name="mirror", suite="hub", source="hub", id=MIRROR_ID, hidden_size=16, vocab_size=264, n_params=0,
        tokenizer="toy", tokens_per_step=256, revisions=(MIRROR_REVISION,), steps=(1,), allow_pickle=False,
        trust_remote_code=False, key="suites.hub.models[0]",
        hub_cache="results/default/weights/mirror/{revision}",  # as common.smk sets it
    )
    return ModelEntry(**{**base, **kwargs})


def snakemake(workdir, config: dict, *args, env=None, timeout=600):
    """Run Snakemake on `config` in `workdir`; stdout and stderr together in .stdout."""
    configfile = workdir / "config.yaml"
    configfile.write_text(yaml.safe_dump(config, sort_keys=False))
    return subprocess.run(
        SNAKEMAKE + ["--directory", str(workdir), "--configfile", str(configfile), "--cores", "2", *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", **(env or {})},
    )


def job_counts(output: str) -> dict[str, int]:
    """Snakemake's own 'Job stats' table: jobs per rule, and the total."""
    table = output.split("Job stats:", 1)[1].split("\n\n", 1)[0]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M)}


def stage_mirror(workdir):
    """A tiny GPT-NeoX over the toy tokenizer (258 ids, 264 head rows), staged as the hub
    checkpoint `lmsat-test/mirror@step1` in the directory rule fetch_checkpoint would fill."""
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    torch.manual_seed(7)
    config = GPTNeoXConfig(vocab_size=264, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                           intermediate_size=32, max_position_embeddings=64, tie_word_embeddings=False)
    cache = workdir / entry().cache_dir(MIRROR_REVISION)
    hub.publish_revision(GPTNeoXForCausalLM(config), None, cache, MIRROR_ID, MIRROR_REVISION)
    # marked as lmsat.checkpoints.fetch.fetch_checkpoint marks its downloads: these runs treat it as
    # fetched (deleted after use); one staged by hand is tracked and kept (tests/test_runs.py)
    (cache / FETCHED_MARKER).write_text(json.dumps(dict(model="mirror", id=MIRROR_ID, revision=MIRROR_REVISION)))
    return cache


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    directory = tmp_path_factory.mktemp("corpora")
    (directory / "empty.txt").write_text("\n\n")
    (directory / "tiny.txt").write_text("w1 w2 w3\n")
    return directory


def run_config(corpora, *, broken_model: bool) -> dict:
    """One toy model (2 revisions), the staged hub model, two bad corpora, and optionally a
    hub model that cannot be fetched offline."""
    config = small_toy_config(("toy-d16",), n_seq=16, chunk=4)
    config["fetch"] = {"attempts": 2, "first_wait_s": 0, "retries": 1}
    hub_suite = dict(tokenizer="toy", tokens_per_step=256, revisions={"schedule": "list", "list": [MIRROR_REVISION]})
    config["suites"]["hub"] = dict(hub_suite, models=[{"name": "mirror", "id": MIRROR_ID, "hidden_size": 16,
                                                       "vocab_size": 264}])
    if broken_model:  # its own suite: the keys of the other models do not move when it goes
        config["suites"]["unreachable"] = dict(hub_suite, models=[{"name": "ghost", "id": "lmsat-test/ghost",
                                                                   "hidden_size": 16}])
    config["corpora"]["empty"] = {"type": "text_files", "files": [str(corpora / "empty.txt")]}
    config["corpora"]["tiny"] = {"type": "text_files", "files": [str(corpora / "tiny.txt")]}
    return config


@pytest.fixture(scope="module")
def faulted_run(tmp_path_factory, corpora):
    """--keep-going with an unfetchable model, an empty corpus and a too-small corpus."""
    workdir = tmp_path_factory.mktemp("faulted")
    stage_mirror(workdir)
    bad_samples = ["results/default/samples/empty/toy.h5", "results/default/samples/tiny/toy.h5"]
    result = snakemake(workdir, run_config(corpora, broken_model=True), "--keep-going", *TARGETS, *bad_samples,
                       env=OFFLINE)
    return workdir, result


@pytest.fixture(scope="module")
def resumed_run(faulted_run, corpora):
    """The rerun once the broken model is taken out of the config."""
    workdir, _ = faulted_run
    return workdir, snakemake(workdir, run_config(corpora, broken_model=False), *TARGETS, env=OFFLINE)


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory, corpora, resumed_run):
    """The same models, seed and settings in a fresh directory, fetched checkpoints kept."""
    workdir = tmp_path_factory.mktemp("clean")
    stage_mirror(workdir)
    config = run_config(corpora, broken_model=False)
    config["fetch"]["remove_after_use"] = False
    return workdir, config, snakemake(workdir, config, TARGETS[0], env=OFFLINE)


def checkpoint_outputs(model, revision):
    outputs = [f"results/default/cache/{model}/{revision}.h5", f"results/default/metrics/loss/{model}/{revision}.json"]
    if model != "toy-d16":
        outputs += [f"results/default/spectra/{model}/{revision}.h5", f"results/default/attention/{model}/{revision}.h5"]
    return outputs


# ------------------------------------------------------------------ 1. bad config and input


@slow
@pytest.mark.parametrize("mutate, key, problem", [
    (lambda c: c["suites"]["toy"]["models"][0].update(token=TOKEN), "suites.toy.models[0].token", "unknown key"),
    (lambda c: c["extraction"].update(dtype="float8"), "extraction.dtype", "is not one of"),
    (lambda c: c.update(bottleneck={"models": ["toy-d16"], "ranks": [32]}), "bottleneck.ranks[0]", "exceeds the hidden"),
])
def test_bad_config_fails_before_any_job_naming_the_key(tmp_path, mutate, key, problem):
    config = small_toy_config(("toy-d16",))
    mutate(config)
    result = snakemake(tmp_path, config, "-n")
    assert result.returncode != 0
    assert f"config key '{key}'" in result.stdout and problem in result.stdout and "Fix:" in result.stdout
    assert "Job stats" not in result.stdout and TOKEN not in result.stdout  # planned nothing, echoed no secret


@slow
def test_bad_corpora_fail_their_sample_job_naming_corpus_and_key(faulted_run):
    workdir, result = faulted_run
    empty = (workdir / "logs/default/sample_eval_tokens/empty/toy.log").read_text()
    assert "corpus empty (config key 'corpora.empty') has no documents" in empty
    tiny = (workdir / "logs/default/sample_eval_tokens/tiny/toy.log").read_text()
    assert "sample.n_tokens=512" in tiny and "lower sample.n_tokens or use a larger corpus" in tiny
    for name in ("empty", "tiny"):
        assert not (workdir / f"results/default/samples/{name}/toy.h5").exists()


def test_bad_corpus_errors_from_the_library(tmp_path, corpora):
    spec = dict(type="text_files", path="", name="", split="train", text_field="text", streaming=True,
                max_documents=0, files=[str(corpora / "empty.txt")])
    sample = dict(n_tokens=100, seq_len=10, pool_factor=2)
    with pytest.raises(CorpusError, match=r"corpus empty \(config key 'corpora.empty'\) has no documents"):
        build_sample(spec, "empty", word_tokenizer(["w1", "w2", "w3"]), "w", sample, 0, tmp_path / "s.h5")


def test_unknown_architecture_and_missing_revision_name_model_and_revision(tmp_path):
    directory = tmp_path / MIRROR_REVISION
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps({"model_type": "martian", "hidden_size": 16}))
    local = entry(source="local", id=str(tmp_path))
    with pytest.raises(ModelLoadError, match=r"model mirror .* at revision step1 \(an architecture .*upgrade"):
        load_causal_lm(local, MIRROR_REVISION)
    with pytest.raises(ModelLoadError, match=r"'step7' is not in the suite of model mirror"):
        load_causal_lm(local, "step7")


# ------------------------------------------------------------------ 2. hub faults


def http_error(cls, status: int):
    """A huggingface_hub HTTP error carrying a real response with `status`."""
    try:
        import httpx2 as http
    except ImportError:
        import httpx as http
    request = http.Request("GET", "https://huggingface.co/api/models/x")
    return cls(f"{status} from the hub", response=http.Response(status, request=request))


def test_transient_faults_are_retried_with_growing_waits():
    from huggingface_hub.errors import HfHubHTTPError

    failures = [ConnectionResetError("reset by peer"), http_error(HfHubHTTPError, 503)]
    calls, waits = [], []

    def flaky():
        calls.append(1)
        if failures:
            raise failures.pop(0)
        return "snapshot"

    policy = RetryPolicy(attempts=4, first_wait_s=2, max_wait_s=3)
    assert with_backoff(flaky, policy, what="m@r", sleep=waits.append) == "snapshot"
    assert len(calls) == 3 and waits == [2, 3]  # doubled, then capped
    assert [policy.wait_s(n) for n in (1, 2, 3, 4)] == [2, 3, 3, 3]

    calls.clear()

    def down():
        calls.append(1)
        raise ConnectionResetError("down")

    with pytest.raises(ConnectionResetError):
        with_backoff(down, RetryPolicy(attempts=3, first_wait_s=1), what="m@r", sleep=waits.append)
    assert len(calls) == 3  # gave up after 3 tries


def raised_from(error, cause):
    try:
        try:
            raise cause
        except Exception as inner:
            raise error from inner
    except Exception as outer:
        return outer


def test_permanent_faults_are_not_retried():
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    permanent = [
        http_error(RepositoryNotFoundError, 404), http_error(GatedRepoError, 401),
        http_error(RevisionNotFoundError, 404), http_error(HfHubHTTPError, 403),
        raised_from(LocalEntryNotFoundError("no cached snapshot"), OfflineModeIsEnabled("offline")),
        LocalEntryNotFoundError("local_files_only and nothing cached"),
    ]
    for error in permanent:
        calls = []

        def fail():
            calls.append(1)
            raise error

        with pytest.raises(type(error)):
            with_backoff(fail, RetryPolicy(attempts=5, first_wait_s=0), what="m@r", sleep=lambda s: None)
        assert len(calls) == 1, error
    # the hub unreachable without a cached copy: transient, whatever wraps it
    assert is_transient(raised_from(LocalEntryNotFoundError("no snapshot"), ConnectionRefusedError("refused")))
    assert is_transient(http_error(HfHubHTTPError, 429)) and is_transient(TimeoutError("read timed out"))


@slow
def test_unfetchable_model_fails_only_its_own_jobs(faulted_run):
    workdir, result = faulted_run
    assert result.returncode != 0
    log = (workdir / "logs/default/fetch_checkpoint/ghost/step1.log").read_text()
    assert "cannot fetch model ghost (lmsat-test/ghost) at revision step1" in log and "HF_HUB_OFFLINE" in log
    assert result.stdout.count("Trying to restart job") >= 1  # rule `retries` (fetch.retries: 1)
    for model, revision in CHECKPOINTS:  # every unaffected output is there
        for path in checkpoint_outputs(model, revision):
            assert (workdir / path).is_file(), path
    assert not any((workdir / path).exists() for path in checkpoint_outputs("ghost", "step1"))
    assert not (workdir / "results/default/tables/loss.csv").exists()  # no table from part of the checkpoints


@slow
def test_rerun_completes_the_rest_without_recomputing(resumed_run):
    workdir, result = resumed_run
    assert result.returncode == 0, result.stdout[-3000:]
    assert job_counts(result.stdout) == {"tabulate_metric": 1, "total": 1}
    table = pd.read_csv(workdir / "results/default/tables/loss.csv")
    assert sorted(zip(table["model"], table["revision"])) == sorted(CHECKPOINTS)


# ------------------------------------------------------------------ 3. killed jobs

KILLED_EXTRACTION = """
import logging, sys, time
import numpy as np, torch
from transformers import GPTNeoXForCausalLM
from lmsat.data.hidden_states import extract_to_cache
from test_cache import IDENTITY, SETTINGS

logging.basicConfig(level=logging.INFO)
torch.set_num_threads(1)
model_dir, tokens, outputs, throttle = sys.argv[1], np.load(sys.argv[2]), sys.argv[3:-1], float(sys.argv[-1])
model = GPTNeoXForCausalLM.from_pretrained(model_dir).eval()
if throttle:  # slow forwards, so that the kill lands between chunks
    model.register_forward_pre_hook(lambda module, args: time.sleep(throttle))
for out in outputs:
    extract_to_cache(model, tokens, out, identity=IDENTITY, settings=SETTINGS)
"""


def python(code: str, *args, tmp_path):
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(code))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, str(script), *map(str, args)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def kill_when(process, ready, timeout=60):
    """SIGKILL `process` as soon as `ready()` holds; fail if it ends first."""
    deadline = time.monotonic() + timeout
    while not ready():
        assert process.poll() is None, f"the job ended before it could be killed:\n{process.stdout.read()}"
        assert time.monotonic() < deadline, "the job made no progress"
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    assert process.wait(30) == -signal.SIGKILL


def test_sigkilled_extraction_resumes_to_the_same_bytes(tiny_neox, tmp_path):
    tiny_neox.save_pretrained(tmp_path / "model")
    tokens = np.random.default_rng(0).integers(0, 36, size=(10, 12)).astype(np.int32)  # 3 chunks of 4 sequences
    np.save(tmp_path / "tokens.npy", tokens)
    out, parts = tmp_path / "cache.h5", tmp_path / "cache.h5.parts"
    killed = python(KILLED_EXTRACTION, tmp_path / "model", tmp_path / "tokens.npy", out, 0.3, tmp_path=tmp_path)
    kill_when(killed, lambda: len(list(parts.glob("chunk_*.done"))) >= 2)
    assert not out.exists()  # nothing that looks complete
    done = sorted(p.name for p in parts.glob("chunk_*.done"))

    rerun = python(KILLED_EXTRACTION, tmp_path / "model", tmp_path / "tokens.npy", out, tmp_path / "fresh.h5", 0,
                   tmp_path=tmp_path)
    log, _ = rerun.communicate(timeout=120)
    assert rerun.returncode == 0, log
    assert f"{len(done)} of 3 chunks already done" in log
    assert out.read_bytes() == (tmp_path / "fresh.h5").read_bytes()  # bit for bit
    data, attrs = read_all(out)
    assert attrs["complete"] and data["loss"].shape == (10, 11) and not parts.exists()


KILLED_TRAINING = """
import json, sys, time
import torch
from lmsat.bottleneck.rank_heads import train_head
from lmsat.bottleneck.representation_cache import ShardedRepresentations
from test_heads import D, V, _cfg

torch.set_num_threads(1)
paths = json.loads(sys.argv[1])
cfg = _cfg(n_steps=40, eval_every=10, save_every=5)


class Slow:  # the real reader, throttled so that the kill lands mid-training
    def __init__(self, reader, seconds):
        self.reader, self.seconds, self.seq_len, self.d = reader, seconds, reader.seq_len, reader.d

    def sample_batch(self, *args):
        time.sleep(self.seconds)
        return self.reader.sample_batch(*args)


with ShardedRepresentations(paths["train"], seq_len=64) as train, ShardedRepresentations(paths["eval"]) as ev:
    results = {}
    for name, state in paths["runs"].items():
        reader = Slow(train, paths["throttle"]) if paths["throttle"] else train
        result = train_head(reader, ev, D, V, 4, cfg, state_path=state)
        results[name] = dict(eval_loss=result["eval_loss"], history=result["history"], step=result["step"])
print("RESULTS " + json.dumps(results))
"""


def test_sigkilled_head_training_resumes_to_the_uninterrupted_result(tmp_path):
    teacher = _teacher()
    paths = dict(train=[str(p) for p in _write_shards(tmp_path, "train", teacher, 8000, 2, seed=1)],
                 eval=[str(p) for p in _write_shards(tmp_path, "eval", teacher, 1000, 1, seed=2)])
    state = tmp_path / "state.pt"
    killed = python(KILLED_TRAINING, json.dumps(dict(paths, runs={"killed": str(state)}, throttle=0.05)),
                    tmp_path=tmp_path)
    kill_when(killed, state.exists)
    rest = python(KILLED_TRAINING, json.dumps(dict(paths, runs={"resumed": str(state), "fresh": None}, throttle=0)),
                  tmp_path=tmp_path)
    log, _ = rest.communicate(timeout=120)
    assert rest.returncode == 0, log
    results = json.loads(log.split("RESULTS ", 1)[1])
    resumed, fresh = results["resumed"], results["fresh"]
    assert resumed["step"] == fresh["step"] == 40
    assert resumed["eval_loss"] == pytest.approx(fresh["eval_loss"], abs=1e-6)
    for a, b in zip(resumed["history"], fresh["history"], strict=True):
        assert a["eval_loss"] == pytest.approx(b["eval_loss"], abs=1e-6)


# ------------------------------------------------------------------ 4. corrupt caches


@slow
def test_corrupt_caches_fail_the_jobs_that_read_them(resumed_run, tmp_path):
    source, _ = resumed_run
    workdir = tmp_path / "run"
    shutil.copytree(source, workdir, symlinks=True)
    caches = {name: workdir / f"results/default/cache/{m}/{r}.h5" for name, (m, r) in zip(("truncated", "nan", "foreign"),
                                                                                  CHECKPOINTS)}
    caches["truncated"].write_bytes(caches["truncated"].read_bytes()[:4000])
    with h5py.File(caches["nan"], "r+") as f:
        f["loss"][3, 2] = np.nan
    with h5py.File(caches["foreign"], "r+") as f:
        f.attrs["sample_sha256"] = "0" * 64  # made from another token sample
    for model, revision in CHECKPOINTS:  # their records must be recomputed from the caches
        (workdir / f"results/default/metrics/loss/{model}/{revision}.json").unlink()
    table = (workdir / "results/default/tables/loss.csv").read_bytes()

    config = yaml.safe_load((source / "config.yaml").read_text())
    result = snakemake(workdir, config, "--keep-going", TARGETS[0])
    assert result.returncode != 0
    expected = {"truncated": "is unreadable or truncated", "nan": "is corrupt: dataset 'loss' does not match its checksum",
                "foreign": "was made with sample_sha256='0000"}  # the NaN: its checksum sees it first (test_integrity.py)
    for (model, revision), (name, problem) in zip(CHECKPOINTS, expected.items()):
        log = (workdir / f"logs/default/compute_checkpoint_metric/loss/{model}/{revision}.log").read_text()
        assert str(caches[name].relative_to(workdir)) in log and problem in log, (name, log[-2000:])
        assert "delete it and rerun" in log or f"Fix: delete {caches[name].relative_to(workdir)} and rerun" in log
    assert job_counts(result.stdout) == {"compute_checkpoint_metric": 3, "tabulate_metric": 1, "total": 4}
    assert "rule tabulate_metric:" not in result.stdout  # planned, never run: nothing aggregated
    assert (workdir / "results/default/tables/loss.csv").read_bytes() == table


# ------------------------------------------------------------------ 5. disk


@slow
def test_fetched_checkpoints_are_removed_after_their_last_consumer(faulted_run, clean_run):
    workdir, _ = faulted_run
    assert not (workdir / entry().cache_dir(MIRROR_REVISION)).exists()  # fetch.remove_after_use (default)
    for path in checkpoint_outputs("mirror", MIRROR_REVISION):  # after both jobs that read it
        assert (workdir / path).is_file()
    kept, _, result = clean_run
    assert result.returncode == 0, result.stdout[-3000:]
    assert (kept / entry().cache_dir(MIRROR_REVISION) / "models--lmsat-test--mirror").is_dir()  # remove_after_use: false


@slow
def test_fetch_jobs_declare_the_disk_they_fill(faulted_run):
    _, result = faulted_run
    ghost = entry(name="ghost", id="lmsat-test/ghost", vocab_size=0)
    need = checkpoint_disk_mb(ghost, bytes_per_param=2)
    requested = [int(mb) for mb in re.findall(r"rule fetch_checkpoint:.*?disk_mb=(\d+)", result.stdout, re.S)]
    assert requested == [need, 2 * need]  # the retry asks for more
    pythia_12b = entry(name="pythia-12b", hidden_size=5120, vocab_size=50688)
    assert 20_000 < checkpoint_disk_mb(pythia_12b, 2) < 60_000  # true size: 23.7 GB
    assert estimated_parameters(entry(n_params=123)) == 123 + 2 * 264 * 16  # + embedding and head
    # with the depth known, within 0.1% for Pythia-410m and 12b (405,334,016 and 11,846,072,320)
    pythia_410m = entry(hidden_size=1024, vocab_size=50304, num_layers=24)
    assert abs(estimated_parameters(pythia_410m) / 405_334_016 - 1) < 1e-3
    assert abs(estimated_parameters(dataclasses.replace(pythia_12b, num_layers=36)) / 11_846_072_320 - 1) < 1e-3


def test_a_fetch_waits_for_disk_space_and_fails_clearly_without(tmp_path):
    ballast = tmp_path / "done.safetensors"  # a checkpoint whose last consumer is finishing
    with open(ballast, "wb") as handle:
        handle.write(b"\0" * 256_000_000)
        os.fsync(handle.fileno())
    reserve = free_mb(tmp_path) + 100  # fits only once the ballast is gone
    waits = []

    def consumer_finishes(seconds):
        waits.append(seconds)
        ballast.unlink(missing_ok=True)

    wait_for_space(tmp_path / "weights", 1, reserve, max_wait_s=3600, sleep=consumer_finishes, poll_s=60)
    assert waits == [60] and not ballast.exists()

    waits.clear()
    with pytest.raises(FetchError, match=r"do not fit on the disk .*min_free_mb=0 .*after waiting 3 min.*disk_mb"):
        wait_for_space(tmp_path, free_mb(tmp_path) + 1e9, 0, max_wait_s=180, sleep=waits.append, poll_s=60)
    assert waits == [60, 60, 60]


# ------------------------------------------------------------------ 6. untrusted weights and tokens


def stage_snapshot(cache, repo_id, revision, files: dict):
    """A hub-cache snapshot holding `files` (name -> bytes), as a download would leave it."""
    root = hub.repo_dir(cache, repo_id)
    snapshot = root / "snapshots" / ("a" * 40)
    snapshot.mkdir(parents=True)
    for name, content in files.items():
        (snapshot / name).write_bytes(content)
    (root / "refs").mkdir()
    (root / "refs" / revision).write_text("a" * 40)


def test_a_pickle_only_revision_is_refused_unless_allowed(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # what HF_HUB_OFFLINE=1 sets
    stage_snapshot(tmp_path, MIRROR_ID, MIRROR_REVISION, {"config.json": b"{}", "pytorch_model.bin": b"pickle"})
    with pytest.raises(FetchError, match=r"model mirror .* at revision step1 has no safetensors weights.*allow_pickle"):
        fetch_checkpoint(entry(), MIRROR_REVISION, tmp_path)
    snapshot = fetch_checkpoint(entry(allow_pickle=True), MIRROR_REVISION, tmp_path)
    assert (snapshot / "pytorch_model.bin").is_file()
    assert "*.bin" not in allow_patterns(entry()) and "*.bin" in allow_patterns(entry(allow_pickle=True))
    assert "*.py" not in allow_patterns(entry()) and "*.py" in allow_patterns(entry(trust_remote_code=True))


def test_offline_fetch_of_a_staged_checkpoint_loads_through_from_pretrained(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.chdir(tmp_path)
    stage_mirror(tmp_path)
    snapshot = fetch_checkpoint(entry(), MIRROR_REVISION, entry().cache_dir(MIRROR_REVISION))
    assert (snapshot / "model.safetensors").is_file()
    model = load_causal_lm(entry(), MIRROR_REVISION)  # from_pretrained(id, revision=..., cache_dir=...)
    assert model.get_output_embeddings().weight.shape == (264, 16)
    with pytest.raises(FetchError, match=r"model mirror \(lmsat-test/mirror\) at revision step2.*HF_HUB_OFFLINE"):
        fetch_checkpoint(entry(revisions=("step1", "step2"), steps=(1, 2)), "step2", entry().cache_dir("step2"))


def test_repository_code_is_never_run_unless_trusted(tmp_path):
    directory = tmp_path / MIRROR_REVISION
    directory.mkdir()
    marker = tmp_path / "code_ran"
    (directory / "config.json").write_text(json.dumps({
        "model_type": "lmsat_evil", "hidden_size": 16,
        "auto_map": {"AutoConfig": "configuration_evil.EvilConfig", "AutoModelForCausalLM": "modeling_evil.EvilModel"},
    }))
    for name in ("configuration_evil.py", "modeling_evil.py"):
        (directory / name).write_text(f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n")
    from safetensors.torch import save_file

    save_file({"weight": torch.zeros(2)}, str(directory / "model.safetensors"))
    with pytest.raises(ModelLoadError, match=r"model mirror .* step1 .*set trust_remote_code: true on suites.hub"):
        load_causal_lm(entry(source="local", id=str(tmp_path)), MIRROR_REVISION)
    assert not marker.exists()


@slow
def test_no_token_in_any_log_or_output(faulted_run):
    workdir, result = faulted_run
    assert TOKEN not in result.stdout
    for path in workdir.rglob("*"):
        if path.is_file() and path.suffix not in (".h5", ".safetensors", ".npz"):
            assert TOKEN.encode() not in path.read_bytes(), path


def test_log_lines_mask_the_token(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # setup_logging replaces it
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    setup_logging(str(tmp_path / "job.log"))
    try:
        logging.getLogger("lmsat.test").error("request failed: Authorization: Bearer %s", TOKEN)
        try:
            raise RuntimeError(f"401 for token {TOKEN}")
        except RuntimeError:
            logging.getLogger("lmsat.test").exception("fetch failed")
    finally:
        for handler in root.handlers:
            handler.close()
        root.handlers[:] = handlers
        root.setLevel(level)
        logging.captureWarnings(False)
    text = (tmp_path / "job.log").read_text()
    assert TOKEN not in text and text.count("<HF_TOKEN>") >= 2


# ------------------------------------------------------------------ 7. determinism


@slow
def test_same_config_and_seed_give_identical_caches_and_tables(resumed_run, clean_run):
    first, _ = resumed_run
    second, config, result = clean_run
    assert result.returncode == 0, result.stdout[-3000:]
    for model, revision in CHECKPOINTS:
        path = f"results/default/cache/{model}/{revision}.h5"
        assert (first / path).read_bytes() == (second / path).read_bytes(), path
        record = f"results/default/metrics/loss/{model}/{revision}.json"
        assert (first / record).read_text() == (second / record).read_text()
    a, b = (pd.read_csv(d / "results/default/tables/loss.csv") for d in (first, second))
    pd.testing.assert_frame_equal(a.drop(columns="config_sha256"), b.drop(columns="config_sha256"))
    # the tables name the config that made them without its operational keys: the clean run
    # kept its checkpoints (fetch.remove_after_use, operational), which changes no result
    planned = load_plan(config, SCHEMA).config
    for spec in planned["tokenizers"].values():  # the paths common.smk gives the files it builds
        if spec["source"] == "toy":
            spec["id"] = "results/default/toy/tokenizer"
    for spec in planned["corpora"].values():
        if spec["type"] == "synthetic":
            spec["files"] = [f"results/default/corpora/synthetic/{spec['split']}.txt"]
    made_by = config_sha256(result_config(planned, load_yaml(SCHEMA)))
    assert set(b["config_sha256"]) == {made_by} == set(a["config_sha256"])
    assert {"torch_version", "transformers_version", "lmsat_version"} <= set(b.columns)
    assert b["torch_version"].iloc[0] == torch.__version__


def test_no_config_key_takes_a_token():
    config = small_toy_config(("toy-d16",))
    config["fetch"] = {"token": TOKEN}
    with pytest.raises(ConfigError, match=r"'fetch.token': unknown key") as error:
        load_plan(config, SCHEMA)
    assert TOKEN not in str(error.value)
