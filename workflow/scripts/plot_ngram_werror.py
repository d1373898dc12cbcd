"""Rule plot_ngram_werror: Fig. 7 from results/tables/ngram_werror.csv."""

import _lmsat_src  # noqa: F401 (first: this workflow's src/ on sys.path)
import lmsat.offline  # noqa: F401 (first: compute jobs never reach the network)

from lmsat.figures.bottleneck import plot_ngram_werror
from lmsat.io import setup_logging
from lmsat.tables import read_table


def main(snakemake):
    setup_logging(snakemake.log[0])
    plot_ngram_werror(read_table(snakemake.input[0]), [snakemake.output.png, snakemake.output.pdf])


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
