"""Rule write_storycloze_task: a storycloze_2016 task reading the manually downloaded CSVs."""

import _lmsat_src  # noqa: F401 (first: this workflow's src/ on sys.path)
import lmsat.runtime.offline  # noqa: F401 (first: compute jobs never reach the network)
import lmsat.runtime.warm_start  # noqa: F401 (then: a local run's warm interpreter takes the job, if it serves it)

from pathlib import Path

from lmsat.core.io import setup_logging
from lmsat.saturation.downstream import write_storycloze_task


def main(snakemake):
    setup_logging(snakemake.log[0])
    write_storycloze_task(Path(snakemake.output[0]).parent, snakemake.params.data_dir)


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
