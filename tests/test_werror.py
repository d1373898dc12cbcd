"""W-error and the exact Gram spectrum, against dense numpy SVD."""

import numpy as np
import pytest
import scipy.sparse
import scipy.sparse.csgraph

from lmsat.bottleneck.werror import frobenius_norm, gram_spectrum, w_error_curve


def _brute_force_w_error(matrix, d):
    """Eckart-Young error of the best rank-d approximation, by explicit truncated SVD."""
    u, s, vt = np.linalg.svd(matrix, full_matrices=False)
    best_rank_d = (u[:, :d] * s[:d]) @ vt[:d]
    return np.linalg.norm(matrix - best_rank_d) / np.linalg.norm(matrix)


@pytest.mark.parametrize("shape", [(40, 25), (25, 40), (30, 30)])
def test_gram_spectrum_matches_dense_svd(shape):
    rng = np.random.default_rng(0)
    dense = rng.random(shape) * (rng.random(shape) < 0.2)  # sparse-ish, has zero columns
    dense[:, 3] = 0.0
    expected = np.linalg.svd(dense, compute_uv=False)
    for matrix in (dense, scipy.sparse.csr_matrix(dense), scipy.sparse.coo_matrix(dense)):
        sigma = gram_spectrum(matrix)
        assert sigma.shape == (min(shape),)
        np.testing.assert_allclose(sigma, expected, atol=1e-6, rtol=0)
        assert np.all(np.diff(sigma) <= 0)


def test_gram_spectrum_of_an_ngram_like_matrix_splits_into_blocks_and_matches_dense_svd():
    """Rows with one next token (most n-gram contexts), a few shared-token blocks, unused
    columns: the per-block eigensolve must give the spectrum of the whole matrix."""
    rng = np.random.default_rng(3)
    n_cols = 60
    single = np.zeros((120, n_cols))
    single[np.arange(120), rng.integers(0, 40, size=120)] = 1.0  # one-hot rows
    blocks = np.zeros((30, n_cols))
    for row in range(30):  # three groups of columns that share contexts
        group = np.arange(10) + 10 * (row % 3)
        blocks[row, rng.choice(group, size=3, replace=False)] = rng.dirichlet(np.ones(3))
    dense = np.vstack([single, blocks])[rng.permutation(150)]  # columns 40..59 unused
    n_blocks, _ = scipy.sparse.csgraph.connected_components(
        scipy.sparse.csr_matrix(dense.T @ dense), directed=False
    )
    assert n_blocks > 3  # the fast path is exercised
    expected = np.linalg.svd(dense, compute_uv=False)
    for device in (None, "cpu"):
        sigma = gram_spectrum(scipy.sparse.csr_matrix(dense), device=device)
        np.testing.assert_allclose(sigma, expected, atol=1e-6, rtol=0)
        sigma_t = gram_spectrum(scipy.sparse.csr_matrix(dense.T), device=device)
        np.testing.assert_allclose(sigma_t, expected, atol=1e-6, rtol=0)


def test_gram_spectrum_with_torch_eigensolver_matches_scipy():
    matrix = scipy.sparse.random(60, 35, density=0.1, random_state=5, format="csr")
    np.testing.assert_allclose(
        gram_spectrum(matrix, device="cpu"), gram_spectrum(matrix), atol=1e-10
    )


def test_gram_spectrum_of_low_rank_matrix_has_exact_zeros_beyond_rank():
    rng = np.random.default_rng(1)
    matrix = rng.normal(size=(50, 3)) @ rng.normal(size=(3, 20))  # rank 3
    sigma = gram_spectrum(scipy.sparse.csr_matrix(matrix))
    np.testing.assert_allclose(sigma, np.linalg.svd(matrix, compute_uv=False), atol=1e-6)
    assert np.all(sigma[3:] < 1e-6)


def test_w_error_curve_matches_truncated_svd_error():
    rng = np.random.default_rng(2)
    matrix = rng.random((30, 12)) ** 3
    dims, werror = w_error_curve(gram_spectrum(matrix))
    np.testing.assert_array_equal(dims, np.arange(13))
    assert werror[0] == pytest.approx(1.0, abs=1e-12)
    assert werror[-1] == 0.0
    expected = [_brute_force_w_error(matrix, d) for d in dims]
    np.testing.assert_allclose(werror, expected, atol=1e-7)
    assert np.all(np.diff(werror) <= 0)


def test_w_error_is_zero_at_the_rank():
    rng = np.random.default_rng(3)
    matrix = rng.normal(size=(20, 4)) @ rng.normal(size=(4, 15))
    _, werror = w_error_curve(gram_spectrum(matrix))
    assert werror[0] == pytest.approx(1.0)
    assert werror[4] < 1e-6
    assert werror[3] > 1e-3


def test_top_k_values_with_frobenius_norm_give_the_same_head_of_the_curve():
    rng = np.random.default_rng(4)
    matrix = rng.random((25, 18))
    sigma = np.linalg.svd(matrix, compute_uv=False)
    _, full = w_error_curve(sigma)
    _, partial = w_error_curve(sigma[:5][::-1], frobenius_norm=frobenius_norm(matrix))
    np.testing.assert_allclose(partial, full[:6], atol=1e-12)
    assert frobenius_norm(scipy.sparse.csr_matrix(matrix)) == pytest.approx(np.linalg.norm(matrix))


def test_tail_sums_keep_small_values_that_one_minus_cumsum_loses():
    sigma = np.array([1e4] + [1e-5] * 10)
    _, werror = w_error_curve(sigma)
    assert werror[1] == pytest.approx(np.sqrt(10) * 1e-5 / np.sqrt(1e8 + 1e-9), rel=1e-9)


def test_bad_inputs_name_the_argument():
    with pytest.raises(ValueError, match="frobenius_norm"):
        w_error_curve([3.0, 4.0], frobenius_norm=1.0)
    with pytest.raises(ValueError, match="non-negative"):
        w_error_curve([1.0, -1.0])
    with pytest.raises(ValueError, match="zero matrix"):
        w_error_curve([0.0, 0.0])
    with pytest.raises(ValueError, match="2-D"):
        gram_spectrum(np.ones(3))
    with pytest.raises(ValueError, match="numpy array or a scipy sparse"):
        gram_spectrum([[1.0]])
