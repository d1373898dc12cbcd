"""Tidy tables aggregated over checkpoints (one row per model x revision)."""

from __future__ import annotations

import pandas as pd

from lmsat.io import library_versions

LOSS_COLUMNS = ["suite", "model", "revision", "step", "tokens", "loss", "loss_sem", "is_best", "is_final"]


def loss_table(records: list[dict]) -> pd.DataFrame:
    """Loss per checkpoint with the loss-minimising (best) and last (final) revision flagged.

    records: dicts with suite, model, revision, step, tokens, loss, loss_sem.
    """
    table = pd.DataFrame.from_records(records)
    if table.empty:
        raise ValueError("no loss records to tabulate")
    table = table.sort_values(["suite", "model", "step"], kind="stable").reset_index(drop=True)
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
