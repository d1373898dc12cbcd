"""Checkpoint schedules: which training steps a suite released, and how revisions are named.

    >>> len(pythia_steps())
    154
"""

from __future__ import annotations

import math
import re


def pythia_steps() -> list[int]:
    """Pythia's 154 released steps: 0, 1, 2, 4, ..., 512, then every 1000 up to 143000."""
    return [0] + [2**i for i in range(10)] + list(range(1000, 143001, 1000))


def toy_steps(max_steps: int, n_linear: int = 4, base: int = 2) -> list[int]:
    """A Pythia-like schedule for a short run: 0, powers of `base`, then `n_linear` even steps.

    Powers stop below the first linear step, so the schedule is log-spaced early (where
    the loss moves fast) and linear late (where saturation shows). Pythia's base is 2;
    base 4 keeps the shape with half the early checkpoints (each costs a job per stage).

    >>> toy_steps(800, base=4)
    [0, 1, 4, 16, 64, 200, 400, 600, 800]
    """
    if max_steps < 1:
        raise ValueError(f"max_steps must be >= 1, got {max_steps}")
    if base < 2:
        raise ValueError(f"base must be >= 2, got {base}")
    every = max(1, max_steps // n_linear)
    linear = list(range(every, max_steps + 1, every))
    if linear[-1] != max_steps:
        linear.append(max_steps)
    powers = [base**i for i in range(int(math.log(every, base)) + 2) if base**i < every]
    return sorted(set([0] + powers + linear))


def log_subsample(items: list, n: int, key=None) -> list:
    """About `n` items log-spaced by `key` (default: the item), first and last always kept."""
    if n == 1:
        raise ValueError("log_subsample keeps the first and last items: n must be 0 (all) or >= 2")
    if n <= 0 or len(items) <= n:
        return list(items)
    key = key or (lambda x: x)
    values = [key(x) for x in items]
    lo, hi = math.log1p(values[0]), math.log1p(values[-1])
    targets = [math.expm1(lo + (hi - lo) * i / (n - 1)) for i in range(n)]
    chosen = {min(range(len(values)), key=lambda j: abs(values[j] - t)) for t in targets}
    return [items[j] for j in sorted(chosen | {0, len(items) - 1})]


def render_revision(template: str, step: int, tokens_per_step: int) -> str:
    """Revision name of `step`, e.g. template 'stage1-step{step}-tokens{tokens_b}B'.

    `tokens_b` is the tokens seen, in billions, rounded up (exact integer arithmetic), as
    OLMo names its branches: allenai/OLMo's README (commit 59a53e3) links OLMo-2-0425-1B's
    final `stage1-step1907359-tokens4001B` (4000.02B tokens at 512 x 4096 tokens a step) and
    `stage2-ingredient1-step23852-tokens51B` (50.02B); rounding to nearest would give 4000
    and 50, names that do not exist.

    >>> render_revision("stage1-step{step}-tokens{tokens_b}B", 1907359, 2097152)
    'stage1-step1907359-tokens4001B'
    """
    tokens_b = -(-step * tokens_per_step // 10**9)
    return template.format(step=step, tokens_b=tokens_b)


# Branches a suite's repository lists (or its schedule promises) that hold no weights
# upstream, with the report that says so: hub id -> {revision: issue}. A generated schedule
# (`schedule: pythia`) plans around them; an explicit list naming one is refused at planning
# (lmsat.planning), not after hours of other work at fetch.
MISSING_WEIGHTS: dict[str, dict[str, str]] = {
    # EleutherAI/pythia#202 (open): "missing weights on HF"
    "EleutherAI/pythia-410m-seed9": {"step40000": "EleutherAI/pythia#202"},
    "EleutherAI/pythia-410m-seed6": {"step88000": "EleutherAI/pythia#202"},
    "EleutherAI/pythia-410m-seed2": {"step111000": "EleutherAI/pythia#202"},
}


def missing_weights(model_id: str) -> dict[str, str]:
    """Revisions of hub repository `model_id` known to hold no weights -> the issue reporting it.

    >>> missing_weights("EleutherAI/pythia-410m-seed9")
    {'step40000': 'EleutherAI/pythia#202'}
    """
    return dict(MISSING_WEIGHTS.get(model_id, {}))


def parse_step(revision: str, step_regex: str) -> int:
    """Training step encoded in a revision name (`main` has no step: raise)."""
    match = re.search(step_regex, revision)
    if not match:
        raise ValueError(f"revision {revision!r} does not match step_regex {step_regex!r}")
    step = match.group(1) if match.re.groups else None
    if step is None or not step.isdigit():
        raise ValueError(f"the first group of step_regex {step_regex!r} gives {step!r} for revision {revision!r}, not a step number")
    return int(step)
