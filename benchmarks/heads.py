"""Benchmark: training a rank-r head from an HDF5 cache vs re-running the frozen backbone.

    python benchmarks/heads.py            # 4 x 256 tokens per step, 12 steps (minutes)
    python benchmarks/heads.py --quick    # 2 x 128 tokens per step, 4 steps (< 1 min)

Backbone: a randomly initialised Pythia-160m-shaped GPT-NeoX (d = 768, 12 layers, 12
heads, V = 50304); head: LowRankHead of rank 64. Both paths run the very same
`lmsat.bottleneck.rank_heads.train_head` (same config, steps, windows and tokens per step); only the
source of the representations differs:
  * cache:    `ShardedRepresentations` over HDF5 shards (float16 hidden states) written
              once by one pass of the backbone over the same number of tokens;
  * backbone: a reader that runs the frozen backbone (no grad) on every sampled batch.
              It runs each window as one sequence, whereas a cached window may start
              mid-sequence and carries the left context of the forward that wrote it:
              the same compute per window, but other representations, so the two
              final losses differ.
The cache's one-off build time is printed too, with the break-even over a grid of runs
(the paper trains one head per rank x learning rate on the same representations).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np
import torch
from transformers import GPTNeoXConfig, GPTNeoXModel

from lmsat.bottleneck.rank_heads import HeadTrainConfig, train_head
from lmsat.bottleneck.representation_cache import ShardedRepresentations

VOCAB_SIZE, D = 50304, 768


class BackboneReader:
    """Reader with the `sample_batch` interface of ShardedRepresentations that runs the
    frozen backbone on windows of a token stream: hidden (n, d) and next tokens (n,)."""

    def __init__(self, backbone: GPTNeoXModel, tokens: np.ndarray, seq_len: int):
        self.backbone, self.tokens, self.seq_len, self.d = backbone, tokens, seq_len, D

    @torch.no_grad()
    def sample_batch(self, n_sequences: int, rng: np.random.Generator):
        starts = rng.integers(0, self.tokens.size - self.seq_len, size=n_sequences)
        windows = np.stack([self.tokens[s : s + self.seq_len + 1] for s in starts])
        inputs = torch.as_tensor(windows[:, :-1])  # (B, T)
        hidden = self.backbone(input_ids=inputs).last_hidden_state  # (B, T, d), final LN
        return hidden.reshape(-1, D).numpy(), windows[:, 1:].reshape(-1).astype(np.int64)


@torch.no_grad()
def build_cache(backbone, tokens: np.ndarray, seq_len: int, directory: Path, per_shard: int):
    """One backbone pass over consecutive sequences of `tokens`, written as HDF5 shards."""
    n_sequences = (tokens.size - 1) // seq_len
    paths = []
    for first in range(0, n_sequences, per_shard):
        count = min(per_shard, n_sequences - first)
        windows = np.stack(
            [tokens[(first + i) * seq_len : (first + i + 1) * seq_len + 1] for i in range(count)]
        )
        hidden = backbone(input_ids=torch.as_tensor(windows[:, :-1])).last_hidden_state
        path = directory / f"shard-{len(paths):04d}.h5"
        with h5py.File(path, "w") as f:
            f.create_dataset("hidden", data=hidden.reshape(-1, D).numpy().astype(np.float16))
            f.create_dataset("targets", data=windows[:, 1:].reshape(-1).astype(np.int64))
        paths.append(path)
    return paths


class StepClock:
    """Wraps a reader; the times between consecutive sample_batch calls are step times."""

    def __init__(self, reader):
        self.reader, self.seq_len, self.d, self.calls = reader, reader.seq_len, reader.d, []

    def sample_batch(self, n_sequences, rng):
        self.calls.append(time.perf_counter())
        return self.reader.sample_batch(n_sequences, rng)

    def median_step_seconds(self) -> float:
        return float(np.median(np.diff(self.calls)))  # the first step's warm-up excluded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, < 1 minute")
    parser.add_argument("--steps", type=int, help="optimizer steps per run (12, quick 4)")
    parser.add_argument("--batch", type=int, help="sequences per step (4, quick 2)")
    parser.add_argument("--seq-len", type=int, help="tokens per sequence (256, quick 128)")
    parser.add_argument("--rank", type=int, default=64, help="head rank r")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument(
        "--grid-runs",
        type=int,
        default=32,
        help="runs sharing one cache, for the break-even (e.g. 8 ranks x 4 lrs)",
    )
    args = parser.parse_args()
    steps = max(2, args.steps or (4 if args.quick else 12))  # >= 2: step times are gaps
    batch = args.batch or (2 if args.quick else 4)
    seq_len = args.seq_len or (128 if args.quick else 256)
    torch.set_num_threads(args.threads)

    torch.manual_seed(0)
    config = GPTNeoXConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=D,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=3072,
        max_position_embeddings=2048,
        rotary_pct=0.25,
    )
    backbone = GPTNeoXModel(config).eval().requires_grad_(False)
    tokens = np.random.default_rng(0).integers(0, VOCAB_SIZE, size=steps * batch * seq_len + 1)
    cfg = HeadTrainConfig(
        peak_lr=1e-2,
        batch_size=batch,
        seq_len=seq_len,
        n_steps=steps,
        eval_every=0,
        save_every=0,
        chunk_tokens=8192,
    )
    print(
        f"Pythia-160m-shaped backbone (random init), rank-{args.rank} head, {steps} steps x "
        f"{batch} x {seq_len} tokens, {args.threads} thread(s)"
    )

    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        train_paths = build_cache(backbone, tokens, seq_len, Path(tmp), per_shard=4)
        build_s = time.perf_counter() - start
        eval_path = Path(tmp) / "eval.h5"  # a tiny eval set: train_head always evaluates once
        with h5py.File(eval_path, "w") as f:
            f.create_dataset("hidden", data=np.zeros((seq_len, D), np.float16))
            f.create_dataset("targets", data=np.zeros(seq_len, np.int64))
        cache_bytes = sum(p.stat().st_size for p in train_paths)

        timings = {}
        with (
            ShardedRepresentations(train_paths, seq_len=seq_len) as cached,
            ShardedRepresentations([eval_path]) as evaluation,
        ):
            readers = {"cache": cached, "backbone": BackboneReader(backbone, tokens, seq_len)}
            for name, reader in readers.items():
                clock = StepClock(reader)
                result = train_head(clock, evaluation, D, VOCAB_SIZE, args.rank, cfg)
                timings[name] = clock.median_step_seconds()
                print(f"  {name:<9} final train loss {result['history'][-1]['train_loss']:.3f}")

    print(
        f"\ncache build: {build_s:.1f}s for {steps * batch * seq_len:,} tokens "
        f"({cache_bytes / 2**20:.0f} MiB float16 HDF5)"
    )
    print(f"{'path':<10}{'median s / step':>16}")
    for name, seconds in timings.items():
        print(f"{name:<10}{seconds:>16.3f}")
    speedup = timings["backbone"] / timings["cache"]
    print(f"\nspeed-up cache vs backbone, per step: {speedup:.1f}x")
    for runs in (1, args.grid_runs):
        with_cache = build_s + runs * steps * timings["cache"]
        without = runs * steps * timings["backbone"]
        print(
            f"{runs:>3} run(s) incl. the cache build: {without / with_cache:.1f}x "
            f"({without:.0f}s vs {with_cache:.0f}s)"
        )


if __name__ == "__main__":
    main()
