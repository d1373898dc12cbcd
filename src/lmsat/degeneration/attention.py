"""Low-rank signatures of weight decay in attention (Kobayashi et al., beyond Godey et al.).

Weight decay on two factors of a product, lambda (||A||_F^2 + ||B||_F^2) / 2, has the same
minima as a nuclear-norm penalty lambda ||A B^T||_* on the product, so it drives the
attention products towards low rank. Its fingerprints, per layer and head:

  * the singular values of the product, and its effective rank / stable rank;
  * nuclear_ratio = ||A B^T||_* / ((||A||_F^2 + ||B||_F^2) / 2)  <= 1, with equality iff the
    factorisation is the minimal-norm one, i.e. balanced (A^T A = B^T B) and aligned;
  * balance_gap = ||A^T A - B^T B||_F / ||A||_F^2, 0 for a balanced factorisation
    (normalised by ||A||_F^2 as specified; balanced factors have ||A||_F = ||B||_F).

Orientation (d = model width, r = d_head; heads from `lmsat.checkpoints.adapters`, nn.Linear shapes):

  kind "qk": score(x_i, x_j) = (q x_i)^T (k x_j) = x_i^T (q^T k) x_j
             A = q^T (d, r), B = k^T (d, r), product A B^T = q^T k (d, d)
  kind "vo": head output = o (v x) = (o v) x
             A = o   (d, r), B = v^T (d, r), product A B^T = o v   (d, d)

so both Grams A^T A and B^T B are r x r, over the head dimension the two factors share:
q q^T vs k k^T and o^T o vs v v^T (Kobayashi et al.'s W_Q W_Q^T vs W_K W_K^T). Biases, the
1/sqrt(d_head) scale and rotary embeddings are not part of the products. With grouped-query
attention (n_kv_heads < n_heads) one key/value head is shared by several query heads, so
per-pair balance is not expected even at an optimum; the records are still per query head.

Singular values of A B^T come from the QR factors, A = Q_a R_a, B = Q_b R_b, so
A B^T = Q_a (R_a R_b^T) Q_b^T and the r x r core has the same singular values:
O(d r^2) per head, never a d x d SVD. R is the Cholesky factor of the Gram A^T A (which
the balance gap needs anyway), computed in float64 for all heads of a layer at once with
torch on the device the weights are on (GPU in the checkpoint job), and copied to the host
once per model.

    records = attention_lowrank(model)   # list[AttentionRecord], one per (layer, head, kind)
"""

from dataclasses import dataclass

import numpy as np
import torch

from lmsat.checkpoints.adapters import attention_heads, num_layers, parameter_name
from lmsat.degeneration.spectra import effective_rank, stable_rank


@dataclass(frozen=True)
class LowRankMetrics:
    """Low-rank metrics of one factorised product A B^T."""

    singular_values: np.ndarray  # (min(d, r),) of A B^T, descending, float64
    effective_rank: float  # Roy & Vetterli exp-entropy rank of the product
    stable_rank: float  # ||A B^T||_F^2 / ||A B^T||_2^2
    nuclear_norm: float  # ||A B^T||_*
    nuclear_ratio: float  # ||A B^T||_* / ((||A||_F^2 + ||B||_F^2) / 2), in [0, 1]
    balance_gap: float  # ||A^T A - B^T B||_F / ||A||_F^2, 0 when balanced


@dataclass(frozen=True)
class AttentionRecord:
    """Metrics of one head's qk or vo product (see the module docstring for orientation)."""

    layer: int  # 0-based block index
    head: int  # 0-based query-head index
    kind: str  # "qk" (A = q^T, B = k^T) or "vo" (A = o, B = v^T)
    metrics: LowRankMetrics  # the numbers

    def as_row(self) -> dict:
        """Flat dict for a table (singular values as a list)."""
        m = self.metrics
        return {
            "layer": self.layer,
            "head": self.head,
            "kind": self.kind,
            "effective_rank": m.effective_rank,
            "stable_rank": m.stable_rank,
            "nuclear_norm": m.nuclear_norm,
            "nuclear_ratio": m.nuclear_ratio,
            "balance_gap": m.balance_gap,
            "singular_values": m.singular_values.tolist(),
        }


def _as_float64(x) -> torch.Tensor:
    """A float64 tensor on x's device (numpy arrays go to the CPU)."""
    x = torch.as_tensor(x) if not isinstance(x, torch.Tensor) else x.detach()
    return x.to(torch.float64)


