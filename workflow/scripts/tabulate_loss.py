"""Rule tabulate_loss: results/tables/loss.csv from the per-checkpoint loss records."""

import _lmsat_src  # noqa: F401 (first: this workflow's src/ on sys.path)
import lmsat.offline  # noqa: F401 (first: compute jobs never reach the network)

from lmsat.io import atomic_path, read_record, setup_logging
from lmsat.tables import loss_table, with_provenance


def main(snakemake):
    setup_logging(snakemake.log[0])
    table = loss_table([read_record(path, "metric", "model", "revision") for path in snakemake.input], snakemake.params.models)
    table = with_provenance(table, snakemake.params.config_sha256, snakemake.input)
    with atomic_path(snakemake.output[0]) as tmp:
        table.to_csv(tmp, index=False)


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
