"""Checkpoint select_checkpoints: each model's best and final revision, from loss.csv.

results/tables/best_final.csv has one row per model x kind (best = loss-minimising
revision on the eval sample, final = last revision), with its step, tokens and loss. No
provenance columns (unlike the final tables): its bytes change only when a selection does.
"""

import _lmsat_src  # noqa: F401 (first: this workflow's src/ on sys.path)
import lmsat.offline  # noqa: F401 (first: compute jobs never reach the network)
import logging

import pandas as pd

from lmsat.io import atomic_path, setup_logging
from lmsat.tables import in_model_order

COLUMNS = ["suite", "model", "kind", "revision", "step", "tokens", "loss", "loss_sem"]
log = logging.getLogger(__name__)


def select_checkpoints(loss: pd.DataFrame) -> pd.DataFrame:
    """The rows flagged is_best / is_final in a loss table, one per model x kind, models in
    the loss table's order (by size)."""
    rows = []
    for kind in ("best", "final"):
        flagged = loss[loss[f"is_{kind}"].astype(bool)].assign(kind=kind)
        counts = flagged.groupby("model").size()
        missing = sorted(set(loss["model"]) - set(counts.index))
        if missing or (counts > 1).any():
            raise ValueError(
                f"loss table: models {missing or sorted(counts[counts > 1].index)} need exactly one "
                f"is_{kind} row; rebuild results/tables/loss.csv with lmsat.tables.loss_table"
            )
        rows.append(flagged)
    table = in_model_order(pd.concat(rows), list(dict.fromkeys(loss["model"])), ["kind"])
    return table[COLUMNS]


def main(snakemake):
    setup_logging(snakemake.log[0])
    table = select_checkpoints(pd.read_csv(snakemake.input[0]))
    for row in table.itertuples():
        log.info("%s %s: %s (step %d, loss %.4f)", row.model, row.kind, row.revision, row.step, row.loss)
    with atomic_path(snakemake.output[0]) as tmp:
        table.to_csv(tmp, index=False)


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
