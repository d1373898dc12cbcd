"""Rule ngram_ground_truth: empirical n-gram W-error curves of growing samples of a
synthetic language against the curve of its true n-gram matrix."""

import _lmsat_src  # noqa: F401 (first: this workflow's src/ on sys.path)
import lmsat.offline  # noqa: F401 (first: compute jobs never reach the network)
import logging

import pandas as pd

from lmsat.tables import write_csv
from lmsat.io import setup_logging
from lmsat.ngram_werror import TABLE_COLUMNS, curve_rows, ground_truth_spectra
from lmsat.synthetic import LanguageSpec, build_language

log = logging.getLogger(__name__)


def main(snakemake):
    setup_logging(snakemake.log[0])
    params = snakemake.params
    language = build_language(LanguageSpec(**params.language))
    spectra = ground_truth_spectra(language, params.sample_sizes, params.order, params.seed)
    common = dict(corpus="synthetic", tokenizer="language", order=params.order, vocab_size=language.vocab_size)
    truth = curve_rows(spectra["truth"]["singular_values"], **common, kind="truth", n_tokens=0,
                       n_contexts=spectra["truth"]["n_contexts"])
    tables = [truth]
    for n, spectrum in spectra["samples"].items():
        curve = curve_rows(spectrum["singular_values"], **common, kind="empirical", n_tokens=n,
                           n_contexts=spectrum["n_contexts"])
        gap = (curve["werror"] - truth["werror"]).abs().max()
        log.info("%d tokens: %d of %d contexts seen, max |W-error gap| to the truth %.4f", n,
                 spectrum["n_contexts"], spectra["truth"]["n_contexts"], gap)
        tables.append(curve)
    tables.append(curve_rows(spectra["buckets"], **common, kind="buckets", n_tokens=0, n_contexts=language.n_contexts))
    write_csv(pd.concat(tables, ignore_index=True)[TABLE_COLUMNS], snakemake.output[0], snakemake.params.config_sha256)


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
