"""The saturation verdict's error rates with a real run's own noise (docs/saturation.md).

    python benchmarks/verdict_rates.py export results/default/cache/toy-d64   # -> tests/data/toy_sequence_losses.csv
    python benchmarks/verdict_rates.py rates                                  # the table docs/saturation.md quotes
    python benchmarks/verdict_rates.py rates --curves 2000 --draws 20000
    python benchmarks/verdict_rates.py coverage                               # the interval's coverage

`export` writes the per-sequence mean losses (lmsat.saturation.verdict.sequence_means of each cache's
`loss` dataset) of one model's checkpoints, one column per step. `rates` resamples its
sequences about a flat curve (the size) and about curves that fall, bottom out at the
3rd-last checkpoint and rise to the final by 1 ... 5 standard errors of the paired best-to-final
difference (the power), as tests/test_verdict.py does (rise_curve). `coverage` says how often
the interval [rise_low, rise_high] holds the true rise of the final above the best earlier
checkpoint, on a flat curve, a rising one and one still falling (the final the lowest).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import h5py
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

from lmsat.saturation.verdict import sequence_means, simulated_coverage, simulated_rate  # noqa: E402

DATA = ROOT / "tests" / "data" / "toy_sequence_losses.csv"


def export(cache_dir: Path, out: Path) -> None:
    caches = sorted(cache_dir.glob("step*.h5"), key=lambda p: int(p.stem[4:]))
    columns = {}
    for path in caches:
        with h5py.File(path, "r") as f:
            columns[path.stem] = sequence_means(f["loss"][...])  # (n_seq,): the loss dataset only
    table = pd.DataFrame(columns)
    table.insert(0, "sequence", range(len(table)))
    with open(out, "w", encoding="utf-8") as handle:
        handle.write(f"# benchmarks/verdict_rates.py export {cache_dir}: per-sequence mean token loss (nats)"
                     " at each checkpoint, the default toy run's caches\n")
        table.to_csv(handle, index=False, float_format="%.9g")
    print(f"wrote {out}: {len(table)} sequences x {len(caches)} checkpoints")


def rates(curves: int, draws: int, alpha: float) -> None:
    from test_verdict import rise_curve

    losses = pd.read_csv(DATA, comment="#").drop(columns="sequence").to_numpy().T  # (K, n)
    size, hits, se = simulated_rate(losses, None, curves=curves, alpha=alpha, draws=draws, seed=1)
    bound = 3 * math.sqrt(alpha * (1 - alpha) / curves)
    print(f"{DATA.name}: {losses.shape[1]} sequences x {losses.shape[0]} checkpoints; {curves} curves each, "
          f"{draws} null draws, alpha {alpha}")
    print(f"flat curve: saturates in {hits} of {curves} ({size:.3f}; alpha + 3 binomial SE = {alpha + bound:.3f})")
    print("| true rise (SE) | rise (nats) | detected |")
    print("| --- | --- | --- |")
    for rise in (1, 2, 3, 4, 5):
        power, hits, se = simulated_rate(losses, rise_curve(float(rise), len(losses)), curves=curves, alpha=alpha, draws=draws,
                                        seed=2)
        print(f"| {rise} | {rise * se:.4f} | {power:.3f} ({hits}/{curves}) |", flush=True)


def coverage(curves: int, draws: int, alpha: float) -> None:
    from test_verdict import COVERAGE_CURVES

    losses = pd.read_csv(DATA, comment="#").drop(columns="sequence").to_numpy().T  # (K, n)
    print(f"{DATA.name}: {losses.shape[1]} sequences x {losses.shape[0]} checkpoints; {curves} curves each, "
          f"{draws} null draws, alpha {alpha}: share of runs whose bound holds the true rise theta")
    print(f"| true curve | theta (nats) | rise_low <= theta | rise_high >= theta | both ({1 - 2 * alpha:.0%} claimed) |")
    print("| --- | --- | --- | --- | --- |")
    for name, shape in COVERAGE_CURVES.items():
        found = simulated_coverage(losses, shape(len(losses)), curves=curves, alpha=alpha, draws=draws, seed=3)
        print(f"| {name} | {found['theta']:+.4f} | {found['low']:.3f} | {found['high']:.3f} | {found['both']:.3f} |",
              flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    e = sub.add_parser("export")
    e.add_argument("cache_dir", type=Path)
    e.add_argument("--out", type=Path, default=DATA)
    r = sub.add_parser("rates")
    r.add_argument("--curves", type=int, default=1000)
    r.add_argument("--draws", type=int, default=2000)
    r.add_argument("--alpha", type=float, default=0.05)
    c = sub.add_parser("coverage")
    c.add_argument("--curves", type=int, default=1000)
    c.add_argument("--draws", type=int, default=2000)
    c.add_argument("--alpha", type=float, default=0.05)
    args = parser.parse_args()
    if args.command == "export":
        export(args.cache_dir, args.out)
    elif args.command == "rates":
        rates(args.curves, args.draws, args.alpha)
    else:
        coverage(args.curves, args.draws, args.alpha)


if __name__ == "__main__":
    main()
