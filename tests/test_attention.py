"""Attention low-rank metrics against dense products and constructed factorisations."""

import numpy as np
import pytest
import torch
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM, LlamaConfig, LlamaForCausalLM

from lmsat.degeneration.attention import attention_lowrank, factor_metrics, product_singular_values, qk_vo_factors
from lmsat.degeneration.spectra import effective_rank, stable_rank


def dense_reference(a: np.ndarray, b: np.ndarray) -> dict:
    """Brute force on the d x d product."""
    product = a @ b.T
    s = np.linalg.svd(product, compute_uv=False)
    frob_a, frob_b = np.sum(a**2), np.sum(b**2)
    return {
        "s": s,
        "nuclear_ratio": s.sum() / ((frob_a + frob_b) / 2),
        "balance_gap": np.linalg.norm(a.T @ a - b.T @ b) / frob_a,
        "stable_rank": np.linalg.norm(product) ** 2 / np.linalg.norm(product, 2) ** 2,
    }


@pytest.mark.parametrize("d, r", [(64, 8), (128, 32), (16, 16), (6, 10)])
def test_metrics_match_dense_svd(d, r):
    rng = np.random.default_rng(d + r)
    a = rng.normal(size=(3, d, r))
    b = rng.normal(size=(3, d, r)) * 0.3
    for i, m in enumerate(factor_metrics(a, b)):
        ref = dense_reference(a[i], b[i])
        n = min(d, r)
        np.testing.assert_allclose(m.singular_values, ref["s"][:n], rtol=1e-9, atol=1e-12)
        assert np.allclose(ref["s"][n:], 0, atol=1e-10)  # the product has rank <= r
        assert m.nuclear_ratio == pytest.approx(ref["nuclear_ratio"], rel=1e-9)
        assert m.balance_gap == pytest.approx(ref["balance_gap"], rel=1e-9)
        assert m.stable_rank == pytest.approx(ref["stable_rank"], rel=1e-9)
        assert m.effective_rank == pytest.approx(effective_rank(ref["s"][:n]), rel=1e-9)
        assert 0 < m.nuclear_ratio < 1


def test_balanced_factorisation_from_svd_has_ratio_one_and_gap_zero():
    rng = np.random.default_rng(0)
    d, r = 48, 6
    u, _ = np.linalg.qr(rng.normal(size=(d, r)))
    v, _ = np.linalg.qr(rng.normal(size=(d, r)))
    s = np.array([9.0, 4.0, 2.0, 1.0, 0.5, 0.1])
    a, b = u * np.sqrt(s), v * np.sqrt(s)  # A = U sqrt(S), B = V sqrt(S): A B^T = U S V^T
    (m,) = factor_metrics(a, b)
    np.testing.assert_allclose(m.singular_values, s, rtol=1e-12)
    assert m.nuclear_ratio == pytest.approx(1.0, abs=1e-12)
    assert m.balance_gap == pytest.approx(0.0, abs=1e-12)
    assert m.stable_rank == pytest.approx(np.sum(s**2) / 81)


def test_unbalanced_factorisation_of_the_same_product_has_ratio_below_one():
    rng = np.random.default_rng(1)
    d, r = 48, 6
    u, _ = np.linalg.qr(rng.normal(size=(d, r)))
    v, _ = np.linalg.qr(rng.normal(size=(d, r)))
    s = np.array([9.0, 4.0, 2.0, 1.0, 0.5, 0.1])
    a, b = u * np.sqrt(s), v * np.sqrt(s)
    mix = np.diag([3.0, 1.0, 0.5, 2.0, 1.0, 1.0])  # A M, B M^-T: same product, more weight norm
    unbalanced_a, unbalanced_b = a @ mix, b @ np.linalg.inv(mix).T
    np.testing.assert_allclose(unbalanced_a @ unbalanced_b.T, a @ b.T, atol=1e-12)
    (m,) = factor_metrics(unbalanced_a, unbalanced_b)
    np.testing.assert_allclose(m.singular_values, s, rtol=1e-9)  # same product, same spectrum
    assert m.nuclear_ratio < 0.9
    assert m.balance_gap > 0.1
    # Misaligned but equally sized factors (rotate B's inner basis) also fall short of 1.
    rotation, _ = np.linalg.qr(rng.normal(size=(r, r)))
    (misaligned,) = factor_metrics(a, b @ rotation)
    assert misaligned.nuclear_ratio < 0.99


def test_zero_factor_and_shape_mismatch_raise():
    with pytest.raises(ValueError, match="all-zero"):
        factor_metrics(np.zeros((1, 8, 2)), np.ones((1, 8, 2)))
    with pytest.raises(ValueError, match="same shape"):
        product_singular_values(np.ones((1, 8, 2)), np.ones((1, 8, 3)))


def tiny_neox():
    torch.manual_seed(0)
    config = GPTNeoXConfig(
        vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=48, bos_token_id=0, eos_token_id=1,
    )
    return GPTNeoXForCausalLM(config).eval()


