"""Tests for lmsat.toy.language against brute-force dense references on tiny languages."""

import itertools

import h5py
import numpy as np
import pytest

from lmsat.toy.language import (
    LanguageSpec,
    build_language,
    load_language,
    save_language,
    write_corpus,
)

TINY = LanguageSpec(vocab_size=12, order=2, groups=2, support=4, seed=3)
TINY3 = LanguageSpec(vocab_size=12, order=3, groups=2, support=4, seed=6)


@pytest.fixture(scope="module")
def default_lang():
    return build_language(LanguageSpec())


def dense_bucket_chain(lang):
    """Bucket chain built from explicit token histories (x_{t-1}, g(x_{t-2}), ..., g(x_{t-k}))."""
    spec = lang.spec
    V, G, k = spec.vocab_size, spec.groups, spec.order
    histories = list(itertools.product(range(G), repeat=k - 1))  # (g(x_{t-2}), ..., g(x_{t-k}))

    def bucket(last, history):
        return last + V * sum(g * G**i for i, g in enumerate(history))

    P = lang.transitions.toarray()
    T = np.zeros((spec.n_contexts, spec.n_contexts))
    for last in range(V):
        for history in histories:
            c = bucket(last, history)
            for x in range(V):
                new_history = ((int(lang.group[last]),) + history)[: k - 1]
                T[c, bucket(x, new_history)] += P[c, x]
    return T


@pytest.mark.parametrize("spec", [TINY, TINY3])
def test_rows_sum_to_one_and_support_size(spec):
    lang = build_language(spec)
    P = lang.transitions
    assert P.shape == (spec.n_contexts, spec.vocab_size)
    np.testing.assert_allclose(np.asarray(P.sum(axis=1)).ravel(), 1.0, atol=1e-14)
    assert (np.diff(P.indptr) == spec.support).all()
    assert (P.data > 0).all()


@pytest.mark.parametrize("spec", [TINY, TINY3])
def test_stationary_matches_dense_bruteforce(spec):
    lang = build_language(spec)
    T = dense_bucket_chain(lang)
    np.testing.assert_allclose(T.sum(axis=1), 1.0, atol=1e-14)
    eigvals, eigvecs = np.linalg.eig(T.T)
    reference = np.real(eigvecs[:, np.argmin(np.abs(eigvals - 1))])
    reference /= reference.sum()
    np.testing.assert_allclose(lang.stationary, reference, atol=1e-11)
    np.testing.assert_allclose(lang.stationary @ T, lang.stationary, atol=1e-12)
    assert lang.stationary.min() > 0  # every bucket reachable


@pytest.mark.parametrize("spec", [TINY, TINY3])
def test_entropy_rate_matches_dense_bruteforce(spec):
    lang = build_language(spec)
    P = lang.transitions.toarray()
    expected = 0.0
    for c in range(spec.n_contexts):
        for x in range(spec.vocab_size):
            if P[c, x] > 0:
                expected -= lang.stationary[c] * P[c, x] * np.log(P[c, x])
    assert lang.entropy_rate == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("spec", [TINY, TINY3])
def test_contexts_and_sample_nll_match_bruteforce(spec):
    lang = build_language(spec)
    tokens, nll = lang.sample(500, np.random.default_rng(0))
    V, G, k = spec.vocab_size, spec.groups, spec.order
    expected = []
    for t in range(k, len(tokens)):
        history = [int(lang.group[tokens[t - lag]]) for lag in range(2, k + 1)]
        expected.append(tokens[t - 1] + V * sum(g * G**i for i, g in enumerate(history)))
    buckets = lang.contexts(tokens)
    np.testing.assert_array_equal(buckets, expected)
    P = lang.transitions.toarray()
    np.testing.assert_allclose(nll[k:], -np.log(P[buckets, tokens[k:]]), rtol=1e-14)
    np.testing.assert_allclose(lang.token_nll(buckets, tokens[k:]), nll[k:], rtol=1e-14)


def test_sample_chains_nll_matches_contexts():
    lang = build_language(TINY3)
    tokens, nll = lang.sample_chains(7, 50, np.random.default_rng(1))
    assert tokens.shape == nll.shape == (7, 50)
    for doc, doc_nll in zip(tokens, nll):
        buckets = lang.contexts(doc)
        np.testing.assert_allclose(doc_nll[3:], lang.token_nll(buckets, doc[3:]), rtol=1e-14)


def test_empirical_nll_approaches_entropy_rate():
    lang = build_language(LanguageSpec(vocab_size=128, groups=4, support=16))
    _, nll = lang.sample(300_000, np.random.default_rng(0))
    assert nll.mean() == pytest.approx(lang.entropy_rate, abs=0.02)
    _, chains_nll = lang.sample_chains(1000, 300, np.random.default_rng(1))
    assert chains_nll.mean() == pytest.approx(lang.entropy_rate, abs=0.02)


