"""Benchmark: what mp_softrank_margin costs WeightWatcher's MP fit (lmsat.degeneration.weight_diagnostics),
side by side in one process: the fit with its margin against the same fit without it, on the
eigenvalues of the matrices the default run and a Pythia-160m-shaped model diagnose.

    .venv/bin/python benchmarks/mp_margin.py            # prints CPU seconds of each and the ratio
    .venv/bin/python benchmarks/mp_margin.py --repeats 5

The eigenvalues are those of random matrices with a rank-one spike (the MP fit's cost depends
on their number and spread, not on training): the toy suite's 9 matrices per checkpoint at
d = 16, 32, 64, 128 (attention.query_key_value 3d x d, attention.dense d x d, the MLP's 4d x d
and d x 4d, the head's 514 rows) and Pythia-160m's 49 (d = 768, 12 blocks, the head's 50,277
rows: its 768 eigenvalues from a 768 x 768 Gram, as the job computes them). Without the margin
is the fit with lmsat.degeneration.weight_diagnostics._mp_margin replaced by a constant, the
rest unchanged; the two alternate per repeat, and the median CPU seconds of each are compared.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from lmsat.degeneration import weight_diagnostics


def shapes(d: int, blocks: int, head_rows: int) -> list[tuple[int, int]]:
    """(n, m) of every matrix the checkpoint job diagnoses in a GPT-NeoX of width d."""
    block = [(3 * d, d), (d, d), (4 * d, d), (4 * d, d)]  # query_key_value, dense, h_to_4h, 4h_to_h (n >= m)
    return block * blocks + [(head_rows, d)]


def spectra(pairs, seed: int = 0) -> list[tuple[np.ndarray, int, int]]:
    """Eigenvalues of W^T W for a random n x m W with a rank-one spike, per (n, m) pair."""
    rng = np.random.default_rng(seed)
    found = []
    for n, m in pairs:
        w = rng.normal(size=(n, m)) + rng.uniform(1, 6) * np.outer(rng.normal(size=n), rng.normal(size=m)) / np.sqrt(m)
        found.append((np.linalg.eigvalsh(w.T @ w), n, m))
    return found


def cpu_seconds(cases) -> float:
    start = time.process_time()
    for evals, n, m in cases:
        weight_diagnostics.fit_marchenko_pastur(evals, n, m)
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    suites = {
        "default run (4 toys x 9 checkpoints)": spectra([s for d in (16, 32, 64, 128) for s in shapes(d, 2, 514)] * 9),
        "pythia-160m-shaped (one checkpoint)": spectra(shapes(768, 12, 50_277), seed=1),
    }
    with_margin = weight_diagnostics._mp_margin
    for name, cases in suites.items():
        timed = {"with": [], "without": []}
        for _ in range(args.repeats):
            weight_diagnostics._mp_margin = with_margin
            timed["with"].append(cpu_seconds(cases))
            weight_diagnostics._mp_margin = lambda *parts: 0.0
            timed["without"].append(cpu_seconds(cases))
        weight_diagnostics._mp_margin = with_margin
        a, b = statistics.median(timed["with"]), statistics.median(timed["without"])
        print(f"{name}: {len(cases)} MP fits, CPU s with the margin {a:.2f}, without {b:.2f}, ratio {a / b:.2f}")


if __name__ == "__main__":
    main()
