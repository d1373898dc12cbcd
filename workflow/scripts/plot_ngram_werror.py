"""Rule plot_ngram_werror: Fig. 7 from results/tables/ngram_werror.csv."""

import _lmsat_src  # noqa: F401 (first: this workflow's src/ on sys.path)
import lmsat.offline  # noqa: F401 (first: compute jobs never reach the network)

import pandas as pd

from lmsat.figures.bottleneck import plot_ngram_werror
from lmsat.io import setup_logging


def main(snakemake):
    setup_logging(snakemake.log[0])
    plot_ngram_werror(pd.read_csv(snakemake.input[0]), [snakemake.output.png, snakemake.output.pdf])


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