def test_default_spec_is_high_rank_and_zipfian(default_lang):
    lang = default_lang
    V = lang.vocab_size
    gram = (lang.transitions.T @ lang.transitions).toarray()  # (V, V)
    eigvals = np.linalg.eigvalsh(gram)
    rank = int((eigvals > eigvals.max() * 1e-10).sum())
    assert rank > 128
    tokens, _ = lang.sample(200_000, np.random.default_rng(0))
    unigram = np.bincount(tokens, minlength=V) / len(tokens)
    # more popular ids first, frequency ~ rank^-a: log-log slope near -1, per-decade means fall
    ranks = np.arange(1, V + 1)
    slope = np.polyfit(np.log(ranks), np.log(np.maximum(unigram, 1e-9)), 1)[0]
    assert -1.6 < slope < -0.7
    assert unigram[:10].mean() > 4 * unigram[10:100].mean() > 16 * unigram[100:].mean()
    assert lang.entropy_rate < np.log(lang.spec.support)


def test_words_unique_pronounceable_and_shorter_when_popular(default_lang):
    words = default_lang.words
    assert len(set(words)) == len(words) == default_lang.vocab_size
    assert all(w.isascii() and w.isalpha() and w.islower() for w in words)
    lengths = [len(w) for w in words]
    assert lengths == sorted(lengths)
    vowels = set("aeiou")
    assert all(
        w[i] not in vowels and w[i + 1] in vowels for w in words for i in range(0, len(w), 2)
    )


def test_determinism_given_seed():
    a, b = build_language(TINY3), build_language(TINY3)
    c = build_language(LanguageSpec(vocab_size=12, order=3, groups=2, support=4, seed=7))
    assert a.words == b.words
    np.testing.assert_array_equal(a.transitions.toarray(), b.transitions.toarray())
    np.testing.assert_array_equal(a.stationary, b.stationary)
    assert (a.transitions != c.transitions).nnz > 0
    s1 = a.sample(100, np.random.default_rng(9))
    s2 = b.sample(100, np.random.default_rng(9))
    np.testing.assert_array_equal(s1[0], s2[0])


def test_non_ergodic_spec_raises():
    # one successor per context: the chain is a permutation (periodic or reducible)
    with pytest.raises(ValueError, match="ergodic|periodic"):
        build_language(LanguageSpec(vocab_size=12, order=1, groups=1, support=1))


def test_bad_spec_names_field():
    with pytest.raises(ValueError, match="support"):
        LanguageSpec(vocab_size=10, support=11)


def test_save_load_round_trip(tmp_path):
    lang = build_language(TINY3)
    path = tmp_path / "lang.h5"
    save_language(lang, path)
    back = load_language(path, spec=TINY3)
    assert back.spec == lang.spec
    assert back.words == lang.words
    np.testing.assert_array_equal(back.group, lang.group)
    np.testing.assert_array_equal(back.transitions.toarray(), lang.transitions.toarray())
    np.testing.assert_array_equal(back.stationary, lang.stationary)
    assert back.entropy_rate == lang.entropy_rate
    np.testing.assert_array_equal(
        back.sample(50, np.random.default_rng(0))[0], lang.sample(50, np.random.default_rng(0))[0]
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lang.h5"]  # no temp left behind


def test_load_other_spec_or_corrupt_file_raises(tmp_path):
    path = tmp_path / "lang.h5"
    save_language(build_language(TINY), path)
    with pytest.raises(ValueError, match="seed=3 \\(wanted 4\\)"):
        load_language(path, spec=LanguageSpec(vocab_size=12, order=2, groups=2, support=4, seed=4))
    garbage = tmp_path / "garbage.h5"
    garbage.write_bytes(b"not an hdf5 file" * 100)
    with pytest.raises(ValueError, match="garbage.h5"):
        load_language(garbage)
    with h5py.File(path, "a") as f:
        del f["stationary"]
    with pytest.raises(ValueError, match="corrupt"):
        load_language(path)
    with pytest.raises(ValueError, match="missing.h5"):
        load_language(tmp_path / "missing.h5")


def test_write_corpus(tmp_path):
    lang = build_language(TINY3)
    path = tmp_path / "corpus.txt"
    stats = write_corpus(lang, path, n_tokens=1000, doc_tokens=64, seed=7)
    assert stats["n_docs"] == 16 and stats["n_tokens"] == 1024
    text = path.read_text()
    lines = text.split("\n")
    assert lines[-1] == "" and len(lines) == 17
    index = {w: i for i, w in enumerate(lang.words)}
    nll = []
    for line in lines[:-1]:
        words = line.split(" ")
        assert len(words) == 64 and all(words)
        ids = np.array([index[w] for w in words])
        nll.extend(lang.token_nll(lang.contexts(ids), ids[3:]))
    assert np.isfinite(nll).all()
    assert np.mean(nll) == pytest.approx(stats["mean_nll"], abs=0.3)  # first k tokens differ
    write_corpus(lang, tmp_path / "again.txt", n_tokens=1000, doc_tokens=64, seed=7)
    assert (tmp_path / "again.txt").read_text() == text
    write_corpus(lang, tmp_path / "other.txt", n_tokens=1000, doc_tokens=64, seed=8)
    assert (tmp_path / "other.txt").read_text() != text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["again.txt", "corpus.txt", "other.txt"]
