"""Rule plot_anisotropy: Fig. 2 (anisotropy vs depth) and Fig. 3 (along training)."""

import _lmsat_src  # noqa: F401 (first: this workflow's src/ on sys.path)
import lmsat.offline  # noqa: F401 (first: compute jobs never reach the network)
import pandas as pd

from lmsat.figures.degeneration import plot_anisotropy_depth, plot_anisotropy_training
from lmsat.io import setup_logging


def main(snakemake):
    setup_logging(snakemake.log[0])
    out = snakemake.output
    plot_anisotropy_depth(pd.read_csv(snakemake.input.layers), [out.fig2_png, out.fig2_pdf], snakemake.params.suites)
    plot_anisotropy_training(pd.read_csv(snakemake.input.training), [out.fig3_png, out.fig3_pdf])


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
