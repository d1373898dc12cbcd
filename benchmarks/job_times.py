"""The per-checkpoint CPU jobs' work at Pythia's shapes: what `lmsat plan`'s time models of
rules compute_checkpoint_metric and compare_checkpoint_caches are calibrated from.

    python benchmarks/job_times.py                       # Pythia 14m and 160m shapes, config/pythia.yaml's sample
    python benchmarks/job_times.py --shapes 14m 160m 410m --repeats 3

For each shape (hidden size d, L layers, from config/pythia.yaml) it writes three caches in
the layout rule analyse_checkpoint writes (lmsat.data.hidden_states: per-token losses, the
last layer's states of every sample token, `layer_sample` tokens of every hidden state,
float16, each dataset under its checksum), of correlated random states (a checkpoint, its
final and its previous one), then times, each in this one process on one thread (the jobs
run with threads=1):

  open_cache                 a cache's checksums verified (every compare job verifies three)
  compute_checkpoint_metric  each cache metric's compute on an open cache
  compare_checkpoint_caches  representation_similarity of a cache with two others

Printed per shape and job: CPU seconds (the process's user + system time, which other load
on a shared machine moves far less than wall time; medians of --repeats), the job's work in
the units lmsat.planning.job_times counts it in, and seconds per unit. Not timed: the job's
start (Python, Snakemake's preamble, the imports: docs/performance.md's per-rule figures),
reading the sample file, writing the JSON record. Measured figures: docs/performance.md,
"What a plan's hours are made of".
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from lmsat.core.checked_hdf5 import write_checked_hdf5  # noqa: E402
from lmsat.data.hidden_states import FORMAT_VERSION, open_cache  # noqa: E402
from lmsat.planning.job_times import cache_shape, comparison_work, metric_work  # noqa: E402
from lmsat.products.metrics import METRICS  # noqa: E402


def write_cache(path: Path, shape, base: dict | None, rng) -> dict:
    """A cache file of `shape` (lmsat.planning.job_times.CacheShape); its states `base`'s plus
    noise (a neighbouring checkpoint), or fresh ones. -> its arrays"""
    n_seq, seq_len, n, k, states, d = shape.n_seq, shape.seq_len, shape.n_tokens, shape.layer_sample, shape.states, shape.d
    if base is None:
        hidden = rng.standard_normal((n, d), dtype=np.float32) + 0.5  # (n, d): a common direction, as trained models have
        layers = rng.standard_normal((states, k, d), dtype=np.float32) + 0.5  # (L + 1, k, d)
    else:
        hidden = base["hidden"] + 0.3 * rng.standard_normal((n, d), dtype=np.float32)
        layers = base["layers"] + 0.3 * rng.standard_normal((states, k, d), dtype=np.float32)
    arrays = dict(
        loss=rng.uniform(1.0, 6.0, (n_seq, seq_len - 1)).astype(np.float32),  # (n_seq, seq_len - 1)
        hidden=hidden.astype(np.float16),
        layers=layers.astype(np.float16),
        layer_index=np.random.default_rng(k).choice(n, size=k, replace=False).astype(np.int64),  # (k,): the same tokens in all three
    )
    arrays["layer_index"].sort()
    write_checked_hdf5(path, arrays, dict(complete=True, head_rows=50304, model="m", revision=path.stem, sample_sha256="s"),
                       FORMAT_VERSION)
    return {key: arrays[key].astype(np.float32) for key in ("hidden", "layers")}


def cpu_seconds(work) -> float:
    started = time.process_time()
    work()
    return time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", default=["14m", "160m"], help="Pythia sizes (config/pythia.yaml)")
    parser.add_argument("--repeats", type=int, default=1, help="timings per job and shape (median)")
    args = parser.parse_args()
    import threadpoolctl

    config = yaml.safe_load((ROOT / "config" / "pythia.yaml").read_text())
    models = {m["name"].removeprefix("pythia-"): m for m in config["suites"]["pythia"]["models"]}
    cache_metrics = [name for name, metric in METRICS.items() if metric.reads == "cache"]
    pair_metrics = [name for name, metric in METRICS.items() if metric.reads == "cache_pairs"]
    rng = np.random.default_rng(0)
    print("job work at Pythia shapes, config/pythia.yaml's sample; CPU seconds on one thread (median of "
          f"{args.repeats}), excluding the job's start")
    print(f"{'shape':>6} {'d':>5} {'states':>6} {'job':<42} {'cpu s':>8} {'work units':>11} {'s per unit':>11}")
    with threadpoolctl.threadpool_limits(1), tempfile.TemporaryDirectory(prefix="lmsat-job-times-") as scratch:
        for size in args.shapes:
            spec = models[size]
            shape = cache_shape(spec["hidden_size"], spec["num_layers"], config["sample"], config["extraction"])
            paths = [Path(scratch) / f"{size}-{name}.h5" for name in ("this", "final", "previous")]
            base = write_cache(paths[0], shape, None, rng)
            for path in paths[1:]:
                write_cache(path, shape, base, rng)
            rows = []

            def verify():
                with open_cache(paths[0], verify=True):
                    pass

            seconds = statistics.median(cpu_seconds(verify) for _ in range(args.repeats))
            rows.append(("open_cache: checksums verified (bytes)", seconds, float(shape.bytes)))
            with open_cache(paths[0], verify=False) as cache:
                for name in cache_metrics:
                    seconds = statistics.median(cpu_seconds(lambda: METRICS[name].compute(cache)) for _ in range(args.repeats))
                    rows.append((f"compute_checkpoint_metric {name}", seconds, metric_work(name, shape)))
                with open_cache(paths[1], verify=False) as final, open_cache(paths[2], verify=False) as previous:
                    references = {"final": ("final", 2, final), "previous": ("previous", 1, previous)}
                    for name in pair_metrics:
                        seconds = statistics.median(cpu_seconds(lambda: METRICS[name].compute(cache, references))
                                                    for _ in range(args.repeats))
                        rows.append((f"compare_checkpoint_caches {name}", seconds, comparison_work(shape, references=2)))
            for job, seconds, units in rows:
                print(f"{size:>6} {shape.d:>5} {shape.states:>6} {job:<42} {seconds:8.2f} {units:11.3e} {seconds / units:11.3e}")
            for path in paths:
                path.unlink()


if __name__ == "__main__":
    main()
