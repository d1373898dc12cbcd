"""Rule plot_metric_figure: one figure of lmsat.figures.FIGURES from its tables."""

import _lmsat_src  # noqa: F401 (first: this workflow's src/ on sys.path)
import lmsat.offline  # noqa: F401 (first: compute jobs never reach the network)

import pandas as pd

from lmsat.figures import FIGURES
from lmsat.io import setup_logging


def main(snakemake):
    setup_logging(snakemake.log[0])
    figure = FIGURES[snakemake.wildcards.figure]
    tables = {name: pd.read_csv(snakemake.input[name]) for name in figure.tables}
    options = dict(snakemake.params.options)
    if figure.entropy_rate:
        options["entropy_rate"] = None
        if snakemake.input.language:
            from lmsat.synthetic import load_language

            options["entropy_rate"] = load_language(snakemake.input.language).entropy_rate
    figure.draw(tables, [snakemake.output.png, snakemake.output.pdf], **options)


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
