"""Benchmark: LM-head singular values via the float64 Gram matrix vs WeightWatcher vs full SVD.

    python benchmarks/spectra.py           # a 50,304 x 768 float32 head (Pythia-160m's shape)
    python benchmarks/spectra.py --quick   # a 50,304 x 128 head (Pythia-14m's shape), < 1 min

Methods, on the same random float32 head with a decaying spectrum:
  * Gram (lmsat): lmsat.degeneration.spectra.singular_values, eigvalsh of W^T W accumulated in float64.
  * WeightWatcher: the SVD WeightWatcher runs for a layer's ESD on a CPU-only machine,
    `weightwatcher.RMT_Util.svd_vals(W, method="accurate")` (scipy.linalg.svd on W as given,
    float32 here). Skipped with a message when weightwatcher is not installed.
  * numpy SVD: numpy.linalg.svd(W as float64, compute_uv=False), the reference for errors.

It also checks, on a torch model holding the head as nn.Linear, whether WeightWatcher's
default `describe()` sees the head at all (it skips matrices with more than max_N rows).
"""

import argparse
import statistics
import time

import numpy as np

from lmsat.degeneration.spectra import singular_values


def random_head(n_rows: int, d: int, seed: int = 0) -> np.ndarray:
    """Gaussian rows with column scales decaying 100x: singular values spread like a head's."""
    rng = np.random.default_rng(seed)
    scales = np.logspace(0, -2, d).astype(np.float32)
    return rng.standard_normal((n_rows, d), dtype=np.float32) * scales


def timed(function, repeats: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def weightwatcher_default_sees(head: np.ndarray) -> str:
    """Run WeightWatcher's default describe() on a model that holds `head` as nn.Linear."""
    import logging

    import torch
    import weightwatcher
    from weightwatcher import constants

    logging.getLogger("weightwatcher").setLevel(logging.ERROR)
    model = torch.nn.Sequential(torch.nn.Linear(head.shape[1], head.shape[0], bias=False))
    with torch.no_grad():
        model[0].weight.copy_(torch.from_numpy(head))
    watcher = weightwatcher.WeightWatcher(model=model)
    seen = len(watcher.describe()) > 0
    seen_raised = len(watcher.describe(max_N=head.shape[0] + 1)) > 0
    return (
        f"WeightWatcher {weightwatcher.__version__}: DEFAULT_MAX_N = {constants.DEFAULT_MAX_N} "
        f"(weightwatcher/constants.py; layer_supported() skips a layer when N = max(rows, cols) > "
        f"max_N). Default describe() on this {head.shape[0]} x {head.shape[1]} head: "
        f"{'listed' if seen else 'NOT listed (skipped)'}; with max_N={head.shape[0] + 1}: "
        f"{'listed' if seen_raised else 'still not listed'}."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a 50,304 x 128 head (< 1 min)")
    args = parser.parse_args()
    n_rows, d = (50_304, 128) if args.quick else (50_304, 768)
    repeats = 3
    head = random_head(n_rows, d)
    print(f"head: {n_rows:,} x {d} float32; medians of {repeats} repeats")

    t_ref, reference = timed(lambda: np.linalg.svd(head.astype(np.float64), compute_uv=False), repeats)
    rows = [("numpy.linalg.svd, float64 (reference)", t_ref, reference)]
    t_gram, gram = timed(lambda: singular_values(head), repeats)
    rows.insert(0, ("Gram + eigvalsh, float64 (lmsat)", t_gram, gram))
    try:
        from weightwatcher import RMT_Util
    except ImportError:
        note = "weightwatcher is not installed: WeightWatcher row skipped (pip install weightwatcher)."
    else:
        t_ww, ww = timed(lambda: RMT_Util.svd_vals(head, method="accurate"), repeats)
        rows.append(("WeightWatcher svd_vals (scipy svd, input dtype)", t_ww, np.sort(ww)[::-1]))
        note = weightwatcher_default_sees(head)

    print(f"\n{'method':50s} {'seconds':>9s} {'max rel err':>12s} {'Gram faster by':>15s}")
    for name, seconds, s in rows:
        error = np.max(np.abs(s - reference) / reference)
        print(f"{name:50s} {seconds:9.3f} {error:12.2e} {seconds / t_gram:14.1f}x")
    print(f"\nNote: {note}")


if __name__ == "__main__":
    main()
