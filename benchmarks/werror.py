"""Benchmark: all singular values of a 5-gram matrix via the Gram matrix vs scipy svds.

    python benchmarks/werror.py            # 5M tokens, V = 8192, svds k = 1000 (minutes)
    python benchmarks/werror.py --quick    # 600k tokens, V = 4096, k = 250 (< 1 min)

Methods: "gram" = lmsat.bottleneck.werror.gram_spectrum (scipy eigvalsh, in place), "gram-torch" =
the same with torch.linalg.eigvalsh (MKL) on CPU (what the pipeline uses on CPU),
"gram-cuda" (with --cuda) the same on the GPU, "svds" = scipy.sparse.linalg.svds(k).
Threads: set OMP_NUM_THREADS (also used for torch) to compare at a fixed thread count.

The token stream is synthetic but text-like: a bank of phrases (1-8 tokens, Zipfian
unigrams) concatenated in Zipfian order of popularity, so frequent n-grams repeat and most
contexts are seen once, as in real text. Each method runs in a fresh subprocess (its peak
RSS is its own); time and memory exclude loading the matrix.

`svds(k)` ends with a dense (C x k) product Av and its SVD: for k = 1000 and millions of
contexts that alone is tens of GB. svds is handed W as a LinearOperator (svds wraps a
sparse matrix in one anyway: same products, W @ x and W^T @ y) whose matmat writes Av in
Fortran order, so svds's own `scipy.linalg.svd(Av, overwrite_a=True)` works in place;
given the sparse matrix itself, LAPACK's wrapper would first copy the C-ordered Av
(+8 bytes per entry). When even Av cannot fit in the memory available, the benchmark times
only svds's iterative stage (the very `eigsh` call on W^T W it makes, same operator,
tolerance and ncv) - a lower bound on svds's time - and says so.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import scipy.sparse
import scipy.sparse.linalg

from lmsat.bottleneck.ngrams import context_matrix, count_ngrams
from lmsat.bottleneck.werror import frobenius_norm, gram_spectrum, w_error_curve


def zipf_probabilities(n: int, exponent: float) -> np.ndarray:
    weights = 1.0 / np.arange(1, n + 1) ** exponent
    return weights / weights.sum()


def phrase_stream(n_tokens: int, vocab_size: int, n_phrases: int, seed: int = 0) -> np.ndarray:
    """(n_tokens,) int64: Zipf-popular phrases of Zipf-frequent tokens, concatenated."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 9, size=n_phrases)  # (n_phrases,)
    bank = rng.choice(vocab_size, size=lengths.sum(), p=zipf_probabilities(vocab_size, 1.1))
    phrase_starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    n_picks = int(n_tokens / lengths.mean() * 1.1) + 1
    picks = rng.choice(n_phrases, size=n_picks, p=zipf_probabilities(n_phrases, 1.0))
    picked_lengths = lengths[picks]
    offsets = np.arange(picked_lengths.sum()) - np.repeat(
        np.cumsum(picked_lengths) - picked_lengths, picked_lengths
    )
    positions = np.repeat(phrase_starts[picks], picked_lengths) + offsets
    return bank[positions][:n_tokens]


