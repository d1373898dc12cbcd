"""Representation similarity between two checkpoints, layer by layer: linear CKA (also
debiased), SVCCA and PWCCA, on the hidden states of the same tokens.

    x = cache_a["layers"][i]; y = cache_b["layers"][i]     # (k, w) each: the same k tokens
    linear_cka(x, y)                                        # Kornblith et al. 2019, in [0, 1]
    linear_cka(x, y, debiased=True)                         # the unbiased HSIC estimator in it
    canonical_similarity(x, y)                              # SVCCA and PWCCA (Raghu 2017, Morcos 2018)

Linear CKA (Kornblith, Norouzi, Lee, Hinton 2019; pico-analyze's `cka` metric calls their
`feature_space_linear_cka`): with X, Y centred column-wise,

    CKA(X, Y) = ||Y^T X||_F^2 / (||X^T X||_F ||Y^T Y||_F)
              = <K_X, K_Y>_F / (||K_X||_F ||K_Y||_F),  K_X = X X^T (centred Grams)

computed in feature space (d x d products) when both widths are at most n, else with the
n x n Grams: the cheaper of O(n d^2) and O(n^2 d). It is 1 for Y = X R c (R orthogonal,
c != 0) and invariant to either, and for independent representations it is biased above 0
by about (d_X d_Y)^(1/2) / n (it shrinks with the number of tokens n); the debiased form
(Song et al. 2012's unbiased HSIC in place of the biased one, Kornblith's `debiased=True`)
removes that bias, at the price of a noisier value that can fall below 0.

SVCCA (Raghu et al. 2017): each representation is reduced to the principal directions
that keep `keep` (99%) of its variance, then the canonical correlations rho_i of the two
reduced spaces are the singular values of Q_X^T Q_Y (Q: orthonormal bases; Bjorck and
Golub's method, stable however correlated the columns are); SVCCA is their mean. PWCCA
(Morcos et al. 2018) weighs each rho_i by how much of X its canonical variate h_i accounts
for, a_i = sum_j |<h_i, x_j>| over X's centred columns x_j, normalised to sum 1. Both here
run on the 99%-variance subspaces: Google's reference (pico-analyze's `pwcca`) regularises
the full covariances with epsilon instead, which differs on ill-conditioned layers
(anisotropic last layers): by up to 0.12 (median 0.02) on the default run's caches, where it
takes square roots of negative eigenvalues on 10 of 36 states; CKA agrees with pico-analyze's
to 1e-6 (benchmarks/pico_analyze_side_by_side.py).

A representation with no variance (every token the same vector) has no similarity:
SimilarityError, never a number.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SVCCA_KEEP = 0.99  # share of each representation's variance its reduced subspace keeps


class SimilarityError(ValueError):
    """Representations that cannot be compared: other shapes, NaN/Inf, or no variance."""


def centred(x, name: str = "x") -> np.ndarray:
    """float64 copy of a (n, d) representation with each column's mean removed."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 2:
        raise SimilarityError(f"{name} must be (n tokens >= 2, d); got shape {x.shape}")
    if not np.isfinite(x).all():
        raise SimilarityError(f"{name} holds NaN/Inf (row {int(np.argwhere(~np.isfinite(x))[0, 0])})")
    return x - x.mean(axis=0)


def _pair(x, y) -> tuple[np.ndarray, np.ndarray]:
    x, y = centred(x, "x"), centred(y, "y")
    if x.shape[0] != y.shape[0]:
        raise SimilarityError(f"x and y hold {x.shape[0]} and {y.shape[0]} tokens: they must be the same tokens")
    for name, z in (("x", x), ("y", y)):
        if not np.any(z):
            raise SimilarityError(f"{name} has no variance (every token the same vector): its similarity is undefined")
    return x, y


def _debiased(dot: float, diag_x: np.ndarray, diag_y: np.ndarray, n: int) -> float:
    """n (n - 3) x the unbiased HSIC (Song et al. 2012) of centred X, Y from <K_X, K_Y>_F
    (`dot`) and the Grams' diagonals (the tokens' squared norms): Kornblith et al.'s
    feature-space form of the U-statistic."""
    return dot - n / (n - 2.0) * float(diag_x @ diag_y) + float(diag_x.sum() * diag_y.sum()) / ((n - 1) * (n - 2))


