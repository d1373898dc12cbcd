"""n-gram counting and the context matrix, against a brute-force dict counter."""

from collections import Counter, defaultdict

import numpy as np
import pytest

from lmsat.bottleneck.ngrams import _tokens_per_word, context_matrix, count_ngrams


def _brute_force_counts(stream, order):
    return Counter(tuple(stream[i : i + order]) for i in range(len(stream) - order + 1))


def _as_dict(counts):
    return {tuple(row): int(c) for row, c in zip(counts.ngrams().tolist(), counts.counts)}


def _split(stream, sizes):
    borders = np.cumsum(sizes)[:-1]
    return np.split(stream, borders)


@pytest.mark.parametrize(
    "vocab_size,order",
    [(7, 5), (6208, 5), (6209, 5), (50304, 5), (3, 2), (200_000, 5), (3_000_000, 5), (10, 9)],
)
def test_counts_match_brute_force_across_chunk_borders(vocab_size, order):
    rng = np.random.default_rng(vocab_size + order)
    # A few very frequent tokens (many repeated n-grams) plus the largest ids (packing).
    stream = rng.choice([0, 1, 2, vocab_size - 1], size=700, p=[0.4, 0.3, 0.2, 0.1])
    stream[::37] = rng.integers(0, vocab_size, size=stream[::37].size)
    sizes = [1, 2, 0, 3, 150, 4, 1, 300, 239]  # chunks shorter than order included
    chunks = _split(stream, sizes)
    assert sum(len(c) for c in chunks) == stream.size
    counts = count_ngrams(iter(chunks), order=order, vocab_size=vocab_size)
    expected = _brute_force_counts(stream.tolist(), order)
    assert _as_dict(counts) == dict(expected)
    assert counts.n_tokens == stream.size
    assert int(counts.counts.sum()) == stream.size - order + 1
    # The result does not depend on how the stream was chunked.
    single = count_ngrams([stream], order=order, vocab_size=vocab_size)
    np.testing.assert_array_equal(single.keys, counts.keys)
    np.testing.assert_array_equal(single.counts, counts.counts)


def test_key_packing_width():
    assert _tokens_per_word(6208) == 5  # 6208**5 < 2**63: a 5-gram is one int64
    assert _tokens_per_word(6209) == 4
    assert _tokens_per_word(50304) == 4  # Pythia: two words per 5-gram
    assert count_ngrams([np.arange(10)], vocab_size=6208).keys.shape[1] == 1
    assert count_ngrams([np.arange(10)], vocab_size=50304).keys.shape[1] == 2


def test_many_small_chunks_merge_exactly():
    rng = np.random.default_rng(5)
    stream = rng.integers(0, 4, size=3000)  # few distinct 5-grams, many repeats
    chunks = _split(stream, rng.integers(0, 40, size=200).tolist() + [3000])
    counts = count_ngrams(chunks, order=5, vocab_size=4)
    assert _as_dict(counts) == dict(_brute_force_counts(stream.tolist(), 5))


def test_stream_shorter_than_order_gives_no_ngrams():
    counts = count_ngrams([np.array([1, 2]), np.array([3])], order=5, vocab_size=10)
    assert len(counts) == 0
    assert context_matrix(counts).shape == (0, 10)


def test_context_matrix_rows_are_next_token_distributions():
    rng = np.random.default_rng(6)
    vocab_size, order = 9, 3
    stream = rng.integers(0, vocab_size, size=500)
    counts = count_ngrams(_split(stream, [100, 1, 399]), order=order, vocab_size=vocab_size)
    matrix = context_matrix(counts)

    by_context = defaultdict(Counter)
    for *context, nxt in _brute_force_counts(stream.tolist(), order).elements():
        by_context[tuple(context)][nxt] += 1
    contexts = sorted(by_context)
    assert matrix.shape == (len(contexts), vocab_size)
    dense = matrix.toarray()
    for row, context in enumerate(contexts):
        total = sum(by_context[context].values())
        expected = np.zeros(vocab_size)
        for token, c in by_context[context].items():
            expected[token] = c / total
        np.testing.assert_allclose(dense[row], expected, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(matrix.sum(axis=1)).ravel(), 1.0)
    assert matrix.has_canonical_format


def test_bad_inputs_name_the_culprit():
    with pytest.raises(ValueError, match=r"chunk 1 .*vocab_size=5"):
        count_ngrams([np.array([1, 2]), np.array([4, 5])], vocab_size=5)
    with pytest.raises(ValueError, match="chunk 0 must be a 1-D integer"):
        count_ngrams([np.array([0.5, 1.0])], vocab_size=5)
    with pytest.raises(ValueError, match="vocab_size"):
        count_ngrams([np.array([1])])
    with pytest.raises(ValueError, match="order"):
        count_ngrams([np.array([1])], order=1, vocab_size=5)
