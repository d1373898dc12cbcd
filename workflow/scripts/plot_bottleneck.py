"""Rule plot_bottleneck: Fig. 6 (loss and accuracy vs head rank) and Fig. 8 (loss vs W-error)."""

import _lmsat_src  # noqa: F401 (first: this workflow's src/ on sys.path)
import lmsat.offline  # noqa: F401 (first: compute jobs never reach the network)

import pandas as pd

from lmsat.figures.bottleneck import plot_rank_heads, plot_werror_loss
from lmsat.io import setup_logging


def main(snakemake):
    setup_logging(snakemake.log[0])
    output = snakemake.output
    heads = pd.read_csv(snakemake.input.heads)
    plot_rank_heads(heads, [output.fig6_png, output.fig6_pdf])
    plot_werror_loss(heads, [output.fig8_png, output.fig8_pdf])


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
