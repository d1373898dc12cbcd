"""Rule fit_scaling_law: fit L(N, T) = A/N^alpha + B/T^beta + E and compare every checkpoint.

Inputs: results/tables/best_final.csv (each model's best and final checkpoint) and the
parameter counts of results/params/{model}.json (for models whose n_params the config
leaves at 0). Outputs (lmsat.products.saturation_tables.scaling_tables):
  scaling_fit.csv        one row: A, alpha, their standard errors and 95% CIs, the fixed
                         B, beta, E, the settings, and the mean shortfall of the models
                         below min_params (the paper - ~8% final, ~4% best)
  scaling_shortfall.csv  one row per model x kind (best/final): N, T, measured and
                         predicted loss, shortfall in % (> 0 = worse than the law),
                         and best_final.csv's implausible_loss
"""

import _lmsat_src  # noqa: F401 (first: this workflow's src/ on sys.path)
import lmsat.runtime.offline  # noqa: F401 (first: compute jobs never reach the network)
import lmsat.runtime.warm_start  # noqa: F401 (then: a local run's warm interpreter takes the job, if it serves it)

import logging

from lmsat.core.io import read_record, setup_logging
from lmsat.products.saturation_tables import model_sizes, scaled_models, scaling_tables
from lmsat.products.table_files import read_table, write_csv

log = logging.getLogger(__name__)


def main(snakemake):
    setup_logging(snakemake.log[0])
    params = snakemake.params
    settings = params.scaling
    configured, selection = scaled_models(params.n_params, read_table(snakemake.input.selection), settings["models"])
    sizes = model_sizes(configured, [read_record(path, "model") for path in snakemake.input.counts], settings["params"])
    fit_row, table = scaling_tables(selection, sizes, settings, seed=params.seed)
    log.info("law:\n%s\nshortfall:\n%s", fit_row.T.to_string(), table.to_string())
    write_csv(fit_row, snakemake.output.fit, params.config_sha256)
    write_csv(table, snakemake.output.shortfall, params.config_sha256)


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
