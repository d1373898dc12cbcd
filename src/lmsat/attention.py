"""Low-rank signatures of weight decay in attention (Kobayashi et al., beyond Godey et al.).

Weight decay on two factors of a product, lambda (||A||_F^2 + ||B||_F^2) / 2, has the same
minima as a nuclear-norm penalty lambda ||A B^T||_* on the product, so it drives the
attention products towards low rank. Its fingerprints, per layer and head:

  * the singular values of the product, and its effective rank / stable rank;
  * nuclear_ratio = ||A B^T||_* / ((||A||_F^2 + ||B||_F^2) / 2)  <= 1, with equality iff the
    factorisation is the minimal-norm one, i.e. balanced (A^T A = B^T B) and aligned;
  * balance_gap = ||A^T A - B^T B||_F / ||A||_F^2, 0 for a balanced factorisation
    (normalised by ||A||_F^2 as specified; balanced factors have ||A||_F = ||B||_F).

Orientation (d = model width, r = d_head; heads from `lmsat.adapters`, nn.Linear shapes):

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
O(d r^2) per head, never a d x d SVD.

    records = attention_lowrank(model)   # list[AttentionRecord], one per (layer, head, kind)
"""

from dataclasses import dataclass

import numpy as np
import torch

from lmsat.adapters import attention_heads, num_layers
from lmsat.spectra import effective_rank, stable_rank


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


def _check_factors(a: np.ndarray, b: np.ndarray) -> None:
    if a.ndim != 3 or a.shape != b.shape:
        raise ValueError(
            f"factors must both be (n, d, r) stacks of the same shape; got A {a.shape}, B {b.shape}."
        )
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("factors hold NaN/Inf: the checkpoint is broken.")


def product_singular_values(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Singular values of A_i B_i^T for stacks A, B (n, d, r): (n, min(d, r)), descending."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    _check_factors(a, b)
    if a.shape[1] <= a.shape[2]:  # d <= r: no bottleneck to exploit, the product is small
        return np.linalg.svd(a @ b.transpose(0, 2, 1), compute_uv=False)
    r_a = np.linalg.qr(a, mode="r")  # (n, r, r)
    r_b = np.linalg.qr(b, mode="r")
    return np.linalg.svd(r_a @ r_b.transpose(0, 2, 1), compute_uv=False)


def factor_metrics(a: np.ndarray, b: np.ndarray) -> list[LowRankMetrics]:
    """LowRankMetrics of A_i B_i^T for each pair in stacks A, B (n, d, r)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.ndim == 2:
        a, b = a[None], b[None]
    singular = product_singular_values(a, b)  # (n, min(d, r))
    frob_a = np.einsum("ndr,ndr->n", a, a)  # ||A||_F^2
    frob_b = np.einsum("ndr,ndr->n", b, b)
    gram_gap = a.transpose(0, 2, 1) @ a - b.transpose(0, 2, 1) @ b  # (n, r, r)
    gap_norm = np.linalg.norm(gram_gap, axis=(1, 2))
    metrics = []
    for i, s in enumerate(singular):
        if frob_a[i] == 0 or frob_b[i] == 0:
            raise ValueError(f"factor pair {i} has an all-zero factor: its product has no spectrum.")
        metrics.append(
            LowRankMetrics(
                singular_values=s,
                effective_rank=effective_rank(s),
                stable_rank=stable_rank(s),
                nuclear_norm=float(s.sum()),
                nuclear_ratio=float(s.sum() / ((frob_a[i] + frob_b[i]) / 2)),
                balance_gap=float(gap_norm[i] / frob_a[i]),
            )
        )
    return metrics


def _float64(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().to(device="cpu", dtype=torch.float64).numpy()


def qk_vo_factors(model: torch.nn.Module, layer: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{"qk": (A, B), "vo": (A, B)} for block `layer`, stacks (n_heads, d, d_head), float64."""
    heads = attention_heads(model, layer)
    q, k, v, o = (_float64(w) for w in (heads.q, heads.k, heads.v, heads.o))
    return {
        "qk": (q.transpose(0, 2, 1), k.transpose(0, 2, 1)),  # A = q^T, B = k^T
        "vo": (o, v.transpose(0, 2, 1)),  # A = o, B = v^T
    }


@torch.no_grad()
def attention_lowrank(model: torch.nn.Module, layers: list[int] | None = None) -> list[AttentionRecord]:
    """AttentionRecord per (layer, kind, head) for `layers` (default: all), ordered that way."""
    records = []
    for layer in range(num_layers(model)) if layers is None else layers:
        for kind, (a, b) in qk_vo_factors(model, layer).items():
            for head, metrics in enumerate(factor_metrics(a, b)):
                records.append(AttentionRecord(layer=layer, head=head, kind=kind, metrics=metrics))
    return records
