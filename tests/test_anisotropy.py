"""Streaming O(n d) anisotropy against the brute-force pairwise mean."""

import h5py
import numpy as np
import pytest
import torch

from lmsat.degeneration.anisotropy import (
    MeanCosineAccumulator,
    mean_pairwise_cosine,
    mean_pairwise_cosine_bruteforce,
)


def anisotropic(n: int, d: int, offset: float, seed: int = 0) -> np.ndarray:
    """Gaussian cloud shifted by a common direction: larger offset, larger anisotropy."""
    rng = np.random.default_rng(seed)
    common = rng.normal(size=d)
    common /= np.linalg.norm(common)
    return rng.normal(size=(n, d)) + offset * np.sqrt(d) * common


def naive_double_loop(h: np.ndarray) -> float:
    """The paper's formula, literally (tiny n only)."""
    n = len(h)
    total = sum(
        h[i] @ h[j] / (np.linalg.norm(h[i]) * np.linalg.norm(h[j]))
        for i in range(n)
        for j in range(n)
        if i != j
    )
    return total / (n * n - n)


def test_bruteforce_reference_matches_the_paper_formula_literally():
    h = anisotropic(23, 5, offset=0.7)
    assert mean_pairwise_cosine_bruteforce(h, chunk_size=4) == pytest.approx(naive_double_loop(h), abs=1e-12)


@pytest.mark.parametrize(
    "n, d, offset",
    [(2, 3, 0.0), (50, 768, 0.0), (1000, 16, 0.0), (700, 64, 0.5), (1500, 128, 3.0), (333, 1, 0.2)],
)
def test_exact_method_equals_bruteforce(n, d, offset):
    h = anisotropic(n, d, offset)
    assert mean_pairwise_cosine(h) == pytest.approx(mean_pairwise_cosine_bruteforce(h, 256), abs=1e-9)


def test_known_values():
    assert mean_pairwise_cosine(np.ones((10, 4)) * [1, 2, 3, 4]) == pytest.approx(1.0)
    opposite = np.array([[1.0, 0.0], [-1.0, 0.0]])
    assert mean_pairwise_cosine(opposite) == pytest.approx(-1.0)
    # Orthonormal basis: every pair has cosine 0.
    assert mean_pairwise_cosine(np.eye(6) * 3.0) == pytest.approx(0.0, abs=1e-15)
    # A strong common offset makes the set anisotropic, none makes it near-isotropic.
    assert mean_pairwise_cosine(anisotropic(2000, 64, 3.0)) > 0.85
    assert abs(mean_pairwise_cosine(anisotropic(2000, 64, 0.0))) < 0.01


def test_streaming_from_hdf5_chunks_equals_bruteforce(tmp_path):
    h = anisotropic(2500, 48, offset=1.0).astype(np.float32)
    path = tmp_path / "reps.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("layer_3", data=h, chunks=(256, 48))
    acc = MeanCosineAccumulator()
    with h5py.File(path, "r") as f:
        dataset = f["layer_3"]
        for start in range(0, dataset.shape[0], 300):  # uneven last chunk
            acc.update(dataset[start : start + 300])
    assert acc.n == 2500
    assert acc.value == pytest.approx(mean_pairwise_cosine_bruteforce(h), abs=1e-9)


def test_chunking_does_not_change_the_result_and_torch_bf16_is_accepted():
    h = anisotropic(1000, 32, offset=0.3)
    acc = MeanCosineAccumulator()
    for chunk in np.array_split(h, 7):
        acc.update(torch.from_numpy(chunk))
    assert acc.value == pytest.approx(mean_pairwise_cosine(h), abs=1e-12)
    bf16 = torch.from_numpy(h).to(torch.bfloat16)
    expected = mean_pairwise_cosine_bruteforce(bf16.float().numpy())
    assert mean_pairwise_cosine(bf16) == pytest.approx(expected, abs=1e-9)


