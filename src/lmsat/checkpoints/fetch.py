"""Fetch one checkpoint of a hub model into a hub cache of its own, retrying transient faults.

Rule `fetch_checkpoint` runs this once per (hub model, revision); every job that loads the
checkpoint then reads it offline with the usual call

    AutoModelForCausalLM.from_pretrained("EleutherAI/pythia-160m", revision="step1000",
        cache_dir="results/weights/pythia-160m/step1000", local_files_only=True)

so all hub traffic for weights happens here, where it is retried:

- transient faults (connection refused or reset, timeouts, HTTP 5xx, 429, 408) are retried
  with exponential backoff (`with_backoff`);
- permanent ones (unknown repository or revision, gated or disabled repository, offline
  mode without the files, no safetensors weights) fail at once, with a message naming the
  model, the revision and the fix; a gated repository (the suite's `gated`: Gemma,
  Llama-2) fails before any download when no token is set, naming the license to accept.

Before it downloads, a fetch waits until the files (as the hub sizes them) fit on the disk
with `min_free_mb` left free (`wait_for_space`): other jobs delete the checkpoints they are
done with, so fetching cannot run ahead of them until the disk is full.

Only safetensors weights are fetched unless the model allows pickle (.bin) files, and the
repository's Python files only when it trusts them. The revision's config.json comes first,
alone: a checkpoint of a format lmsat converts at load time (lmsat.checkpoints.formats: hf_olmo, Pico's
pico_decoder) whose config.json holds a field the conversion does not map is refused then,
naming the field, before any weight is downloaded. huggingface_hub reads the token from
HF_TOKEN itself; it is never an argument here, nor a config key, nor logged.
"""

from __future__ import annotations

import json
import logging
import math
import shutil
import time
from pathlib import Path

from lmsat.checkpoints import formats
from lmsat.core.fingerprint import FETCHED_MARKER
from lmsat.core.io import is_disk_full, write_json
from lmsat.core.plan import ModelEntry
from lmsat.core.retry import RetryPolicy, causes, is_transient, with_backoff
from lmsat.core.retry import job_retry_policy as job_retry_policy  # the staging and fetch scripts' policy
from lmsat.errors import FetchError

log = logging.getLogger(__name__)


def allow_patterns(model: ModelEntry) -> list[str]:
    """Files of a revision to fetch: config, tokenizer and safetensors weights; pickle (.bin)
    weights only when the model allows them, Python files only when it trusts them."""
    patterns = ["*.json", "*.safetensors", "*.txt", "*.model"]
    if model.allow_pickle:
        patterns.append("*.bin")
    if model.trust_remote_code:
        patterns.append("*.py")
    return patterns


def check_weights(snapshot: Path, model: ModelEntry, revision: str) -> None:
    """Refuse a snapshot without loadable weights (e.g. a revision with only .bin files)."""
    files = sorted(p.name for p in Path(snapshot).iterdir())
    weights = [f for f in files if f.endswith(".safetensors") or (model.allow_pickle and f.endswith(".bin"))]
    if not weights:
        fix = (
            f"set allow_pickle: true on {model.key} if you trust this repository's pickle files"
            if not model.allow_pickle
            else "check the revision on the hub"
        )
        raise FetchError(
            f"model {model.name} ({model.id}) at revision {revision} has no "
            f"{'safetensors or .bin' if model.allow_pickle else 'safetensors'} weights "
            f"(files: {', '.join(files) or 'none'}). Fix: {fix}"
        )


def gated_fix(license: str, repo_id: str) -> str:
    """How to get access to a gated repository: which license to accept, where, and the token."""
    terms = license or "the repository's terms"
    return (
        f"log in to the hub with your account, accept {terms} at https://huggingface.co/{repo_id}, "
        "then export HF_TOKEN=<a read token of that account> and rerun"
    )


def require_token(what: str, license: str, repo_id: str) -> None:
    """Fail at once, naming the license, when a gated repository is to be fetched without a
    hub token (HF_TOKEN, or one saved by `hf auth login`): the hub would refuse it anyway."""
    from huggingface_hub import get_token

    if license and not get_token():
        raise FetchError(f"cannot fetch {what}: the repository is gated and HF_TOKEN is not set. Fix: {gated_fix(license, repo_id)}")


