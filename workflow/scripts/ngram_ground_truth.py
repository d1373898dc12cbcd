"""Rule ngram_ground_truth: empirical n-gram W-error curves of growing samples of a
synthetic language against the curve of its true n-gram matrix."""

import _lmsat_src  # noqa: F401 (first: this workflow's src/ on sys.path)
import lmsat.runtime.offline  # noqa: F401 (first: compute jobs never reach the network)
import lmsat.runtime.warm_start  # noqa: F401 (then: a local run's warm interpreter takes the job, if it serves it)

from lmsat.bottleneck.corpus_werror import ground_truth_spectra
from lmsat.core.io import setup_logging
from lmsat.products.bottleneck_tables import ngram_ground_truth_table
from lmsat.products.table_files import write_csv
from lmsat.toy.language import LanguageSpec, build_language


def main(snakemake):
    setup_logging(snakemake.log[0])
    params = snakemake.params
    language = build_language(LanguageSpec(**params.language))
    spectra = ground_truth_spectra(language, params.sample_sizes, params.order, params.seed)
    table = ngram_ground_truth_table(spectra, params.order, language.vocab_size, language.n_contexts)
    write_csv(table, snakemake.output[0], params.config_sha256)


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
