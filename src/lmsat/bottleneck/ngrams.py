"""n-gram counts and the context matrix W (C x V) of section 5.1 of Godey et al. 2024.

Each row of W is the empirical next-token distribution of one observed (order-1)-token
context; its singular values give the W-error curve (`lmsat.bottleneck.werror`).

Counting is vectorised and streams over chunks of one token stream:
  * each n-gram is packed, big-endian in base V, into `n_words` int64 words holding
    `tokens_per_word` tokens each (the largest k with V**k <= 2**63 - 1). When V**order
    fits in one int64 (V <= 6208 for 5-grams) an n-gram is a single integer; otherwise
    (Pythia's 50k vocabulary) it is a pair/tuple of words. The packing is a bijection,
    so there are no collisions, and lexicographic order of the words is lexicographic
    order of the n-grams (contexts stay contiguous, which `context_matrix` relies on);
  * every chunk is reduced to (distinct keys, counts) with a sort, and these partial
    tables are merged LSM-style (a merge happens only when the pending partial tables
    outgrow the merged table), so memory is O(distinct n-grams + one chunk), never
    O(corpus), and total work is O(N log N);
  * the last order-1 tokens of each chunk are carried into the next one, so an n-gram
    that straddles a chunk border is counted exactly once.

The chunks are pieces of ONE stream: n-grams spanning two consecutive chunks are counted.
Separate documents with an end-of-text token (as Pythia's data does) or count them with
separate calls.

Usage:
    counts = count_ngrams(chunks, order=5, vocab_size=50304)
    W = context_matrix(counts)   # scipy.sparse.csr_matrix (C, V), rows sum to 1
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import scipy.sparse

_MAX_INT64 = np.iinfo(np.int64).max


@dataclass
class NgramCounts:
    """Distinct n-grams of a token stream and how often each occurred."""

    order: int  # n of the n-grams (5 in the paper): order-1 context tokens + 1 next token
    vocab_size: int  # V: every token id is in [0, V)
    tokens_per_word: int  # tokens packed into each int64 key word (base-V digits)
    keys: np.ndarray  # (n_distinct, n_words) int64, packed n-grams, lexicographically sorted
    counts: np.ndarray  # (n_distinct,) int64, occurrences of each n-gram
    n_tokens: int  # tokens read from the stream (n-grams counted = n_tokens - order + 1)

    def __len__(self) -> int:
        return int(self.counts.size)

    def ngrams(self) -> np.ndarray:
        """Decode the keys: (n_distinct, order) int64 token ids, one n-gram per row."""
        return _unpack(self.keys, self.order, self.vocab_size, self.tokens_per_word)


def _tokens_per_word(vocab_size: int) -> int:
    """Largest k with vocab_size**k <= 2**63 - 1 (python ints: exact)."""
    k = 1
    while vocab_size ** (k + 1) <= _MAX_INT64:
        k += 1
    return k


def _pack(windows: np.ndarray, vocab_size: int, tokens_per_word: int) -> np.ndarray:
    """(n, order) token ids -> (n, n_words) int64 keys, big-endian base vocab_size."""
    n, order = windows.shape
    n_words = -(-order // tokens_per_word)
    keys = np.zeros((n, n_words), dtype=np.int64)
    for position in range(order):
        word = position // tokens_per_word
        keys[:, word] *= vocab_size  # cannot overflow: at most tokens_per_word digits
        keys[:, word] += windows[:, position]
    return keys


def _unpack(keys: np.ndarray, order: int, vocab_size: int, tokens_per_word: int) -> np.ndarray:
    """Inverse of `_pack`: (n, n_words) int64 -> (n, order) int64."""
    out = np.empty((keys.shape[0], order), dtype=np.int64)
    for word in range(keys.shape[1]):
        positions = range(word * tokens_per_word, min((word + 1) * tokens_per_word, order))
        value = keys[:, word].copy()
        for position in reversed(positions):  # least significant digit is the last token
            out[:, position] = value % vocab_size
            value //= vocab_size
    return out


def _unique_weighted(keys: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sum `counts` over equal rows of `keys` (n, n_words); rows come out sorted."""
    if keys.shape[0] == 0:
        return keys, counts
    if keys.shape[1] == 1:
        order = np.argsort(keys[:, 0], kind="stable")
    else:
        order = np.lexsort(keys.T[::-1])  # lexsort's last key is the primary one
    keys = keys[order]
    counts = counts[order]
    is_new = np.ones(keys.shape[0], dtype=bool)
    is_new[1:] = np.any(keys[1:] != keys[:-1], axis=1)
    starts = np.flatnonzero(is_new)
    return keys[starts], np.add.reduceat(counts, starts)


