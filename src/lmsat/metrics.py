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


@register(
    "anisotropy",
    source="cache",
    higher_is_better=None,
    description="mean pairwise cosine of the representations of every layer (sampled tokens) and of the last layer (all tokens)",
)
def anisotropy(cache) -> dict:
    """A(H) per layer from `layers` (k sampled tokens) and exactly for the last layer.

    `anisotropy_layers[i]` is hidden_states[i] (0 = embeddings, n_layers = the last layer,
    post final norm) over the k tokens of the layer subsample; `anisotropy_last` streams
    every row of `hidden` (the same last layer, all n_seq x seq_len tokens) in float64.
    """
    from lmsat.anisotropy import MeanCosineAccumulator, mean_pairwise_cosine
    from lmsat.cache import CacheError, iter_rows

    layers = cache["layers"]  # (n_layers + 1, k, d)
    per_layer = []
    for i in range(layers.shape[0]):
        rows = np.asarray(layers[i], dtype=np.float64)  # (k, d)
        if not np.isfinite(rows).all():
            raise CacheError(f"{cache.filename}:layers[{i}] has NaN/Inf; delete the cache and rerun")
        per_layer.append(mean_pairwise_cosine(rows))
    hidden = cache["hidden"]  # (n_tokens, d)
    last = MeanCosineAccumulator()
    for block in iter_rows(hidden, rows=max(1, 2**23 // hidden.shape[1])):  # (m, d) float64, 64 MiB
        last.update(block)
    return {
        "anisotropy_layers": per_layer,
        "anisotropy_last": last.value,
        "n_layers": layers.shape[0] - 1,
        "layer_sample": layers.shape[1],
        "n_tokens": last.n,
    }
