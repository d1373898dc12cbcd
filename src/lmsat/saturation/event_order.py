"""Which comes first: a series' change of trend (the head's degeneration, the representations'
anisotropy, ...) or the loss's rise? Per model, with error rates (docs/event_order.md).

Events, dated on the checkpoint grid:
- **the loss's rise**: its best (loss-minimising) checkpoint, as the saturation verdict dates it
  (lmsat.saturation.verdict), with a confidence set for which checkpoint is truly best:
  every checkpoint whose loss no other checkpoint beats beyond noise (multiple comparisons
  with the best, Hsu 1984: a paired max-t test per candidate over the same eval sequences).
- **a series' change of trend**: the breakpoint of the best continuous two-piece linear fit
  (a hinge: y = a + b t + c (t - t_k)_+, t the training step) over the *window*, the
  checkpoints after the loss's fast fall (from the first that has made FAST_FALL of the
  loss's fall to its lowest, to the final), at a checkpoint of the window with one at least
  on each side. A change exists when the hinge beats a straight line beyond noise: the
  sup-F statistic max_k (RSS_line - RSS_k) / (RSS_k / (m - 3)), whose null distribution
  under a line plus independent Gaussian noise depends on the grid only (Monte Carlo).
  Its confidence set: the breakpoints whose fit is not worse than the best beyond noise
  (profile likelihood, F(1, m - 4)), which carries the checkpoint-to-checkpoint wobble of
  training; for a series measured on the eval sample, joined with the breakpoints of
  `REPLICATES` bootstrap resamples of the eval sequences (the same resamples for every
  series of a model: per-sequence influence values, `influence`).
- **resolution**: the loss's best is a checkpoint, but a series' change may fall between two:
  its confidence set is widened by one checkpoint on each side, so a bound of the lead is
  right whenever both sets hold their truths, wherever the change falls between checkpoints.

The lead of a series over the rise is (rise's step) - (series' onset step): positive, the
series changed first. Its bounds combine the two sets, each at level 1 - alpha / 2, so each
bound is wrong with probability at most alpha (the interval is a 1 - 2 alpha one, as the
verdict's). Verdicts: `leads` (the lower bound above 0), `lags` (the upper bound below 0),
`together within the resolution` (the interval holds 0: the order is not resolved; not
evidence that they coincide), `no change` (no change of trend beyond noise), `no rise` (the
model's loss does not rise: nothing to order against), `too few checkpoints` (a window of
fewer than MIN_WINDOW measured checkpoints).

    verdict, events = order_events(steps, tokens, per_sequence_losses, [SeriesData(...), ...])

Temporal order is necessary for a cause, not sufficient: see docs/event_order.md.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

import numpy as np

from lmsat.saturation.verdict import (
    DEFAULT_ALPHA,
    DEFAULT_MIN_CHECKPOINTS,
    SATURATES,
    Verdict,
    max_z_quantile,
    verdict_from_paired,
)

LEADS, LAGS, TOGETHER = "leads", "lags", "together within the resolution"
NO_CHANGE, NO_RISE, TOO_FEW = "no change", "no rise", "too few checkpoints"
RISE = "rise"  # the loss row's verdict when the model saturates (the reference the others are ordered against)
ORDER_VERDICTS = (LEADS, LAGS, TOGETHER, NO_CHANGE, NO_RISE, TOO_FEW)
ORDERED = (LEADS, LAGS)  # the verdicts that claim an order; the others are "no evidence of order"
SAMPLE, WEIGHTS, LOSS = "sample", "weights", "loss"
FAST_FALL = 0.9  # the window starts once the loss has made 90% of its fall to its lowest
MIN_WINDOW = 5  # a hinge (3 parameters and its breakpoint) and one degree of freedom for its noise
REPLICATES = 400  # bootstrap resamples of the eval sequences per model
NULL_DRAWS = 4000  # Monte Carlo draws of the sup-F null and of each best-set critical value
SEED = 0  # fixed: the same data give the same table on every run


@dataclass(frozen=True)
class SeriesData:
    """One series of a model along its checkpoints (the loss's steps)."""

    name: str
    kind: str  # SAMPLE (measured on the eval sample) or WEIGHTS (of the weights alone)
    values: np.ndarray  # (K,) one per checkpoint; NaN where not measured
    # (K, n): d value / d weight of each eval sequence at weight 1 (the linearised statistic), the
    # same n sequences as the loss's; None where unknown (a WEIGHTS series, records of an older lmsat)
    influence: np.ndarray | None = None


@dataclass(frozen=True)
class Event:
    """One row of the table event_order: a series' event and its order against the loss's rise."""

    series: str
    kind: str  # LOSS, SAMPLE or WEIGHTS
    verdict: str  # RISE / NO_RISE for the loss; one of ORDER_VERDICTS for a series
    window_start_step: int  # the first checkpoint of the window (-1: none)
    window_checkpoints: int  # measured checkpoints in it
    onset_step: int  # the loss's best checkpoint, or the series' breakpoint (-1: none)
    onset_tokens: float
    onset_low_step: int  # the confidence set's first checkpoint (a series': less one, the resolution)
    onset_high_step: int  # its last checkpoint (a series': plus one)
    onset_low_tokens: float
    onset_high_tokens: float
    change_p_value: float  # the sup-F test of a change of trend (nan for the loss)
    slope_before: float  # the hinge's slopes, per 1000 steps (nan for the loss)
    slope_after: float
    lead_steps: float  # (rise's step) - (onset step): > 0, the series first; nan where no order is sought
    lead_low_steps: float
    lead_high_steps: float
    lead_tokens: float
    lead_low_tokens: float
    lead_high_tokens: float
    resampled: str  # what the onset's interval carries
    alpha: float

    def as_row(self) -> dict:
        return asdict(self)


EVENT_COLUMNS = tuple(f.name for f in fields(Event))


def fast_fall_end(loss) -> int:
    """Index of the first checkpoint at or before the lowest loss that has made FAST_FALL of
    the fall from the highest loss before it to the lowest: the window's start. The early
    phase, where every series changes at once, is left out."""
    loss = np.asarray(loss, dtype=np.float64)
    best = int(np.argmin(loss))
    top = float(loss[: best + 1].max())
    threshold = float(loss[best]) + (1 - FAST_FALL) * (top - float(loss[best]))
    return int(np.flatnonzero(loss[: best + 1] <= threshold)[0])


# ---------------------------------------------------------------- the hinge


def _scaled(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    span = x[-1] - x[0]
    if x.ndim != 1 or len(x) < MIN_WINDOW or not span > 0 or np.any(np.diff(x) <= 0):
        raise ValueError(f"a hinge needs >= {MIN_WINDOW} increasing steps, got {x.tolist()}")
    return (x - x[0]) / span


def _hinge_basis(x) -> tuple[np.ndarray, np.ndarray]:
    """(R, U): R (m, m) takes the straight-line fit out of a series; U (m - 2, m), row c the
    unit vector of the hinge at interior point c + 1 with the line taken out. The hinge at c
    lowers the line's RSS by (U[c] . R y)^2."""
    x = _scaled(x)
    m = len(x)
    line = np.stack([np.ones(m), x], axis=1)  # (m, 2)
    q, _ = np.linalg.qr(line)
    residualizer = np.eye(m) - q @ q.T  # (m, m)
    hinges = np.maximum(x[None, :] - x[1:-1, None], 0.0) @ residualizer  # (m - 2, m)
    return residualizer, hinges / np.linalg.norm(hinges, axis=1, keepdims=True)


def hinge_scan(x, values) -> tuple[np.ndarray, np.ndarray]:
    """(RSS of the line (R,), RSS of the hinge at each interior point (m - 2, R)) of the
    columns of `values` (m, R) over steps x (m,)."""
    residualizer, hinges = _hinge_basis(x)
    residual = residualizer @ np.asarray(values, dtype=np.float64)  # (m, R)
    rss_line = (residual**2).sum(axis=0)  # (R,)
    rss = rss_line[None, :] - (hinges @ residual) ** 2  # (m - 2, R)
    return rss_line, np.clip(rss, 0.0, None)


def _sup_f(rss_line: np.ndarray, rss: np.ndarray, m: int) -> np.ndarray:
    best = rss.min(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        statistic = (rss_line - best) / (best / (m - 3))
    statistic[rss_line <= 0] = 0.0  # a straight (or constant) series: nothing to explain
    return statistic


_NULLS: dict[tuple, np.ndarray] = {}


def sup_f_null(x, draws: int = NULL_DRAWS, seed: int = SEED) -> np.ndarray:
    """Sorted draws of the sup-F statistic under a straight line plus independent Gaussian
    noise on steps x: it depends on the grid only (the line and the noise's scale cancel)."""
    key = (tuple(np.round(_scaled(x), 12)), draws, seed)
    if key not in _NULLS:
        noise = np.random.default_rng(seed).standard_normal((len(key[0]), draws))  # (m, draws)
        _NULLS[key] = np.sort(_sup_f(*hinge_scan(x, noise), len(key[0])))
    return _NULLS[key]


def change_test(x, y, draws: int = NULL_DRAWS, seed: int = SEED) -> tuple[float, float]:
    """(sup-F, its Monte Carlo p-value): does a hinge beat a straight line beyond noise?"""
    y = np.asarray(y, dtype=np.float64)
    if np.ptp(y) == 0:  # a constant series (identical weights at every checkpoint): no trend to change
        return 0.0, 1.0
    rss_line, rss = hinge_scan(x, y[:, None])
    statistic = float(_sup_f(rss_line, rss, len(y))[0])
    null = sup_f_null(x, draws, seed)
    exceed = len(null) - np.searchsorted(null, statistic, side="left")
    return statistic, float((exceed + 1) / (len(null) + 1))


def breakpoint_set(x, y, alpha: float) -> tuple[int, np.ndarray]:
    """(the best breakpoint, the breakpoints of the 1 - alpha profile-likelihood set), as
    indices into x: those whose hinge's RSS exceeds the lowest by at most F(1, m - 4; 1 - alpha)
    times the lowest's variance estimate. Wide when the change is small against the noise."""
    import scipy.stats

    rss = hinge_scan(x, np.asarray(y, dtype=np.float64)[:, None])[1][:, 0]  # (m - 2,)
    m, lowest = len(y), float(rss.min())
    inside = rss - lowest <= scipy.stats.f.ppf(1 - alpha, 1, m - 4) * lowest / (m - 4)
    return int(np.argmin(rss)) + 1, np.flatnonzero(inside) + 1


def hinge_slopes(x, y, at: int) -> tuple[float, float]:
    """(slope before, slope after) of the hinge at index `at`, in units of y per unit of x."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    design = np.stack([np.ones_like(x), x - x[at], np.maximum(x - x[at], 0.0)], axis=1)
    coefficients = np.linalg.lstsq(design, y, rcond=None)[0]
    return float(coefficients[1]), float(coefficients[1] + coefficients[2])


# ---------------------------------------------------------------- the loss's best checkpoint


def best_set(per_unit_losses, alpha: float, draws: int = NULL_DRAWS, seed: int = SEED) -> tuple[int, np.ndarray]:
    """(the best checkpoint, a 1 - alpha confidence set of the truly best), as indices: each
    checkpoint k that no other beats beyond noise, i.e. max_j t(loss_k - loss_j) at most the
    1 - alpha quantile of that maximum under "k is best" (paired over the units, multivariate
    t with n - 1 degrees of freedom, as the verdict's critical value). That quantile lies
    between the one-sided t quantile of one comparison and the Bonferroni bound over K - 1, so
    only the checkpoints between the two need its Monte Carlo."""
    import scipy.stats

    losses = np.asarray(per_unit_losses, dtype=np.float64)  # (K, n)
    k, n = losses.shape
    means = losses.mean(axis=1)
    best = int(np.argmin(means))
    if k < 2:
        return best, np.array([best])
    covariance = np.cov(losses, ddof=1) / n  # (K, K) of the checkpoints' means
    variance = np.diag(covariance)
    single = float(scipy.stats.t.ppf(1 - alpha, n - 1))
    bonferroni = float(scipy.stats.t.ppf(1 - alpha / (k - 1), n - 1))
    members = []
    for candidate in range(k):
        others = np.delete(np.arange(k), candidate)
        mean = means[candidate] - means[others]  # (K - 1,)
        # cov(L_c - L_i, L_c - L_j) = C_cc - C_ci - C_cj + C_ij
        difference_cov = (covariance[candidate, candidate] - covariance[candidate, others][:, None]
                          - covariance[candidate, others][None, :] + covariance[np.ix_(others, others)])
        se = np.sqrt(np.clip(variance[candidate] + variance[others] - 2 * covariance[candidate, others], 0.0, None))
        exact = se <= 1e-15 * (np.abs(means[candidate]) + 1)  # identical checkpoints: no noise in their difference
        if np.any(mean[exact] > 0):
            continue
        used = ~exact
        t_max = float((mean[used] / se[used]).max()) if used.any() else -math.inf
        if t_max <= single:
            members.append(candidate)
            continue
        if t_max > bonferroni:
            continue
        correlation = difference_cov[np.ix_(used, used)] / np.outer(se[used], se[used])
        if t_max <= max_z_quantile(correlation, alpha, draws, seed, df=n - 1)[0]:
            members.append(candidate)
    return best, np.array(members, dtype=np.int64)


# ---------------------------------------------------------------- the order


def bootstrap_weights(n: int, replicates: int = REPLICATES, seed: int = SEED) -> np.ndarray:
    """(n, R) multinomial counts of n sequences drawn with replacement, less 1: the weights'
    change in each resample, the same for every series of a model (joint resampling)."""
    rng = np.random.default_rng(seed)
    return (rng.multinomial(n, np.full(n, 1.0 / n), size=replicates).T - 1.0).astype(np.float64)


def _onset_of(series: SeriesData, steps, window, alpha, weights, draws, seed):
    """(index, set's low, high (indices into the checkpoints), p of a change, slopes per 1000
    steps, what the set carries) of a series over the window's measured checkpoints."""
    index = np.array([k for k in window if np.isfinite(series.values[k])], dtype=np.int64)
    x, y = steps[index].astype(np.float64), series.values[index].astype(np.float64)
    _, p_value = change_test(x, y, draws, seed)
    at, inside = breakpoint_set(x, y, alpha / 2)
    low, high = int(inside.min()), int(inside.max())
    resampled = "training's wobble (the fit's residuals), the grid (one checkpoint each side)"
    if series.kind == SAMPLE and series.influence is not None and weights is not None:
        replicates = y[:, None] + series.influence[index] @ weights  # (m, R)
        onsets = hinge_scan(x, replicates)[1].argmin(axis=0) + 1  # (R,)
        low = min(low, int(np.floor(np.quantile(onsets, alpha / 4))))
        high = max(high, int(np.ceil(np.quantile(onsets, 1 - alpha / 4))))
        resampled = f"{weights.shape[0]} eval sequences ({weights.shape[1]} resamples), " + resampled
    elif series.kind == SAMPLE:
        resampled += "; its eval-sample noise is not resampled (no per-sequence values)"
    before, after = hinge_slopes(x / 1000.0, y, at)
    return int(index[at]), int(index[low]), int(index[high]), p_value, before, after, resampled


def order_events(steps, tokens, per_unit_losses, series: list[SeriesData], alpha: float = DEFAULT_ALPHA,
                 min_checkpoints: int = DEFAULT_MIN_CHECKPOINTS, replicates: int = REPLICATES,
                 draws: int = NULL_DRAWS, seed: int = SEED, verdict_draws: int | None = None) -> tuple[Verdict, list[Event]]:
    """The saturation verdict of the loss (`per_unit_losses` (K, n), the same n eval
    sequences at every checkpoint, rows ordered by `steps`) and one Event per series: the
    loss's first, then each of `series` (values aligned with `steps`). verdict_draws: the
    verdict's null draws (None: its default, as the table saturation_verdicts; simulations
    lower it and `draws` for speed)."""
    steps = np.asarray(steps, dtype=np.int64)
    tokens = np.asarray(tokens, dtype=np.float64)
    losses = np.asarray(per_unit_losses, dtype=np.float64)
    k = len(steps)
    if tokens.shape != steps.shape or losses.ndim != 2 or losses.shape[0] != k:
        raise ValueError(f"steps {steps.shape}, tokens {tokens.shape} and losses {losses.shape} must share K checkpoints")
    verdict = verdict_from_paired(steps, losses, alpha=alpha, min_checkpoints=min_checkpoints,
                                  **({} if verdict_draws is None else {"draws": verdict_draws}))
    rise = verdict.verdict == SATURATES
    n = losses.shape[1]
    for s in series:
        if s.values.shape != (k,):
            raise ValueError(f"series {s.name}: {s.values.shape} values for {k} checkpoints")
        if s.influence is not None and s.influence.shape != (k, n):
            raise ValueError(f"series {s.name}: influence {s.influence.shape}, expected ({k}, {n}): another eval sample")
    nan = math.nan
    start = fast_fall_end(losses.mean(axis=1))
    window = np.arange(start, k)

    def widened(low: int, high: int) -> tuple[int, int]:
        return max(low - 1, 0), min(high + 1, k - 1)

    best, members = best_set(losses, alpha / 2, draws, seed)
    loss_low, loss_high = int(members.min()), int(members.max())  # checkpoints: the best is one of them
    events = [Event(LOSS, LOSS, RISE if rise else NO_RISE, int(steps[start]), len(window), int(steps[best]),
                    float(tokens[best]), int(steps[loss_low]), int(steps[loss_high]), float(tokens[loss_low]),
                    float(tokens[loss_high]), nan, nan, nan, nan, nan, nan, nan, nan, nan,
                    f"{n} eval sequences (paired best-checkpoint set)", alpha)]
    weights = bootstrap_weights(n, replicates, seed) if any(s.influence is not None for s in series) else None
    for s in series:
        measured = int(np.isfinite(s.values[window]).sum())
        if measured < MIN_WINDOW:
            events.append(Event(s.name, s.kind, NO_RISE if not rise else TOO_FEW, int(steps[start]), measured, -1, nan,
                                -1, -1, nan, nan, nan, nan, nan, nan, nan, nan, nan, nan, nan, "", alpha))
            continue
        onset, low, high, p_value, before, after, resampled = _onset_of(s, steps, window, alpha, weights, draws, seed)
        low, high = widened(low, high)
        lead = [nan] * 6
        if not rise:
            verdict_of_series = NO_RISE
        elif p_value >= alpha:
            verdict_of_series = NO_CHANGE
        else:
            lead = [float(steps[best] - steps[onset]), float(steps[loss_low] - steps[high]),
                    float(steps[loss_high] - steps[low]), float(tokens[best] - tokens[onset]),
                    float(tokens[loss_low] - tokens[high]), float(tokens[loss_high] - tokens[low])]
            verdict_of_series = LEADS if lead[1] > 0 else LAGS if lead[2] < 0 else TOGETHER
        events.append(Event(s.name, s.kind, verdict_of_series, int(steps[start]), measured, int(steps[onset]),
                            float(tokens[onset]), int(steps[low]), int(steps[high]), float(tokens[low]),
                            float(tokens[high]), p_value, before, after, *lead, resampled, alpha))
    return verdict, events
