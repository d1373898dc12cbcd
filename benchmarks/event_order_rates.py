"""The order of events' error rates from planted truth (docs/event_order.md quotes the tables).

    python benchmarks/event_order_rates.py                      # every grid, 200 runs per cell
    python benchmarks/event_order_rates.py --grids pythia --runs 400

Each simulated model (lmsat.saturation.order_simulation.planted_run) has a loss that falls
fast, bottoms out at 60% of training and rises to the final by --rise-se paired standard
errors over --units eval sequences, and two series with a kink (a change of slope) planted
`lead` before the loss's bottom: one measured on the same sequences (sample: the
sequences resampled), one of the weights alone (weights). Both wobble from checkpoint to
checkpoint by --wobble of the kink's effect at the final (training's noise), the sample one
also by --sampling through its sequences. The truths: no change at all (an independent
series), the kink with the loss's bottom (lead 0), after it (lags), before it (leads) by a
share of training. Grids: the toy's schedule, an own Trainer run saving every 20 steps, the
published record's 27 steps, Pythia's 154 revisions.

It prints, per grid, the share of runs given each verdict, and the error rates: a false
lead (`leads` where the truth is no change, together, or a lag) must be at most alpha.
Numbers are single-threaded (OPENBLAS_NUM_THREADS=1): the Monte Carlo's small
eigendecompositions are slower threaded on a busy machine.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from lmsat.saturation.event_order import LAGS, LEADS, NO_CHANGE, NO_RISE, SAMPLE, TOGETHER, TOO_FEW, WEIGHTS  # noqa: E402
from lmsat.saturation.order_simulation import GRIDS, planted_runs, verdict_counts  # noqa: E402

SHOWN = (LEADS, TOGETHER, LAGS, NO_CHANGE, TOO_FEW, NO_RISE)
TRUTHS = (("no change (independent)", None), ("together (lead 0)", 0.0), ("lags by 10%", -0.1),
          ("leads by 2%", 0.02), ("leads by 5%", 0.05), ("leads by 10%", 0.1), ("leads by 20%", 0.2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grids", nargs="*", default=list(GRIDS), choices=list(GRIDS))
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--rise-se", type=float, default=20.0)
    parser.add_argument("--units", type=int, default=64)
    parser.add_argument("--wobble", type=float, default=0.05)
    parser.add_argument("--sampling", type=float, default=0.02)
    parser.add_argument("--alpha", type=float, default=0.05)
    args = parser.parse_args()
    bound = args.alpha + 3 * math.sqrt(args.alpha * (1 - args.alpha) / args.runs)
    print(f"{args.runs} runs per cell; loss rise {args.rise_se:g} paired SE over {args.units} sequences; series wobble "
          f"{args.wobble:g}, sampling {args.sampling:g} of the kink's effect; alpha {args.alpha:g} (alpha + 3 binomial "
          f"SE = {bound:.3f}); leads as a share of training steps")
    for grid in args.grids:
        steps = GRIDS[grid]
        started = time.perf_counter()
        print(f"\n### {grid}: {len(steps)} checkpoints, steps {steps[0]:,} to {steps[-1]:,}\n")
        print("| truth | series | " + " | ".join(SHOWN) + " |")
        print("| --- | --- | " + " | ".join("---" for _ in SHOWN) + " |")
        false_leads, false_lags = [], []
        for seed, (truth, share) in enumerate(TRUTHS):
            lead = None if share is None else share * float(steps[-1])
            runs = planted_runs(steps, lead, args.runs, seed=seed, rise_se=args.rise_se, n_units=args.units,
                                wobble=args.wobble, sampling=args.sampling)
            counts = verdict_counts(runs, alpha=args.alpha)
            for kind in (SAMPLE, WEIGHTS):
                shares = {v: counts[kind][v] / args.runs for v in SHOWN}
                print(f"| {truth} | {kind} | " + " | ".join(f"{shares[v]:.3f}" for v in SHOWN) + " |", flush=True)
                if share is None or share <= 0:
                    false_leads.append((shares[LEADS], truth, kind))
                if share is None or share >= 0:
                    false_lags.append((shares[LAGS], truth, kind))
        worst = max(false_leads)
        print(f"\nfalse lead (leads where the truth is no change, together or a lag): at most {worst[0]:.3f} "
              f"({worst[1]}, {worst[2]}); {'within' if worst[0] <= bound else 'ABOVE'} alpha + 3 SE = {bound:.3f}")
        worst = max(false_lags)
        print(f"false lag (lags where the truth is no change, together or a lead): at most {worst[0]:.3f} "
              f"({worst[1]}, {worst[2]})")
        print(f"({time.perf_counter() - started:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
