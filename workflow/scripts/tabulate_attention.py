"""Rule tabulate_attention: per-head low-rank attention metrics of every checkpoint."""

import _lmsat_src  # noqa: F401 (first: this workflow's src/ on sys.path)
import lmsat.offline  # noqa: F401 (first: compute jobs never reach the network)
import pandas as pd

from lmsat.degeneration import attention_table
from lmsat.tables import write_csv
from lmsat.io import setup_logging


def main(snakemake):
    setup_logging(snakemake.log[0])
    identical = pd.read_csv(snakemake.input.identical)
    write_csv(attention_table(list(snakemake.input.files), identical, snakemake.params.models), snakemake.output[0], snakemake.params.config_sha256, snakemake.input.files)


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
