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
    """Revision name of `step`, e.g. template 'stage1-step{step}-tokens{tokens_b}B'."""
    tokens_b = round(step * tokens_per_step / 1e9)
    return template.format(step=step, tokens_b=tokens_b)


def parse_step(revision: str, step_regex: str) -> int:
    """Training step encoded in a revision name (`main` has no step: raise)."""
    match = re.search(step_regex, revision)
    if not match:
        raise ValueError(f"revision {revision!r} does not match step_regex {step_regex!r}")
    step = match.group(1) if match.re.groups else None
    if step is None or not step.isdigit():
        raise ValueError(f"the first group of step_regex {step_regex!r} gives {step!r} for revision {revision!r}, not a step number")
    return int(step)
