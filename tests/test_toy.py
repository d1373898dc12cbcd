"""Tests for lmsat.toy.suite (tokenizer, schedule, training) and lmsat.checkpoints.local_hub (local hub cache)."""

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from lmsat.checkpoints.local_hub import (
    RevisionNotFoundError,
    list_revisions,
    publish_revision,
    snapshot_path,
)
from lmsat.core.schedules import toy_steps
from lmsat.toy.language import LanguageSpec, build_language, write_corpus
from lmsat.toy.suite import (
    ToyModelSpec,
    TrainSpec,
    build_model,
    build_tokenizer,
    evaluate_loss,
    tokenize_corpus,
    train_toy_model,
)

SPEC = LanguageSpec(vocab_size=60, order=2, groups=2, support=6, seed=1)


@pytest.fixture(scope="module")
def lang():
    return build_language(SPEC)


@pytest.fixture(scope="module")
def corpus(lang, tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "train.txt"
    stats = write_corpus(lang, path, n_tokens=20_000, doc_tokens=100, seed=0)
    return path, stats


def test_tokenizer_ids_are_word_ids(lang, corpus, tmp_path):
    path, _ = corpus
    tokenizer = build_tokenizer(lang.words, out_dir=tmp_path / "tok")
    V = lang.vocab_size
    assert len(tokenizer) == V + 2
    assert (
        tokenizer.eos_token_id
        == tokenizer.bos_token_id
        == tokenizer.convert_tokens_to_ids("<|endoftext|>")
        == V
    )
    assert tokenizer.unk_token_id == V + 1
    line = path.read_text().splitlines()[0]
    word_ids = [lang.words.index(w) for w in line.split(" ")]
    ids = tokenizer(line, add_special_tokens=False)["input_ids"]
    assert ids == word_ids
    assert tokenizer(line)["input_ids"] == word_ids  # no specials added by default
    assert tokenizer.decode(ids) == line
    assert tokenizer("zzzzqq " + lang.words[5])["input_ids"] == [V + 1, 5]
    reloaded = AutoTokenizer.from_pretrained(tmp_path / "tok")
    assert reloaded(line)["input_ids"] == word_ids
    assert reloaded.eos_token_id == V


def test_tokenize_corpus_joins_documents_with_eos(lang, corpus):
    path, stats = corpus
    tokenizer = build_tokenizer(lang.words)
    ids = tokenize_corpus(tokenizer, path)
    assert ids.dtype == np.int32
    assert len(ids) == stats["n_tokens"] + stats["n_docs"] - 1
    eos = np.flatnonzero(ids == tokenizer.eos_token_id)
    np.testing.assert_array_equal(eos, np.arange(1, stats["n_docs"]) * 101 - 1)
    first_doc = ids[:100]
    assert tokenizer.decode(first_doc.tolist()) == path.read_text().splitlines()[0]
    # the ids are the language's own: the true nll of the corpus matches write_corpus's stats
    docs = np.split(ids, eos)
    nll = np.concatenate([lang.token_nll(lang.contexts(d[d != 60]), d[d != 60][2:]) for d in docs])
    assert nll.mean() == pytest.approx(stats["mean_nll"], abs=0.1)


def test_checkpoint_schedule_is_pythia_like():
    steps = toy_steps(TrainSpec().max_steps)
    assert 10 <= len(steps) <= 14
    assert steps[:4] == [0, 1, 2, 4]
    assert steps[-1] == TrainSpec().max_steps and steps == sorted(set(steps))
    powers = [s for s in steps if s and s & (s - 1) == 0]
    tail = steps[len(powers) + 1 :]
    assert np.ptp(np.diff(tail)) <= 1  # evenly spaced after the powers of two
    assert toy_steps(3) == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="max_steps"):
        toy_steps(0)


def test_lr_schedule_warmup_and_cosine_to_tenth():
    spec = TrainSpec(max_steps=1000, lr=1e-3)
    lrs = [spec.lr_at(s, hidden_size=64) for s in range(spec.max_steps)]
    assert lrs[0] == pytest.approx(1e-4)  # 1/10 of a 10-step warmup
    assert max(lrs) == pytest.approx(1e-3) and np.argmax(lrs) == 9
    assert lrs[-1] == pytest.approx(1e-4, rel=1e-3)
    assert all(a >= b for a, b in zip(lrs[9:], lrs[10:]))


def test_model_spec_pads_head_like_pythia():
    spec = ToyModelSpec(hidden_size=32, vocab_size=62)
    model = build_model(spec, seed=0)
    assert spec.padded_vocab_size == 64
    assert model.get_output_embeddings().weight.shape == (64, 32)  # padding rows exist in the head
    cfg = model.config
    assert (cfg.num_hidden_layers, cfg.intermediate_size, cfg.tie_word_embeddings) == (
        2,
        128,
        False,
    )
    assert (
        cfg.use_parallel_residual
        and model.get_input_embeddings().weight.data_ptr()
        != model.get_output_embeddings().weight.data_ptr()
    )
    with pytest.raises(ValueError, match="num_heads"):
        ToyModelSpec(hidden_size=30, vocab_size=62, num_heads=4).config()


def _tiny_run(train, tokenizer, seed=0):
    torch.set_num_threads(1)
    model_spec = ToyModelSpec(hidden_size=16, vocab_size=len(tokenizer), seq_len=16)
    train_spec = TrainSpec(max_steps=40, batch_size=8, lr=1e-2, seed=seed)
    saved = {}

    def keep(step, model):
        saved[step] = {k: v.detach().clone() for k, v in model.state_dict().items()}

    log = train_toy_model(train, model_spec, train_spec, [0, 8, 40], keep)
    return model_spec, log, saved