def test_attention_lowrank_records_agree_with_dense_products_of_the_model_weights():
    model = tiny_neox()
    records = attention_lowrank(model)
    assert len(records) == 2 * 2 * 4  # layers x kinds x heads
    assert [(r.layer, r.kind, r.head) for r in records[:5]] == [
        (0, "qk", 0), (0, "qk", 1), (0, "qk", 2), (0, "qk", 3), (0, "vo", 0)
    ]
    d_head = 8
    for record in records:
        attn = model.gpt_neox.layers[record.layer].attention
        h = record.head
        # Independent slicing of the raw parameters (head-interleaved fused qkv, Linear dense).
        fused = attn.query_key_value.weight.detach().double().numpy()  # (3 * 32, 32)
        rows = fused[h * 3 * d_head : (h + 1) * 3 * d_head]  # [q_h; k_h; v_h] of head h
        q, k, v = rows[:d_head], rows[d_head : 2 * d_head], rows[2 * d_head :]
        o = attn.dense.weight.detach().double().numpy()[:, h * d_head : (h + 1) * d_head]
        a, b = (q.T, k.T) if record.kind == "qk" else (o, v.T)
        ref = dense_reference(a, b)
        product = q.T @ k if record.kind == "qk" else o @ v
        np.testing.assert_allclose(a @ b.T, product)
        np.testing.assert_allclose(record.metrics.singular_values, ref["s"][:d_head], rtol=1e-9)
        assert record.metrics.nuclear_ratio == pytest.approx(ref["nuclear_ratio"], rel=1e-9)
        assert record.metrics.balance_gap == pytest.approx(ref["balance_gap"], rel=1e-9)
    row = records[0].as_row()
    assert set(row) >= {"layer", "head", "kind", "nuclear_ratio", "balance_gap", "singular_values"}
    assert len(row["singular_values"]) == d_head


def test_gqa_model_gives_one_record_per_query_head_and_layer_subset():
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=50, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=48, bos_token_id=0, eos_token_id=1, pad_token_id=2,
    )
    model = LlamaForCausalLM(config).eval()
    records = attention_lowrank(model, layers=[2])
    assert len(records) == 2 * 4 and {r.layer for r in records} == {2}
    a, b = qk_vo_factors(model, 2)["qk"]
    np.testing.assert_array_equal(b[0], b[1])  # query heads 0 and 1 share kv head 0
    assert stable_rank(records[0].metrics.singular_values) == records[0].metrics.stable_rank


def test_cholesky_path_matches_float64_qr_on_ill_conditioned_and_rank_deficient_factors():
    """Stated tolerance of the batched Gram/Cholesky path against float64 Householder QR +
    SVD (the reference, in numpy): |s - s_ref| <= 1e-12 * cond(A) cond(B) * s_1. Factors
    with cond 1e3 (trained attention factors are far better conditioned) and one with a
    zero column (singular Gram: the Householder fallback)."""
    rng = np.random.default_rng(3)
    n, d, r = 4, 96, 12
    u = np.linalg.qr(rng.normal(size=(n, d, r)))[0]
    v = np.linalg.qr(rng.normal(size=(n, r, r)))[0]
    scales = np.logspace(0, -3, r)  # cond(A) = cond(B) = 1e3
    a = u * scales @ v
    b = np.linalg.qr(rng.normal(size=(n, d, r)))[0] * scales[::-1] @ v
    a[3, :, 5] = 0.0  # rank-deficient factor
    reference = np.linalg.svd(np.linalg.qr(a, mode="r") @ np.linalg.qr(b, mode="r").transpose(0, 2, 1), compute_uv=False)
    got = product_singular_values(a, b)
    tolerance = 1e-12 * 1e3 * 1e3 * reference[:, :1]
    assert (np.abs(got - reference) <= tolerance).all()
    got_torch = product_singular_values(torch.from_numpy(a).to(torch.float32), torch.from_numpy(b).to(torch.float32))
    ref_32 = product_singular_values(torch.from_numpy(a).float().double(), torch.from_numpy(b).float().double())
    np.testing.assert_array_equal(got_torch, ref_32)  # any input dtype is upcast to float64 first


def test_nan_or_inf_in_a_factor_raises():
    a, b = np.ones((2, 8, 2)), np.ones((2, 8, 2))
    for bad in (np.nan, np.inf, -np.inf):
        broken = a.copy()
        broken[1, 3, 0] = bad
        with pytest.raises(ValueError, match="NaN/Inf"):
            factor_metrics(broken, b)


@pytest.mark.parametrize("key, value, bounds", [
    ("qk/effective_rank", 9.0, r"\[1, 8\]"),  # d_head 8: at most 8 singular values
    ("vo/stable_rank", 0.5, r"\[1, 8\]"),
    ("qk/nuclear_ratio", 1.5, r"\[0, 1\]"),
    ("vo/balance_gap", -0.1, r"\[0, inf\]"),
])
def test_an_attention_file_with_an_impossible_value_is_refused_even_with_its_checksum_recomputed(
        tiny_neox, tmp_path, key, value, bounds):
    import re

    from lmsat.core.integrity import IntegrityError
    from lmsat.degeneration.weight_files import attention_arrays, read_attention, write_attention

    arrays, shape = attention_arrays(tiny_neox)
    read = tmp_path / "attention" / "tiny" / "step3.h5"
    read.parent.mkdir(parents=True)
    record = dict(suite="s", model="tiny", revision="step3", step=3, tokens=30)
    write_attention(read, arrays, shape, record, 16)
    read_attention(read)
    arrays[key][1, 0] = value
    write_attention(read, arrays, shape, record, 16)  # checksums of the edited values
    with pytest.raises(IntegrityError, match=rf"{re.escape(str(read))} is corrupt: tiny@step3: dataset `{key}` at "
                       rf"\(1, 0\) is {re.escape(repr(value))}, outside {bounds}.*rule analyse_checkpoint"):
        read_attention(read)
