"""Checkpoint select_checkpoints: each model's best and final revision, from loss.csv.

results/tables/best_final.csv (lmsat.products.saturation_tables.select_checkpoints) has one row per model x
kind (best = loss-minimising revision on the eval sample, final = last revision), with its
step, tokens, loss and the loss table's implausible_loss flag. No provenance columns (unlike the final tables): its bytes change
only when a selection does.
"""

import _lmsat_src  # noqa: F401 (first: this workflow's src/ on sys.path)
import lmsat.runtime.offline  # noqa: F401 (first: compute jobs never reach the network)
import lmsat.runtime.warm_start  # noqa: F401 (then: a local run's warm interpreter takes the job, if it serves it)

import logging

from lmsat.core.io import setup_logging
from lmsat.products.saturation_tables import select_checkpoints
from lmsat.products.table_files import read_table, write_csv

log = logging.getLogger(__name__)


def main(snakemake):
    setup_logging(snakemake.log[0])
    table = select_checkpoints(read_table(snakemake.input[0]))
    for row in table.itertuples():
        log.info("%s %s: %s (step %d, loss %.4f%s)", row.model, row.kind, row.revision, row.step, row.loss,
                 "; implausible for its step: see loss.csv's implausible_loss" if row.implausible_loss else "")
    write_csv(table, snakemake.output[0])


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
