"""Rule plot_ground_truth: n-gram W-error against the true matrix, and the rank-r head
losses against the synthetic language's entropy rate (when the heads were measured on it)."""

import _lmsat_src  # noqa: F401 (first: this workflow's src/ on sys.path)
import lmsat.offline  # noqa: F401 (first: compute jobs never reach the network)

import pandas as pd

from lmsat.figures.bottleneck import plot_ground_truth
from lmsat.io import setup_logging
from lmsat.synthetic import entropy_rate_of


def main(snakemake):
    setup_logging(snakemake.log[0])
    inputs = snakemake.input
    heads = pd.read_csv(inputs.heads) if inputs.heads else None
    entropy_rate = entropy_rate_of(inputs.language)
    plot_ground_truth(pd.read_csv(inputs.curves), heads, entropy_rate, [snakemake.output.png, snakemake.output.pdf])


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
