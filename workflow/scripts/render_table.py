"""Rule render_table: results/report/<table>.html, a table of results/tables as a sortable
HTML page (Snakemake's report shows HTML inline; a CSV only as a download)."""

import _lmsat_src  # noqa: F401 (first: this workflow's src/ on sys.path)
import lmsat.runtime.offline  # noqa: F401 (first: compute jobs never reach the network)
import lmsat.runtime.warm_start  # noqa: F401 (then: a local run's warm interpreter takes the job, if it serves it)

from pathlib import Path

from lmsat.core.io import atomic_path, setup_logging
from lmsat.products.report import table_page
from lmsat.products.table_files import read_table


def main(snakemake):
    setup_logging(snakemake.log[0])
    source = Path(snakemake.input[0])
    html = table_page(read_table(source), source.name, csv_bytes=source.read_bytes())
    with atomic_path(snakemake.output[0]) as tmp:
        Path(tmp).write_text(html, encoding="utf-8")


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