def _fix(error: BaseException, model: ModelEntry, revision: str, cache_dir, policy: RetryPolicy) -> str:
    from huggingface_hub import errors as hub

    for cause in causes(error):
        if isinstance(cause, hub.OfflineModeIsEnabled) or "HF_HUB_OFFLINE" in str(cause):
            return f"unset HF_HUB_OFFLINE and rerun, or put the checkpoint's hub cache in {cache_dir} beforehand"
        if isinstance(cause, hub.GatedRepoError) or (model.gated and isinstance(cause, hub.RepositoryNotFoundError)):
            return gated_fix(model.gated, model.id)
        if isinstance(cause, hub.RepositoryNotFoundError):
            return f"check the hub id ({model.key}.id), or export HF_TOKEN for a private repository"
        if isinstance(cause, hub.RevisionNotFoundError):
            return f"check the revisions of {model.key} (the hub has no {revision!r})"
    if is_transient(error):
        return f"the hub was unreachable for {policy.attempts} tries; rerun later (finished jobs are kept)"
    if any(is_disk_full(cause) for cause in causes(error)):
        return (
            f"the disk of {cache_dir} filled up during the download: free space there, or lower "
            "--resources disk_mb so that fewer checkpoints are on disk at once, and rerun"
        )
    return "see the error above"


def download_mb(model: ModelEntry, revision: str, patterns: list[str]) -> float | None:
    """MB the files of `revision` matching `patterns` take, as the hub lists them; None when
    the hub cannot tell (offline, unreachable: the download then decides what happens)."""
    from huggingface_hub import HfApi
    from huggingface_hub.utils import filter_repo_objects

    try:
        info = HfApi().model_info(model.id, revision=model.hub_revision(revision), files_metadata=True)
    except Exception as error:
        log.info("size of %s@%s unknown (%s: %s)", model.id, revision, type(error).__name__, error)
        return None
    files = filter_repo_objects(info.siblings or [], allow_patterns=patterns, key=lambda f: f.rfilename)
    return sum(f.size or 0 for f in files) / 1e6


def free_mb(path) -> float:
    """Free MB on the filesystem that holds `path` (or would, once created)."""
    path = Path(path).absolute()
    while not path.exists():
        path = path.parent
    return shutil.disk_usage(path).free / 1e6


def wait_for_space(path, need_mb: float, reserve_mb: float, max_wait_s: float, *, sleep=time.sleep,
                   poll_s: float = 60.0) -> None:
    """Return once `need_mb` fits on the disk of `path` with `reserve_mb` left over; wait
    (other jobs delete the checkpoints they are done with) for up to `max_wait_s`, then fail.

    This is the back-pressure that keeps fetching from running ahead of the jobs that read
    the checkpoints (e.g. one GPU extracting while fetches complete faster) until the disk
    is full."""
    waited = 0.0
    while (free := free_mb(path)) < need_mb + reserve_mb:
        if waited >= max_wait_s:
            raise FetchError(
                f"{need_mb:.0f} MB do not fit on the disk of {path}: {free:.0f} MB free and "
                f"fetch.min_free_mb={reserve_mb:.0f} must stay free, after waiting {waited / 60:.0f} min. "
                "Fix: free space, or fetch fewer checkpoints at once (--resources disk_mb=...), then rerun"
            )
        wait = min(poll_s, max_wait_s - waited)
        log.info("waiting for disk space: %.0f MB needed + %.0f MB kept free, %.0f MB free", need_mb, reserve_mb, free)
        sleep(wait)
        waited += wait


