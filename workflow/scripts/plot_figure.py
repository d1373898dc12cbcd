"""Rule plot_figure: one figure of lmsat.figures.FIGURES from its tables."""

import _lmsat_src  # noqa: F401 (first: this workflow's src/ on sys.path)
import lmsat.runtime.offline  # noqa: F401 (first: compute jobs never reach the network)
import lmsat.runtime.warm_start  # noqa: F401 (then: a local run's warm interpreter takes the job, if it serves it)

from lmsat.core.io import setup_logging
from lmsat.figures import FIGURES
from lmsat.products.table_files import read_table


def main(snakemake):
    setup_logging(snakemake.log[0])
    figure, inputs = FIGURES[snakemake.wildcards.figure], snakemake.input
    names = [name for name in (*figure.tables, *figure.optional) if name in inputs.keys()]
    frames = {name: read_table(inputs[name]) for name in names}  # an optional one not planned: None
    options = dict(snakemake.params.options)
    if figure.entropy_rate:
        from lmsat.toy.language import entropy_rate_of  # scipy: only for the figures that draw it

        options["entropy_rate"] = entropy_rate_of(inputs.language)
    figure.plot(frames, [snakemake.output.png, snakemake.output.pdf], **options)


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
