"""The hidden-state cache: contents against the model itself, resume, and rejection of bad files."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import torch

from lmsat.data import hidden_states as cache_module
from lmsat.data.hidden_states import CacheError, ExtractionSettings, extract_to_cache, iter_rows, open_cache
from lmsat.products.metrics import METRICS

SETTINGS = ExtractionSettings(batch_size=3, chunk_sequences=4, layer_sample=50, seed=1)
IDENTITY = dict(model="tiny", revision="step1", model_id="local/tiny", sample_sha256="abc")


@pytest.fixture
def tokens():
    return np.random.default_rng(0).integers(0, 36, size=(10, 12)).astype(np.int32)  # (n_seq, seq_len)


def read_all(path):
    with h5py.File(path, "r") as f:
        return {name: f[name][...] for name in f}, dict(f.attrs)


def test_cache_matches_the_model(tiny_neox, tokens, tmp_path):
    out = tmp_path / "c.h5"
    extract_to_cache(tiny_neox, tokens, out, identity=IDENTITY, settings=SETTINGS)
    data, attrs = read_all(out)
    ids = torch.as_tensor(tokens, dtype=torch.long)
    with torch.no_grad():
        reference = tiny_neox(ids, labels=ids, output_hidden_states=True)
    # per-token losses average to the model's own loss; hidden is its last hidden state
    assert data["loss"].shape == (10, 11)
    assert np.isclose(data["loss"].mean(), reference.loss.item(), rtol=1e-5)
    assert np.allclose(data["hidden"], reference.hidden_states[-1].reshape(-1, 16).numpy(), atol=1e-5)
    flat = [h.reshape(-1, 16).numpy()[data["layer_index"]] for h in reference.hidden_states]
    assert np.allclose(data["layers"], np.stack(flat), atol=1e-5)
    assert data["layers"].shape == (3, 50, 16) and attrs["n_layers"] == 2
    assert attrs["complete"] and attrs["revision"] == "step1" and "torch" in attrs["versions"]
    assert not (tmp_path / "c.h5.parts").exists()


def test_killed_extraction_resumes_to_identical_file(tiny_neox, tokens, tmp_path, monkeypatch):
    reference = tmp_path / "ref.h5"
    extract_to_cache(tiny_neox, tokens, reference, identity=IDENTITY, settings=SETTINGS)

    out = tmp_path / "c.h5"
    real_chunk, calls = cache_module._extract_chunk, []

    def dying_chunk(*args, **kwargs):
        if len(calls) == 2:
            raise KeyboardInterrupt("killed")
        calls.append(1)
        return real_chunk(*args, **kwargs)

    monkeypatch.setattr(cache_module, "_extract_chunk", dying_chunk)
    with pytest.raises(KeyboardInterrupt):
        extract_to_cache(tiny_neox, tokens, out, identity=IDENTITY, settings=SETTINGS)
    assert not out.exists()  # nothing that looks complete
    assert len(list((tmp_path / "c.h5.parts").glob("chunk_*.done"))) == 2

    calls.clear()
    monkeypatch.setattr(cache_module, "_extract_chunk", lambda *a, **k: calls.append(1) or real_chunk(*a, **k))
    extract_to_cache(tiny_neox, tokens, out, identity=IDENTITY, settings=SETTINGS)
    assert len(calls) == 1  # only the missing third chunk was computed
    resumed, attrs = read_all(out)
    expected, _ = read_all(reference)
    for name in expected:
        assert np.array_equal(resumed[name], expected[name]), name
    assert out.read_bytes() == reference.read_bytes()  # bit for bit


def test_leftover_chunks_from_other_inputs_are_discarded(tiny_neox, tokens, tmp_path):
    out = tmp_path / "c.h5"
    parts = tmp_path / "c.h5.parts"
    parts.mkdir()
    (parts / "meta.json").write_text('{"model": "other"}')
    np.savez(parts / "chunk_0000000.npz", loss=np.zeros((4, 11), np.float32))
    extract_to_cache(tiny_neox, tokens, out, identity=IDENTITY, settings=SETTINGS)
    data, _ = read_all(out)
    assert data["loss"].mean() > 1.0  # real losses, not the stale zeros


def test_open_cache_rejects_bad_files(tiny_neox, tokens, tmp_path):
    out = tmp_path / "c.h5"
    extract_to_cache(tiny_neox, tokens, out, identity=IDENTITY, settings=SETTINGS)
    with open_cache(out, expect={"revision": "step1", "sample_sha256": "abc"}) as f:
        assert METRICS["loss"].compute(f)["n_tokens"] == 110
    with pytest.raises(CacheError, match="sample_sha256"):
        open_cache(out, expect={"sample_sha256": "other"})

    truncated = tmp_path / "t.h5"
    truncated.write_bytes(out.read_bytes()[:2000])
    with pytest.raises(CacheError, match="unreadable or truncated"):
        open_cache(truncated)

    with h5py.File(out, "a") as f:
        f["loss"][0, 0] = np.nan
        f["hidden"][5, 3] = np.inf
    with pytest.raises(CacheError, match=r"c\.h5 is corrupt: dataset 'loss' does not match its checksum"):
        open_cache(out)  # the checksums see it first (tests/test_integrity.py); the readers' own checks:
    with open_cache(out, verify=False) as f:
        with pytest.raises(CacheError, match="NaN"):
            METRICS["loss"].compute(f)
        with pytest.raises(CacheError, match="row 5"):
            list(iter_rows(f["hidden"], rows=4))

    with h5py.File(out, "a") as f:
        f.attrs["complete"] = False
    with pytest.raises(CacheError, match="incomplete"):
        open_cache(out)


def test_a_head_that_does_not_read_the_last_hidden_state_is_refused(tiny_neox, tokens, tmp_path):
    """hidden_states[-1] must be the head's input (post final norm); a model whose head sees
    something else (here: a norm that the hidden states do not show) needs an adapter."""
    import copy

    model = copy.deepcopy(tiny_neox)
    with torch.no_grad():
        model.gpt_neox.final_layer_norm.weight.mul_(2.0)  # logits change, hidden_states[-1] too
    original = model.forward

    def forward_with_stale_last_state(*args, **kwargs):
        out = original(*args, **kwargs)
        out.hidden_states = out.hidden_states[:-1] + (out.hidden_states[-1] / 2.0,)
        return out

    model.forward = forward_with_stale_last_state
    ids = torch.as_tensor(tokens[:2], dtype=torch.long)
    with torch.no_grad(), pytest.raises(RuntimeError, match="needs an adapter"):
        cache_module.forward_hidden_states(model, ids, check_head=True)
    assert len(cache_module.forward_hidden_states(tiny_neox, ids, check_head=True)) == 3  # embeddings + 2 layers


def test_layers_of_a_model_with_narrower_last_state_keep_each_state_s_own_tokens(tokens, tmp_path):
    """OPT-350m-like: 32-wide blocks, a 16-wide last state after project_out. Each state is
    reshaped with its own width (the first ones are not half-vectors of other tokens) and
    zero-padded to the widest, which leaves every cosine as it is."""
    from transformers import OPTConfig, OPTForCausalLM

    torch.manual_seed(0)
    config = OPTConfig(
        vocab_size=40, hidden_size=32, word_embed_proj_dim=16, num_hidden_layers=2, ffn_dim=48,
        num_attention_heads=4, max_position_embeddings=64, do_layer_norm_before=False,
        pad_token_id=1, bos_token_id=2, eos_token_id=2,
    )
    model = OPTForCausalLM(config).eval()
    out = tmp_path / "c.h5"
    extract_to_cache(model, tokens, out, identity=IDENTITY, settings=SETTINGS)
    data, attrs = read_all(out)
    with torch.no_grad():
        states = model(torch.as_tensor(tokens, dtype=torch.long), output_hidden_states=True).hidden_states
    widths = [h.shape[-1] for h in states]
    assert widths[0] == 32 and widths[-1] == 16  # the case under test
    assert data["layers"].shape == (3, 50, 32) and attrs["hidden_size"] == 16
    for i, h in enumerate(states):
        flat = h.reshape(-1, h.shape[-1]).numpy()[data["layer_index"]]  # brute force, per state
        np.testing.assert_allclose(data["layers"][i, :, : h.shape[-1]], flat, atol=1e-5, err_msg=f"state {i}")
        assert not data["layers"][i, :, h.shape[-1] :].any()  # zero padding
    np.testing.assert_allclose(data["hidden"], states[-1].reshape(-1, 16).numpy(), atol=1e-5)
