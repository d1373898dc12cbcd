"""Rank-constrained LM heads trained on cached representations (Godey et al. 2024, 5.1, App. B).

The backbone is frozen, so a head only ever sees (final hidden state, next token) pairs:
we train it on representations cached once in sharded HDF5 files instead of re-running
the backbone for every batch of every (rank, learning rate) run (`benchmarks/heads.py`).

    W = A B,  A (V x r), B (r x d),  logits = A (B h)    # O(r (d + V)) per token

Pieces:
  * `LowRankHead(d, V, r)`: Linear(d -> r) then Linear(r -> V), no bias (Pythia's
    `embed_out` has none).
  * `chunked_cross_entropy`: CE over tokens in chunks, so at most (chunk x V) logits exist
    at a time, in the forward AND the backward pass (a fused linear + cross-entropy for
    LowRankHead, activation checkpointing per chunk for any other head).
  * `ShardedRepresentations`: reader for HDF5 shards with datasets `hidden` (n, d) and
    `targets` (n,).
  * `train_head`: Pythia's recipe (App. B), resumable from a state file after a kill.
  * `full_head_eval`: the reference row, the model's own full-rank head W (V, d).

Usage (the learning-rate grid is lmsat.bottleneck.lr_grid, planned without torch):
    with ShardedRepresentations(train_files, seq_len=2048) as train, \\
         ShardedRepresentations(eval_files) as evaluation:
        for lr in lr_grid():
            result = train_head(train, evaluation, d, V, r, HeadTrainConfig(peak_lr=lr),
                                state_path=f"state_r{r}_lr{lr:g}.pt")
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np
import torch
import torch.nn.functional as F
import torch.utils.checkpoint
from torch import nn

from lmsat.integrity import verify_hdf5
from lmsat.io import atomic_path
from lmsat.progress import Progress

# --------------------------------------------------------------------------- the head


class LowRankHead(nn.Module):
    """LM head of rank <= r: logits = A (B h), A (V, r) = up.weight, B (r, d) = down.weight.

    Initialisation: the paper draws A and B from N(0, 1). With unit-variance hidden
    coordinates that makes each logit N(0, r d): std 2048 for Pythia-1B at r = d = 2048,
    a softmax saturated on one token and a loss of thousands of nats at step 0. We keep the
    Gaussian shape but scale it by 1/sqrt(fan_in) (B ~ N(0, 1/d), A ~ N(0, 1/r)), so each
    logit starts ~N(0, ||h||^2 / d), i.e. ~N(0, 1) after a unit-gain LayerNorm, whatever r: the
    initial loss is ~ln V + 1/2, and since AdamW's step size does not depend on the
    weights' scale, one learning-rate grid serves every r. `init="paper"` gives the
    paper's plain N(0, 1).
    """

    def __init__(
        self,
        d: int,
        vocab_size: int,
        rank: int,
        init: str = "scaled",
        generator: torch.Generator | None = None,
    ):
        super().__init__()
        if not 1 <= rank <= d:
            raise ValueError(
                f"LowRankHead: rank r={rank} must be in [1, d={d}]: a head of rank above the "
                f"hidden size d is no constraint; pass r <= d"
            )
        if init not in ("scaled", "paper"):
            raise ValueError(f"LowRankHead: init={init!r}; use 'scaled' or 'paper'")
        self.d, self.vocab_size, self.rank = d, vocab_size, rank
        self.down = nn.Linear(d, rank, bias=False)  # B (r, d)
        self.up = nn.Linear(rank, vocab_size, bias=False)  # A (V, r)
        with torch.no_grad():
            for layer, fan_in in ((self.down, d), (self.up, rank)):
                layer.weight.normal_(0.0, 1.0, generator=generator)
                if init == "scaled":
                    layer.weight.mul_(1.0 / math.sqrt(fan_in))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:  # (n, d) -> (n, V)
        return self.up(self.down(hidden))

    def full_weight(self) -> torch.Tensor:
        """W = A B, (V, d): for spectra / W-error comparisons."""
        return self.up.weight @ self.down.weight


def _chunk_loss(head, hidden: torch.Tensor, targets: torch.Tensor):
    logits = head(hidden)  # (chunk, V)
    if logits.dtype in (torch.float16, torch.bfloat16):  # softmax in at least float32
        logits = logits.float()
    loss_sum = F.cross_entropy(logits, targets, reduction="sum")
    n_correct = (logits.argmax(dim=-1) == targets).sum()
    return loss_sum, n_correct


class _FusedLinearCrossEntropy(torch.autograd.Function):
    """sum_i CE(features_i @ weight^T, target_i) for the last linear layer of a head.

    Gradients are computed chunk by chunk during the forward (softmax - onehot, then two
    matmuls) and only scaled in the backward: peak memory is one (chunk, V) buffer, and
    unlike activation checkpointing no logits are computed twice (~1.4x faster).
    """

    @staticmethod
    def forward(ctx, features, weight, targets, chunk):  # (N, k), (V, k), (N,)
        compute_dtype = torch.float32 if weight.dtype in (torch.float16, torch.bfloat16) else None
        grad_features = torch.empty_like(features)  # (N, k)
        grad_weight = torch.zeros(
            weight.shape, dtype=compute_dtype or weight.dtype, device=weight.device
        )  # (V, k)
        loss_sum = torch.zeros((), dtype=torch.float64, device=features.device)
        n_correct = torch.zeros((), dtype=torch.int64, device=features.device)
        for start in range(0, features.shape[0], chunk):
            feats = features[start : start + chunk]  # (c, k)
            tgts = targets[start : start + chunk]  # (c,)
            logits = feats @ weight.T  # (c, V)
            if compute_dtype is not None:
                logits = logits.to(compute_dtype)
            rows = torch.arange(tgts.shape[0], device=tgts.device)
            target_logits = logits[rows, tgts]  # (c,)
            max_logits, predictions = logits.max(dim=1)  # (c,), (c,): one pass for both
            n_correct += (predictions == tgts).sum()
            # Softmax in place with a single exp pass: the logits buffer becomes d loss/d logits.
            grad_logits = logits.sub_(max_logits[:, None]).exp_()  # (c, V)
            partition = grad_logits.sum(dim=1)  # (c,)
            log_normaliser = max_logits + partition.log()  # (c,) logsumexp
            loss_sum += (log_normaliser - target_logits).sum(dtype=torch.float64)
            grad_logits.div_(partition[:, None])
            grad_logits[rows, tgts] -= 1.0
            grad_features[start : start + chunk] = (grad_logits @ weight.to(grad_logits.dtype)).to(
                features.dtype
            )
            grad_weight.addmm_(grad_logits.T, feats.to(grad_logits.dtype))
        ctx.save_for_backward(grad_features, grad_weight.to(weight.dtype))
        ctx.mark_non_differentiable(n_correct)
        return loss_sum, n_correct

    @staticmethod
    def backward(ctx, grad_loss, _grad_correct):
        grad_features, grad_weight = ctx.saved_tensors
        return (
            grad_features * grad_loss.to(grad_features.dtype),
            grad_weight * grad_loss.to(grad_weight.dtype),
            None,
            None,
        )


def _as_features_and_output_weight(head, hidden):
    """(features (N, k), weight (V, k)) if head(hidden) == features @ weight.T, else None."""
    if isinstance(head, LowRankHead):
        return head.down(hidden), head.up.weight
    if isinstance(head, nn.Linear) and head.bias is None:
        return hidden, head.weight
    return None


def chunked_cross_entropy(
    hidden: torch.Tensor, head, targets: torch.Tensor, chunk: int = 8192
) -> tuple[torch.Tensor, int]:
    """Summed cross-entropy and number of correct argmax predictions over (N, d) hidden.

    `head` maps (n, d) -> (n, V) logits (a module or any callable). Tokens are processed
    `chunk` at a time, so at most (chunk, V) logits exist at once, backward included:
    for a LowRankHead (or a bias-free nn.Linear) by a fused linear + cross-entropy that
    computes the gradients chunk by chunk in the forward; for any other module by
    checkpointing each chunk (backward recomputes its logits).
    Returns (loss_sum, a float64 0-d tensor that carries gradients; n_correct, an int).
    """
    if hidden.ndim != 2 or targets.ndim != 1 or hidden.shape[0] != targets.shape[0]:
        raise ValueError(
            f"chunked_cross_entropy: need hidden (N, d) and targets (N,), got "
            f"{tuple(hidden.shape)} and {tuple(targets.shape)}"
        )
    if chunk < 1:
        raise ValueError(f"chunked_cross_entropy: chunk={chunk} must be >= 1")
    needs_grad = torch.is_grad_enabled() and (
        hidden.requires_grad
        or (isinstance(head, nn.Module) and any(p.requires_grad for p in head.parameters()))
    )
    if needs_grad:
        linear = _as_features_and_output_weight(head, hidden)
        if linear is not None:
            loss_sum, n_correct = _FusedLinearCrossEntropy.apply(*linear, targets, chunk)
            return loss_sum, int(n_correct.item())
    loss_sum = torch.zeros((), dtype=torch.float64, device=hidden.device)
    n_correct = torch.zeros((), dtype=torch.int64, device=hidden.device)
    for start in range(0, hidden.shape[0], chunk):
        hidden_chunk = hidden[start : start + chunk]  # (chunk, d)
        targets_chunk = targets[start : start + chunk]  # (chunk,)
        if needs_grad:
            chunk_loss, chunk_correct = torch.utils.checkpoint.checkpoint(
                _chunk_loss, head, hidden_chunk, targets_chunk, use_reentrant=False
            )
        else:
            chunk_loss, chunk_correct = _chunk_loss(head, hidden_chunk, targets_chunk)
        loss_sum = loss_sum + chunk_loss.double()
        n_correct = n_correct + chunk_correct
    return loss_sum, int(n_correct.item())


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
        self.verify = verify  # check each shard against its checksums (lmsat.integrity)
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


# ----------------------------------------------------------------------------- training


@dataclass
class HeadTrainConfig:
    """Pythia's optimiser recipe (Biderman et al. 2023) as used in App. B of the paper."""

    peak_lr: float = 1e-2  # searched per rank over lmsat.bottleneck.lr_grid() = [1e-3, 5e-2] in the paper
    # Batch size counts SEQUENCES of seq_len tokens, as in Pythia/the paper ("batch size
    # 256" with Pythia's 2048-token context): 256 x 2048 = 524,288 tokens per step, so the
    # paper's ~150M tokens are ~286 steps. Sequences here are runs of seq_len consecutive
    # cached positions (ShardedRepresentations.seq_len must equal seq_len); for a frozen
    # backbone only the (hidden, target) pairs matter, so seq_len=1 (i.i.d. tokens, lower
    # gradient variance) with batch_size = tokens per step is equally valid statistically,
    # but each sequence is one HDF5 read (~0.3 ms): keep sequences of hundreds of tokens.
    batch_size: int = 256  # sequences per optimizer step
    seq_len: int = 2048  # tokens per sequence; tokens per step = batch_size * seq_len
    n_steps: int = 286  # optimizer steps (286 x 524,288 ~ 150M tokens, as in the paper)
    warmup_fraction: float = 0.01  # linear warmup over ceil(1% of n_steps) steps
    min_lr_ratio: float = 0.1  # cosine decay from peak_lr to 0.1 x peak_lr at the last step
    betas: tuple[float, float] = (0.9, 0.95)  # AdamW betas
    eps: float = 1e-8  # AdamW epsilon
    weight_decay: float = 0.1  # decoupled weight decay, on both A and B
    grad_clip: float = 1.0  # max global gradient norm
    seed: int = 0  # head init and batch sampling (batch of step s uses rng([seed, s]))
    eval_every: int = 50  # evaluate on the eval reader every k steps (0: only at the end)
    save_every: int = 25  # write the resumable state every k steps (0: only when stopping)
    chunk_tokens: int = 8192  # tokens per logits chunk: peak memory ~ chunk_tokens x V
    init: str = "scaled"  # LowRankHead init: "scaled" (see its docstring) or "paper"
    device: str = "cpu"  # torch device for the head and the batches


