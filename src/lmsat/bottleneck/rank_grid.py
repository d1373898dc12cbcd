"""The rank-constrained head experiment, planning side (Godey et al. 2024, 5.1, App. B).

What `workflow/rules/common.smk` and the config checks (lmsat.planning) need to plan the jobs
of `workflow/rules/bottleneck.smk`, without importing torch: the rank sweep and the
learning-rate grid of each model, the corpora of the head token sets, and the
`lmsat.bottleneck.rank_heads.HeadTrainConfig` fields the config sets. Training is `lmsat.bottleneck.rank_heads`; the tables
behind Figs. 6 and 8 are `lmsat.products.bottleneck_tables.heads_tables`.

    ranks = head_ranks(config["bottleneck"], d)           # [1, 4, 16, d]
    rates = learning_rates(config["bottleneck"])           # {"0.001": 0.001, ...}
    fields = head_train_fields(config["bottleneck"])       # {"batch_size": 4, "n_steps": 400, ...}
"""

from __future__ import annotations

import math

import numpy as np

# Snakemake imports this module to plan the DAG: no torch, pandas or scipy here.

# The head cache's windows and shards (lmsat.bottleneck.representation_cache writes them; the workflow counts its
# files and lmsat.planning checks bottleneck.seq_len against them at planning).


def n_windows(n_tokens: int, seq_len: int) -> int:
    """Windows of a set of `n_tokens` tokens (rounded up to whole windows, as the eval sample)."""
    return math.ceil(n_tokens / seq_len)


def windows_per_shard(shard_tokens: int, seq_len: int) -> int:
    return max(1, shard_tokens // seq_len)


def shard_count(n_tokens: int, seq_len: int, shard_tokens: int) -> int:
    """Shards of a set; the workflow declares this many files per set at DAG time."""
    return math.ceil(n_windows(n_tokens, seq_len) / windows_per_shard(shard_tokens, seq_len))


# bottleneck config key -> the lmsat.bottleneck.rank_heads.HeadTrainConfig field it sets (the rest of the
# config is Pythia's recipe, App. B)
HEAD_TRAIN_FIELDS = {
    "batch_sequences": "batch_size",
    "seq_len": "seq_len",
    "steps": "n_steps",
    "eval_every": "eval_every",
    "save_every": "save_every",
    "chunk_tokens": "chunk_tokens",
    "init": "init",
}


def head_ranks(bottleneck: dict, hidden_size: int) -> list[int]:
    """Ranks swept for a model of width d: `ranks`, plus d itself with `full_rank`."""
    ranks = set(bottleneck["ranks"])
    if bottleneck["full_rank"]:
        ranks.add(hidden_size)
    return sorted(ranks)


def lr_label(lr: float) -> str:
    """Path form of a learning rate (3 significant digits: 0.001, 0.0158, 0.05)."""
    return f"{lr:.3g}"


def lr_grid(lo: float = 1e-3, hi: float = 5e-2, n: int = 4) -> list[float]:
    """n log-spaced peak learning rates from lo to hi (the paper's search range, App. B)."""
    if lo <= 0 or hi <= 0 or n < 1:
        raise ValueError(f"lr_grid: need lo > 0, hi > 0 and n >= 1, got lo={lo}, hi={hi}, n={n}")
    return [float(x) for x in np.geomspace(lo, hi, n)]


def learning_rates(bottleneck: dict) -> dict[str, float]:
    """Label -> peak learning rate of the grid, log-spaced over [lr_min, lr_max] (lr_grid)."""
    return {lr_label(lr): lr for lr in lr_grid(bottleneck["lr_min"], bottleneck["lr_max"], bottleneck["lr_count"])}


def set_corpora(config: dict) -> dict[str, str]:
    """Corpus of the train and eval token sets ('' in the config = the eval sample's corpus)."""
    bottleneck, default = config["bottleneck"], config["sample"]["corpus"]
    return {name: bottleneck[f"{name}_corpus"] or default for name in ("train", "eval")}


def head_train_fields(bottleneck: dict) -> dict:
    """The HeadTrainConfig fields the bottleneck section sets, by field name: rule
    train_rank_head's params (only these re-run a head), so its script builds
    HeadTrainConfig(**fields, peak_lr=..., seed=..., device=...) with no renaming."""
    return {field: bottleneck[key] for key, field in HEAD_TRAIN_FIELDS.items()}
