"""Singular-value spectra of LM heads and the scalars derived from them (Godey et al. 4.2).

    s = singular_values(W, n_valid_rows=50277)   # (min(V, d),) float64, descending
    normalised_spectrum(s)                         # s / s[0], the curves of Fig. 4
    singular_entropy(s)                            # KL(p || uniform), Fig. 5
    effective_rank(s), stable_rank(s)              # also used by lmsat.degeneration.attention

Singular values come from the eigenvalues of the small Gram matrix (W^T W, d x d for a tall
V x d head), accumulated over row chunks in float64 with torch on the device the head is on
(the GPU in the checkpoint job): O(V d^2) time and O(d^2) extra memory, no V x d float64
copy, no host copy of the weights. The price of squaring: s_i is accurate to about eps * (s_1 / s_i)^2
relative (eps = 2.2e-16), so values below ~1e-7 s_1 are noise. LM heads have s_1 / s_d of
10-1000; for pathological matrices use numpy.linalg.svd.

Singular entropy. The paper: "KL divergence between the normalized singular value
distribution and the uniform distribution", without saying whether the distribution is
p_i = s_i / sum s (power=1) or s_i^2 / sum s^2 (power=2, the share of energy / variance).
Default power=1: it normalises the singular values themselves (as Fig. 4 plots s, not s^2),
and it makes the metric the log-gap to Roy & Vetterli's effective rank,
KL(p || uniform) = log n - H(p) = log(n / effective_rank(s)). power=2 is available.
Logs are natural (nats).

Pythia pads its head to a multiple of 128 rows (50304 rows for 50277 tokenizer entries);
the padding rows are never a target (the softmax only pushes their logits down), so they
are not part of the vocabulary's geometry. `n_valid_rows` keeps only the first rows.
`matrix_sha256` / `identical_heads` detect checkpoints that serve the same head or embedding
(EleutherAI/pythia#205: many pythia-2.8b branches hold final-era weights; #206).
"""

import hashlib
import math
from collections.abc import Mapping

import numpy as np


def _as_tensor(matrix):
    """A torch view of `matrix` (numpy arrays are wrapped, torch tensors stay on their device)."""
    import torch

    return matrix.detach() if isinstance(matrix, torch.Tensor) else torch.as_tensor(np.asarray(matrix))


def gram_matrix(matrix, chunk_rows: int = 8192):
    """G = M^T M in float64, (d, d) torch tensor on M's device for M (V, d), summed over row
    chunks of M (each cast to float64 there: no V x d float64 copy)."""
    import torch

    if len(matrix.shape) != 2:
        raise ValueError(f"matrix must be 2-D (rows, cols); got shape {tuple(matrix.shape)}.")
    matrix = _as_tensor(matrix)
    n_rows, n_cols = matrix.shape
    gram = torch.zeros(n_cols, n_cols, dtype=torch.float64, device=matrix.device)
    on_host = gram.device.type == "cpu"
    for start in range(0, n_rows, chunk_rows):
        block = matrix[start : start + chunk_rows].to(torch.float64)  # (m, d)
        if on_host:  # numpy runs X^T X as a symmetric rank-k update: half the flops of a GEMM
            rows = block.numpy()
            gram.numpy()[...] += rows.T @ rows
        else:
            gram += block.T @ block
    if not bool(torch.isfinite(gram.diagonal()).all()):  # a NaN/Inf entry reaches its column's G_jj
        bad = ~torch.isfinite(matrix).all(dim=1)
        raise ValueError(f"matrix has NaN/Inf (first in row {int(bad.nonzero()[0, 0])}): the checkpoint is broken.")
    return gram


def singular_values(matrix, n_valid_rows: int | None = None, chunk_rows: int = 8192, gram=None) -> np.ndarray:
    """Singular values of a (V, d) matrix (numpy, or torch on any device), float64, descending.

    The Gram and its eigenvalues are computed on the matrix's device; only the d values
    come back to the host. n_valid_rows: keep only rows [0, n_valid_rows) (drop vocabulary
    padding); None keeps all. Returns min(V', d) values, V' the rows kept. gram: the kept
    rows' M^T M (d, d) float64 when the caller has it already (a tall matrix: V' >= d; the
    checkpoint job shares it with the gradient bottleneck), used instead of a second one.
    """
    import torch

    if len(matrix.shape) != 2:
        raise ValueError(f"matrix must be 2-D (rows, cols); got shape {tuple(matrix.shape)}.")
    if n_valid_rows is not None:
        if not 1 <= n_valid_rows <= matrix.shape[0]:
            raise ValueError(
                f"n_valid_rows={n_valid_rows} must be in [1, {matrix.shape[0]}] (the matrix's rows)."
            )
        matrix = matrix[:n_valid_rows]
    matrix = _as_tensor(matrix)
    if matrix.shape[0] < matrix.shape[1]:  # wide: the smaller Gram is M M^T
        matrix = matrix.T
        if gram is not None:
            raise ValueError(f"a shared gram is M^T M of a tall matrix; this one is {tuple(matrix.shape[::-1])}.")
    if gram is None:
        gram = gram_matrix(matrix, chunk_rows)
    eigenvalues = torch.linalg.eigvalsh(gram).cpu().numpy()  # ascending
    # Rounding can push eigenvalues of a PSD matrix slightly below 0: they are 0.
    return np.sqrt(np.clip(eigenvalues, 0.0, None))[::-1].copy()


