"""Rule tabulate_anisotropy: the tables of Figs. 2 and 3 from the anisotropy records."""

import _lmsat_src  # noqa: F401 (first: this workflow's src/ on sys.path)
import lmsat.offline  # noqa: F401 (first: compute jobs never reach the network)
import pandas as pd

from lmsat.degeneration import anisotropy_tables
from lmsat.tables import write_csv
from lmsat.io import read_record, setup_logging


def main(snakemake):
    setup_logging(snakemake.log[0])
    records = [read_record(path, "metric", "model", "revision") for path in snakemake.input.records]
    layers, training = anisotropy_tables(records, pd.read_csv(snakemake.input.loss), snakemake.params.models)
    write_csv(layers, snakemake.output.layers, snakemake.params.config_sha256, snakemake.input.records)
    write_csv(training, snakemake.output.training, snakemake.params.config_sha256, snakemake.input.records)


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
