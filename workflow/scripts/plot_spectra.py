"""Rule plot_spectra: Fig. 4 (normalised head spectra) and Fig. 5 (singular entropy)."""

import _lmsat_src  # noqa: F401 (first: this workflow's src/ on sys.path)
import lmsat.offline  # noqa: F401 (first: compute jobs never reach the network)
import pandas as pd

from lmsat.figures.degeneration import plot_head_spectra, plot_singular_entropy
from lmsat.io import setup_logging


def main(snakemake):
    setup_logging(snakemake.log[0])
    out = snakemake.output
    plot_head_spectra(pd.read_csv(snakemake.input.spectra), [out.fig4_png, out.fig4_pdf])
    entropy = pd.read_csv(snakemake.input.entropy)
    plot_singular_entropy(entropy, [out.fig5_png, out.fig5_pdf], power=snakemake.params.power)


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
