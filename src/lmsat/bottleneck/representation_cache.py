"""The head-training cache: a frozen model's last-layer representations in sharded HDF5.

Rank-constrained heads (Godey et al. 2024, 5.1) only ever see (final hidden state, next
token) pairs of a frozen backbone, so the backbone runs once per model and every
(rank, learning rate) job reads the pairs from these shards (`lmsat.bottleneck.rank_heads`,
`benchmarks/heads.py`).

Token sets. A train and an eval set of windows of `seq_len` tokens are drawn, without
replacement and disjoint from each other, from the token pools of their corpora (whole
documents joined with end-of-text, as for the eval sample, `lmsat.data.corpus`). Windows that
overlap the eval token sample of Fig. 1a are never drawn, so the heads are neither
trained nor selected on the tokens the loss curves are measured on.

Layout of `results/bottleneck/cache/{model}/{set}_{i:04d}.h5`, one file per shard:

    hidden         (n, d)        storage dtype  hidden_states[-1], post final norm (the head's input)
    targets        (n,)          int32          the next token of each position
    window_starts  (windows,)    int64          where each window starts in its corpus's token pool
    attrs    model, revision, model_id, set, shard, n_shards, windows, seq_len,
             hidden_size, storage_dtype, dtype, tokens_sha256, identity, format_version,
             checksums (SHA-256 of each dataset, lmsat.core.integrity: verified by every reader)

Each window of seq_len tokens gives seq_len - 1 pairs. Building is resumable: shards are
written atomically under `<dir>/.parts/` and kept across a kill; a rerun skips the parts
whose identity (model, revision, tokens, dtypes) matches, and only when all exist are
they moved under their final names.

    sets = draw_token_sets([("train", "pile", 2**20), ("eval", "pile", 2**16)], pools, 2048, seed=0)
    build_head_cache(lm, sets, {"train": [...], "eval": [...]}, identity={...})
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import shutil
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np
import torch
import torch.nn.functional as F

from lmsat.bottleneck.rank_grid import n_windows
from lmsat.bottleneck.rank_grid import shard_count as shard_count  # the workflow's count of shard files
from lmsat.bottleneck.rank_grid import windows_per_shard as windows_per_shard
from lmsat.core.integrity import CHECKSUM_ATTR, IntegrityError, hdf5_checksums, verify_hdf5
from lmsat.core.io import atomic_path, library_versions
from lmsat.data.corpus import tokens_sha256
from lmsat.errors import CorpusError
from lmsat.runtime.progress import Progress

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
SET_SEED = 0x5EED5  # mixed with the config seed: a stream apart from the eval sample's
LOGITS_BUDGET = 2**26  # floats of logits materialised at once (256 MiB in float32)


@dataclass(frozen=True)
class CacheSettings:
    batch_size: int = 8  # windows per forward
    dtype: str = "float32"  # forward dtype
    storage_dtype: str = "float16"  # dtype of the stored hidden states
    check_atol: float = 1e-3  # tolerance of the check that head(hidden) gives the logits


def overlapping_windows(n_pool_windows: int, seq_len: int, ranges) -> np.ndarray:
    """Mask (n_pool_windows,) of the windows [j L, (j+1) L) that overlap any [start, start+length)."""
    hits = np.zeros(n_pool_windows + 1, dtype=np.int64)  # difference array
    for start, length in ranges:
        first, last = start // seq_len, min((start + length - 1) // seq_len, n_pool_windows - 1)
        if first <= last:
            hits[first] += 1
            hits[last + 1] -= 1
    return np.cumsum(hits[:-1]) > 0


def check_sample_alignment(pool: np.ndarray, sample_tokens: np.ndarray, sample_starts: np.ndarray, where: str) -> None:
    """The eval sample's windows must be windows of the same token stream as `pool`.

    Both pools are prefixes of one document stream, so positions agree; a mismatch means
    the corpus or tokenizer changed since the sample was drawn (its windows could not be
    excluded reliably).
    """
    seq_len = sample_tokens.shape[1]
    for row, start in zip(sample_tokens, sample_starts):
        if start + seq_len <= len(pool) and not np.array_equal(pool[start : start + seq_len], row):
            raise CorpusError(
                f"{where}: the eval token sample's window at position {start} differs from the "
                "corpus as read now (the corpus or tokenizer changed); delete the sample and rerun"
            )


def draw_token_sets(requests, pools: dict, seq_len: int, seed: int, excluded: dict | None = None) -> dict:
    """Disjoint random windows for each requested set.

    requests: [(set name, corpus name, n_tokens)], drawn in this order; pools: corpus ->
    (n,) int32 tokens; excluded: corpus -> [(start, length)] ranges no window may overlap.
    Returns set name -> (tokens (n_seq, seq_len) int32, starts (n_seq,) int64), sorted by start.
    """
    rng = np.random.default_rng([seed, SET_SEED])
    taken = {}
    for corpus, pool in pools.items():
        taken[corpus] = overlapping_windows(len(pool) // seq_len, seq_len, (excluded or {}).get(corpus, []))
    sets = {}
    for name, corpus, n_tokens in requests:
        pool, n_seq = pools[corpus], n_windows(n_tokens, seq_len)
        free = np.flatnonzero(~taken[corpus])
        if len(free) < n_seq:
            raise CorpusError(
                f"corpus {corpus} gave {len(pool)} tokens: {len(free)} free windows of {seq_len} for the "
                f"{name} set, which needs {n_seq} (bottleneck.{name}_tokens={n_tokens}); lower it, raise "
                "bottleneck.pool_factor, or use a larger corpus"
            )
        chosen = np.sort(rng.choice(free, size=n_seq, replace=False))
        taken[corpus][chosen] = True
        starts = chosen.astype(np.int64) * seq_len
        sets[name] = (np.stack([pool[s : s + seq_len] for s in starts]).astype(np.int32), starts)
    return sets


def _shard_identity(identity: dict, set_name: str, shard: int, tokens: np.ndarray, settings: CacheSettings) -> str:
    payload = dict(
        identity, set=set_name, shard=shard, tokens_sha256=tokens_sha256(tokens),
        dtype=settings.dtype, storage_dtype=settings.storage_dtype, format_version=FORMAT_VERSION,
    )
    return json.dumps(payload, sort_keys=True)


def _existing_identity(path: Path) -> str | None:
    """The identity of a part left by an earlier run, None when it is torn or corrupt."""
    try:
        with h5py.File(path, "r") as f:
            verify_hdf5(f, path)
            return f.attrs.get("identity")
    except (OSError, IntegrityError) as error:  # torn by a kill, or corrupt: recompute
        log.warning("%s: not reused (%s)", path, error)
        return None


def _forward_pairs(model, tokens: np.ndarray, settings: CacheSettings, device, check: bool, progress=None):
    """Hidden states and next tokens of every window. tokens (b, L) -> (b (L-1), d), (b (L-1),)
    progress: a lmsat.runtime.progress.Progress counting tokens, updated after each batch."""

    from lmsat.data.hidden_states import forward_hidden_states

    storage = getattr(np, settings.storage_dtype)
    hiddens, targets = [], []
    for b in range(0, len(tokens), settings.batch_size):
        ids = torch.as_tensor(tokens[b : b + settings.batch_size], dtype=torch.long, device=device)  # (b, L)
        with torch.no_grad():
            hidden_states = forward_hidden_states(model, ids, check_head=check and b == 0, atol=settings.check_atol)
            last = hidden_states[-1]  # (b, L, d), post final norm
        d = last.shape[-1]
        hiddens.append(last[:, :-1].reshape(-1, d).float().cpu().numpy().astype(storage))
        targets.append(ids[:, 1:].reshape(-1).cpu().numpy().astype(np.int32))
        if progress is not None:
            progress.update(ids.numel())
    return np.concatenate(hiddens), np.concatenate(targets)


def build_head_cache(model, token_sets: dict, shard_paths: dict, *, identity: dict, settings: CacheSettings, device="cpu") -> dict:
    """Forward every set through `model` and write its shards; returns per-set summaries.

    token_sets: set -> (tokens (n_seq, L), starts); shard_paths: set -> [paths], the windows
    of a set split into consecutive groups of ceil(n_seq / n_shards) windows, one per path.
    `identity` (model, revision, model_id, ...) is stored and decides which leftover parts
    of a killed run are reused.
    """
    first = Path(next(iter(shard_paths.values()))[0])
    parts = first.parent / ".parts"
    parts.mkdir(parents=True, exist_ok=True)
    clock, computed, summary, checked = time.perf_counter(), 0, {}, False
    plan = []
    for set_name, paths in shard_paths.items():
        tokens, starts = token_sets[set_name]
        per_shard = math.ceil(len(tokens) / len(paths))
        if math.ceil(len(tokens) / per_shard) != len(paths):
            raise ValueError(f"{set_name}: {len(tokens)} windows do not split into {len(paths)} shards")
        for shard, path in enumerate(paths):
            rows = slice(shard * per_shard, (shard + 1) * per_shard)
            plan.append((set_name, shard, len(paths), Path(path), tokens[rows], starts[rows]))
    progress = Progress("head cache forward", sum(block.size for *_, block, _ in plan), "token")
    for set_name, shard, n_shards, path, block, block_starts in plan:
        part = parts / path.name
        shard_id = _shard_identity(identity, set_name, shard, block, settings)
        if part.exists() and _existing_identity(part) == shard_id:
            log.info("%s: reusing the part left by an earlier run", part)
            progress.total -= block.size
            continue
        hidden, targets = _forward_pairs(model, block, settings, device, check=not checked, progress=progress)
        checked = True
        if not np.isfinite(hidden).all():
            raise ValueError(f"the forward of {identity.get('model')}@{identity.get('revision')} gave non-finite hidden states")
        with atomic_path(part) as tmp, h5py.File(tmp, "w") as f:
            d = hidden.shape[1]
            window_starts = np.asarray(block_starts, dtype=np.int64)
            f.create_dataset("hidden", data=hidden, chunks=(min(len(hidden), max(1, 2**20 // d)), d))
            f.create_dataset("targets", data=targets)
            f.create_dataset("window_starts", data=window_starts)
            f.attrs[CHECKSUM_ATTR] = hdf5_checksums(dict(hidden=hidden, targets=targets, window_starts=window_starts))
            f.attrs.update({k: v for k, v in identity.items() if v is not None})
            f.attrs.update(
                set=set_name, shard=shard, n_shards=n_shards, windows=len(block), seq_len=block.shape[1],
                hidden_size=d, dtype=settings.dtype, storage_dtype=settings.storage_dtype,
                tokens_sha256=tokens_sha256(block), identity=shard_id, format_version=FORMAT_VERSION,
                versions=json.dumps(library_versions(), sort_keys=True),
            )
        computed += block.size
        log.info("%s shard %d/%d: %d pairs, %.0f tokens/s", set_name, shard + 1, n_shards, len(targets),
                 computed / (time.perf_counter() - clock))
    if progress.done:
        progress.finish()
    for set_name, shard, n_shards, path, block, _ in plan:
        os.replace(parts / path.name, path)
        entry = summary.setdefault(set_name, dict(windows=0, pairs=0, shards=n_shards, sha256=hashlib.sha256()))
        entry["windows"] += len(block)
        entry["pairs"] += block.shape[0] * (block.shape[1] - 1)
        entry["sha256"].update(tokens_sha256(block).encode())
    shutil.rmtree(parts)
    return {name: {**entry, "sha256": entry["sha256"].hexdigest()} for name, entry in summary.items()}


def full_head_reference(model, eval_paths, chunk: int = 8192) -> dict:
    """The reference row of Fig. 6: the model's own head on the cached eval pairs.

    Reads the stored (possibly float16) hidden states, exactly what the rank-r heads are
    evaluated on, and runs where the model is (a GPU for Pythia's 50k-row heads). Returns
    eval_loss, eval_acc, n_tokens and loss_sem (standard error of the mean per-token loss,
    the noise scale of one eval loss).
    """

    from lmsat.bottleneck.rank_heads import full_head_eval
    from lmsat.bottleneck.representation_cache import ShardedRepresentations

    head = model.get_output_embeddings()
    weight = head.weight.detach().float()  # (V, d), on the model's device
    bias = None if getattr(head, "bias", None) is None else head.bias.detach().float()
    chunk = max(1, min(chunk, LOGITS_BUDGET // weight.shape[0]))  # at most (chunk, V) logits at once
    loss_sum = correct = n = 0
    shift, squares = None, 0.0  # sum of squared deviations from a shift (the first chunk's mean)
    with ShardedRepresentations([str(p) for p in eval_paths]) as reader:
        for hidden, targets in reader.iter_batches(chunk):
            result = full_head_eval(hidden, targets, weight, bias, chunk=chunk)
            loss_sum += result["eval_loss"] * result["n_tokens"]
            correct += result["eval_acc"] * result["n_tokens"]
            n += result["n_tokens"]
            with torch.no_grad():
                hidden = torch.as_tensor(hidden, device=weight.device)
                targets = torch.as_tensor(targets, device=weight.device)
                losses = F.cross_entropy(F.linear(hidden, weight, bias), targets, reduction="none").double()
            shift = float(losses.mean()) if shift is None else shift
            squares += float(((losses - shift) ** 2).sum())
    mean = loss_sum / n
    variance = max(squares / n - (mean - shift) ** 2, 0.0) * n / max(n - 1, 1)
    return dict(eval_loss=mean, eval_acc=correct / n, n_tokens=int(n), loss_sem=math.sqrt(variance / n))


# ------------------------------------------------------------------- reading the shards

# ------------------------------------------------------------------- cached representations


class ShardError(ValueError):
    """A head-cache shard that cannot be read (truncated, corrupt); the message names it."""

    def __init__(self, path: Path, error: Exception):
        super().__init__(
            f"head-cache shard {path} is unreadable or truncated ({error}). Fix: delete {path.parent} "
            "(that model's head cache) and rerun, so that build_head_cache writes it again"
        )


class ShardedRepresentations:
    """Reads (hidden, target) pairs from HDF5 shards, each with datasets
    `hidden` (n, d) (any float dtype; returned as float32) and `targets` (n,) (ints).

    A "sequence" is `seq_len` consecutive cached positions inside one shard (a batch of
    sequences is a few large contiguous reads, which HDF5 does well; seq_len=1 samples
    single tokens). Batches drawn with the same numpy Generator state are identical.
    """

    def __init__(self, paths: Sequence[str | os.PathLike], seq_len: int = 1, verify: bool = True):
        if len(paths) == 0:
            raise ValueError("ShardedRepresentations: paths is empty; pass the HDF5 shard files")
        if seq_len < 1:
            raise ValueError(f"ShardedRepresentations: seq_len={seq_len} must be >= 1")
        self.paths = [Path(p) for p in paths]
        self.seq_len = seq_len
        self.verify = verify  # check each shard against its checksums (lmsat.core.integrity)
        self._files: list[h5py.File] = []
        self._hidden: list[h5py.Dataset] = []  # dataset handles: looking one up costs ~0.2 ms
        self._targets: list[h5py.Dataset] = []
        self.shard_sizes: list[int] = []
        self.d: int | None = None
        try:
            for path in self.paths:
                self._open_shard(path)
        except BaseException:
            self.close()
            raise
        self.n_tokens = int(sum(self.shard_sizes))
        # Valid window starts per shard; windows never cross shard borders.
        self._windows = np.array([max(n - seq_len + 1, 0) for n in self.shard_sizes])
        self._window_offsets = np.concatenate([[0], np.cumsum(self._windows)])  # (n_shards+1,)
        if self._window_offsets[-1] == 0:
            raise ValueError(
                f"ShardedRepresentations: no shard holds seq_len={seq_len} positions "
                f"(sizes {self.shard_sizes}); lower seq_len"
            )

    def _open_shard(self, path: Path) -> None:
        if not path.is_file():
            raise ValueError(f"ShardedRepresentations: shard {path} does not exist")
        try:
            file = h5py.File(path, "r")
        except OSError as error:
            raise ShardError(path, error) from error
        self._files.append(file)
        for name in ("hidden", "targets"):
            if name not in file:
                raise ValueError(
                    f"ShardedRepresentations: shard {path} has no dataset '{name}' "
                    f"(it has {sorted(file.keys())}); write 'hidden' (n, d) and 'targets' (n,)"
                )
        hidden, targets = file["hidden"], file["targets"]
        if hidden.ndim != 2 or targets.ndim != 1 or hidden.shape[0] != targets.shape[0]:
            raise ValueError(
                f"ShardedRepresentations: shard {path} has hidden {hidden.shape} and targets "
                f"{targets.shape}; need (n, d) and (n,) with the same n"
            )
        if not np.issubdtype(targets.dtype, np.integer):
            raise ValueError(
                f"ShardedRepresentations: shard {path} has targets of dtype {targets.dtype}; "
                f"store token ids as integers"
            )
        if self.d is None:
            self.d = int(hidden.shape[1])
        elif hidden.shape[1] != self.d:
            raise ValueError(
                f"ShardedRepresentations: shard {path} has d={hidden.shape[1]}, the first "
                f"shard d={self.d}; all shards must come from the same model"
            )
        if self.verify:  # IntegrityError naming the shard when its data is not what was written
            try:
                verify_hdf5(file, path, ("hidden", "targets"))
            except OSError as error:  # a damaged chunk HDF5 cannot decode
                raise ShardError(path, error) from error
        self.shard_sizes.append(int(hidden.shape[0]))
        self._hidden.append(hidden)
        self._targets.append(targets)

    def sample_batch(self, n_sequences: int, rng: np.random.Generator):
        """`n_sequences` windows of `seq_len` positions drawn uniformly (with replacement).

        Returns hidden (n_sequences * seq_len, d) float32 and targets (same n,) int64,
        ordered by (shard, start) for read locality.
        """
        window_ids = np.sort(rng.integers(0, self._window_offsets[-1], size=n_sequences))
        shards = np.searchsorted(self._window_offsets, window_ids, side="right") - 1
        starts = window_ids - self._window_offsets[shards]
        n = n_sequences * self.seq_len
        hidden = np.empty((n, self.d), dtype=np.float32)  # (n, d)
        targets = np.empty(n, dtype=np.int64)  # (n,)
        for i, (shard, start) in enumerate(zip(shards, starts)):
            rows = slice(i * self.seq_len, (i + 1) * self.seq_len)
            try:
                self._hidden[shard].read_direct(hidden, np.s_[start : start + self.seq_len], rows)
                self._targets[shard].read_direct(targets, np.s_[start : start + self.seq_len], rows)
            except OSError as error:
                raise ShardError(self.paths[shard], error) from error
        return hidden, targets

    def iter_batches(self, batch_tokens: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Every cached position exactly once, in order, `batch_tokens` at a time."""
        for path, hidden, targets, size in zip(self.paths, self._hidden, self._targets, self.shard_sizes):
            for start in range(0, size, batch_tokens):
                stop = min(start + batch_tokens, size)
                try:
                    batch = (
                        np.asarray(hidden[start:stop], dtype=np.float32),  # (n, d)
                        np.asarray(targets[start:stop], dtype=np.int64),  # (n,)
                    )
                except OSError as error:
                    raise ShardError(path, error) from error
                yield batch

    def close(self) -> None:
        for file in self._files:
            file.close()
        self._files, self._hidden, self._targets = [], [], []

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
