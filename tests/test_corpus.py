"""The eval token sample: determinism, windows, corpus sources and errors."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest

from lmsat.data.corpus import CorpusError, build_sample, iter_documents, read_sample

from conftest import word_tokenizer

WORDS = [f"w{i}" for i in range(30)]
SAMPLE = dict(n_tokens=100, seq_len=10, pool_factor=3)


def corpus_spec(**kwargs):
    spec = dict(type="text_files", path="", name="", split="validation", text_field="text", streaming=True, files=[], max_documents=0)
    spec.update(kwargs)
    return spec


@pytest.fixture
def text_corpus(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "docs.txt"
    path.write_text("\n".join(" ".join(rng.choice(WORDS, size=40)) for _ in range(30)) + "\n")
    return path


def test_sample_is_deterministic_and_windows_the_corpus(text_corpus, tmp_path):
    tokenizer = word_tokenizer(WORDS)
    spec = corpus_spec(files=[str(text_corpus)])
    a = build_sample(spec, "docs", tokenizer, "words", SAMPLE, 0, tmp_path / "a.h5")
    b = build_sample(spec, "docs", tokenizer, "words", SAMPLE, 0, tmp_path / "b.h5")
    c = build_sample(spec, "docs", tokenizer, "words", SAMPLE, 1, tmp_path / "c.h5")
    assert a == b != c
    tokens, attrs = read_sample(tmp_path / "a.h5")
    assert tokens.shape == (10, 10) and attrs["tokenizer"] == "words"
    # every window is a contiguous piece of the documents joined by eos
    pool = []
    for line in text_corpus.read_text().splitlines():
        pool += [int(w[1:]) for w in line.split()] + [len(WORDS)]
    with h5py.File(tmp_path / "a.h5") as f:
        starts = f["starts"][...]
    for row, start in zip(tokens, starts):
        assert row.tolist() == pool[start : start + 10]
    assert len(set(starts)) == 10 and attrs["pool_tokens"] >= 300


def test_corpus_too_small_for_the_sample(text_corpus, tmp_path):
    spec = corpus_spec(files=[str(text_corpus)])
    with pytest.raises(CorpusError, match="sample.n_tokens=5000"):
        build_sample(spec, "docs", word_tokenizer(WORDS), "words", dict(SAMPLE, n_tokens=5000), 0, tmp_path / "s.h5")
    assert not (tmp_path / "s.h5").exists()


def test_empty_corpus(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    with pytest.raises(CorpusError, match="no documents"):
        build_sample(corpus_spec(files=[str(empty)]), "e", word_tokenizer(WORDS), "w", SAMPLE, 0, tmp_path / "s.h5")


def test_hf_dataset_path_through_datasets_load_dataset(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"body": f"w{i} w{i + 1} w{i + 2}"}) + "\n" for i in range(5)))
    spec = corpus_spec(type="hf", path="json", split="train", text_field="body", data_files=[str(data)])
    docs = list(iter_documents(spec, "mine"))
    assert docs[0] == "w0 w1 w2" and len(docs) == 5
    bad = dict(spec, text_field="text")
    with pytest.raises(CorpusError, match="no field 'text'"):
        list(iter_documents(bad, "mine"))


def test_jsonl_text_files(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"text": "a b"}) + "\n" + "not json\n")
    with pytest.raises(CorpusError, match="d.jsonl:2"):
        list(iter_documents(corpus_spec(files=[str(data)]), "d"))


def test_corrupt_sample_is_rejected(text_corpus, tmp_path):
    build_sample(corpus_spec(files=[str(text_corpus)]), "docs", word_tokenizer(WORDS), "words", SAMPLE, 0, tmp_path / "a.h5")
    with h5py.File(tmp_path / "a.h5", "a") as f:
        f["tokens"][0, 0] += 1
    with pytest.raises(CorpusError, match="sha256"):
        read_sample(tmp_path / "a.h5")


def flaky_hub(monkeypatch, fail_at: int, error: Exception, broken_openings: int = 1) -> list[int]:
    """`datasets.load_dataset` replaced by a real streaming dataset of 6 rows whose first
    `broken_openings` openings raise `error` after `fail_at` rows, as a dropped connection
    would; returns the calls."""
    import datasets

    calls = []

    def load_dataset(path, name=None, split=None, streaming=False, data_files=None):
        calls.append(len(calls))
        broken = len(calls) <= broken_openings

        def rows():
            for i in range(6):
                if broken and i == fail_at:
                    raise error
                yield {"text": f"doc {i}"}

        return datasets.IterableDataset.from_generator(rows)

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    return calls


def test_hf_stream_resumes_after_a_transient_fault_without_repeating_rows(monkeypatch):
    from lmsat.checkpoints.fetch import RetryPolicy

    calls = flaky_hub(monkeypatch, fail_at=3, error=ConnectionError("connection reset by peer"))
    spec = corpus_spec(type="hf", path="some/corpus", split="train", streaming=True)
    waits = []
    docs = list(iter_documents(spec, "web", policy=RetryPolicy(attempts=2, first_wait_s=7), sleep=waits.append))
    assert docs == [f"doc {i}" for i in range(6)]
    assert waits == [7] and len(calls) == 2


def test_hf_stream_permanent_fault_is_not_retried_and_names_the_corpus(monkeypatch):
    calls = flaky_hub(monkeypatch, fail_at=2, error=ValueError("bad shard"))
    spec = corpus_spec(type="hf", path="some/corpus", split="train", streaming=True)
    with pytest.raises(CorpusError, match="some/corpus for corpus web after 2 rows: bad shard"):
        list(iter_documents(spec, "web", sleep=lambda s: pytest.fail("slept")))
    assert len(calls) == 1


def test_hf_stream_gives_up_after_the_policy_s_tries_without_progress(monkeypatch):
    from lmsat.checkpoints.fetch import RetryPolicy

    calls = flaky_hub(monkeypatch, fail_at=0, error=TimeoutError("read timed out"), broken_openings=9)
    spec = corpus_spec(type="hf", path="some/corpus", split="train", streaming=True)
    waits = []
    with pytest.raises(CorpusError, match=r"after 0 rows \(try 3 of 3\): read timed out"):
        list(iter_documents(spec, "web", policy=RetryPolicy(attempts=3, first_wait_s=1), sleep=waits.append))
    assert waits == [1, 2] and len(calls) == 3


def test_the_size_of_a_text_s_sample_is_chosen_by_one_rule_and_what_cannot_be_drawn_is_named(tmp_path):
    """lmsat.data.corpus.text_sample_size, the rule of `lmsat init`, `analyse --text` and the
    training callback (issue 44, items 3, 4): sequences of the context (at most 2048; halved
    while the text gives fewer than 4), half the text's windows (at most 50,000 tokens); a
    size it cannot draw is named as the caller's user sets it, with the size it can. The
    chosen size is drawn for real by build_sample."""
    from lmsat.data.corpus import SAMPLE_POOL_FACTOR, text_sample_size

    tokenizer = word_tokenizer(WORDS)
    rng = np.random.default_rng(0)
    text = tmp_path / "eval.txt"
    text.write_text("\n".join(" ".join(rng.choice(WORDS, size=12)) for _ in range(1470)) + "\n")  # 19,110 tokens
    size = text_sample_size([text], tokenizer, ("max_position_embeddings", 256))
    assert (size.n_tokens, size.seq_len, size.windows, size.pool_tokens) == (9472, 256, 74, 19_110)
    assert "half the text's 74 windows" in size.describe() and "sample.n_tokens: N and sample.seq_len: L" in size.how
    spec = corpus_spec(files=[str(text)])
    sample = dict(n_tokens=size.n_tokens, seq_len=size.seq_len, pool_factor=SAMPLE_POOL_FACTOR)
    build_sample(spec, "text", tokenizer, "words", sample, 0, tmp_path / "sample.h5")
    assert read_sample(tmp_path / "sample.h5")[0].shape == (37, 256)
    # no stated context: 2048, and the text gives 9 such windows
    assert (lambda s: (s.n_tokens, s.seq_len))(text_sample_size([text], tokenizer, None)) == (4 * 2048, 2048)
    # a context of 8192 and a short text: 2048 halved to 1024 for 4 windows at least
    short = tmp_path / "short.txt"
    short.write_text("\n".join(" ".join(rng.choice(WORDS, size=12)) for _ in range(500)) + "\n")  # 6,500 tokens
    assert (lambda s: (s.n_tokens, s.seq_len))(text_sample_size([short], tokenizer, ("n_positions", 8192))) == (3072, 1024)
    # a size the text cannot give, named as the caller's option
    for options, named, fix in (({"n_tokens": "n_tokens={}", "seq_len": "seq_len={}"}, "n_tokens=50000", "n_tokens=9472"),
                                ({"n_tokens": "--n-tokens {}", "seq_len": "--seq-len {}"}, "--n-tokens 50000",
                                 "--n-tokens 9472"),
                                ({"n_tokens": "sample.n_tokens: {}", "seq_len": "sample.seq_len: {}"},
                                 "sample.n_tokens: 50000", "sample.n_tokens: 9472")):
        with pytest.raises(CorpusError, match=rf"74 windows of 256, fewer than the 196 sequences that {named} needs\. "
                                              rf"Fix: {fix} or less"):
            text_sample_size([text], tokenizer, ("max_position_embeddings", 256), n_tokens=50_000, options=options)
    with pytest.raises(CorpusError, match=r"--seq-len 512 exceeds the context of the model \(max_position_embeddings=256\)"
                                          r".*Fix: --seq-len 256 or less"):
        text_sample_size([text], tokenizer, ("max_position_embeddings", 256), seq_len=512,
                         options={"n_tokens": "--n-tokens {}", "seq_len": "--seq-len {}"})
    tiny = tmp_path / "tiny.txt"
    tiny.write_text("w1 w2 w3\n")
    with pytest.raises(CorpusError, match=r"gives 4 tokens, too few for an eval sample of two 16-token sequences.*Fix: "
                                          r"give more text"):
        text_sample_size([tiny], tokenizer, ("max_position_embeddings", 256))