def _spectrum(s, name: str = "singular_values") -> np.ndarray:
    s = np.asarray(s, dtype=np.float64)
    if s.ndim != 1 or s.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D array; got shape {s.shape}.")
    if not np.isfinite(s).all() or (s < 0).any():
        raise ValueError(f"{name} must be finite and >= 0.")
    if not s.max() > 0:
        raise ValueError(f"{name} are all zero: the matrix is zero, its spectrum has no shape.")
    return s


def normalised_spectrum(s) -> np.ndarray:
    """s / max(s): the normalised singular value curve of the paper's Fig. 4."""
    s = _spectrum(s)
    return s / s.max()


def _entropy(p: np.ndarray) -> float:
    positive = p[p > 0]  # 0 log 0 = 0
    return float(-(positive * np.log(positive)).sum())


def singular_entropy(s, power: int = 1) -> float:
    """KL(p || uniform) = log(n) - H(p), p = s^power / sum(s^power), in nats.

    0 for a flat spectrum, log(n) for a single non-zero value. power=1 (default) or 2; see
    the module docstring for the choice.
    """
    if power not in (1, 2):
        raise ValueError(f"power={power!r} must be 1 (p ~ s) or 2 (p ~ s^2).")
    weights = _spectrum(s) ** power
    p = weights / weights.sum()
    return float(np.log(p.size) - _entropy(p))


def effective_rank(s) -> float:
    """Roy & Vetterli (2007): exp(H(p)), p = s / sum(s); between 1 and len(s)."""
    s = _spectrum(s)
    return float(np.exp(_entropy(s / s.sum())))


def effective_rank_influence(eigenvalues, energies) -> np.ndarray:
    """d erank / d w_g at w = 1, per group g of a matrix's rows weighted by w_g: the effective
    rank of the Gram sum_g w_g G_g (G_g = H_g^T H_g), from the eigenvalues lambda (d,) of
    sum_g G_g and energies[g, i] = ||H_g v_i||^2 (g, d), which is d lambda_i / d w_g (first-order
    perturbation; over a repeated eigenvalue the sum below does not depend on the basis).
    erank = exp(H(p)), p = s / sum(s), s = sqrt(lambda):
    d erank / d lambda_i = -erank (log p_i + H) / (2 s_i sum(s)). Singular values below 1e-12
    of the largest are left out (their derivative is unbounded; a Gram of more rows than
    columns has none). erank + sum_g (w_g - 1) infl_g is the statistic a bootstrap of the
    groups resamples, linearised (lmsat.saturation.event_order)."""
    s = np.sqrt(np.clip(np.asarray(eigenvalues, dtype=np.float64), 0.0, None))
    energies = np.asarray(energies, dtype=np.float64)
    kept = s > 1e-12 * s.max()
    p = s[kept] / s[kept].sum()
    entropy = float(-(p * np.log(p)).sum())
    derivative = np.zeros_like(s)
    derivative[kept] = -math.exp(entropy) * (np.log(p) + entropy) / (2 * s[kept] * s[kept].sum())
    return energies @ derivative


def stable_rank(s) -> float:
    """||W||_F^2 / ||W||_2^2 = sum(s^2) / max(s)^2; between 1 and rank(W)."""
    s = _spectrum(s)
    return float((s**2).sum() / s.max() ** 2)


def matrix_sha256(matrix) -> str:
    """Hex sha256 of the matrix's raw bytes in C order (numpy or torch, any dtype).

    Shape and dtype are not hashed: the same values give the same hash whether they come as
    numpy or torch, so compare hashes of one model's heads (same shape and dtype) only.
    """
    if hasattr(matrix, "detach"):
        import torch

        flat = matrix.detach().to("cpu").contiguous().reshape(-1)
        raw = flat.view(torch.uint8).numpy()  # bytes as-is, bf16 included
    else:
        raw = np.ascontiguousarray(matrix).reshape(-1).view(np.uint8)
    return hashlib.sha256(memoryview(raw)).hexdigest()


def matrix_sha256_later(matrix, pool):
    """matrix_sha256 of `matrix` as a Future of `pool` (a concurrent.futures executor).

    The host copy of a device tensor is taken now, in the tensor's own dtype (2 bytes a
    value for a float16 checkpoint, no float64); hashlib releases the GIL, so the hashing
    overlaps whatever the caller runs next (the forward, in the checkpoint job).
    """
    if hasattr(matrix, "detach"):
        matrix = matrix.detach().to("cpu")
    return pool.submit(matrix_sha256, matrix)


def identical_heads(hashes: Mapping[str, str]) -> list[list[str]]:
    """Groups of revisions whose heads are bit-identical, from {revision: matrix_sha256}.

    Only groups of 2+ revisions are returned, each in the mapping's order, groups ordered by
    their first revision. An empty list means every revision has its own head.
    """
    groups: dict[str, list[str]] = {}
    for revision, digest in hashes.items():
        groups.setdefault(digest, []).append(revision)
    return [revisions for revisions in groups.values() if len(revisions) > 1]