def test_tiny_training_reduces_loss_and_is_bit_reproducible(lang, corpus):
    path, _ = corpus
    tokenizer = build_tokenizer(lang.words)
    train = tokenize_corpus(tokenizer, path)
    held_out, _ = lang.sample(2000, np.random.default_rng(5))
    model_spec, log, saved = _tiny_run(train, tokenizer)
    assert [row["step"] for row in log] == list(range(1, 41))
    assert sorted(saved) == [0, 8, 40]
    losses = {}
    for step, state in saved.items():
        model = build_model(model_spec, seed=123)
        model.load_state_dict(state)
        losses[step] = evaluate_loss(model, held_out, model_spec.seq_len)
    assert losses[0] > losses[8] > losses[40]
    assert losses[0] - losses[40] > 0.5
    assert losses[40] > lang.entropy_rate
    _, log_again, saved_again = _tiny_run(train, tokenizer)
    assert log_again == log
    for step in saved:
        for name, tensor in saved[step].items():
            assert torch.equal(tensor, saved_again[step][name]), (step, name)
    _, log_other, _ = _tiny_run(train, tokenizer, seed=1)
    assert log_other != log


def test_training_rejects_bad_input(lang):
    spec = ToyModelSpec(hidden_size=16, vocab_size=62, seq_len=16)
    with pytest.raises(ValueError, match="train_tokens"):
        train_toy_model(np.zeros(5, dtype=np.int32), spec, TrainSpec(max_steps=2), [0], print)
    with pytest.raises(ValueError, match="schedule"):
        train_toy_model(np.zeros(100, dtype=np.int32), spec, TrainSpec(max_steps=2), [0, 3], print)


def test_hub_publish_and_load_through_from_pretrained(lang, tmp_path):
    tokenizer = build_tokenizer(lang.words)
    spec = ToyModelSpec(hidden_size=16, vocab_size=len(tokenizer), seq_len=16)
    cache = tmp_path / "hub"
    repo = "lmsat-toy/toy-d16"
    models = {"step0": build_model(spec, seed=0), "step10": build_model(spec, seed=1)}
    commits = {rev: publish_revision(m, tokenizer, cache, repo, rev) for rev, m in models.items()}
    assert commits["step0"] != commits["step10"] and all(len(c) == 40 for c in commits.values())
    assert publish_revision(models["step0"], tokenizer, cache, repo, "step0") == commits["step0"]
    publish_revision(models["step10"], tokenizer, cache, repo, "step2")
    assert list_revisions(cache, repo) == ["step0", "step2", "step10"]
    assert snapshot_path(cache, repo, "step2") == snapshot_path(cache, repo, "step10")
    for rev, model in models.items():
        loaded = AutoModelForCausalLM.from_pretrained(
            repo, revision=rev, cache_dir=cache, local_files_only=True
        )
        assert snapshot_path(cache, repo, rev).name == commits[rev]
        assert (snapshot_path(cache, repo, rev) / "model.safetensors").is_file()
        expected = model.state_dict()
        for name, tensor in loaded.state_dict().items():
            assert torch.equal(tensor, expected[name]), (rev, name)
        tok = AutoTokenizer.from_pretrained(
            repo, revision=rev, cache_dir=cache, local_files_only=True
        )
        assert tok(lang.words[7])["input_ids"] == [7]
    assert not [
        p for p in (cache / "models--lmsat-toy--toy-d16").iterdir() if p.name.startswith(".")
    ]
    with pytest.raises(
        RevisionNotFoundError, match="lmsat-toy/toy-d16.*step99.*step0, step2, step10"
    ):
        snapshot_path(cache, repo, "step99")
    with pytest.raises(OSError):
        AutoModelForCausalLM.from_pretrained(
            repo, revision="step99", cache_dir=cache, local_files_only=True
        )
    with pytest.raises(ValueError, match="repo_id"):
        publish_revision(models["step0"], tokenizer, cache, "no-org", "step0")


def test_sequential_windows_use_each_token_once_in_order():
    """TrainSpec(windows="sequential") feeds window i = tokens[i*(T+1) : (i+1)*(T+1)]: fresh
    data, never repeated (the saturation study's guard against overfitting)."""
    spec = ToyModelSpec(hidden_size=16, vocab_size=62, seq_len=4)
    train_spec = TrainSpec(max_steps=3, batch_size=2, windows="sequential")
    tokens = np.arange(3 * 2 * 5, dtype=np.int32) % 60  # exactly max_steps x batch x (T + 1)
    seen = []
    import lmsat.toy.suite as toy_module

    original = toy_module.next_token_loss

    def spy(model, windows):
        seen.append(windows.clone())
        return original(model, windows)

    toy_module.next_token_loss = spy
    try:
        train_toy_model(tokens, spec, train_spec, [3], lambda step, model: None)
    finally:
        toy_module.next_token_loss = original
    assert torch.equal(torch.cat(seen).reshape(-1), torch.as_tensor(tokens, dtype=torch.int64))
    with pytest.raises(ValueError, match="sequential windows need"):
        train_toy_model(tokens[:-1], spec, train_spec, [3], print)
    with pytest.raises(ValueError, match="windows"):
        TrainSpec(windows="shuffled")


def test_tied_head_is_the_input_embedding_and_default_stays_untied():
    assert ToyModelSpec(hidden_size=16, vocab_size=62).tied_head is False
    assert TrainSpec().windows == "random"
    model = build_model(ToyModelSpec(hidden_size=16, vocab_size=62, tied_head=True), seed=0)
    assert model.config.tie_word_embeddings
    assert model.get_input_embeddings().weight.data_ptr() == model.get_output_embeddings().weight.data_ptr()