def state_file(directory, hidden_size: int, vocab_size: int, rank: int, cfg: HeadTrainConfig) -> Path:
    """Resumable-state path of a run (train_head's state_path), named by a hash of everything
    that shapes it.

    A changed config gets a new name, so `train_head` never meets a foreign state file;
    `stale_states` lists the leftovers of other configs in the same directory.
    """
    run = {k: v for k, v in dataclasses.asdict(cfg).items() if k != "device"}
    key = json.dumps(dict(d=hidden_size, vocab_size=vocab_size, rank=rank, cfg=run), sort_keys=True, default=list)
    return Path(directory) / f"{hashlib.sha256(key.encode()).hexdigest()[:16]}.pt"


def stale_states(path: Path) -> list[Path]:
    """The other state files beside `path`: runs of other configs."""
    return [p for p in path.parent.glob("*.pt") if p.name != path.name]


def _lr_factor(step: int, cfg: HeadTrainConfig) -> float:
    """Multiplier of peak_lr for optimizer step `step` (0-based): warmup then cosine."""
    warmup = max(1, math.ceil(cfg.warmup_fraction * cfg.n_steps))
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, cfg.n_steps - 1 - warmup)  # 0 -> 1 at last step
    cosine = 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))
    return cfg.min_lr_ratio + (1.0 - cfg.min_lr_ratio) * cosine


