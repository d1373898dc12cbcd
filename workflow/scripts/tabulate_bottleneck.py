"""Rule tabulate_bottleneck: the best learning rate per (model, r), the reference rows and
the W-error of each model's own head (the tables behind Figs. 6 and 8: lmsat.products.bottleneck_tables.heads_tables),
models by size (params.models, the plan's order)."""

import _lmsat_src  # noqa: F401 (first: this workflow's src/ on sys.path)
import lmsat.runtime.offline  # noqa: F401 (first: compute jobs never reach the network)
import lmsat.runtime.warm_start  # noqa: F401 (then: a local run's warm interpreter takes the job, if it serves it)

import logging

from lmsat.core.io import setup_logging
from lmsat.products.bottleneck_tables import heads_tables, monotone_violations, read_head_inputs
from lmsat.products.table_files import write_csv

log = logging.getLogger(__name__)


def main(snakemake):
    setup_logging(snakemake.log[0])
    inputs, params = snakemake.input, snakemake.params
    runs, manifests, spectra = read_head_inputs(inputs.runs, inputs.manifests, inputs.spectra)
    heads, search = heads_tables(runs, manifests, spectra, params.rise_tolerance, params.models)
    for row in heads[heads["kind"] == "full_head"].itertuples():
        top = heads[(heads["model"] == row.model) & (heads["kind"] == "low_rank") & (heads["rank"] == row.hidden_size)]
        if not top.empty:
            gap = float(top["loss_gap"].iloc[0])
            log.info("%s: rank-d head %.4f vs own head %.4f (gap %+.4f, %.1f standard errors)", row.model,
                     top["eval_loss"].iloc[0], row.eval_loss, gap, gap / row.reference_loss_sem)
    for model, low, high in monotone_violations(heads, slack=2 * heads["reference_loss_sem"].max()):
        log.warning("%s: the rank-%d head's loss exceeds the rank-%d head's by more than noise", model, high, low)
    write_csv(heads, snakemake.output.heads, snakemake.params.config_sha256)
    write_csv(search, snakemake.output.search, snakemake.params.config_sha256)


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
