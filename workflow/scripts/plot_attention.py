"""Rule plot_attention: low-rank attention signatures along training, a row per model."""

import _lmsat_src  # noqa: F401 (first: this workflow's src/ on sys.path)
import lmsat.offline  # noqa: F401 (first: compute jobs never reach the network)
import pandas as pd

from lmsat.figures.degeneration import plot_attention_lowrank
from lmsat.io import setup_logging


def main(snakemake):
    setup_logging(snakemake.log[0])
    plot_attention_lowrank(pd.read_csv(snakemake.input[0]), [snakemake.output.png, snakemake.output.pdf])


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