def _check_factors(a: torch.Tensor, b: torch.Tensor) -> None:
    if a.ndim != 3 or a.shape != b.shape:
        raise ValueError(
            f"factors must both be (n, d, r) stacks of the same shape; got A {tuple(a.shape)}, B {tuple(b.shape)}."
        )


def factor_arrays(a, b) -> dict[str, torch.Tensor]:
    """Spectra and norms of A_i B_i^T for stacks A, B (n, d, r), batched on their device.

    -> {"singular_values": (n, min(d, r)) descending, "frob_a", "frob_b": (n,) ||A||_F^2,
    ||B||_F^2, "gap_norm": (n,) ||A^T A - B^T B||_F, "finite": () bool}, all float64 on the
    factors' device (no host sync: the caller checks `finite` once for many layers).

    For d > r the r x r core R_a R_b^T of the QR factors has the product's singular values;
    R comes from the Cholesky factor of the Gram, A^T A = R^T R (Cholesky QR), whose Grams
    the balance gap needs anyway. Cost: two batched (r x d)(d x r) products per kind. The
    singular values then match a float64 QR/SVD to about eps * cond(A) cond(B) * s_1
    (absolute); a singular Gram (rank-deficient factor) falls back to Householder QR.
    """
    a, b = _as_float64(a), _as_float64(b)
    _check_factors(a, b)
    gram_a, gram_b = a.mT @ a, b.mT @ b  # (n, r, r)
    frob_a = gram_a.diagonal(dim1=-2, dim2=-1).sum(-1)  # ||A||_F^2 = tr(A^T A)
    frob_b = gram_b.diagonal(dim1=-2, dim2=-1).sum(-1)
    finite = torch.isfinite(frob_a).all() & torch.isfinite(frob_b).all()  # a NaN/Inf entry reaches its norm
    gap_norm = torch.linalg.matrix_norm(gram_a - gram_b)  # (n,) Frobenius
    if a.shape[1] <= a.shape[2]:  # d <= r: no bottleneck to exploit, the product is small
        singular = torch.linalg.svdvals(torch.nan_to_num(a @ b.mT))  # non-finite: reported via `finite`
    else:
        # nan_to_num: factorisations of non-finite input fail; `finite` reports them instead
        lower_a, info_a = torch.linalg.cholesky_ex(torch.nan_to_num(gram_a))  # A^T A = L L^T, so R_a = L^T
        lower_b, info_b = torch.linalg.cholesky_ex(torch.nan_to_num(gram_b))
        core = lower_a.mT @ lower_b  # (n, r, r) = R_a R_b^T
        failed = (info_a != 0) | (info_b != 0)  # singular Gram: rank-deficient factor
        if failed.any():  # one host sync; rare outside constructed cases
            r_a = torch.linalg.qr(torch.nan_to_num(a[failed]), mode="r").R
            r_b = torch.linalg.qr(torch.nan_to_num(b[failed]), mode="r").R
            core[failed] = r_a @ r_b.mT
        singular = torch.linalg.svdvals(torch.nan_to_num(core))
    return dict(singular_values=singular, frob_a=frob_a, frob_b=frob_b, gap_norm=gap_norm, finite=finite)


class ZeroFactorError(ValueError):
    """Factor `side` ("A" or "B") of pair `pair` is all zero: its product has no spectrum."""

    def __init__(self, pair: int, side: str):
        self.pair, self.side = pair, side
        super().__init__(f"factor pair {pair} has an all-zero factor ({side}): its product has no spectrum.")


class ZeroWeightError(ValueError):
    """An attention weight of a model is all zero for one head; the message names layer,
    head and tensor (attention_lowrank)."""


# The weight each factor of qk_vo_factors comes from, by kind and side.
FACTOR_WEIGHTS = {"qk": {"A": "q", "B": "k"}, "vo": {"A": "o", "B": "v"}}


