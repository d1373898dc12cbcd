"""Anisotropy: mean pairwise cosine similarity of a set of representations (Godey et al. 4.1).

    A(H) = 1 / (n^2 - n) * sum_{i != j} cos(h_i, h_j)

computed exactly in O(n d) rather than O(n^2 d): with u_i = h_i / ||h_i||,

    sum_{i != j} u_i . u_j = ||sum_i u_i||^2 - sum_i ||u_i||^2 = ||sum_i u_i||^2 - n

so only the running sum of unit vectors (d numbers) and the count are needed. That streams:

    acc = MeanCosineAccumulator()
    for start in range(0, n, 4096):
        acc.update(h5["layer_12"][start:start + 4096])   # (m, d) chunk, any float dtype
    acc.value                                             # A(H), float

Everything is accumulated in float64. A zero vector has no direction: by default it raises
(`skip_zero_rows=False`); with `skip_zero_rows=True` such rows are left out of H (they count
neither in n nor in the sum) and `n_skipped` says how many. NaN/Inf raise ValueError.
`mean_pairwise_cosine_bruteforce` is the O(n^2 d) reference used by tests and benchmarks.
"""

from dataclasses import dataclass, field

import numpy as np


def _as_float64_rows(chunk, name: str) -> np.ndarray:
    """A (m, d) float64 array from a numpy array or torch tensor (bf16 included)."""
    if hasattr(chunk, "detach"):  # torch tensor; numpy has no bfloat16, so upcast in torch
        import torch

        chunk = chunk.detach().to(device="cpu", dtype=torch.float64).numpy()
    rows = np.asarray(chunk, dtype=np.float64)
    if rows.ndim != 2:
        raise ValueError(f"{name} must be 2-D (n_vectors, d); got shape {rows.shape}.")
    if not np.isfinite(rows).all():
        bad = np.unique(np.nonzero(~np.isfinite(rows))[0])
        raise ValueError(
            f"{name} holds NaN/Inf in rows {bad[:10].tolist()}{' ...' if len(bad) > 10 else ''}: "
            "fix or mask them before measuring anisotropy."
        )
    return rows


def _unit_rows(rows: np.ndarray, name: str, skip_zero_rows: bool, offset: int = 0) -> np.ndarray:
    norms = np.linalg.norm(rows, axis=1)  # (m,)
    zero = norms == 0
    if zero.any():
        if not skip_zero_rows:
            where = (np.nonzero(zero)[0][:10] + offset).tolist()
            raise ValueError(
                f"{name} has {int(zero.sum())} zero-norm rows (rows {where}"
                f"{' ...' if zero.sum() > 10 else ''}); a zero vector has "
                "no cosine. Mask them (e.g. padding positions) or pass skip_zero_rows=True."
            )
        rows, norms = rows[~zero], norms[~zero]
    return rows / norms[:, None]


@dataclass
class MeanCosineAccumulator:
    """Streaming, exact mean pairwise cosine similarity over all pairs i != j."""

    skip_zero_rows: bool = False  # True: drop zero vectors (see module docstring); False: raise
    n: int = 0  # vectors seen so far (zero rows excluded)
    n_skipped: int = 0  # zero-norm rows dropped (only with skip_zero_rows)
    unit_sum: np.ndarray | None = field(default=None, repr=False)  # (d,) float64 sum of u_i

    def update(self, chunk) -> "MeanCosineAccumulator":
        """Add a (m, d) chunk of representations (numpy array, h5py slice or torch tensor)."""
        rows = _as_float64_rows(chunk, "chunk")
        if self.unit_sum is not None and rows.shape[1] != self.unit_sum.shape[0]:
            raise ValueError(
                f"chunk has d={rows.shape[1]} but earlier chunks had d={self.unit_sum.shape[0]}: "
                "use one accumulator per layer/representation set."
            )
        units = _unit_rows(rows, "chunk", self.skip_zero_rows, offset=self.n + self.n_skipped)
        self.n_skipped += rows.shape[0] - units.shape[0]
        if self.unit_sum is None:
            self.unit_sum = np.zeros(rows.shape[1])
        self.unit_sum += units.sum(axis=0)
        self.n += units.shape[0]
        return self

    @property
    def value(self) -> float:
        """A(H) = (||sum u_i||^2 - n) / (n (n - 1)); needs at least 2 vectors."""
        if self.n < 2:
            raise ValueError(
                f"anisotropy needs at least 2 non-zero vectors, got {self.n}: feed more data."
            )
        squared = float(self.unit_sum @ self.unit_sum)
        return (squared - self.n) / (self.n * (self.n - 1))


