"""Does a model saturate? A test of "the final checkpoint's loss is above an earlier one's"
that accounts for picking the best of many noisy checkpoints.

The naive saturation number, final loss over the lowest loss, is biased upwards: the lowest
of K noisy losses sits below its true value, so on a flat curve the final is "above the best"
by chance alone. The test here is a max-t test of the final against every earlier checkpoint
(White's reality check, studentized; Romano & Wolf 2005), one-sided:

    H0: mu_final <= mu_k for every earlier k   (nothing earlier is better: no rise)
    d_k = loss_final - loss_k,  t_k = mean(d_k) / se(d_k),  T = max_k t_k
    reject ("saturates") when T > c, c = the 1 - alpha quantile of max_k Z_k, Z ~ N(0, R)

R is the correlation of the d_k (they share the final's noise, and with paired samples the
per-sequence difficulty cancels). The least favourable null is the flat curve (all
mu_k = mu_final); any earlier checkpoint that is truly worse only lowers T, so the size is at
most alpha. The same c gives a simultaneous interval for the true rise of the final above the
best earlier checkpoint, theta = max_k (mu_final - mu_k), negative when the final is truly
below every earlier checkpoint (still improving):

    low = max_k (mean(d_k) - c se_k)   high = max_k (mean(d_k) + c se_k)

each bound holds with probability >= 1 - alpha, so [low, high] is a (1 - 2 alpha) interval
(90% at alpha = 0.05). Its point estimate, `rise` = max_k mean(d_k) = the final's loss minus
the lowest earlier one, lies inside it (each term lies between the two bounds' terms).
Reading it: `saturates` exactly when low > 0 (the interval above 0); high < 0 (below 0): the
final is below every earlier checkpoint beyond noise; across 0: no evidence either way.

Two sources of the d_k's covariance:
- paired samples (`verdict_from_paired`): a model run scores the same sequences at every
  checkpoint, so the covariance is estimated from per-sequence mean losses (sequences are
  the independent units; tokens within one are not). Far tighter than independent errors.
- independent estimates with standard errors (`verdict_from_estimates`): a published record
  that gives each checkpoint's value and its standard error only. Treating them as
  independent ignores the positive covariance of a fixed test set, so the test is
  conservative there.

    v = verdict_from_paired(steps, per_sequence)   # (K,) steps, (K, n_seq) mean losses
    v.verdict, v.rise, v.rise_low, v.rise_high, v.best_step
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

import numpy as np

SATURATES = "saturates"
NO_EVIDENCE = "no evidence"
TOO_FEW = "too few checkpoints"
VERDICTS = (SATURATES, NO_EVIDENCE, TOO_FEW)
DEFAULT_ALPHA = 0.05
DEFAULT_MIN_CHECKPOINTS = 3  # the final and at least two earlier: one earlier is no curve
NULL_DRAWS = 20000  # Monte Carlo draws of max_k Z_k; c's Monte Carlo error is ~0.01
NULL_SEED = 0  # fixed: the same data gives the same verdict on every run
METHOD = "max-t test of the final against every earlier checkpoint (one-sided, simultaneous)"


@dataclass(frozen=True)
class Verdict:
    verdict: str  # one of VERDICTS
    checkpoints: int  # K, the final included
    final_step: int
    best_step: int  # step of the lowest loss (the final's when it is the lowest)
    best_loss: float
    final_loss: float
    # the final's loss minus the lowest earlier one: the point estimate of theta, which
    # [rise_low, rise_high] bounds; < 0 when the final is the lowest (biased up by the pick)
    rise: float
    rise_se: float  # standard error of that difference (paired, or independent)
    rise_low: float  # simultaneous lower bound of theta (1 - alpha); > 0 iff saturates
    rise_high: float  # simultaneous upper bound of theta (1 - alpha); < 0: the final is below every earlier one
    t_max: float  # max_k t_k (nan when too few checkpoints)
    critical: float  # c: the 1 - alpha quantile of max_k Z_k under the flat-curve null
    p_value: float  # P(max_k Z_k >= t_max) under the flat-curve null
    alpha: float
    units: int  # independent units behind each loss (sequences); 0 for independent estimates

    @property
    def interval_level(self) -> float:
        """The coverage of [rise_low, rise_high]: 1 - 2 alpha."""
        return 1 - 2 * self.alpha

    def as_row(self) -> dict:
        return asdict(self)


# A verdict table's columns (the table saturation_verdicts of every run, lmsat.products.saturation_tables)
VERDICT_COLUMNS = ("model", *(f.name for f in fields(Verdict)))


def max_z_quantile(correlation: np.ndarray, alpha: float, draws: int = NULL_DRAWS,
                   seed: int = NULL_SEED, df: float = math.inf) -> tuple[float, np.ndarray]:
    """The 1 - alpha quantile of max_k Z_k, Z ~ N(0, correlation), by Monte Carlo, and the
    sorted draws of the maximum (for p-values). A singular correlation (two identical
    checkpoints) is fine: the draws come from its eigen-decomposition, negative eigenvalues
    (rounding) clipped.

    df: finite for t statistics whose standard errors were estimated from df + 1 units
    (a paired verdict): the draws are then multivariate t, Z / sqrt(W / df) with one
    W ~ chi2(df) per draw (as Dunnett's test), heavier-tailed than the normal; with few
    sequences the normal critical value rejects a flat curve far more often than alpha
    (8 sequences: 13% at alpha = 0.05, tests/test_verdict.py)."""
    eigenvalues, vectors = np.linalg.eigh(correlation)
    root = vectors * np.sqrt(np.clip(eigenvalues, 0.0, None))  # (m, m): root @ root.T = correlation
    rng = np.random.default_rng(seed)
    normal = rng.standard_normal((draws, correlation.shape[0]))
    statistics = normal @ root.T  # (draws, m)
    if math.isfinite(df):
        statistics /= np.sqrt(rng.chisquare(df, size=(draws, 1)) / df)
    maxima = np.sort(statistics.max(axis=1))  # (draws,)
    return float(np.quantile(maxima, 1 - alpha)), maxima


def _too_few(steps: np.ndarray, means: np.ndarray, alpha: float, units: int) -> Verdict:
    best = int(np.argmin(means)) if len(means) else 0
    nan = math.nan
    final_loss = float(means[-1]) if len(means) else nan
    return Verdict(TOO_FEW, len(steps), int(steps[-1]) if len(steps) else -1,
                   int(steps[best]) if len(steps) else -1, float(means[best]) if len(means) else nan,
                   final_loss, nan, nan, nan, nan, nan, nan, nan, alpha, units)


def verdict_from_differences(steps, losses, rise_mean, rise_cov, alpha: float = DEFAULT_ALPHA,
                             min_checkpoints: int = DEFAULT_MIN_CHECKPOINTS, units: int = 0,
                             draws: int = NULL_DRAWS) -> Verdict:
    """The verdict from the K checkpoints' mean losses (`losses`, ordered by `steps`, the last
    the final), the K - 1 mean differences final - earlier (`rise_mean`) and their covariance
    (`rise_cov`, (K-1, K-1)). The two constructors below fill the last two.

    units: the n units the covariance was estimated from (0: a known covariance); the
    critical value is then that of a max of t statistics with n - 1 degrees of freedom.
    draws: Monte Carlo draws of the null maximum (simulations lower it for speed)."""
    steps = np.asarray(steps, dtype=np.int64)
    losses = np.asarray(losses, dtype=np.float64)
    if steps.ndim != 1 or losses.shape != steps.shape:
        raise ValueError(f"steps and losses must be 1-d of one length, got {steps.shape} and {losses.shape}")
    if np.any(np.diff(steps) <= 0):
        raise ValueError(f"steps must increase (the last is the final checkpoint), got {steps.tolist()}")
    if not np.all(np.isfinite(losses)):
        raise ValueError(f"non-finite loss at step(s) {steps[~np.isfinite(losses)].tolist()}")
    if not 0 < alpha < 0.5:
        raise ValueError(f"alpha must be in (0, 0.5), got {alpha}")
    if min_checkpoints < 2:
        raise ValueError(f"min_checkpoints must be at least 2 (the final and one earlier), got {min_checkpoints}")
    if len(steps) < max(min_checkpoints, 2):
        return _too_few(steps, losses, alpha, units)
    rise_mean = np.asarray(rise_mean, dtype=np.float64)
    rise_cov = np.asarray(rise_cov, dtype=np.float64)
    se = np.sqrt(np.clip(np.diag(rise_cov), 0.0, None))  # (K-1,)
    best = int(np.argmin(losses))
    earlier = int(np.argmin(losses[:-1]))  # the lowest earlier checkpoint: theta's estimate is the final minus it
    rise = float(losses[-1] - losses[earlier])
    # A difference with no noise (se 0: e.g. a checkpoint identical to the final, difference 0)
    # has no t statistic: left out of the max-t test, it enters both bounds as it is.
    informative = se > 0
    if not informative.any():
        critical, t_max, p_value = math.nan, math.nan, 1.0
        low = high = -math.inf
    else:
        mean, se_used = rise_mean[informative], se[informative]
        correlation = rise_cov[np.ix_(informative, informative)] / np.outer(se_used, se_used)
        critical, maxima = max_z_quantile(correlation, alpha, draws, df=units - 1 if units >= 2 else math.inf)
        t = mean / se_used
        t_max = float(t.max())
        # Monte Carlo p-value, (exceedances + 1) / (draws + 1): never 0, >= 1 / (draws + 1)
        exceed = len(maxima) - np.searchsorted(maxima, t_max, side="left")
        p_value = float((exceed + 1) / (len(maxima) + 1))
        low = float(np.max(mean - critical * se_used))
        high = float(np.max(mean + critical * se_used))
    if not informative.all():
        exact = float(rise_mean[~informative].max())
        low, high = max(low, exact), max(high, exact)
    rise_se = float(se[earlier])
    saturates = best != len(steps) - 1 and low > 0
    return Verdict(SATURATES if saturates else NO_EVIDENCE, len(steps), int(steps[-1]), int(steps[best]),
                   float(losses[best]), float(losses[-1]), rise, rise_se, low, high, t_max, critical, p_value,
                   alpha, units)


def verdict_from_paired(steps, per_unit_losses, alpha: float = DEFAULT_ALPHA,
                        min_checkpoints: int = DEFAULT_MIN_CHECKPOINTS, draws: int = NULL_DRAWS) -> Verdict:
    """The verdict from the same n independent units scored at every checkpoint:
    `per_unit_losses` (K, n), e.g. each sequence's mean token loss (`sequence_means`), rows
    ordered by `steps`. A checkpoint's loss is its row's mean."""
    losses = np.asarray(per_unit_losses, dtype=np.float64)
    if losses.ndim != 2 or losses.shape[0] != len(steps):
        raise ValueError(f"per_unit_losses must be (checkpoints, units) = ({len(steps)}, n), got {losses.shape}")
    if losses.shape[0] >= 2 and losses.shape[1] < 2:
        raise ValueError(f"a paired verdict needs at least 2 units (sequences), got {losses.shape[1]}")
    if not np.all(np.isfinite(losses)):
        bad = np.asarray(steps)[~np.isfinite(losses).all(axis=1)]
        raise ValueError(f"non-finite per-sequence loss at step(s) {bad.tolist()}")
    means = losses.mean(axis=1)  # (K,)
    if losses.shape[0] < 2:
        return verdict_from_differences(steps, means, [], np.zeros((0, 0)), alpha, min_checkpoints, losses.shape[1])
    differences = losses[-1][None, :] - losses[:-1]  # (K-1, n)
    n = differences.shape[1]
    covariance = np.atleast_2d(np.cov(differences, ddof=1)) / n  # of the means
    return verdict_from_differences(steps, means, differences.mean(axis=1), covariance, alpha, min_checkpoints, n,
                                    draws)


def verdict_from_estimates(steps, values, stderrs, alpha: float = DEFAULT_ALPHA,
                           min_checkpoints: int = DEFAULT_MIN_CHECKPOINTS, draws: int = NULL_DRAWS) -> Verdict:
    """The verdict from each checkpoint's loss and its standard error, taken as independent
    (a published record without per-example scores): conservative where the checkpoints were
    scored on one test set, whose shared examples make the true errors of the differences
    smaller."""
    values = np.asarray(values, dtype=np.float64)
    stderrs = np.asarray(stderrs, dtype=np.float64)
    if stderrs.shape != values.shape:
        raise ValueError(f"values and stderrs differ in shape: {values.shape} vs {stderrs.shape}")
    if not np.all(np.isfinite(stderrs)) or np.any(stderrs < 0):
        raise ValueError(f"standard errors must be finite and >= 0, got {stderrs.tolist()}")
    if len(values) < 2:
        return verdict_from_differences(steps, values, [], np.zeros((0, 0)), alpha, min_checkpoints, 0)
    final_var = stderrs[-1] ** 2
    covariance = np.full((len(values) - 1,) * 2, final_var) + np.diag(stderrs[:-1] ** 2)  # (K-1, K-1)
    return verdict_from_differences(steps, values, values[-1] - values[:-1], covariance, alpha,
                                    min_checkpoints, 0, draws)


def sequence_means(token_losses: np.ndarray) -> np.ndarray:
    """(n_seq, seq_len - 1) per-token losses (a cache's `loss`) -> (n_seq,) per-sequence means:
    the independent units of a paired verdict."""
    token_losses = np.asarray(token_losses, dtype=np.float64)
    if token_losses.ndim != 2:
        raise ValueError(f"token losses must be (n_seq, tokens), got {token_losses.shape}")
    return token_losses.mean(axis=1)


def _simulated_runs(per_unit_losses, curve_se, curves: int, alpha: float, min_checkpoints: int, draws: int,
                    seed: int, best: int | None):
    """(the true curve (K,) in loss units, the SE in loss units, a generator of the verdicts of
    `curves` resampled runs about it): simulated_rate's and simulated_coverage's runs."""
    losses = np.asarray(per_unit_losses, dtype=np.float64)
    if losses.ndim != 2 or losses.shape[0] < 2 or losses.shape[1] < 2:
        raise ValueError(f"per_unit_losses must be (checkpoints >= 2, units >= 2), got {losses.shape}")
    k, n = losses.shape
    residuals = losses - losses.mean(axis=1, keepdims=True)  # (K, n): the run's noise about a flat curve
    shape = np.zeros(k) if curve_se is None else np.asarray(curve_se, dtype=np.float64)
    if shape.shape != (k,):
        raise ValueError(f"curve_se must have one value per checkpoint ({k}), got shape {shape.shape}")
    best = int(np.argmin(shape)) if best is None else best
    se = float(np.std(residuals[-1] - residuals[best]) / math.sqrt(n))  # population sd: the resampled world's
    curve = float(losses.mean()) + se * shape  # (K,)
    steps = np.arange(k)

    def runs():
        rng = np.random.default_rng(seed)
        for _ in range(curves):
            units = rng.integers(0, n, size=n)
            yield verdict_from_paired(steps, curve[:, None] + residuals[:, units], alpha, min_checkpoints, draws)

    return curve, se, runs()


def simulated_rate(per_unit_losses, curve_se=None, curves: int = 1000, alpha: float = DEFAULT_ALPHA,
                   min_checkpoints: int = DEFAULT_MIN_CHECKPOINTS, draws: int = NULL_DRAWS, seed: int = 0,
                   best: int | None = None) -> tuple[float, int, float]:
    """How often the verdict says `saturates` on `curves` simulated runs with a real run's own
    noise: each resamples the n units (sequences, with replacement) of `per_unit_losses`
    (K, n), a real run's per-sequence losses, with each checkpoint's mean removed (so each
    sequence keeps its own difficulty and its checkpoint-to-checkpoint wobble), and adds a
    true curve.

    curve_se: the true curve (K,), in standard errors of the paired difference between
    checkpoint `best` and the final (that SE from the residuals themselves); None is the flat
    curve (the test's least favourable null, so the rate is its size). -> (rate, the number
    of `saturates`, the SE in loss units). `best`: the curve's minimum (its argmin by default).
    """
    _, se, runs = _simulated_runs(per_unit_losses, curve_se, curves, alpha, min_checkpoints, draws, seed, best)
    hits = sum(verdict.verdict == SATURATES for verdict in runs)
    return hits / curves, hits, se


def simulated_coverage(per_unit_losses, curve_se=None, curves: int = 1000, alpha: float = DEFAULT_ALPHA,
                       draws: int = NULL_DRAWS, seed: int = 0) -> dict:
    """How often [rise_low, rise_high] holds the true rise theta = max_k (mu_final - mu_k) of
    the curve `curve_se` (as simulated_rate, in standard errors of the final's paired
    difference from its lowest earlier checkpoint), on `curves` runs with a real run's own
    noise. -> {theta (loss units), low (the share with rise_low <= theta), high (rise_high >=
    theta), both, curves}; each bound's share should be >= 1 - alpha, both >= 1 - 2 alpha."""
    shape = np.zeros(len(per_unit_losses)) if curve_se is None else np.asarray(curve_se, dtype=np.float64)
    earlier = int(np.argmin(shape[:-1]))
    curve, _, runs = _simulated_runs(per_unit_losses, shape, curves, alpha, DEFAULT_MIN_CHECKPOINTS, draws, seed,
                                     earlier)
    theta = float(curve[-1] - curve[:-1].min())
    low = high = both = 0
    for verdict in runs:
        below, above = verdict.rise_low <= theta, verdict.rise_high >= theta
        low, high, both = low + below, high + above, both + (below and above)
    return dict(theta=theta, low=low / curves, high=high / curves, both=both / curves, curves=curves)