def _status_mb(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024  # kB
    raise RuntimeError(f"no {field} in /proc/self/status")


def reset_peak_rss() -> float:
    """Reset the kernel's peak-RSS mark (Linux >= 4.0) so loading the matrix is not counted;
    returns the current RSS in MB."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass  # then the peak includes the load
    return _status_mb("VmRSS")


def peak_rss_mb() -> float:
    try:
        return _status_mb("VmHWM")
    except (OSError, RuntimeError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: kB


def svds_iterative_stage(matrix, k: int, seed: int) -> np.ndarray:
    """The eigsh call svds makes (arpack solver, default tol and ncv): sqrt eigenvalues."""
    n_rows, n_cols = matrix.shape
    small = min(n_rows, n_cols)
    if n_rows >= n_cols:
        gram = scipy.sparse.linalg.LinearOperator(
            (small, small), matvec=lambda x: matrix.T @ (matrix @ x), dtype=np.float64
        )
    else:
        gram = scipy.sparse.linalg.LinearOperator(
            (small, small), matvec=lambda x: matrix @ (matrix.T @ x), dtype=np.float64
        )
    v0 = np.random.default_rng(seed).standard_normal(small)
    eigenvalues = scipy.sparse.linalg.eigsh(
        gram, k=k, tol=0, which="LM", v0=v0, return_eigenvectors=False
    )
    return np.sqrt(np.clip(eigenvalues, 0, None))


def svds_operator(matrix) -> scipy.sparse.linalg.LinearOperator:
    """W (C, V) as svds sees it, but with Fortran-ordered matmat output: Av (C, k) is then
    factorised in place by svds's final SVD instead of being copied for LAPACK."""
    adjoint = matrix.T.conj()  # what aslinearoperator(W) uses for W^H @ y

    def matmat(block: np.ndarray) -> np.ndarray:  # (V, k) -> (C, k), column-major
        out = np.empty((matrix.shape[0], block.shape[1]), order="F")
        for start in range(0, block.shape[1], 64):  # bounded temporary per slice
            out[:, start : start + 64] = matrix @ block[:, start : start + 64]
        return out

    return scipy.sparse.linalg.LinearOperator(
        matrix.shape,
        matvec=lambda x: matrix @ x,
        rmatvec=lambda y: adjoint @ y,
        matmat=matmat,
        rmatmat=lambda y: adjoint @ y,
        dtype=np.float64,
    )


def worker(method: str, matrix_path: str, k: int, out_path: str) -> None:
    matrix = scipy.sparse.load_npz(matrix_path).tocsr()
    if method.startswith("gram-"):
        import torch  # imported before the clock starts

        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", os.cpu_count())))
        if method == "gram-cuda":
            torch.cuda.init()  # context creation is not the eigensolver's cost
    baseline = reset_peak_rss()
    start = time.perf_counter()
    if method == "gram":
        values = gram_spectrum(matrix)
    elif method == "gram-torch":
        values = gram_spectrum(matrix, device="cpu")
    elif method == "gram-cuda":
        values = gram_spectrum(matrix, device="cuda")
    elif method == "svds":
        values = scipy.sparse.linalg.svds(
            svds_operator(matrix), k=k, return_singular_vectors=False, random_state=0
        )
    elif method == "svds-iterative-stage":
        values = svds_iterative_stage(matrix, k, seed=0)
    else:
        raise ValueError(f"unknown --worker method {method!r}")
    seconds = time.perf_counter() - start
    np.save(out_path, np.sort(values)[::-1])
    print(json.dumps({"seconds": seconds, "baseline_mb": baseline, "peak_mb": peak_rss_mb()}))


def run_worker(method: str, matrix_path: Path, k: int, out_path: Path) -> dict:
    result = subprocess.run(
        [
            sys.executable,
            __file__,
            "--worker",
            method,
            "--matrix",
            str(matrix_path),
            "--k",
            str(k),
            "--out",
            str(out_path),
        ],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise RuntimeError(f"{method} worker failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def available_memory_bytes() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, < 1 minute")
    parser.add_argument("--tokens", type=int, help="stream length (default 5M, quick 600k)")
    parser.add_argument("--vocab", type=int, help="vocabulary size (default 8192, quick 4096)")
    parser.add_argument("--k", type=int, help="singular values asked of svds (1000, quick 250)")
    parser.add_argument("--repeats", type=int, default=1, help="runs per method (median)")
    parser.add_argument(
        "--force-svds",
        action="store_true",
        help="run the full svds even when its dense step looks too big",
    )
    parser.add_argument(
        "--cuda", action="store_true", help="also time the Gram method on the GPU (gram-cuda)"
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--matrix", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.matrix, args.k, args.out)
        return

    n_tokens = args.tokens or (600_000 if args.quick else 5_000_000)
    vocab_size = args.vocab or (4096 if args.quick else 8192)
    k = args.k or (250 if args.quick else 1000)

    start = time.perf_counter()
    stream = phrase_stream(n_tokens, vocab_size, n_phrases=max(1000, n_tokens // 16))
    generate_s = time.perf_counter() - start
    start = time.perf_counter()
    counts = count_ngrams(np.array_split(stream, 8), order=5, vocab_size=vocab_size)
    count_s = time.perf_counter() - start
    start = time.perf_counter()
    matrix = context_matrix(counts)  # (C, V)
    matrix_s = time.perf_counter() - start
    n_contexts = matrix.shape[0]
    single = float(np.mean(np.diff(matrix.indptr) == 1))
    print(
        f"stream: {n_tokens:,} tokens, V={vocab_size}, {np.unique(stream).size} types used "
        f"(generated in {generate_s:.1f}s)"
    )
    print(
        f"5-grams: {len(counts):,} distinct, counted in {count_s:.1f}s; W: {n_contexts:,} x "
        f"{vocab_size}, nnz {matrix.nnz:,}, {single:.0%} of contexts have one next token "
        f"(built in {matrix_s:.1f}s)"
    )

    # svds's final dense step: Av (C x k) float64 and svd's finiteness mask (C x k) bool.
    svds_dense_bytes = n_contexts * k * (8 + 1)
    use_full_svds = args.force_svds or svds_dense_bytes < 0.85 * available_memory_bytes()
    svds_method = "svds" if use_full_svds else "svds-iterative-stage"

    gram_methods = ["gram", "gram-torch"] + (["gram-cuda"] if args.cuda else [])
    timings: dict[str, list[dict]] = {**{m: [] for m in gram_methods}, svds_method: []}
    with tempfile.TemporaryDirectory() as tmp:
        matrix_path = Path(tmp) / "W.npz"
        scipy.sparse.save_npz(matrix_path, matrix)
        for repeat in range(args.repeats):
            for method in timings:
                timings[method].append(
                    run_worker(method, matrix_path, k, Path(tmp) / f"{method}.npy")
                )
        all_values = np.load(Path(tmp) / "gram.npy")
        top_values = np.load(Path(tmp) / f"{svds_method}.npy")

    relative = np.abs(all_values[:k] - top_values) / all_values[:k]
    print(
        f"\ntop {k} singular values, gram vs {svds_method}: max relative difference "
        f"{relative.max():.2e}"
    )
    dims, werror = w_error_curve(all_values)
    _, werror_top = w_error_curve(top_values, frobenius_norm=frobenius_norm(matrix))
    print(f"W-error({k}): gram {werror[k]:.6f}, {svds_method} + ||W||_F {werror_top[k]:.6f}")
    milestones = {d: float(werror[d]) for d in (10, 100, 500, 1000, 2000, 4000) if d < dims.size}
    print(
        "W-error(d):",
        ", ".join(f"{d}: {w:.3f}" for d, w in milestones.items()),
        f"| halved at d={int(np.argmax(werror <= 0.5))}, "
        f"< 0.1 at d={int(np.argmax(werror < 0.1))}",
    )

    print(f"\n{'method':<24}{'values':>8}{'median s':>11}{'peak MB':>10}{'extra MB':>10}")
    medians = {}
    for method, runs in timings.items():
        seconds = statistics.median(r["seconds"] for r in runs)
        peak = statistics.median(r["peak_mb"] for r in runs)
        extra = statistics.median(r["peak_mb"] - r["baseline_mb"] for r in runs)
        medians[method] = (seconds, extra)
        n_values = all_values.size if method.startswith("gram") else k
        print(f"{method:<24}{n_values:>8}{seconds:>11.2f}{peak:>10.0f}{extra:>10.0f}")
    svds_s, svds_mb = medians[svds_method]
    print()
    for method in gram_methods:
        gram_s, gram_mb = medians[method]
        print(
            f"speed-up {method} vs {svds_method}: {svds_s / gram_s:.1f}x "
            f"(all {all_values.size} values vs the top {k}); "
            f"extra memory {svds_method} / {method}: {svds_mb / max(gram_mb, 1):.2f}x"
        )
    if not use_full_svds:
        print(
            f"full svds not run: its final dense (C x k) step needs ~{svds_dense_bytes / 2**30:.0f}"
            f" GiB, more than 85% of the {available_memory_bytes() / 2**30:.0f} GiB available "
            f"(--force-svds runs it anyway); the time above is a lower bound for svds"
        )


if __name__ == "__main__":
    main()
