"""Benchmark: exact O(n d) anisotropy vs brute-force pairwise cosine vs sampled cosine score.

    python benchmarks/anisotropy.py           # n = 50,000, d = 768 (brute force takes minutes)
    python benchmarks/anisotropy.py --quick   # n = 5,000, under a minute

Methods, on the same anisotropic float32 data (Gaussian cloud + common offset):
  * exact-O(nd): lmsat.degeneration.anisotropy.mean_pairwise_cosine (sum of unit vectors, float64).
  * brute force: lmsat.degeneration.anisotropy.mean_pairwise_cosine_bruteforce, all n^2 cosines in
    float64 blocks; its value is the reference every error is measured against.
  * IsoScore-style cosine score: mean cosine of 100,000 random pairs drawn with replacement
    (i == j possible), as `cosine_score` in the IsoScore repository
    (bcbi-edu/p_eickhoff_isoscore, existing_scores.py) does, one sklearn
    `cosine_similarity` call per pair. The PyPI package IsoScore 2.0.1 ships only
    IsoScore/IsoScore*, not this score, so it is re-implemented here (same sampling, same
    per-pair sklearn call). Its per-pair Python loop is timed on fewer pairs in --quick mode
    and extrapolated to 100k (printed as such).
  * sampled, vectorised: the same 100k-pair estimator in one numpy expression, to separate
    the cost of sampling from the cost of the Python loop.
"""

import argparse
import statistics
import time

import numpy as np

from lmsat.degeneration.anisotropy import mean_pairwise_cosine, mean_pairwise_cosine_bruteforce

N_PAIRS = 100_000


def anisotropic_data(n: int, d: int, offset: float = 1.0, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    common = rng.normal(size=d)
    common /= np.linalg.norm(common)
    return (rng.normal(size=(n, d)) + offset * np.sqrt(d) * common).astype(np.float32)


def timed(function, repeats: int) -> tuple[float, object]:
    """(median seconds, last result) over `repeats` calls."""
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def isoscore_style_loop(h: np.ndarray, n_pairs: int, seed: int) -> float:
    """Mean cosine of n_pairs random pairs, one sklearn call per pair (IsoScore's way)."""
    from sklearn.metrics.pairwise import cosine_similarity

    rng = np.random.default_rng(seed)
    total = 0.0
    for _ in range(n_pairs):
        i, j = rng.integers(len(h)), rng.integers(len(h))
        total += cosine_similarity(h[i : i + 1], h[j : j + 1])[0, 0]
    return total / n_pairs


def sampled_vectorised(h: np.ndarray, n_pairs: int, seed: int, batch: int = 10_000) -> float:
    rng = np.random.default_rng(seed)
    i, j = rng.integers(len(h), size=n_pairs), rng.integers(len(h), size=n_pairs)
    total = 0.0
    for start in range(0, n_pairs, batch):  # batches keep the gathered rows small
        a = h[i[start : start + batch]].astype(np.float64)  # (batch, d)
        b = h[j[start : start + batch]].astype(np.float64)
        dots = np.einsum("bd,bd->b", a, b)
        total += float(np.sum(dots / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))))
    return total / n_pairs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n = 5,000 and fewer loop pairs (< 1 min)")
    args = parser.parse_args()
    n, d = (5_000, 768) if args.quick else (50_000, 768)
    repeats = 3 if args.quick else 5
    loop_pairs = 2_000 if args.quick else N_PAIRS
    h = anisotropic_data(n, d)
    print(f"data: n={n:,} d={d} float32, anisotropic; medians of {repeats} repeats unless noted")

    t_exact, exact = timed(lambda: mean_pairwise_cosine(h), repeats)
    t_brute, reference = timed(lambda: mean_pairwise_cosine_bruteforce(h), 1)
    t_vec, sampled = timed(lambda: sampled_vectorised(h, N_PAIRS, seed=1), repeats)
    t_loop, looped = timed(lambda: isoscore_style_loop(h, loop_pairs, seed=2), 1)
    t_loop_100k = t_loop * N_PAIRS / loop_pairs

    rows = [
        ("exact O(nd) (lmsat)", t_exact, exact, f"median of {repeats}"),
        ("brute force, all pairs, float64", t_brute, reference, "1 run (reference value)"),
        ("sampled 100k pairs, vectorised", t_vec, sampled, f"median of {repeats}"),
        (
            "IsoScore-style cosine score (100k pairs, per-pair sklearn)",
            t_loop_100k,
            looped,
            "1 run" if loop_pairs == N_PAIRS else f"time extrapolated from {loop_pairs:,} pairs; value from those",
        ),
    ]
    print(f"\n{'method':60s} {'seconds':>10s} {'A(H)':>12s} {'|err| vs exact':>15s} {'slower than O(nd)':>18s}  note")
    for name, seconds, value, note in rows:
        print(
            f"{name:60s} {seconds:10.4f} {value:12.8f} {abs(value - reference):15.2e} "
            f"{seconds / t_exact:17.1f}x  {note}"
        )


if __name__ == "__main__":
    main()
