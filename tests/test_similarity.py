"""Representation similarity (lmsat.degeneration.similarity) against its known truths and brute-force
references: CKA of a representation with itself, a rotation or a scaling of it is 1; with an
independent one it is near 0 and shrinks with the sample; feature-space and Gram-space CKA
equal Kornblith et al.'s centred-Gram formula (pico-analyze's `cka`), the debiased one the
U-statistic; SVCCA's correlations equal a textbook CCA's."""

import numpy as np
import pytest

from lmsat.degeneration.similarity import SimilarityError, canonical_similarity, layer_similarities, linear_cka


def rotation(d, rng):
    q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    return q


def centring(n):
    return np.eye(n) - np.ones((n, n)) / n  # H


def gram_cka(x, y):
    """Kornblith et al. 2019, eq. (4) with linear kernels: HSIC from centred Grams H K H."""
    h = centring(x.shape[0])
    kx, ky = h @ x @ x.T @ h, h @ y @ y.T @ h
    return np.sum(kx * ky) / np.sqrt(np.sum(kx * kx) * np.sum(ky * ky))


def unbiased_hsic(kx, ky):
    """Song et al. 2012's unbiased HSIC estimator (their eq. 5), written out."""
    n = kx.shape[0]
    kx, ky = kx.copy(), ky.copy()
    np.fill_diagonal(kx, 0)
    np.fill_diagonal(ky, 0)
    ones = np.ones(n)
    term = np.trace(kx @ ky) + (ones @ kx @ ones) * (ones @ ky @ ones) / ((n - 1) * (n - 2)) - 2 / (n - 2) * ones @ kx @ ky @ ones
    return term / (n * (n - 3))


def debiased_cka_reference(x, y):
    kx, ky = x @ x.T, y @ y.T
    return unbiased_hsic(kx, ky) / np.sqrt(unbiased_hsic(kx, kx) * unbiased_hsic(ky, ky))


@pytest.mark.parametrize("n, d", [(300, 12), (20, 40)])  # feature space, and wider than the sample (Grams)
def test_cka_is_one_for_itself_a_rotation_and_a_scaling(n, d):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, d)) @ np.diag(np.linspace(3, 0.1, d)) + 5.0  # anisotropic, off-centre
    for y in (x, x @ rotation(d, rng), -7.5 * x, 0.01 * x @ rotation(d, rng) + 3.0):
        assert linear_cka(x, y) == pytest.approx(1.0, abs=1e-12)
        assert linear_cka(x, y, debiased=True) == pytest.approx(1.0, abs=1e-12)
        canonical = canonical_similarity(x, y)
        assert canonical.svcca == pytest.approx(1.0, abs=1e-10) and canonical.pwcca == pytest.approx(1.0, abs=1e-10)


@pytest.mark.parametrize("n, dx, dy", [(200, 8, 5), (30, 50, 45)])
def test_cka_equals_the_centred_gram_formula_and_the_u_statistic(n, dx, dy):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(n, dx))
    y = x[:, :1] @ rng.normal(size=(1, dy)) + rng.normal(size=(n, dy))  # related in one direction
    assert linear_cka(x, y) == pytest.approx(gram_cka(x, y), rel=1e-12)
    assert linear_cka(x, y) == pytest.approx(gram_cka(y, x), rel=1e-12)  # symmetric
    xc, yc = x - x.mean(0), y - y.mean(0)
    assert linear_cka(x, y, debiased=True) == pytest.approx(debiased_cka_reference(xc, yc), rel=1e-9)


def test_cka_of_independent_representations_is_near_zero_and_shrinks_with_the_sample():
    rng = np.random.default_rng(2)
    d = 16
    biased = []
    for n in (200, 2000, 20000):
        values = [linear_cka(rng.normal(size=(n, d)), rng.normal(size=(n, d))) for _ in range(5)]
        biased.append(np.mean(values))
        assert np.mean(values) == pytest.approx(d / n, rel=0.5)  # the bias sqrt(d_x d_y) / n
        debiased = [linear_cka(rng.normal(size=(n, d)), rng.normal(size=(n, d)), debiased=True) for _ in range(5)]
        assert abs(np.mean(debiased)) < 0.5 * np.mean(values)  # the debiased estimate centres on 0
    assert biased[0] > 5 * biased[1] > 25 * biased[2]  # ~ 1/n
    assert linear_cka(rng.normal(size=(2000, d)), rng.normal(size=(2000, d))) < 0.02


