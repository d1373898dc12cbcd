"""Tidy tables aggregated over checkpoints (one row per model x revision)."""

from __future__ import annotations

import pandas as pd

from lmsat.io import library_versions

LOSS_COLUMNS = ["suite", "model", "revision", "step", "tokens", "loss", "loss_sem", "is_best", "is_final"]


def in_model_order(table: pd.DataFrame, model_order: list[str] | None, then: list[str]) -> pd.DataFrame:
    """Rows sorted by model in `model_order` (the plan's: by size, lmsat.config.by_size), then
    by `then`; models the order does not name go last, by name (all by name when None).

    Figures draw models in the order of their first row, so this is their panel and legend order.
    """
    order = {m: i for i, m in enumerate(model_order or [])}
    for model in sorted(set(table["model"]) - set(order)):
        order[model] = len(order)
    rank = table["model"].map(order).rename("_model_order")
    table = table.assign(_model_order=rank).sort_values(["_model_order", *then], kind="stable")
    return table.drop(columns="_model_order").reset_index(drop=True)


def loss_table(records: list[dict], model_order: list[str] | None = None) -> pd.DataFrame:
    """Loss per checkpoint with the loss-minimising (best) and last (final) revision flagged.

    records: dicts with suite, model, revision, step, tokens, loss, loss_sem; model_order:
    row order of the models (the plan's, smallest first), by name when None.
    """
    table = pd.DataFrame.from_records(records)
    if table.empty:
        raise ValueError("no loss records to tabulate")
    table = in_model_order(table, model_order, ["step"])
    best = table.groupby("model")["loss"].idxmin()
    final = table.groupby("model")["step"].idxmax()
    table["is_best"] = table.index.isin(best.values)
    table["is_final"] = table.index.isin(final.values)
    return table[LOSS_COLUMNS]


def with_provenance(table: pd.DataFrame, config_sha256: str) -> pd.DataFrame:
    """`table` with the config hash and library versions that made it, as constant columns."""
    table = table.copy()
    table["config_sha256"] = config_sha256
    for name, version in library_versions().items():
        table[f"{name}_version"] = version
    return table
