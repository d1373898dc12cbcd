"""Rule count_corpus_ngrams: the n-gram matrix spectrum of one corpus x tokenizer (Fig. 7).

For a synthetic corpus read with the toy tokenizer (token id == word id), the spectrum of
the language's true n-gram matrix is stored beside it.
"""

import _lmsat_src  # noqa: F401 (first: this workflow's src/ on sys.path)
import lmsat.runtime.offline  # noqa: F401 (first: compute jobs never reach the network)
import lmsat.runtime.warm_start  # noqa: F401 (then: a local run's warm interpreter takes the job, if it serves it)

import json
import logging

import h5py

from lmsat.bottleneck.corpus_werror import MAX_TRUTH_ORDER, corpus_spectrum, true_ngram_spectrum
from lmsat.checkpoints.loading import job_device, load_tokenizer
from lmsat.core.integrity import hdf5_checksums
from lmsat.core.io import atomic_path, library_versions, setup_logging
from lmsat.core.job_inputs import corpus_at, tokenizer_at
from lmsat.data.corpus import iter_documents

log = logging.getLogger(__name__)


def main(snakemake):
    setup_logging(snakemake.log[0])
    params, wildcards = snakemake.params, snakemake.wildcards
    # the specs' planned paths read as this job's inputs (lmsat.core.job_inputs)
    tokenizer = load_tokenizer(tokenizer_at(params.tokenizer, snakemake.input), wildcards.tokenizer)
    # torch's eigensolver on either device: on CPU (MKL) 1.8x faster than scipy's at V = 8k,
    # for a second copy of the Gram block (benchmarks/werror.py)
    device = job_device(snakemake)
    documents = iter_documents(corpus_at(params.corpus, snakemake.input), wildcards.corpus)
    spectrum = corpus_spectrum(documents, tokenizer, params.order, params.max_tokens, device=device)
    log.info("%s / %s: %d tokens, %d contexts, %d distinct %d-grams, V=%d", wildcards.corpus, wildcards.tokenizer,
             spectrum["n_tokens"], spectrum["n_contexts"], spectrum["n_ngrams"], params.order, spectrum["vocab_size"])
    truth = None
    if snakemake.input.language:
        from lmsat.toy.language import load_language

        language = load_language(snakemake.input.language)
        if language.spec.order <= min(MAX_TRUTH_ORDER, params.order - 1):
            truth = true_ngram_spectrum(language, params.order, device=device)
        else:
            log.warning("no true %d-gram matrix for a language of order %d: the figure shows none",
                        params.order, language.spec.order)
    with atomic_path(snakemake.output[0]) as tmp, h5py.File(tmp, "w") as f:
        f.create_dataset("singular_values", data=spectrum["singular_values"])
        if truth is not None:
            f.create_dataset("truth_singular_values", data=truth["singular_values"])
            f.attrs["truth_n_contexts"] = truth["n_contexts"]
        f.attrs.update(
            corpus=wildcards.corpus, tokenizer=wildcards.tokenizer, order=params.order,
            **{k: spectrum[k] for k in ("n_tokens", "n_contexts", "n_ngrams", "vocab_size")},
            versions=json.dumps(library_versions(), sort_keys=True),
        )
        f.attrs["checksums"] = hdf5_checksums({name: f[name][...] for name in f})  # lmsat.core.integrity


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
