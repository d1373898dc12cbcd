"""Rule make_table1: Table 1 (best vs final checkpoint per model) as CSV, Markdown and LaTeX.

Rows are (model, checkpoint kind, revision); columns are lmsat.evaluation.METRICS of the
configured tasks, with arrows for the better direction. Skipped tasks are missing (–).
"""

import _lmsat_src  # noqa: F401 (first: this workflow's src/ on sys.path)
import lmsat.offline  # noqa: F401 (first: compute jobs never reach the network)
import logging

import pandas as pd

from lmsat.evaluation import make_table1, write_table
from lmsat.io import read_record, setup_logging
from lmsat.tables import with_provenance

log = logging.getLogger(__name__)


def table1(records: list[dict], tasks: list[str]) -> pd.DataFrame:
    """make_table1 of evaluate_checkpoint records, with each row's revision in the index."""
    revisions = {}
    for record in records:
        key = (record["model"], record["checkpoint"])
        if revisions.setdefault(key, record["revision"]) != record["revision"]:
            raise ValueError(
                f"records of {key} were evaluated at revisions {revisions[key]} and {record['revision']}; "
                "delete results/evaluation and rerun"
            )
    table = make_table1(records, tasks=tasks)
    decimals = table.attrs["decimals"]
    table = table.set_index(pd.Index([revisions[key] for key in table.index], name="revision"), append=True)
    table.attrs["decimals"] = decimals
    return table


def main(snakemake):
    setup_logging(snakemake.log[0])
    records = [read_record(path, "model", "checkpoint", "task") for path in snakemake.input.records]
    for record in records:
        if record["status"] != "done":
            log.warning("%s %s %s: %s (%s)", record["model"], record["checkpoint"], record["task"], record["status"], record["message"])
    table = table1(records, snakemake.params.tasks)
    write_table(with_provenance(table, snakemake.params.config_sha256), snakemake.output.csv)
    for path in (snakemake.output.md, snakemake.output.tex):
        write_table(table, path)
    log.info("Table 1:\n%s", table.to_string())


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
