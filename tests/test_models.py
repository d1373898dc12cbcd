"""Loading checkpoints through from_pretrained: local directories, safety, clear errors."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from lmsat.checkpoints.loading import ModelLoadError, load_causal_lm
from lmsat.core.plan import ModelEntry


def entry(path, **kwargs):
    base = dict(
        name="tiny", suite="s", source="local", id=str(path), hidden_size=16, vocab_size=40, n_params=0,
        tokenizer="t", tokens_per_step=1, revisions=("step1",), steps=(1,), allow_pickle=False,
        trust_remote_code=False, key="suites.s.models[0]",
    )
    base.update(kwargs)
    return ModelEntry(**base)


def test_local_revision_loads_the_saved_weights(tiny_neox, tmp_path):
    tiny_neox.save_pretrained(tmp_path / "step1")
    model = load_causal_lm(entry(tmp_path), "step1")
    for (name, a), (_, b) in zip(tiny_neox.state_dict().items(), model.state_dict().items()):
        assert torch.equal(a, b), name
    assert not model.training


def test_hidden_size_mismatch_names_the_config_key(tiny_neox, tmp_path):
    tiny_neox.save_pretrained(tmp_path / "step1")
    with pytest.raises(ModelLoadError, match=r"suites.s.models\[0\].hidden_size"):
        load_causal_lm(entry(tmp_path, hidden_size=32), "step1")


def test_num_layers_is_checked_when_given(tiny_neox, tmp_path):
    tiny_neox.save_pretrained(tmp_path / "step1")
    layers = tiny_neox.config.num_hidden_layers
    load_causal_lm(entry(tmp_path, num_layers=layers), "step1")
    with pytest.raises(ModelLoadError, match=rf"num_layers {layers}, but config key 'suites.s.models\[0\].num_layers' says 9"):
        load_causal_lm(entry(tmp_path, num_layers=9), "step1")


def test_head_rows_and_tying_are_checked_when_given(tiny_neox, tmp_path):
    """The model card's head rows and tied/untied head, as the config states them, are
    checked against the loaded model (tiny_neox: 40 rows, untied like Pythia's embed_out)."""
    tiny_neox.save_pretrained(tmp_path / "step1")
    load_causal_lm(entry(tmp_path, vocab_size=40, tied_head=False), "step1")
    with pytest.raises(ModelLoadError, match=r"40 rows.*suites.s.models\[0\].vocab_size' says 50304"):
        load_causal_lm(entry(tmp_path, vocab_size=50304), "step1")
    with pytest.raises(ModelLoadError, match=r"an untied LM head.*tied_head' says True"):
        load_causal_lm(entry(tmp_path, tied_head=True), "step1")
    from transformers import GPTNeoXForCausalLM

    tied = GPTNeoXForCausalLM(dataclasses.replace(tiny_neox.config, tie_word_embeddings=True))
    tied.save_pretrained(tmp_path / "tied" / "step1")
    load_causal_lm(entry(tmp_path / "tied", tied_head=True), "step1")
    with pytest.raises(ModelLoadError, match=r"a tied LM head.*tied_head' says False"):
        load_causal_lm(entry(tmp_path / "tied", tied_head=False), "step1")


def test_revision_outside_the_suite(tiny_neox, tmp_path):
    with pytest.raises(ModelLoadError, match="step7.*not in the suite of model tiny"):
        load_causal_lm(entry(tmp_path), "step7")


def test_pickle_weights_are_refused_unless_allowed(tiny_neox, tmp_path):
    directory = tmp_path / "step1"
    tiny_neox.save_pretrained(directory)
    (directory / "model.safetensors").unlink()
    torch.save(tiny_neox.state_dict(), directory / "pytorch_model.bin")  # a pickle checkpoint
    with pytest.raises(ModelLoadError, match="tiny.*step1.*allow_pickle"):
        load_causal_lm(entry(tmp_path), "step1")
    model = load_causal_lm(dataclasses.replace(entry(tmp_path), allow_pickle=True), "step1")
    assert torch.equal(model.get_output_embeddings().weight, tiny_neox.get_output_embeddings().weight)


def test_a_hub_tokenizer_is_retried_after_a_transient_fault(tmp_path, monkeypatch):
    """The first download attempt drops the connection; the next one succeeds (here the
    'hub id' is a saved tokenizer directory, which from_pretrained accepts as well)."""
    import transformers

    from lmsat.checkpoints.fetch import RetryPolicy
    from lmsat.checkpoints.loading import load_tokenizer

    from conftest import word_tokenizer

    word_tokenizer(["a", "b"]).save_pretrained(str(tmp_path / "tok"))
    real, calls = transformers.AutoTokenizer.from_pretrained, []

    def flaky(*args, **kwargs):
        calls.append(args[0])
        if len(calls) == 1:
            raise ConnectionError("connection reset by peer")
        return real(*args, **kwargs)

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", flaky)
    spec = dict(source="hub", id=str(tmp_path / "tok"), revision="main")
    tokenizer = load_tokenizer(spec, "words", policy=RetryPolicy(attempts=3, first_wait_s=0.0, max_wait_s=0.0))
    assert len(calls) == 2 and len(tokenizer) == 4

    def missing(*args, **kwargs):
        calls.append(args[0])
        raise OSError(f"{args[0]} is not a local folder and is not a valid model identifier")

    calls.clear()
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", missing)
    with pytest.raises(ModelLoadError, match="cannot load tokenizer words"):
        load_tokenizer(spec, "words", policy=RetryPolicy(attempts=3, first_wait_s=0.0, max_wait_s=0.0))
    assert len(calls) == 1  # a permanent error is not retried


def test_auto_dtype_loads_the_stored_values_exactly(tiny_neox, tmp_path):
    """The checkpoint job loads with dtype "auto": a float16 checkpoint stays float16 (the
    stored bytes, which the weight hashes read), and one cast to float32 equals loading
    in float32."""
    import copy

    copy.deepcopy(tiny_neox).half().save_pretrained(tmp_path / "step1")
    stored = load_causal_lm(entry(tmp_path), "step1", dtype="auto")
    as_float32 = load_causal_lm(entry(tmp_path), "step1", dtype="float32")
    assert stored.dtype == torch.float16
    for (name, a), (_, b) in zip(stored.float().state_dict().items(), as_float32.state_dict().items()):
        assert torch.equal(a, b), name
