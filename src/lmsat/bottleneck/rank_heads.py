"""Rank-constrained LM heads trained on cached representations (Godey et al. 2024, 5.1, App. B).

The backbone is frozen, so a head only ever sees (final hidden state, next token) pairs:
we train it on representations cached once in sharded HDF5 files
(lmsat.bottleneck.representation_cache) instead of re-running the backbone for every batch
of every (rank, learning rate) run (`benchmarks/heads.py`).

  * `train_head`: Pythia's recipe (App. B), resumable from a state file after a kill.
  * `full_head_eval`: the reference row, the model's own full-rank head W (V, d).

Usage (the learning-rate grid is lmsat.bottleneck.rank_grid.lr_grid, planned without torch):
    with ShardedRepresentations(train_files, seq_len=2048) as train, \\
         ShardedRepresentations(eval_files) as evaluation:
        for lr in lr_grid():
            result = train_head(train, evaluation, d, V, r, HeadTrainConfig(peak_lr=lr),
                                state_path=f"state_r{r}_lr{lr:g}.pt")"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
import torch.utils.checkpoint

from lmsat.bottleneck.head_loss import LowRankHead, chunked_cross_entropy
from lmsat.core.io import atomic_path
from lmsat.runtime.progress import Progress

# ----------------------------------------------------------------------------- training


@dataclass
class HeadTrainConfig:
    """Pythia's optimiser recipe (Biderman et al. 2023) as used in App. B of the paper."""

    peak_lr: float = 1e-2  # searched per rank over lmsat.bottleneck.rank_grid.lr_grid() = [1e-3, 5e-2] in the paper
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