def test_svcca_correlations_equal_a_textbook_cca():
    rng = np.random.default_rng(3)
    n, dx, dy = 500, 4, 3
    x = rng.normal(size=(n, dx))
    y = x[:, :2] @ rng.normal(size=(2, dy)) + 0.7 * rng.normal(size=(n, dy))
    xc, yc = x - x.mean(0), y - y.mean(0)
    sxx, syy, sxy = xc.T @ xc, yc.T @ yc, xc.T @ yc
    # rho^2 are the eigenvalues of Sxx^-1 Sxy Syy^-1 Syx (Hotelling 1936)
    rho = np.sqrt(np.sort(np.linalg.eigvals(np.linalg.solve(sxx, sxy) @ np.linalg.solve(syy, sxy.T)).real)[::-1][:dy])
    canonical = canonical_similarity(x, y, keep=1.0)  # every direction kept: plain CCA
    assert canonical.dims == (dx, dy)
    assert canonical.svcca == pytest.approx(rho.mean(), rel=1e-9)
    # PWCCA: weights sum_j |<h_i, x_j>| of x's canonical variates h_i, from the same CCA
    wx = np.linalg.solve(sxx, sxy) @ np.linalg.solve(syy, sxy.T)
    values, vectors = np.linalg.eig(wx)
    order = np.argsort(values.real)[::-1][:dy]
    h = xc @ vectors[:, order].real
    h /= np.linalg.norm(h, axis=0)
    weights = np.abs(h.T @ xc).sum(axis=1)
    assert canonical.pwcca == pytest.approx(weights @ rho / weights.sum(), rel=1e-6)


def test_svcca_keeps_the_directions_of_99_percent_of_the_variance():
    rng = np.random.default_rng(4)
    x = rng.normal(size=(400, 6)) * np.array([10, 8, 6, 0.01, 0.01, 0.01])  # 3 directions hold > 99.99%
    assert canonical_similarity(x, x).dims == (3, 3)


def test_nan_no_variance_and_other_tokens_are_named_errors():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(50, 4))
    bad = x.copy()
    bad[7, 1] = np.nan
    with pytest.raises(SimilarityError, match="NaN/Inf .row 7"):
        linear_cka(x, bad)
    with pytest.raises(SimilarityError, match="no variance"):
        linear_cka(x, np.ones((50, 4)))
    with pytest.raises(SimilarityError, match="no variance"):
        canonical_similarity(np.zeros((50, 3)), x)
    with pytest.raises(SimilarityError, match="the same tokens"):
        linear_cka(x, x[:40])
    layers = np.stack([x, x])  # (2, 50, 4)
    frozen = layers.copy()
    frozen[1] = 1.0  # the second hidden state constant
    with pytest.raises(SimilarityError, match="hidden state 1: .*no variance"):
        layer_similarities(layers, {"final": frozen})
    with pytest.raises(SimilarityError, match="not the same hidden states"):
        layer_similarities(layers, {"final": layers[:, :40]})


def test_layer_similarities_per_hidden_state():
    rng = np.random.default_rng(6)
    a = rng.normal(size=(3, 200, 8))
    b = a.copy()
    b[1] = a[1] @ rotation(8, rng)  # state 1 rotated: CKA 1
    b[2] = rng.normal(size=(200, 8))  # state 2 unrelated
    both = layer_similarities(a, {"final": b, "previous": a})
    out = both["final"]
    assert out["cka"][0] == pytest.approx(1) and out["cka"][1] == pytest.approx(1)
    assert out["cka"][2] < 0.15 and abs(out["cka_debiased"][2]) < 0.05
    assert all(len(v) == 3 for v in out.values())
    assert both["previous"]["cka"] == pytest.approx([1, 1, 1])
