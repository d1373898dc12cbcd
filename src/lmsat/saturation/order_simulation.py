"""Error rates of the order of events from planted truth (docs/event_order.md, benchmarks/event_order_rates.py).

A simulated model has a loss that falls fast, bottoms out at a planted checkpoint and rises
to the final by `rise_se` standard errors of a paired difference, scored on `n_units` eval
sequences (each with its own difficulty, which pairing cancels, and its own noise at each
checkpoint); and two series with a planted change of slope (a kink) `lead` steps before the
loss's bottom (negative: after; None: no change at all): one measured on the same
sequences (its per-sequence influence given, as a cache metric's), one of the weights alone.
Both wobble from checkpoint to checkpoint (training's noise) by `wobble` of the kink's size
(the kink moves the series by 1 between it and the final).

    runs = planted_runs(GRIDS["pythia"], lead=3000, runs=200)
    rates = verdict_rates(runs)      # {series kind: {verdict: share}}
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from lmsat.saturation.event_order import SAMPLE, WEIGHTS, SeriesData, order_events


def _pythia_steps() -> np.ndarray:
    """Pythia's 154 revisions: 0, 1, 2, 4, ..., 512, then every 1000 to 143000."""
    return np.array([0, *(2**i for i in range(10)), *range(1000, 143001, 1000)], dtype=np.int64)


def _published_steps() -> np.ndarray:
    """The grid of EleutherAI's published Pythia evaluations (27 steps: 0 to 512, 1000, 3000,
    then every 10000 from 13000 to 143000; lmsat.data.published_evals)."""
    return np.array([0, *(2**i for i in range(10)), 1000, 3000, *range(13000, 143001, 10000)], dtype=np.int64)


GRIDS = {
    "toy": np.array([0, 1, 4, 16, 64, 200, 400, 600, 800], dtype=np.int64),  # the default run's toy schedule
    "own run (20 checkpoints)": np.arange(20, 401, 20, dtype=np.int64),  # a Trainer run, save_steps=20
    "published record": _published_steps(),
    "pythia": _pythia_steps(),
}


@dataclass(frozen=True)
class Planted:
    """One simulated model: its grid, what was planted, and the data order_events reads."""

    steps: np.ndarray  # (K,)
    best: int  # index of the loss's planted bottom
    kink: float | None  # step of the series' planted change (None: no change)
    losses: np.ndarray  # (K, n)
    sample: SeriesData
    weights: SeriesData


def planted_run(steps, rng, lead: float | None, best_fraction: float = 0.6, rise_se: float = 8.0,
                n_units: int = 64, wobble: float = 0.1, sampling: float = 0.05, kink_steps: float | None = None) -> Planted:
    """A model on grid `steps` with its loss's bottom at the checkpoint nearest best_fraction
    of training and its series' kink `lead` steps before it (kink_steps: at that step
    instead). rise_se: the rise from the bottom to the final, in paired standard errors (the
    fall before the bottom, after the fast phase, as large); wobble: the series' independent
    noise per checkpoint, sampling: its eval-sample noise (shared by the checkpoints through
    the sequences), both in units of the kink's effect at the final."""
    steps = np.asarray(steps, dtype=np.float64)
    k = len(steps)
    best = int(np.argmin(np.abs(steps - best_fraction * steps[-1])))
    t_best, t_end = steps[best], steps[-1]
    # the loss: a fast fall (done by a tenth of training), then a V whose arms are rise_se paired SEs deep
    noise_sd = 1.0
    se = noise_sd * np.sqrt(2.0 / n_units)  # paired SE of a difference of two checkpoints' means
    depth = rise_se * se
    fast = 100.0 * depth * np.exp(-steps / (0.03 * t_end))
    curve = fast + depth * np.maximum(t_best - steps, 0) / t_best + depth * np.maximum(steps - t_best, 0) / (t_end - t_best)
    difficulty = rng.normal(0.0, 3.0, n_units)  # cancels in pairs
    losses = 20.0 + curve[:, None] + difficulty[None, :] + rng.normal(0.0, noise_sd, (k, n_units))  # (K, n), > 0
    kink = None if lead is None and kink_steps is None else (kink_steps if kink_steps is not None else t_best - lead)
    trend = 0.3 * steps / t_end  # a slope before the kink: the change is of the trend, not from flat
    shape = trend if kink is None else trend + np.maximum(steps - kink, 0) / max(t_end - kink, 1.0)
    per_sequence = rng.normal(0.0, sampling * np.sqrt(n_units), (k, n_units))  # each sequence's part, mean ~ sampling
    per_sequence += rng.normal(0.0, sampling * np.sqrt(n_units), n_units)[None, :]  # a sequence's lasting part
    sample_values = shape + rng.normal(0.0, wobble, k) + per_sequence.mean(axis=1)
    influence = (per_sequence - per_sequence.mean(axis=1, keepdims=True)) / n_units  # (K, n)
    weights_values = shape + rng.normal(0.0, wobble, k)
    return Planted(steps.astype(np.int64), best, kink, losses, SeriesData("sample", SAMPLE, sample_values, influence),
                   SeriesData("weights", WEIGHTS, weights_values))


def planted_runs(steps, lead: float | None, runs: int, seed: int = 0, **planted) -> list[Planted]:
    rng = np.random.default_rng(seed)
    return [planted_run(steps, rng, lead, **planted) for _ in range(runs)]


def verdict_counts(runs: list[Planted], alpha: float = 0.05, replicates: int = 200, draws: int = 1000) -> dict:
    """{"loss" | "sample" | "weights": Counter of verdicts} over the simulated runs."""
    counts = {"loss": Counter(), SAMPLE: Counter(), WEIGHTS: Counter()}
    for run in runs:
        _, events = order_events(run.steps, run.steps.astype(np.float64), run.losses, [run.sample, run.weights],
                                 alpha=alpha, replicates=replicates, draws=draws, verdict_draws=draws)
        for event in events:
            counts[event.kind if event.kind != "loss" else "loss"][event.verdict] += 1
    return counts


def verdict_rates(runs: list[Planted], **options) -> dict:
    """verdict_counts as shares of the runs."""
    return {kind: {verdict: n / len(runs) for verdict, n in counter.items()}
            for kind, counter in verdict_counts(runs, **options).items()}
