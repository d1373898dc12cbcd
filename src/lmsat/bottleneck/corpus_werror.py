"""5-gram W-error of corpora (Godey et al. 2024, Fig. 7) and its ground truth.

Corpora. Documents are tokenized, joined with the end-of-text token into one stream
(as Pythia's training data is) and counted in chunks (`lmsat.bottleneck.ngrams.count_ngrams`, memory
proportional to the distinct n-grams); W (C x V) has one row per observed (n-1)-token
context, its next-token distribution, and W-error(d) = ||sigma_{d+1:}|| / ||W||_F comes from
all of W's singular values (`lmsat.bottleneck.werror.gram_spectrum`).

Ground truth. For the synthetic language (`lmsat.toy.language`) the true matrix is known:
every (n-1)-token context c with positive probability has the true row P(. | bucket(c)),
a row of `transitions` (C_b x V). W's limit is therefore `transitions` with row b repeated
m_b times, m_b the number of possible contexts whose bucket is b, and its Gram matrix is
T^T diag(m) T: the spectrum of diag(sqrt(m)) T. Contexts must determine the bucket
(n - 1 >= the language's order); m is counted exactly for orders 1 and 2 by a walk over
the bucket graph. As the sample grows the empirical curve converges to this one from
above (a context seen a few times has a noisy row whose energy spreads over all
directions); `ground_truth_spectra` draws one long chain and counts growing prefixes.

    sigma = corpus_spectrum(iter_documents(spec), tokenizer, order=5)["singular_values"]
    dims, werror = w_error_curve(sigma)
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator

import numpy as np
import scipy.sparse

from lmsat.bottleneck.ngrams import context_matrix, count_ngrams
from lmsat.bottleneck.werror import gram_spectrum, w_error_curve
from lmsat.runtime.progress import Progress

log = logging.getLogger(__name__)

TABLE_COLUMNS = ["corpus", "tokenizer", "kind", "order", "n_tokens", "n_contexts", "vocab_size", "d", "werror"]
MAX_TRUTH_ORDER = 2  # language orders whose possible contexts are counted exactly


def corpus_token_chunks(
    documents: Iterable[str], tokenizer, max_tokens: int = 0, chunk_tokens: int = 1 << 20, batch_documents: int = 256
) -> Iterator[np.ndarray]:
    """Consecutive pieces of the stream doc_1 eos doc_2 eos ..., at most max_tokens (0 = all)."""
    eos = tokenizer.eos_token_id
    if eos is None:
        raise ValueError("corpus_token_chunks: the tokenizer has no eos_token_id to separate documents")
    pending, size, total = [], 0, 0

    def flush():
        nonlocal pending, size
        chunk = np.concatenate(pending)
        pending, size = [], 0
        return chunk

    documents = iter(documents)
    while True:
        batch = [text for _, text in zip(range(batch_documents), documents)]
        if not batch:
            break
        for ids in tokenizer(batch, add_special_tokens=False)["input_ids"]:
            piece = np.asarray(ids + [eos], dtype=np.int64)
            if max_tokens:
                piece = piece[: max_tokens - total]
            pending.append(piece)
            size += piece.size
            total += piece.size
            if size >= chunk_tokens:
                yield flush()
            if max_tokens and total >= max_tokens:
                break
        if max_tokens and total >= max_tokens:
            break
    if pending:
        yield flush()


def spectrum_of_counts(counts, device: str | None = None) -> dict:
    """Singular values of the context matrix of `counts`, with its shape."""
    matrix = context_matrix(counts)  # (C, V) sparse
    return dict(
        singular_values=gram_spectrum(matrix, device=device),
        n_tokens=int(counts.n_tokens),
        n_contexts=int(matrix.shape[0]),
        n_ngrams=len(counts),
        vocab_size=int(counts.vocab_size),
    )


def corpus_spectrum(documents, tokenizer, order: int = 5, max_tokens: int = 0, device: str | None = None) -> dict:
    """The n-gram matrix spectrum of a corpus (documents joined with end-of-text)."""
    chunks = corpus_token_chunks(documents, tokenizer, max_tokens)
    progress = Progress(f"{order}-gram counting", max_tokens or None, "token")
    counts = count_ngrams(chunks, order=order, vocab_size=len(tokenizer), progress=progress)
    progress.finish(distinct=f"{len(counts):,}")
    if counts.n_tokens < order:
        raise ValueError(f"corpus_spectrum: the corpus gave {counts.n_tokens} tokens, fewer than order={order}")
    return spectrum_of_counts(counts, device)


def _bucket_graph(lang) -> scipy.sparse.csr_matrix:
    """0/1 adjacency (C, C) of the bucket chain: b -> next_bucket(b, x) for x in supp(b)."""
    T = lang.transitions
    C = T.shape[0]
    rows = np.repeat(np.arange(C), np.diff(T.indptr))
    cols = lang.next_bucket(rows, T.indices.astype(np.int64))
    # distinct tokens lead to distinct buckets (a bucket holds its last token), so entries are 0/1
    return scipy.sparse.csr_matrix((np.ones(rows.size), (rows, cols)), shape=(C, C))


def possible_context_counts(lang, context_length: int) -> np.ndarray:
    """m (C,): token sequences of `context_length` with positive probability, by bucket.

    A sequence's bucket is the context of the token after it. All buckets are reachable
    (the chain is ergodic), so for order 2 a pair (x1, x2) is possible iff x2 follows x1
    from some bucket whose last token is x1; afterwards each token extends a sequence by
    one edge of the bucket graph, and sequences and paths correspond one to one.
    """
    order, V, G = lang.spec.order, lang.spec.vocab_size, lang.spec.groups
    if order > MAX_TRUTH_ORDER:
        raise ValueError(
            f"possible_context_counts: language order {order} > {MAX_TRUTH_ORDER} is not supported; "
            f"use a language of order <= {MAX_TRUTH_ORDER}"
        )
    if context_length < order:
        raise ValueError(
            f"possible_context_counts: contexts of {context_length} tokens do not determine the next-token "
            f"distribution of an order-{order} language; use n-grams with n - 1 >= {order}"
        )
    T = lang.transitions
    C = T.shape[0]
    rows = np.repeat(np.arange(C), np.diff(T.indptr))
    counts = np.zeros(C)
    if order == 1:  # the bucket is the last token
        counts[np.unique(T.indices)] = 1.0
    else:  # bucket of (x1, x2) = x2 + V g(x1)
        follows = np.zeros((V, V), dtype=bool)  # follows[x1, x2]
        follows[rows % V, T.indices] = True
        for group in range(G):
            counts[np.arange(V) + V * group] = follows[lang.group == group].sum(axis=0)
    graph_t = _bucket_graph(lang).T.tocsr()
    for _ in range(context_length - order):
        counts = graph_t @ counts
    return counts


def true_ngram_spectrum(lang, order: int, device: str | None = None) -> dict:
    """Singular values of the true n-gram matrix: diag(sqrt(m)) T, m from possible_context_counts."""
    counts = possible_context_counts(lang, order - 1)
    weighted = scipy.sparse.diags(np.sqrt(counts)) @ lang.transitions  # (C, V)
    return dict(singular_values=gram_spectrum(weighted.tocsr(), device=device), n_contexts=float(counts.sum()))


def ground_truth_spectra(lang, sample_sizes, order: int, seed: int) -> dict:
    """Empirical n-gram spectra of growing prefixes of one chain, and the truth.

    Returns {"samples": {n: spectrum dict}, "truth": spectrum dict, "buckets": singular
    values of `transitions` itself (rows unweighted)}.
    """
    sizes = sorted(set(int(n) for n in sample_sizes))
    tokens, _ = lang.sample(sizes[-1], np.random.default_rng([seed, order]))
    samples = {}
    for n in sizes:
        samples[n] = spectrum_of_counts(count_ngrams([tokens[:n]], order=order, vocab_size=lang.vocab_size))
        log.info("%d tokens: %d contexts", n, samples[n]["n_contexts"])
    return dict(samples=samples, truth=true_ngram_spectrum(lang, order), buckets=gram_spectrum(lang.transitions))


def curve_rows(singular_values, **fields):
    """One row per d = 0..len(sigma): W-error(d), with `fields` repeated (a pandas DataFrame)."""
    import pandas as pd  # not at DAG time: Snakemake imports this module for check_config

    dims, werror = w_error_curve(singular_values)
    table = pd.DataFrame({"d": dims, "werror": werror})
    for key, value in reversed(list(fields.items())):
        table.insert(0, key, value)
    return table