def hub_config(model: ModelEntry, revision: str, cache_dir) -> dict | None:
    """config.json of `revision` (downloaded alone into the hub cache `cache_dir`), as a dict;
    None when the revision has none (the weights' download then says what is there)."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError

    try:
        path = hf_hub_download(model.id, "config.json", revision=model.hub_revision(revision), cache_dir=cache_dir)
    except EntryNotFoundError:
        return None
    try:
        return json.loads(Path(path).read_text())
    except ValueError as error:
        raise FetchError(f"model {model.name} ({model.id}) at revision {revision}: its config.json is not JSON ({error}). "
                         f"Fix: delete {cache_dir} and rerun") from None


def fetch_checkpoint(model: ModelEntry, revision: str, cache_dir, *, policy: RetryPolicy = RetryPolicy(),
                     min_free_mb: float = 0, disk_wait_s: float = 0, sleep=time.sleep) -> Path:
    """Download `revision` of hub model `model` into the hub cache `cache_dir`; returns the
    snapshot folder. Waits first until it fits on the disk with `min_free_mb` left free.
    Raises FetchError naming model, revision and the fix."""
    from huggingface_hub import snapshot_download

    what = f"model {model.name} ({model.id}) at revision {revision}"
    require_token(what, model.gated, model.id)

    def failed(error: Exception) -> FetchError:
        fix = _fix(error, model, revision, cache_dir, policy)
        return FetchError(f"cannot fetch {what}: {type(error).__name__}: {str(error).rstrip('.')}. Fix: {fix}")

    try:  # config.json alone first: a format lmsat cannot load costs no weight download
        config = with_backoff(lambda: hub_config(model, revision, cache_dir), policy, what=what, sleep=sleep)
    except FetchError:
        raise
    except Exception as error:
        raise failed(error) from error
    try:
        formats.check_config(config or {}, what)
    except formats.UnsupportedCheckpoint as error:
        raise FetchError(f"cannot fetch {what}: {str(error).removeprefix(what + ': ')}") from None
    patterns = allow_patterns(model)
    if min_free_mb > 0:
        need = download_mb(model, revision, patterns)
        if need is not None:
            try:
                wait_for_space(cache_dir, need, min_free_mb, disk_wait_s, sleep=sleep)
            except FetchError as error:
                raise FetchError(f"cannot fetch {what}: {error}") from None
    log.info("fetching %s into %s (files: %s)", what, cache_dir, " ".join(patterns))
    clock = time.perf_counter()
    try:
        folder = with_backoff(
            lambda: snapshot_download(model.id, revision=model.hub_revision(revision), cache_dir=cache_dir,
                                      allow_patterns=patterns),
            policy, what=what, sleep=sleep,
        )
    except Exception as error:
        raise failed(error) from error
    folder = Path(folder)
    check_weights(folder, model, revision)
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    # the mark of a download: a cache without it was staged by hand and is never deleted
    write_json(Path(cache_dir) / FETCHED_MARKER, dict(model=model.name, id=model.id, revision=revision))
    log.info("fetched %s: %.1f MB in %.0f s", what, size / 1e6, time.perf_counter() - clock)
    return folder


def estimated_parameters(model: ModelEntry) -> int:
    """Parameters of `model`, for sizing its checkpoint before anything is downloaded:
    the blocks plus 2 V d for an untied embedding and head (V = vocab_size, or 65536 when
    unknown). The blocks are n_params when the config gives it (a scaling-law count of
    either kind: adding the embedding on top errs high, never low), else 12 L d^2 with
    L = num_layers - within 0.1% for Pythia (biases and norms left out) - or, when that is unknown
    too, a guessed depth L = max(6, d / 64): 0.75x (410m, deep for its width) to 2.2x (12b).
    """
    d, vocab = model.hidden_size, model.vocab_size or 65536
    if model.n_params:
        blocks = model.n_params
    else:
        depth = model.num_layers or max(6, d / 64)
        blocks = 12 * depth * d * d
    return int(blocks + 2 * vocab * d)


# bytes a parameter takes in each dtype a checkpoint may be stored in (config fetch.stored_dtype)
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


def stored_bytes_per_param(model: ModelEntry, fetch: dict) -> float:
    """Bytes a parameter of `model`'s stored checkpoints takes: its suite's dtype in the
    config's `fetch.stored_dtype`, else `fetch.bytes_per_param`."""
    dtype = fetch.get("stored_dtype", {}).get(model.suite)
    return DTYPE_BYTES[dtype] if dtype else fetch["bytes_per_param"]


def checkpoint_disk_mb(model: ModelEntry, bytes_per_param: float) -> int:
    """Disk (MB) one fetched checkpoint of `model` takes: weights, plus 10% and 50 MB for the
    tokenizer, config and the hub's partial-download files."""
    return math.ceil(estimated_parameters(model) * bytes_per_param * 1.1 / 1e6) + 50
