"""Rule write_storycloze_task: a storycloze_2016 task reading the manually downloaded CSVs."""

import _lmsat_src  # noqa: F401 (first: this workflow's src/ on sys.path)
import lmsat.runtime.offline  # noqa: F401 (first: compute jobs never reach the network)
import lmsat.runtime.warm_start  # noqa: F401 (then: a local run's warm interpreter takes the job, if it serves it)

import shutil
from pathlib import Path

from lmsat.core.io import atomic_path, setup_logging
from lmsat.saturation.downstream import write_storycloze_task


def main(snakemake):
    setup_logging(snakemake.log[0])
    # the CSVs copied beside the YAML (outputs: an evaluation job without this machine's disk
    # reads the copies), then the YAML naming them relative to itself
    for source, copy in zip(snakemake.input, snakemake.output[1:]):
        with atomic_path(copy) as tmp:
            shutil.copyfile(source, tmp)
    task_dir = Path(snakemake.output[0]).parent
    write_storycloze_task(task_dir, task_dir)


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