def count_ngrams(
    token_stream_chunks: Iterable[np.ndarray], order: int = 5, vocab_size: int | None = None,
    progress=None,
) -> NgramCounts:
    """Count the n-grams of a token stream given as consecutive chunks of int arrays.

    Exact: equals a dictionary count over the concatenated stream, including the n-grams
    that cross chunk borders. Chunks may be of any length (even shorter than `order`).
    progress: a lmsat.runtime.progress.Progress counting tokens, updated after each chunk.
    """
    if vocab_size is None or int(vocab_size) < 1:
        raise ValueError(f"count_ngrams: vocab_size must be a positive int, got {vocab_size!r}")
    if int(order) < 2:
        raise ValueError(
            f"count_ngrams: order must be >= 2 (a context plus a next token), got {order!r}"
        )
    vocab_size, order = int(vocab_size), int(order)
    tokens_per_word = _tokens_per_word(vocab_size)
    n_words = -(-order // tokens_per_word)

    merged_keys = np.zeros((0, n_words), dtype=np.int64)  # (n_distinct, n_words)
    merged_counts = np.zeros(0, dtype=np.int64)
    pending_keys: list[np.ndarray] = []  # per-chunk tables not yet merged
    pending_counts: list[np.ndarray] = []
    pending_rows = 0
    carry = np.zeros(0, dtype=np.int64)  # last order-1 tokens of the stream so far
    n_tokens = 0

    for chunk_index, chunk in enumerate(token_stream_chunks):
        chunk = np.asarray(chunk)
        if chunk.ndim != 1 or not (chunk.size == 0 or np.issubdtype(chunk.dtype, np.integer)):
            raise ValueError(
                f"count_ngrams: chunk {chunk_index} must be a 1-D integer array, got dtype "
                f"{chunk.dtype} and shape {chunk.shape}"
            )
        if chunk.size and (chunk.min() < 0 or chunk.max() >= vocab_size):
            raise ValueError(
                f"count_ngrams: chunk {chunk_index} has token ids in [{chunk.min()}, "
                f"{chunk.max()}], outside [0, vocab_size={vocab_size}); pass the tokenizer's "
                f"full vocabulary size"
            )
        n_tokens += chunk.size
        if progress is not None:
            progress.update(chunk.size, distinct=f"{merged_keys.shape[0] + pending_rows:,}")
        stream = np.concatenate([carry, chunk.astype(np.int64, copy=False)])
        carry = stream[-(order - 1) :].copy()
        if stream.size < order:
            continue
        windows = np.lib.stride_tricks.sliding_window_view(stream, order)  # (n, order) view
        keys, counts = _unique_weighted(
            _pack(windows, vocab_size, tokens_per_word), np.ones(windows.shape[0], np.int64)
        )
        pending_keys.append(keys)
        pending_counts.append(counts)
        pending_rows += keys.shape[0]
        if pending_rows >= merged_keys.shape[0]:  # amortised: merged table at least doubles
            merged_keys, merged_counts = _unique_weighted(
                np.concatenate([merged_keys, *pending_keys]),
                np.concatenate([merged_counts, *pending_counts]),
            )
            pending_keys, pending_counts, pending_rows = [], [], 0

    if pending_keys:
        merged_keys, merged_counts = _unique_weighted(
            np.concatenate([merged_keys, *pending_keys]),
            np.concatenate([merged_counts, *pending_counts]),
        )
    return NgramCounts(
        order=order,
        vocab_size=vocab_size,
        tokens_per_word=tokens_per_word,
        keys=merged_keys,
        counts=merged_counts,
        n_tokens=n_tokens,
    )


def context_matrix(counts: NgramCounts) -> scipy.sparse.csr_matrix:
    """W (C, V): one row per observed context, its row-normalised next-token counts.

    Rows are in lexicographic order of the contexts; float64.
    """
    ngrams = counts.ngrams()  # (n, order), sorted lexicographically
    n = ngrams.shape[0]
    if n == 0:
        return scipy.sparse.csr_matrix((0, counts.vocab_size), dtype=np.float64)
    contexts = ngrams[:, :-1]
    next_tokens = ngrams[:, -1]
    is_new_context = np.ones(n, dtype=bool)
    is_new_context[1:] = np.any(contexts[1:] != contexts[:-1], axis=1)
    row_starts = np.flatnonzero(is_new_context)
    context_totals = np.add.reduceat(counts.counts, row_starts)  # (C,)
    rows_of_entries = np.cumsum(is_new_context) - 1  # (n,) context id of each n-gram
    data = counts.counts / context_totals[rows_of_entries]
    indptr = np.append(row_starts, n)
    # Within a context, next tokens are sorted and distinct: a canonical CSR matrix.
    return scipy.sparse.csr_matrix(
        (data, next_tokens, indptr), shape=(row_starts.size, counts.vocab_size)
    )
