"""Rule plot_scaling_law: Fig. 1b from scaling_fit.csv and scaling_shortfall.csv."""

import _lmsat_src  # noqa: F401 (first: this workflow's src/ on sys.path)
import lmsat.offline  # noqa: F401 (first: compute jobs never reach the network)

import pandas as pd

from lmsat.figures.saturation import plot_scaling_fit
from lmsat.io import setup_logging


def main(snakemake):
    setup_logging(snakemake.log[0])
    fit = pd.read_csv(snakemake.input.fit).iloc[0]
    points = pd.read_csv(snakemake.input.shortfall)
    plot_scaling_fit(points, fit, [snakemake.output.png, snakemake.output.pdf])


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
