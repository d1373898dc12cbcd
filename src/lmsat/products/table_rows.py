"""What every per-checkpoint table shares: its records read and checked, rows in the plan's
model order, a metric's scalars along training, and the on_disk / is_final flags."""

from __future__ import annotations

from lmsat.core.integrity import check_values, require_keys
from lmsat.core.io import read_record
from lmsat.core.lazy import lazy_module
from lmsat.degeneration.weight_files import RECORD_KEYS

pd = lazy_module("pandas")  # imported by the first job that builds a table, not by every metric job


def in_model_order(table: pd.DataFrame, model_order: list[str] | None, then: list[str]) -> pd.DataFrame:
    """Rows sorted by model in `model_order` (the plan's: by size, lmsat.planning.model_entries.by_size), then
    by `then`; models the order does not name go last, by name (all by name when None).

    Figures draw models in the order of their first row, so this is their panel and legend order.
    """
    order = {m: i for i, m in enumerate(model_order or [])}
    for model in sorted(set(table["model"]) - set(order)):
        order[model] = len(order)
    rank = table["model"].map(order).rename("_model_order")
    table = table.assign(_model_order=rank).sort_values(["_model_order", *then], kind="stable")
    return table.drop(columns="_model_order").reset_index(drop=True)



# ---------------------------------------------------------------- per-checkpoint metric tables


def metric_records(files, values: tuple[str, ...] = ()) -> list[dict]:
    """The JSON records of rule compute_checkpoint_metric, each checked against its path and
    its checksum; each of `values` must be there, a number, finite and within the bounds
    the truth sets (lmsat.core.integrity.BOUNDS): an IntegrityError naming file, checkpoint and key."""
    records = []
    for path in files:
        record = read_record(path, "metric", "model", "revision")
        where = f"{record.get('model')}@{record.get('revision')}"
        require_keys(path, where, record, values)
        check_values(path, where, {key: record[key] for key in values})
        records.append(record)
    return records


def scalars_from_records(files, needed: dict, model_order: list[str] | None, columns: tuple[str, ...]) -> pd.DataFrame:
    """One row per checkpoint: RECORD_KEYS, is_final and the metric's scalar `columns`,
    in the plan's model order and by step (any metric's values along training)."""
    records = metric_records(files, tuple(c for c in columns if c != "n_tokens"))
    if not records:
        raise ValueError(f"no records to tabulate (columns {list(columns)})")
    table = flag_final(pd.DataFrame.from_records(records))
    return in_model_order(table, model_order, ["step"])[[*RECORD_KEYS, "is_final", *columns]]


def mark_on_disk(table: pd.DataFrame, gone) -> pd.DataFrame:
    """`table` with column on_disk (rows per checkpoint: those with a revision column): False
    for the checkpoints of `gone` ("model@revision"), measured before their directories went
    (a Trainer's save_total_limit rotates them away) and kept from their records. A table
    comparing each checkpoint with another (reference_revision) also gets reference_on_disk:
    False where that reference left (its rows were made from its cache, or kept from then)."""
    if "revision" not in table or "model" not in table:
        return table
    gone = set(gone)
    table = table.assign(on_disk=[f"{m}@{r}" not in gone for m, r in zip(table["model"], table["revision"])])
    if "reference_revision" in table:
        table = table.assign(reference_on_disk=[f"{m}@{r}" not in gone
                                                for m, r in zip(table["model"], table["reference_revision"])])
    return table


def flag_final(table: pd.DataFrame) -> pd.DataFrame:
    table["is_final"] = table["step"] == table.groupby("model")["step"].transform("max")
    return table
