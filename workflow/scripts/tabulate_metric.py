"""Rule tabulate_metric: one table of a registered metric (lmsat.products.metrics) from its
per-checkpoint files and the tables it needs, each checkpoint's row marked on_disk or not,
written with its provenance."""

import _lmsat_src  # noqa: F401 (first: this workflow's src/ on sys.path)
import lmsat.runtime.offline  # noqa: F401 (first: compute jobs never reach the network)
import lmsat.runtime.warm_start  # noqa: F401 (then: a local run's warm interpreter takes the job, if it serves it)

from lmsat.core.io import setup_logging
from lmsat.products.metrics import METRICS
from lmsat.products.table_files import read_table, write_csv
from lmsat.products.table_rows import mark_on_disk


def main(snakemake):
    setup_logging(snakemake.log[0])
    params, name = snakemake.params, snakemake.wildcards.table
    table = METRICS[params.metric].tables[name]
    files = list(snakemake.input.files)
    needed = {need: read_table(snakemake.input[need]) for need in table.needs}
    options = dict(params.options)
    if table.files_of:  # the other planned metrics' files it reads (input files_of_<metric>)
        present = set(snakemake.input.keys())
        options["files_of"] = {m: list(snakemake.input[f"files_of_{m}"]) for m in table.files_of if f"files_of_{m}" in present}
    frame = mark_on_disk(table.build(files, needed, params.models, **options), params.gone)
    write_csv(frame, snakemake.output[0], params.config_sha256, files if table.row_provenance else ())


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