@torch.no_grad()
def _evaluate(head, eval_reader, chunk_tokens: int, device) -> dict:
    loss_sum, n_correct, n_tokens = 0.0, 0, 0
    for hidden, targets in eval_reader.iter_batches(chunk_tokens):
        hidden = torch.as_tensor(hidden, device=device)
        targets = torch.as_tensor(targets, device=device)
        batch_loss, batch_correct = chunked_cross_entropy(hidden, head, targets, chunk_tokens)
        loss_sum += float(batch_loss)
        n_correct += batch_correct
        n_tokens += targets.shape[0]
    if n_tokens == 0:
        raise ValueError("evaluation: the eval reader yielded no tokens")
    return {
        "eval_loss": loss_sum / n_tokens,
        "eval_acc": n_correct / n_tokens,
        "n_tokens": n_tokens,
    }


def full_head_eval(hidden, targets, W, bias=None, chunk: int = 8192) -> dict:
    """Mean CE and accuracy of the full-rank head W (V, d) (optional bias (V,)) on
    hidden (N, d) / targets (N,) (numpy or torch): the reference row of Fig. 6."""
    W = torch.as_tensor(W)
    hidden = torch.as_tensor(hidden, dtype=W.dtype, device=W.device)
    targets = torch.as_tensor(targets, dtype=torch.int64, device=W.device)
    if hidden.ndim != 2 or W.ndim != 2 or hidden.shape[1] != W.shape[1]:
        raise ValueError(
            f"full_head_eval: hidden {tuple(hidden.shape)} and W {tuple(W.shape)} do not "
            f"match; need hidden (N, d) and W (V, d)"
        )
    bias = None if bias is None else torch.as_tensor(bias, dtype=W.dtype, device=W.device)

    def head(h):  # (n, d) -> (n, V)
        return F.linear(h, W, bias)

    with torch.no_grad():
        loss_sum, n_correct = chunked_cross_entropy(hidden, head, targets, chunk)
    n = targets.shape[0]
    return {"eval_loss": float(loss_sum) / n, "eval_acc": n_correct / n, "n_tokens": n}


