"""Rule make_table1: Table 1 (best vs final checkpoint per model) as CSV, Markdown and LaTeX.

Rows are (model, checkpoint kind, revision) (lmsat.products.saturation_tables.table1); columns are
lmsat.saturation.downstream.METRICS of the configured tasks, with arrows for the better direction.
Skipped tasks are missing (–).
"""

import _lmsat_src  # noqa: F401 (first: this workflow's src/ on sys.path)
import lmsat.runtime.offline  # noqa: F401 (first: compute jobs never reach the network)
import lmsat.runtime.warm_start  # noqa: F401 (then: a local run's warm interpreter takes the job, if it serves it)

import logging

from lmsat.core.io import read_record, setup_logging
from lmsat.products.saturation_tables import table1
from lmsat.products.table_files import write_csv, write_table

log = logging.getLogger(__name__)


def main(snakemake):
    setup_logging(snakemake.log[0])
    records = [read_record(path, "model", "checkpoint", "task") for path in snakemake.input.records]
    for record in records:
        if record["status"] != "done":
            log.warning("%s %s %s: %s (%s)", record["model"], record["checkpoint"], record["task"], record["status"], record["message"])
    table = table1(records, snakemake.params.tasks)
    write_csv(table.reset_index(), snakemake.output.csv, snakemake.params.config_sha256)
    for path in (snakemake.output.md, snakemake.output.tex):
        write_table(table, path)
    log.info("Table 1:\n%s", table.to_string())


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
