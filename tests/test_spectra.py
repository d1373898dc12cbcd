"""Gram-based singular values and spectral scalars against numpy SVD and hand computations."""

import math

import numpy as np
import pytest
import torch

from lmsat.degeneration.spectra import (
    effective_rank,
    identical_heads,
    matrix_sha256,
    normalised_spectrum,
    singular_entropy,
    singular_values,
    stable_rank,
)


def svd_reference(matrix: np.ndarray) -> np.ndarray:
    return np.linalg.svd(np.asarray(matrix, dtype=np.float64), compute_uv=False)


def with_spectrum(n_rows: int, spectrum: np.ndarray, seed: int = 0) -> np.ndarray:
    """U diag(spectrum) V^T with random orthonormal U (n_rows, k), V (k, k)."""
    rng = np.random.default_rng(seed)
    k = spectrum.size
    u, _ = np.linalg.qr(rng.normal(size=(n_rows, k)))
    v, _ = np.linalg.qr(rng.normal(size=(k, k)))
    return (u * spectrum) @ v.T


@pytest.mark.parametrize(
    "matrix",
    [
        np.random.default_rng(1).normal(size=(300, 40)),  # random
        np.random.default_rng(2).normal(size=(5000, 64)).astype(np.float32),  # tall, like a head
        with_spectrum(800, np.logspace(0, -4, 50)),  # ill-conditioned: kappa = 1e4
        np.random.default_rng(3).normal(size=(30, 90)),  # wide
    ],
    ids=["random", "tall-5000x64-float32", "ill-conditioned-1e4", "wide"],
)
def test_singular_values_match_numpy_svd_to_1e6_relative(matrix):
    s = singular_values(matrix, chunk_rows=700)  # several chunks, uneven last one
    expected = svd_reference(matrix)
    assert s.shape == expected.shape
    np.testing.assert_allclose(s, expected, rtol=1e-6)
    assert np.all(np.diff(s) <= 0)


def test_torch_input_including_bf16():
    head = torch.randn(1000, 32, generator=torch.Generator().manual_seed(0))
    np.testing.assert_allclose(singular_values(head), svd_reference(head.numpy()), rtol=1e-6)
    bf16 = head.to(torch.bfloat16)
    expected = svd_reference(bf16.float().numpy())
    np.testing.assert_allclose(singular_values(bf16), expected, rtol=1e-6)


def test_rank_deficient_matrix_gives_zeros_not_nans():
    matrix = with_spectrum(200, np.array([5.0, 2.0, 0.0, 0.0]))
    s = singular_values(matrix)
    assert np.isfinite(s).all()
    np.testing.assert_allclose(s, [5.0, 2.0, 0.0, 0.0], atol=1e-7)


def test_padding_rows_are_dropped():
    rng = np.random.default_rng(4)
    valid = rng.normal(size=(500, 16))
    # Padding rows that were never trained: here a large spike along one direction.
    padding = np.outer(np.full(12, 30.0), np.eye(16)[0])
    head = np.vstack([valid, padding])  # (512, 16), like 50277 -> 50304
    trimmed = singular_values(head, n_valid_rows=500)
    np.testing.assert_allclose(trimmed, svd_reference(valid), rtol=1e-6)
    full = singular_values(head)
    np.testing.assert_allclose(full, svd_reference(head), rtol=1e-6)
    assert full[0] > 3 * trimmed[0]  # the padding spike dominates unless it is dropped
    assert singular_entropy(full) > singular_entropy(trimmed)


def test_bad_input_raises():
    with pytest.raises(ValueError, match=r"n_valid_rows=600 must be in \[1, 512\]"):
        singular_values(np.ones((512, 4)), n_valid_rows=600)
    with pytest.raises(ValueError, match="2-D"):
        singular_values(np.ones(5))
    broken = np.ones((100, 4))
    broken[70, 1] = np.nan
    with pytest.raises(ValueError, match="row 70"):
        singular_values(broken, chunk_rows=32)