def test_zero_rows_raise_by_default_and_are_dropped_on_request():
    h = anisotropic(100, 8, offset=0.5)
    with_zeros = h.copy()
    with_zeros[[55, 60]] = 0.0
    acc = MeanCosineAccumulator()
    acc.update(with_zeros[:50])
    with pytest.raises(ValueError, match=r"2 zero-norm rows \(rows \[55, 60\]\).*skip_zero_rows"):
        acc.update(with_zeros[50:])
    skipping = MeanCosineAccumulator(skip_zero_rows=True)
    skipping.update(with_zeros[:50]).update(with_zeros[50:])
    kept = np.delete(h, [55, 60], axis=0)
    assert (skipping.n, skipping.n_skipped) == (98, 2)
    assert skipping.value == pytest.approx(mean_pairwise_cosine_bruteforce(kept), abs=1e-9)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_values_raise(bad):
    h = anisotropic(10, 4, offset=0.0)
    h[3, 2] = bad
    with pytest.raises(ValueError, match=r"NaN/Inf in rows \[3\]"):
        mean_pairwise_cosine(h)
    with pytest.raises(ValueError, match="NaN/Inf"):
        mean_pairwise_cosine_bruteforce(h)


def test_bad_shapes_and_too_few_vectors_raise():
    with pytest.raises(ValueError, match="2-D"):
        mean_pairwise_cosine(np.ones(5))
    with pytest.raises(ValueError, match="at least 2"):
        mean_pairwise_cosine(np.ones((1, 5)))
    with pytest.raises(ValueError, match="at least 2"):
        _ = MeanCosineAccumulator().value
    acc = MeanCosineAccumulator().update(np.ones((3, 5)))
    with pytest.raises(ValueError, match="d=4 but earlier chunks had d=5"):
        acc.update(np.ones((3, 4)))


def test_the_per_sequence_influence_leaves_out_zero_rows_as_the_value_does():
    """Zero rows (an embedding row that padding_idx keeps at zero) are left out of A(H) and of
    each sequence's count, so the influence is the derivative of the weighted statistic over the
    non-zero rows (brute force: central differences of the weighted mean cosine)."""
    from lmsat.degeneration.anisotropy import mean_cosine_by_sequence, mean_cosine_influence, mean_pairwise_cosine_bruteforce

    rng = np.random.default_rng(3)
    n_seq, seq_len, d = 6, 5, 4
    hidden = rng.normal(size=(n_seq * seq_len, d)) + 0.5  # (N, d), some shared direction
    hidden[[0, 7, 8, 21]] = 0.0  # zero vectors in three sequences
    blocks = (hidden[i : i + 2 * seq_len] for i in range(0, len(hidden), 2 * seq_len))  # whole sequences
    accumulator, unit_sums, counts = mean_cosine_by_sequence(blocks, n_seq, seq_len, d)
    kept = np.linalg.norm(hidden, axis=1) > 0
    assert accumulator.n_skipped == 4 and accumulator.n == kept.sum()
    assert accumulator.value == pytest.approx(mean_pairwise_cosine_bruteforce(hidden[kept]), rel=1e-12)
    assert counts.tolist() == [4, 3, 5, 5, 4, 5]

    units = hidden[kept] / np.linalg.norm(hidden[kept], axis=1, keepdims=True)
    cosines = units @ units.T
    sequence_of_row = np.repeat(np.arange(n_seq), seq_len)[kept]

    def weighted(w):  # (n_seq,) -> the mean cosine over pairs of the weighted non-zero rows
        rows = w[sequence_of_row]
        n = rows.sum()
        return (rows @ cosines @ rows - rows @ rows + (rows**2 - rows).sum()) / (n * (n - 1))

    step = 1e-5
    differences = np.array([(weighted(1 + step * e) - weighted(1 - step * e)) / (2 * step) for e in np.eye(n_seq)])
    influence = mean_cosine_influence(unit_sums, counts)
    assert np.allclose(influence, differences, rtol=1e-6, atol=1e-9 * np.abs(differences).max())
