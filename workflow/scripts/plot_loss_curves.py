"""Rule plot_loss_curves: Fig. 1a from results/tables/loss.csv."""

import _lmsat_src  # noqa: F401 (first: this workflow's src/ on sys.path)
import lmsat.offline  # noqa: F401 (first: compute jobs never reach the network)
import pandas as pd

from lmsat.figures.saturation import plot_loss_curves
from lmsat.io import setup_logging


def main(snakemake):
    setup_logging(snakemake.log[0])
    entropy_rate = None
    if snakemake.input.language:
        from lmsat.synthetic import load_language

        entropy_rate = load_language(snakemake.input.language).entropy_rate
    table = pd.read_csv(snakemake.input.table)
    plot_loss_curves(table, [snakemake.output.png, snakemake.output.pdf], entropy_rate=entropy_rate)


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