def test_singular_entropy_is_zero_for_a_flat_spectrum():
    assert singular_entropy(np.full(768, 2.5)) == pytest.approx(0.0, abs=1e-12)
    assert singular_entropy(np.full(768, 2.5), power=2) == pytest.approx(0.0, abs=1e-12)


def test_singular_entropy_hand_computed():
    # s = (3, 1).
    # power=1: p = (3/4, 1/4); KL = 3/4 ln(3/4 / (1/2)) + 1/4 ln(1/4 / (1/2))
    #                              = 0.75 ln 1.5 + 0.25 ln 0.5 = 0.304099 - 0.173287 = 0.130812
    # power=2: p = (9/10, 1/10); KL = 0.9 ln 1.8 + 0.1 ln 0.2 = 0.529008 - 0.160944 = 0.368064
    assert singular_entropy([3.0, 1.0]) == pytest.approx(0.130812, abs=1e-6)
    assert singular_entropy([3.0, 1.0], power=2) == pytest.approx(0.368064, abs=1e-6)
    # One non-zero value out of n: the maximum, log(n) (zero entries contribute 0 log 0 = 0).
    assert singular_entropy([4.0, 0.0, 0.0, 0.0]) == pytest.approx(math.log(4))


def test_singular_entropy_is_log_gap_to_effective_rank_and_rejects_other_powers():
    s = np.random.default_rng(5).gamma(2.0, size=100)
    assert singular_entropy(s) == pytest.approx(math.log(100 / effective_rank(s)))
    with pytest.raises(ValueError, match="power=3"):
        singular_entropy(s, power=3)


def test_effective_and_stable_rank():
    assert effective_rank(np.ones(10)) == pytest.approx(10.0)
    assert effective_rank([7.0, 0.0, 0.0]) == pytest.approx(1.0)
    # p = (1/2, 1/4, 1/4): H = 1.5 ln 2, exp(H) = 2^1.5
    assert effective_rank([2.0, 1.0, 1.0]) == pytest.approx(2**1.5)
    assert stable_rank([2.0, 1.0, 1.0]) == pytest.approx((4 + 1 + 1) / 4)
    matrix = np.random.default_rng(6).normal(size=(50, 8))
    frobenius, spectral = np.linalg.norm(matrix), np.linalg.norm(matrix, 2)
    assert stable_rank(singular_values(matrix)) == pytest.approx(frobenius**2 / spectral**2)


def test_normalised_spectrum_and_zero_matrix():
    np.testing.assert_allclose(normalised_spectrum([4.0, 2.0, 1.0]), [1.0, 0.5, 0.25])
    with pytest.raises(ValueError, match="all zero"):
        singular_entropy(singular_values(np.zeros((10, 3))))


def test_identical_heads_groups_bit_identical_revisions():
    rng = np.random.default_rng(7)
    final = rng.normal(size=(64, 8)).astype(np.float32)
    early = rng.normal(size=(64, 8)).astype(np.float32)
    nudged = final.copy()
    nudged[3, 3] = np.nextafter(nudged[3, 3], np.inf)  # one ulp away: not identical
    heads = {"step1000": early, "step2000": final, "step3000": nudged, "step143000": final.copy()}
    hashes = {revision: matrix_sha256(head) for revision, head in heads.items()}
    assert identical_heads(hashes) == [["step2000", "step143000"]]
    assert identical_heads({"a": hashes["step1000"], "b": hashes["step3000"]}) == []
    # numpy and torch views of the same bytes agree, including bf16 tensors.
    assert matrix_sha256(torch.from_numpy(final)) == hashes["step2000"]
    bf16 = torch.from_numpy(final).to(torch.bfloat16)
    assert matrix_sha256(bf16) == matrix_sha256(bf16.clone())
    assert matrix_sha256(bf16) != matrix_sha256(torch.from_numpy(early).to(torch.bfloat16))
