"""Rule tabulate_spectra: tables of Figs. 4 and 5, and the revisions with identical weights."""

import _lmsat_src  # noqa: F401 (first: this workflow's src/ on sys.path)
import lmsat.offline  # noqa: F401 (first: compute jobs never reach the network)
from lmsat.degeneration import spectra_tables
from lmsat.tables import write_csv
from lmsat.io import setup_logging


def main(snakemake):
    setup_logging(snakemake.log[0])
    spectra, entropy, identical = spectra_tables(list(snakemake.input), snakemake.params.models)
    write_csv(spectra, snakemake.output.spectra, snakemake.params.config_sha256, snakemake.input)
    write_csv(entropy, snakemake.output.entropy, snakemake.params.config_sha256, snakemake.input)
    write_csv(identical, snakemake.output.identical, snakemake.params.config_sha256)


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