def mean_pairwise_cosine(representations, skip_zero_rows: bool = False) -> float:
    """A(H) of a (n, d) array in O(n d) (one-shot MeanCosineAccumulator)."""
    return MeanCosineAccumulator(skip_zero_rows=skip_zero_rows).update(representations).value


def mean_cosine_influence(unit_sums, counts) -> np.ndarray:
    """d A / d w_g at w = 1, per group g of the vectors (e.g. the eval sequences) weighted by
    w_g: A(w) = (||sum_g w_g S_g||^2 - N(w)) / (N(w) (N(w) - 1)), N(w) = sum_g w_g n_g, from
    each group's sum of unit vectors S_g (g, d) and count n_g (g,). A + sum_g (w_g - 1) infl_g
    is the statistic a bootstrap of the groups resamples, linearised
    (lmsat.saturation.event_order); exact to first order in w - 1."""
    unit_sums = np.asarray(unit_sums, dtype=np.float64)
    counts = np.asarray(counts, dtype=np.float64)
    total, n = unit_sums.sum(axis=0), float(counts.sum())
    denominator = n * (n - 1)
    value = (float(total @ total) - n) / denominator
    return (2 * unit_sums @ total - counts) / denominator - value * counts * (2 * n - 1) / denominator


def mean_cosine_by_sequence(blocks, n_seq: int, seq_len: int, d: int):
    """A(H) of every row of `blocks` ((m, d) float64 each, whole sequences in order), zero rows
    left out and counted, with what mean_cosine_influence needs per sequence: (accumulator,
    unit_sums (n_seq, d), counts (n_seq,) of non-zero rows)."""
    accumulator = MeanCosineAccumulator(skip_zero_rows=True)
    unit_sums = np.zeros((n_seq, d))  # (n_seq, d): each sequence's sum of unit vectors
    counts = np.zeros(n_seq)  # (n_seq,): each sequence's non-zero vectors
    first = 0
    for block in blocks:  # (m, d), m a multiple of seq_len
        accumulator.update(block)
        norms = np.linalg.norm(block, axis=1, keepdims=True)  # (m, 1)
        units = np.divide(block, norms, out=np.zeros_like(block), where=norms > 0)  # a zero row adds nothing
        count = block.shape[0] // seq_len
        unit_sums[first : first + count] = units.reshape(count, seq_len, -1).sum(axis=1)
        counts[first : first + count] = (norms[:, 0] > 0).reshape(count, seq_len).sum(axis=1)
        first += count
    return accumulator, unit_sums, counts


def mean_pairwise_cosine_bruteforce(representations, chunk_size: int = 2048) -> float:
    """Reference A(H): sums the full cosine matrix block by block, O(n^2 d), float64.

    Never materialises the (n, n) matrix: each (chunk_size, n) block is summed and dropped;
    the diagonal (self-similarity) is subtracted per block.
    """
    units = _unit_rows(_as_float64_rows(representations, "representations"), "representations", False)
    n = units.shape[0]
    if n < 2:
        raise ValueError(f"anisotropy needs at least 2 vectors, got {n}.")
    total = 0.0
    for start in range(0, n, chunk_size):
        block = units[start : start + chunk_size] @ units.T  # (m, n) cosines
        rows = np.arange(block.shape[0])
        total += block.sum() - block[rows, start + rows].sum()
    return total / (n * (n - 1))
