"""Per-checkpoint metrics, registered by name (the `{metric}` wildcard resolves here).

A metric reads either the hidden-state cache of a checkpoint (`source="cache"`) or the
checkpoint's weights (`source="weights"`), and returns a flat dict of JSON values. This
module imports no torch, so the workflow can read the registry at DAG time.

    @register("loss", source="cache", higher_is_better=False, description="...")
    def loss(cache) -> dict: ...
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Metric:
    name: str
    source: str  # "cache": reads results/cache/...h5; "weights": loads the checkpoint
    higher_is_better: bool | None  # None: neither (a diagnostic)
    description: str
    compute: Callable[..., dict]


METRICS: dict[str, Metric] = {}


def register(name: str, *, source: str, higher_is_better: bool | None, description: str):
    if source not in ("cache", "weights"):
        raise ValueError(f"metric {name}: source must be 'cache' or 'weights', not {source!r}")

    def decorate(fn):
        if name in METRICS:
            raise ValueError(f"metric {name!r} is registered twice")
        METRICS[name] = Metric(name, source, higher_is_better, description, fn)
        return fn

    return decorate


@register("loss", source="cache", higher_is_better=False, description="mean per-token cross-entropy (nats) on the eval sample")
def loss(cache) -> dict:
    """Mean cross-entropy over every predicted position of the eval sample."""
    from lmsat.cache import CacheError

    values = cache["loss"][...].astype(np.float64)  # (n_seq, seq_len - 1)
    if not np.isfinite(values).all():
        raise CacheError(f"{cache.filename}: per-token losses contain NaN/Inf; delete the cache and rerun")
    return {"loss": float(values.mean()), "loss_sem": float(values.std() / np.sqrt(values.size)), "n_tokens": int(values.size)}