def train_head(
    train_reader,
    eval_reader,
    d: int,
    vocab_size: int,
    rank: int,
    cfg: HeadTrainConfig,
    state_path: str | os.PathLike | None = None,
    max_steps_this_call: int | None = None,
) -> dict:
    """Train a LowRankHead(d, V, r) on cached representations; evaluate it on eval_reader.

    Readers: `train_reader.sample_batch(n_sequences, rng) -> (hidden (n, d), targets (n,))`
    and `eval_reader.iter_batches(batch_tokens)`, e.g. `ShardedRepresentations`. The batch
    of step s is drawn with `np.random.default_rng([cfg.seed, s])`, so batches do not
    depend on how the run was interrupted.

    Resumable: with `state_path`, the state (head, optimizer, scheduler, torch RNG, step,
    history) is written atomically every `cfg.save_every` steps and when the call stops;
    an existing state file is resumed from (it must come from the same d, V, r and cfg).
    `max_steps_this_call` stops after that many steps (the next call resumes). A finished
    state file is not retrained: the call just returns its results.

    Returns dict(eval_loss, eval_acc, history, step, finished, head); eval_loss/eval_acc
    are None while unfinished. history: one dict per evaluation (step, lr, train_loss =
    mean over the steps since the previous evaluation, eval_loss, eval_acc).
    """
    if cfg.n_steps < 1 or cfg.batch_size < 1 or cfg.seq_len < 1:
        raise ValueError(
            f"train_head: n_steps={cfg.n_steps}, batch_size={cfg.batch_size}, "
            f"seq_len={cfg.seq_len} must all be >= 1"
        )
    reader_seq_len = getattr(train_reader, "seq_len", cfg.seq_len)
    if reader_seq_len != cfg.seq_len:
        raise ValueError(
            f"train_head: cfg.seq_len={cfg.seq_len} but train_reader.seq_len={reader_seq_len}; "
            f"build the reader with seq_len=cfg.seq_len"
        )
    reader_d = getattr(train_reader, "d", d)
    if reader_d != d:
        raise ValueError(
            f"train_head: d={d} but the train reader's representations have d={reader_d}"
        )
    device = torch.device(cfg.device)
    # Everything that changes the result identifies the run (the device does not).
    run_cfg = {k: v for k, v in dataclasses.asdict(cfg).items() if k != "device"}
    run_id = {"d": d, "vocab_size": vocab_size, "rank": rank, "cfg": run_cfg}

    generator = torch.Generator().manual_seed(cfg.seed)
    head = LowRankHead(d, vocab_size, rank, init=cfg.init, generator=generator).to(device)
    optimizer = torch.optim.AdamW(
        head.parameters(),
        lr=cfg.peak_lr,
        betas=tuple(cfg.betas),
        eps=cfg.eps,
        weight_decay=cfg.weight_decay,
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: _lr_factor(s, cfg))
    step, history, since_eval = 0, [], []  # since_eval: train losses since the last eval
    final = None

    state_path = None if state_path is None else Path(state_path)
    if state_path is not None and state_path.exists():
        try:
            state = torch.load(state_path, map_location=device, weights_only=True)
        except Exception as error:  # truncated or foreign file
            raise ValueError(
                f"train_head: state file {state_path} is unreadable ({error}); delete it to "
                f"restart the run"
            ) from error
        if state.get("run") != run_id:
            raise ValueError(
                f"train_head: state file {state_path} was written by a different run "
                f"({state.get('run')}); delete it or pass the same d, V, r and config"
            )
        head.load_state_dict(state["head"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["torch_rng"])
        step, history, since_eval = state["step"], state["history"], state["since_eval"]
        final = state["final"]

    def save() -> None:
        if state_path is None:
            return
        with atomic_path(state_path) as tmp:  # a kill mid-write leaves the previous state
            torch.save(
                {
                    "run": run_id,
                    "head": head.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(),
                    "torch_rng": torch.get_rng_state(),
                    "step": step,
                    "history": history,
                    "since_eval": since_eval,
                    "final": final,
                },
                tmp,
            )

    stop_at = (
        cfg.n_steps if max_steps_this_call is None else min(cfg.n_steps, step + max_steps_this_call)
    )
    head.train()
    progress = Progress(
        f"rank-{rank} head (d={d}, lr={cfg.peak_lr:g})", cfg.n_steps, "step", initial=step,
        per_unit={"tokens": cfg.batch_size * cfg.seq_len},
    )
    while step < stop_at:
        hidden, targets = train_reader.sample_batch(
            cfg.batch_size, np.random.default_rng([cfg.seed, step])
        )
        if targets.min() < 0 or targets.max() >= vocab_size:
            raise ValueError(
                f"train_head: the train reader gave token ids in [{targets.min()}, "
                f"{targets.max()}] at step {step}, outside [0, V={vocab_size}); pass the "
                f"model's vocab_size"
            )
        hidden = torch.as_tensor(hidden, device=device)  # (n, d)
        targets = torch.as_tensor(targets, device=device)  # (n,)
        lr = optimizer.param_groups[0]["lr"]
        loss_sum, _ = chunked_cross_entropy(hidden, head, targets, cfg.chunk_tokens)
        loss = loss_sum / targets.shape[0]
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), cfg.grad_clip)
        optimizer.step()
        scheduler.step()
        step += 1
        since_eval.append(float(loss.detach()))
        if (cfg.eval_every and step % cfg.eval_every == 0) or step == cfg.n_steps:
            head.eval()
            metrics = _evaluate(head, eval_reader, cfg.chunk_tokens, device)
            head.train()
            history.append(
                {
                    "step": step,
                    "lr": lr,
                    "train_loss": float(np.mean(since_eval)),
                    "eval_loss": metrics["eval_loss"],
                    "eval_acc": metrics["eval_acc"],
                }
            )
            since_eval = []
            if step == cfg.n_steps:
                final = {"eval_loss": metrics["eval_loss"], "eval_acc": metrics["eval_acc"]}
        if (cfg.save_every and step % cfg.save_every == 0) or step == stop_at:
            save()
        progress.update(1, train_loss=f"{since_eval[-1]:.4f}" if since_eval else "-")
    if progress.done > progress.initial:
        progress.finish(eval_loss=f"{final['eval_loss']:.4f}" if final else "-")

    head.eval()
    finished = final is not None
    return {
        "eval_loss": final["eval_loss"] if finished else None,
        "eval_acc": final["eval_acc"] if finished else None,
        "history": history,
        "step": step,
        "finished": finished,
        "head": head,
    }
