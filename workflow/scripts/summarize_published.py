"""Rule summarize_published: the tables of EleutherAI's published record of Pythia
(lmsat.products.published_run) and its summary page; one line per model's verdict in the log."""

import _lmsat_src  # noqa: F401 (first: this workflow's src/ on sys.path)
import lmsat.runtime.offline  # noqa: F401 (first: compute jobs never reach the network)
import lmsat.runtime.warm_start  # noqa: F401 (then: a local run's warm interpreter takes the job, if it serves it)

import logging
import os
from pathlib import Path

from lmsat.core.io import atomic_path, setup_logging
from lmsat.data.published_evals import source
from lmsat.products.published_run import summary_page, tables, verdict_line, verdict_summary
from lmsat.products.table_files import write_csv

log = logging.getLogger(__name__)


def main(snakemake):
    setup_logging(snakemake.log[0])
    ((suite, settings),) = snakemake.params.suites.items()
    products = tables(suite, list(settings["models"]), float(settings["min_params"]))
    for name, table in products.items():
        write_csv(table, snakemake.output[name], snakemake.params.config_sha256)
    for row in products["published_verdicts"].to_dict("records"):
        log.info("verdict %s", verdict_line(row))
    log.info("%s", verdict_summary(products["published_verdicts"]))
    # links between the planned paths (results/<run>/report/ to results/<run>/figures/): in a
    # storage run the page is written to a local copy elsewhere and read in the bucket
    here = f"results/{snakemake.params.run}/report"
    figures = [(title, path, os.path.relpath(path, here)) for title, path in snakemake.params.figures]
    with atomic_path(snakemake.output.html) as tmp:
        Path(tmp).write_text(summary_page(products, source(), figures), encoding="utf-8")


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
