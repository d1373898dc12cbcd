"""Rule tabulate_ngrams: W-error(d) of every corpus x tokenizer n-gram matrix (Fig. 7's table)."""

import _lmsat_src  # noqa: F401 (first: this workflow's src/ on sys.path)
import lmsat.runtime.offline  # noqa: F401 (first: compute jobs never reach the network)
import lmsat.runtime.warm_start  # noqa: F401 (then: a local run's warm interpreter takes the job, if it serves it)

from lmsat.core.io import setup_logging
from lmsat.products.bottleneck_tables import ngram_werror_table
from lmsat.products.table_files import write_csv


def main(snakemake):
    setup_logging(snakemake.log[0])
    write_csv(ngram_werror_table(list(snakemake.input)), snakemake.output[0], snakemake.params.config_sha256)


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