def metrics_from_arrays(singular: np.ndarray, frob_a: np.ndarray, frob_b: np.ndarray, gap_norm: np.ndarray) -> list[LowRankMetrics]:
    """LowRankMetrics per pair from factor_arrays' host copies (numpy float64)."""
    if frob_a.size and ((frob_a == 0) | (frob_b == 0)).any():
        i = int(np.nonzero((frob_a == 0) | (frob_b == 0))[0][0])
        raise ZeroFactorError(i, "A" if frob_a[i] == 0 else "B")
    return [
        LowRankMetrics(
            singular_values=s,
            effective_rank=effective_rank(s),
            stable_rank=stable_rank(s),
            nuclear_norm=float(s.sum()),
            nuclear_ratio=float(s.sum() / ((frob_a[i] + frob_b[i]) / 2)),
            balance_gap=float(gap_norm[i] / frob_a[i]),
        )
        for i, s in enumerate(singular)
    ]


def _host(arrays: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    if not bool(arrays["finite"]):
        raise ValueError("factors hold NaN/Inf: the checkpoint is broken.")
    return {k: v.cpu().numpy() for k, v in arrays.items() if k != "finite"}


def product_singular_values(a, b) -> np.ndarray:
    """Singular values of A_i B_i^T for stacks A, B (n, d, r): (n, min(d, r)), descending."""
    return _host(factor_arrays(a, b))["singular_values"]


def factor_metrics(a, b) -> list[LowRankMetrics]:
    """LowRankMetrics of A_i B_i^T for each pair in stacks A, B (n, d, r), numpy or torch."""
    a, b = _as_float64(a), _as_float64(b)
    if a.ndim == 2:
        a, b = a[None], b[None]
    host = _host(factor_arrays(a, b))
    return metrics_from_arrays(host["singular_values"], host["frob_a"], host["frob_b"], host["gap_norm"])


def qk_vo_factors(model: torch.nn.Module, layer: int) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """{"qk": (A, B), "vo": (A, B)} for block `layer`, stacks (n_heads, d, d_head), float64 on
    the model's device (views cast there: no host copy)."""
    heads = attention_heads(model, layer)
    q, k, v, o = (w.to(torch.float64) for w in (heads.q, heads.k, heads.v, heads.o))
    return {
        "qk": (q.mT, k.mT),  # A = q^T, B = k^T
        "vo": (o, v.mT),  # A = o, B = v^T
    }


@torch.no_grad()
def attention_factor_arrays(model: torch.nn.Module, layers: list[int] | None = None) -> dict[str, dict[str, np.ndarray]]:
    """factor_arrays of every head, per kind, stacked over `layers` (default: all) on the
    model's device and copied to the host once: {kind: {name: (n_layers, n_heads[, w])}}."""
    per_kind: dict[str, list[dict[str, torch.Tensor]]] = {}
    for layer in range(num_layers(model)) if layers is None else layers:
        for kind, (a, b) in qk_vo_factors(model, layer).items():
            per_kind.setdefault(kind, []).append(factor_arrays(a, b))
    stacked = {}
    for kind, rows in per_kind.items():
        stacked[kind] = _host({k: torch.stack([row[k] for row in rows]) for k in rows[0]} | {
            "finite": torch.stack([row["finite"] for row in rows]).all()
        })
    return stacked


@torch.no_grad()
def attention_lowrank(model: torch.nn.Module, layers: list[int] | None = None) -> list[AttentionRecord]:
    """AttentionRecord per (layer, kind, head) for `layers` (default: all), ordered that way."""
    layers = list(range(num_layers(model))) if layers is None else list(layers)
    arrays = attention_factor_arrays(model, layers)
    records = []
    for i, layer in enumerate(layers):
        for kind, host in arrays.items():
            try:
                per_head = metrics_from_arrays(*(host[k][i] for k in ("singular_values", "frob_a", "frob_b", "gap_norm")))
            except ZeroFactorError as error:
                raise ZeroWeightError(_zero_factor_message(model, layer, kind, error)) from None
            records.extend(AttentionRecord(layer=layer, head=h, kind=kind, metrics=m) for h, m in enumerate(per_head))
    return records


def _zero_factor_message(model: torch.nn.Module, layer: int, kind: str, error: ZeroFactorError) -> str:
    """Which weight of which layer and head is all zero (error from metrics_from_arrays)."""
    weight = FACTOR_WEIGHTS[kind][error.side]
    view = getattr(attention_heads(model, layer), weight)
    tensor = parameter_name(model, view) or f"the attention weights of layer {layer}"
    return (
        f"layer {layer}, head {error.pair}: its W_{weight.upper()} slice of tensor {tensor} is all zero, so the "
        f"{kind} product has no spectrum"
    )
