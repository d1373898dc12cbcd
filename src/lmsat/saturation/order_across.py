"""Across models: does a series' value at a checkpoint predict the later rise of the loss, once
size is controlled? A permutation test sized for the few models a suite has (docs/event_order.md).

The models of one size (PolyPythias' seeds, DataDecide's data recipes at one size, a sweep of
one's own) form a stratum; only comparisons inside a stratum count, so size cannot drive
the answer. The statistic is the stratified Kendall score

    S = sum over strata, over pairs i < j in it, of sign(v_i - v_j) sign(r_i - r_j)

(v: the series' value at the checkpoint, r: the rise, the final's loss minus the lowest
earlier one), reported as tau = S / (the number of such pairs), in [-1, 1]. Its null
distribution permutes the values among the models of each stratum (exchangeable under "no
association within a size"): exactly when there are at most EXACT_LIMIT arrangements,
else by PERMUTATIONS random ones. Two-sided p = P(|S*| >= |S|).

With few models the test has no power at all: with two seeds of one size there are two
arrangements, so no p-value can go below 1. `smallest_p` is the p-value of the most extreme
arrangement; when it exceeds alpha the verdict is `no power`, whatever the data.

    result = stratified_kendall(values, rises, strata, alpha=0.05)
"""

from __future__ import annotations

import itertools
import math

import numpy as np

HIGHER_MORE, HIGHER_LESS = "higher value, larger rise", "higher value, smaller rise"
NO_EVIDENCE, NO_POWER = "no evidence", "no power"
EXACT_LIMIT = 40320  # 8!: arrangements enumerated exactly up to this many
PERMUTATIONS = 20000  # random arrangements beyond it
SEED = 0


def _pair_signs(values: np.ndarray) -> np.ndarray:
    return np.sign(values[:, None] - values[None, :])  # (n, n)


def _score(value_signs: np.ndarray, rise_signs: np.ndarray) -> float:
    return float(np.triu(value_signs * rise_signs, 1).sum())


def stratified_kendall(values, rises, strata, alpha: float, seed: int = SEED) -> dict:
    """The test of association between `values` and `rises` within `strata` (labels, one per
    model). -> {tau, p_value, smallest_p, arrangements, exact, compared (models in strata of
    two or more), strata (such strata), verdict}."""
    values, rises = np.asarray(values, dtype=np.float64), np.asarray(rises, dtype=np.float64)
    strata = np.asarray(strata)
    keep = np.isfinite(values) & np.isfinite(rises)
    groups = []
    for label in dict.fromkeys(strata[keep].tolist()):
        members = np.flatnonzero(keep & (strata == label))
        if len(members) >= 2:
            groups.append(members)
    compared = sum(len(g) for g in groups)
    pairs = sum(len(g) * (len(g) - 1) // 2 for g in groups)
    empty = dict(tau=math.nan, p_value=math.nan, smallest_p=1.0, arrangements=1, exact=True, compared=compared,
                 strata=len(groups), verdict=NO_POWER)
    if not groups:
        return empty
    rise_signs = [_pair_signs(rises[g]) for g in groups]
    observed = sum(_score(_pair_signs(values[g]), r) for g, r in zip(groups, rise_signs))
    arrangements = math.prod(math.factorial(len(g)) for g in groups)
    exact = arrangements <= EXACT_LIMIT
    if exact:
        per_group = []
        for g, r in zip(groups, rise_signs):
            scores = [_score(_pair_signs(values[g][list(order)]), r) for order in itertools.permutations(range(len(g)))]
            per_group.append(np.array(scores))
        null = per_group[0]
        for scores in per_group[1:]:
            null = (null[:, None] + scores[None, :]).ravel()
    else:
        rng = np.random.default_rng(seed)
        null = np.array([sum(_score(_pair_signs(rng.permutation(values[g])), r) for g, r in zip(groups, rise_signs))
                         for _ in range(PERMUTATIONS)])
    magnitude = np.abs(null)
    tolerance = 1e-9
    if exact:
        p_value = float((magnitude >= abs(observed) - tolerance).mean())
        smallest_p = float((magnitude >= magnitude.max() - tolerance).mean())
    else:  # Monte Carlo: (exceedances + 1) / (draws + 1), never 0
        p_value = float(((magnitude >= abs(observed) - tolerance).sum() + 1) / (len(null) + 1))
        smallest_p = float(((magnitude >= magnitude.max() - tolerance).sum() + 1) / (len(null) + 1))
    if smallest_p > alpha:
        verdict = NO_POWER
    elif p_value <= alpha and observed != 0:
        verdict = HIGHER_MORE if observed > 0 else HIGHER_LESS
    else:
        verdict = NO_EVIDENCE
    return dict(tau=observed / pairs, p_value=p_value, smallest_p=smallest_p,
                arrangements=int(arrangements) if exact else PERMUTATIONS, exact=exact, compared=compared,
                strata=len(groups), verdict=verdict)
