"""What the integrity checks cost (issue 22): checksummed writes and verified reads vs the
same code with them switched off, side by side on default-run-sized data.

    python benchmarks/integrity.py              # the default run's widest toy (d=128), 5 repeats
    python benchmarks/integrity.py --repeats 3

Measured, each as median seconds with and without, and their ratio:

  cache job      rule analyse_checkpoint's cache part plus the three cache metrics' reads:
                 extract_to_cache of the default sample (256 x 64 tokens, chunks of 64,
                 layer_sample 2048) through a toy-d128-shaped GPT-NeoX, then open_cache and
                 the loss, anisotropy and effective_rank metrics (each a job of its own).
                 Off: no per-chunk hashing, no fsync, no verification (the former code).
  head shards    opening the default bottleneck train set (262144 tokens of d=128 float32,
                 4 shards of 65536) with and without verification, and one eval pass over it
  tables         write_csv + read_table of a loss table of the default run's size (36 rows)
                 vs to_csv + read_csv

The default run's time is dominated by training, lm-eval and job start-up (seconds per job),
none of which the checks touch; the ratios here are of the parts they do touch.

Measured (2 shared CPUs, 5 repeats, medians): cache job 3.573 -> 3.881 s (1.086), head
shards 0.326 -> 0.836 s (2.56: SHA-256 of 128 MB on open), tables 14.6 -> 20.4 ms (1.40).
For the default run (233 jobs, 10-17 min): 36 checkpoints x 0.31 s + 16 head jobs x <= 0.26 s
(d <= 64: half these shards' bytes) + ~30 tables x 6 ms ~ 15 s, i.e. 1.5-2.5% of the run.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import torch

import lmsat.data.hidden_states as cache_module
from lmsat.bottleneck.representation_cache import ShardedRepresentations
from lmsat.core.integrity import hdf5_checksums
from lmsat.data.hidden_states import ExtractionSettings, extract_to_cache, open_cache
from lmsat.products.metrics import METRICS
from lmsat.products.table_files import read_table, write_csv
from lmsat.toy.suite import ToyModelSpec, build_model


@contextmanager
def checks_off():
    """The write path as it was before checksums: no hashing, no fsync, empty markers."""
    saved = cache_module._chunk_checksums, cache_module.fsync_path, cache_module._file_checksums
    cache_module._chunk_checksums = lambda *args: {}
    cache_module.fsync_path = lambda path: None
    cache_module._file_checksums = lambda markers, index: "{}"
    try:
        yield
    finally:
        cache_module._chunk_checksums, cache_module.fsync_path, cache_module._file_checksums = saved


def cache_job(model, tokens, settings, directory: Path, checked: bool) -> float:
    identity = dict(model="bench", revision="step0", model_id="bench", sample_sha256="bench")
    out = directory / f"cache_{checked}.h5"
    out.unlink(missing_ok=True)
    tick = time.perf_counter()
    if checked:
        extract_to_cache(model, tokens, out, identity=identity, settings=settings)
    else:
        with checks_off():
            extract_to_cache(model, tokens, out, identity=identity, settings=settings)
    for metric in ("loss", "anisotropy", "effective_rank"):  # one job each: each opens the cache
        with open_cache(out, verify=checked) as cache:
            METRICS[metric].compute(cache)
    return time.perf_counter() - tick


def shard_files(directory: Path, n_tokens: int, d: int, shard_tokens: int) -> list[Path]:
    rng = np.random.default_rng(0)
    paths = []
    for i in range(n_tokens // shard_tokens):
        hidden = rng.normal(size=(shard_tokens, d)).astype(np.float32)
        targets = rng.integers(0, 512, size=shard_tokens).astype(np.int32)
        path = directory / f"train_{i:04d}.h5"
        with h5py.File(path, "w") as f:
            f.create_dataset("hidden", data=hidden, chunks=(min(shard_tokens, 2**20 // d), d))
            f.create_dataset("targets", data=targets)
            f.attrs["checksums"] = hdf5_checksums(dict(hidden=hidden, targets=targets))
        paths.append(path)
    return paths


def shard_read(paths, checked: bool) -> float:
    tick = time.perf_counter()
    with ShardedRepresentations(paths, verify=checked) as reader:
        for _ in reader.iter_batches(8192):
            pass
    return time.perf_counter() - tick


def table_round_trip(table: pd.DataFrame, path: Path, checked: bool) -> float:
    tick = time.perf_counter()
    for _ in range(20):
        if checked:
            write_csv(table, path)
            read_table(path)
        else:
            table.to_csv(path, index=False)
            pd.read_csv(path)
    return (time.perf_counter() - tick) / 20


def side_by_side(name: str, run, repeats: int) -> None:
    times = {True: [], False: []}
    for _ in range(repeats):  # alternate, so drifts hit both sides
        for checked in (False, True):
            times[checked].append(run(checked))
    on, off = statistics.median(times[True]), statistics.median(times[False])
    print(f"{name:<14} without {off:8.4f} s   with {on:8.4f} s   ratio {on / off:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)  # the default run's threads: 1
    model = build_model(ToyModelSpec(hidden_size=128, vocab_size=514), seed=0).eval()
    tokens = np.random.default_rng(0).integers(0, 512, size=(256, 64)).astype(np.int32)
    settings = ExtractionSettings(batch_size=32, chunk_sequences=64, layer_sample=2048)
    loss = pd.DataFrame(dict(model=[f"toy-d{d}" for d in (16, 32, 64, 128) for _ in range(9)],
                             revision=[f"step{s}" for _ in range(4) for s in (0, 1, 4, 16, 64, 200, 400, 600, 800)],
                             loss=np.linspace(6.2, 2.9, 36), loss_sem=0.01, is_best=False, is_final=False))
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        shards = shard_files(tmp, 262144, 128, 65536)
        side_by_side("cache job", lambda c: cache_job(model, tokens, settings, tmp, c), args.repeats)
        side_by_side("head shards", lambda c: shard_read(shards, c), args.repeats)
        side_by_side("tables", lambda c: table_round_trip(loss, tmp / "loss.csv", c), args.repeats)


if __name__ == "__main__":
    main()