def linear_cka(x, y, debiased: bool = False) -> float:
    """Linear CKA of two representations of the same n tokens, x (n, d_x), y (n, d_y).

    In [0, 1] (debiased: may fall slightly below 0, and is NaN when a self-similarity
    estimate is not positive, which needs n near 4). SimilarityError for NaN/Inf, other
    token counts or a representation with no variance.
    """
    x, y = _pair(x, y)
    n = x.shape[0]
    if debiased and n < 4:
        raise SimilarityError(f"debiased CKA needs at least 4 tokens; got {n}")
    if max(x.shape[1], y.shape[1]) <= n:  # feature space: (d, d) products
        dot = float(np.square(y.T @ x).sum())  # ||Y^T X||_F^2 = <K_X, K_Y>
        xx, yy = float(np.square(x.T @ x).sum()), float(np.square(y.T @ y).sum())
    else:  # wider than the sample: (n, n) Grams
        kx, ky = x @ x.T, y @ y.T  # (n, n)
        dot, xx, yy = float((kx * ky).sum()), float(np.square(kx).sum()), float(np.square(ky).sum())
    if debiased:
        diag_x, diag_y = np.einsum("ij,ij->i", x, x), np.einsum("ij,ij->i", y, y)  # (n,)
        dot = _debiased(dot, diag_x, diag_y, n)
        xx, yy = _debiased(xx, diag_x, diag_x, n), _debiased(yy, diag_y, diag_y, n)
        if xx <= 0 or yy <= 0:
            return float("nan")
    return dot / np.sqrt(xx * yy)


def principal_basis(x: np.ndarray, keep: float = SVCCA_KEEP) -> np.ndarray:
    """Orthonormal basis (n, k) of the span of x's top principal directions that keep `keep`
    of its variance (x centred, (n, d)): the first k left singular vectors. # (n, k)"""
    u, s, _ = np.linalg.svd(x, full_matrices=False)  # (n, r), (r,)
    energy = np.cumsum(s**2) / np.sum(s**2)
    k = int(np.searchsorted(energy, keep * (1 - 1e-12)) + 1)  # the fewest directions reaching `keep`
    return u[:, :k]


@dataclass(frozen=True)
class CanonicalSimilarity:
    svcca: float  # mean canonical correlation of the 99%-variance subspaces
    pwcca: float  # the same correlations weighted by how much of x each canonical variate explains
    dims: tuple[int, int]  # dimensions kept of x and of y


def canonical_similarity(x, y, keep: float = SVCCA_KEEP, bases=None) -> CanonicalSimilarity:
    """SVCCA and PWCCA of x (n, d_x) and y (n, d_y), the same n tokens (module docstring).
    bases: (qx, qy) of principal_basis, when the caller has them (x compared with several y)."""
    x, y = _pair(x, y)
    qx, qy = bases or (principal_basis(x, keep), principal_basis(y, keep))  # (n, kx), (n, ky)
    a, rho, _ = np.linalg.svd(qx.T @ qy, full_matrices=False)  # (kx, m), (m,): canonical correlations
    rho = np.clip(rho, 0.0, 1.0)
    variates = qx @ a  # (n, m): x's canonical variates, unit norm
    weights = np.abs(variates.T @ x).sum(axis=1)  # (m,): sum over x's neurons of |<h_i, x_j>|
    return CanonicalSimilarity(
        svcca=float(rho.mean()), pwcca=float(weights @ rho / weights.sum()), dims=(qx.shape[1], qy.shape[1])
    )


def layer_similarities(layers, references: dict) -> dict[str, dict[str, list[float]]]:
    """Per hidden state i (0 = embeddings), every similarity of layers[i] with each
    reference's [i]: the `layers` datasets of caches (n_states, k, w), the same k tokens,
    read one hidden state at a time (h5py datasets or arrays).
    -> {reference: {"cka", "cka_debiased", "svcca", "pwcca": (n_states,) lists}}"""
    for name, other in references.items():
        if tuple(other.shape[:2]) != tuple(layers.shape[:2]):
            raise SimilarityError(f"layers of shape {layers.shape} and {name}'s {other.shape}: not the same hidden "
                                  "states of the same tokens")
    out = {name: {"cka": [], "cka_debiased": [], "svcca": [], "pwcca": []} for name in references}
    for i in range(layers.shape[0]):
        x = np.asarray(layers[i], dtype=np.float64)  # (k, w), read and decomposed once for every reference
        qx = None
        for name, other in references.items():
            y = np.asarray(other[i], dtype=np.float64)
            try:
                xc, yc = _pair(x, y)  # checked and centred
                qx = principal_basis(xc) if qx is None else qx
                canonical = canonical_similarity(x, y, bases=(qx, principal_basis(yc)))
                out[name]["cka"].append(linear_cka(x, y))
                out[name]["cka_debiased"].append(linear_cka(x, y, debiased=True))
            except SimilarityError as error:
                raise SimilarityError(f"hidden state {i}: {error}") from None
            out[name]["svcca"].append(canonical.svcca)
            out[name]["pwcca"].append(canonical.pwcca)
    return out
