"""Every tidy table of the workflow, and its one CSV writer (write_csv, with provenance).

Per-checkpoint metric tables (their builders take (files, needed tables, model order), as
lmsat.metrics.Table registers them): loss (Fig. 1a), anisotropy by layer and along
training (Figs. 2, 3), head spectra, singular entropy and identical weights (Figs. 4, 5),
low-rank attention, and any metric's scalars along training (scalars_from_records).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import h5py
import numpy as np
import pandas as pd

from lmsat.degeneration import ATTENTION_KINDS, ATTENTION_SCALARS, RECORD_KEYS, read_attention, read_spectrum
from lmsat.io import atomic_path, library_versions, read_json, read_record, source_sha256
from lmsat.spectra import effective_rank, identical_heads, singular_entropy, stable_rank

log = logging.getLogger(__name__)

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



# ---------------------------------------------------------------- per-checkpoint metric tables


def metric_records(files) -> list[dict]:
    """The JSON records of rule compute_checkpoint_metric, each checked against its path."""
    return [read_record(path, "metric", "model", "revision") for path in files]


def loss_from_records(files, needed: dict, model_order: list[str] | None) -> pd.DataFrame:
    return loss_table(metric_records(files), model_order)


def anisotropy_from_records(files, needed: dict, model_order: list[str] | None, part: int) -> pd.DataFrame:
    return anisotropy_tables(metric_records(files), needed["loss"], model_order)[part]


def spectra_from_files(files, needed: dict, model_order: list[str] | None, part: int) -> pd.DataFrame:
    return spectra_tables(list(files), model_order)[part]


def attention_from_files(files, needed: dict, model_order: list[str] | None) -> pd.DataFrame:
    return attention_table(list(files), needed["identical_weights"], model_order)


def scalars_from_records(files, needed: dict, model_order: list[str] | None, columns: tuple[str, ...]) -> pd.DataFrame:
    """One row per checkpoint: RECORD_KEYS, is_final and the metric's scalar `columns`,
    in the plan's model order and by step (any metric's values along training)."""
    records = metric_records(files)
    if not records:
        raise ValueError(f"no records to tabulate (columns {list(columns)})")
    table = _flag_final(pd.DataFrame.from_records(records))
    return in_model_order(table, model_order, ["step"])[[*RECORD_KEYS, "is_final", *columns]]


def _flag_final(table: pd.DataFrame) -> pd.DataFrame:
    table["is_final"] = table["step"] == table.groupby("model")["step"].transform("max")
    return table


def anisotropy_tables(
    records: list[dict], loss: pd.DataFrame, model_order: list[str] | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Tables of Fig. 2 (per layer) and Fig. 3 (last layer and loss along training).

    records: anisotropy metric records (RECORD_KEYS + anisotropy_layers, anisotropy_last,
    n_layers, layer_sample, n_tokens); loss: results/tables/loss.csv (model, revision, loss);
    model_order: row order of the models (the plan's), by name when None.
    """
    if not records:
        raise ValueError("no anisotropy records to tabulate")
    per_checkpoint = in_model_order(_flag_final(pd.DataFrame.from_records(records)), model_order, ["step"])
    rows = []
    for record in per_checkpoint.to_dict("records"):
        n_layers = record["n_layers"]
        for layer, value in enumerate(record["anisotropy_layers"]):
            rows.append(
                {
                    **{k: record[k] for k in RECORD_KEYS},
                    "is_final": record["is_final"],
                    "layer": layer,
                    "n_layers": n_layers,
                    "relative_depth": layer / n_layers,
                    "anisotropy": value,
                    "n_tokens": record["layer_sample"],
                }
            )
    layers = pd.DataFrame.from_records(rows)
    training = per_checkpoint[[*RECORD_KEYS, "is_final", "anisotropy_last", "n_tokens"]].merge(
        loss[["model", "revision", "loss", "loss_sem", "is_best"]], on=["model", "revision"], how="left"
    )
    missing = training[training["loss"].isna()]
    if len(missing):
        first = missing.iloc[0]
        raise ValueError(
            f"loss table has no loss for {len(missing)} checkpoints (e.g. {first['model']}@{first['revision']}); "
            "rebuild results/tables/loss.csv"
        )
    return layers, training


def spectra_tables(
    paths: list, model_order: list[str] | None = None
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Tables of Fig. 4 (normalised spectra), Fig. 5 (singular entropy) and identical weights.

    Singular entropy KL(p || uniform) with p ~ sigma and with p ~ sigma^2 (both columns).
    model_order: row order of the models (the plan's), by name when None.
    """
    if not paths:
        raise ValueError("no spectra files to tabulate")
    summary, curves = [], []
    for path in paths:
        s, attrs = read_spectrum(path)
        record = {k: attrs[k] for k in RECORD_KEYS}
        summary.append(
            {
                **record,
                "n_rows": attrs["n_rows"],
                "n_valid_rows": attrs["n_valid_rows"],
                "hidden_size": attrs["hidden_size"],
                "sigma_max": float(s[0]),
                "singular_entropy_sigma": singular_entropy(s, power=1),
                "singular_entropy_sigma2": singular_entropy(s, power=2),
                "effective_rank": effective_rank(s),
                "stable_rank": stable_rank(s),
                "head_sha256": attrs["head_sha256"],
                "embedding_sha256": attrs.get("embedding_sha256", ""),  # "": a file from before it
            }
        )
        curves.append(
            pd.DataFrame(
                {**record, "index": np.arange(1, s.size + 1), "singular_value": s, "normalised": s / s[0]}
            )
        )
    entropy = in_model_order(_flag_final(pd.DataFrame.from_records(summary)), model_order, ["step"])
    identical = identical_weights_table(entropy)
    flagged = identical.groupby(["model", "revision"], sort=False)["identical_to"].agg(
        lambda members: ";".join(dict.fromkeys(";".join(members).split(";")))  # over tensors
    )
    keys = pd.MultiIndex.from_frame(entropy[["model", "revision"]])
    entropy["identical_weights"] = keys.isin(flagged.index)
    entropy["identical_to"] = flagged.reindex(keys).fillna("").to_numpy()
    spectra = pd.concat(curves, ignore_index=True).merge(
        entropy[["model", "revision", "identical_weights"]], on=["model", "revision"]
    )
    spectra = in_model_order(spectra, model_order, ["step", "index"])
    return spectra, entropy, identical


IDENTICAL_COLUMNS = [
    "suite", "model", "revision", "step", "tensor", "group", "group_size", "identical_to", "sha256",
]
# tensor -> (its hash column, the known case it reveals)
HASHED_TENSORS = {
    "lm_head": ("head_sha256", "EleutherAI/pythia#205"),
    "input_embedding": ("embedding_sha256", "EleutherAI/pythia#206"),
}


def identical_weights_table(entropy: pd.DataFrame) -> pd.DataFrame:
    """One row per (revision, tensor) whose LM head or input embedding is bit-identical to
    another revision's of the same model.

    group: the earliest revision of the group; identical_to: the other members (;-joined).
    Logs a warning per group.
    """
    rows = []
    for model, per_model in entropy.groupby("model", sort=False):
        per_model = per_model.sort_values("step", kind="stable").set_index("revision", drop=False)
        for tensor, (column, case) in HASHED_TENSORS.items():
            known = per_model[per_model[column] != ""]  # files written before the hash existed
            for group in identical_heads(dict(zip(known["revision"], known[column]))):
                log.warning(
                    "%s: revisions %s serve a bit-identical %s (see %s); "
                    "they are flagged identical_weights and drawn hollow/dashed",
                    model, ", ".join(group), tensor, case,
                )
                for revision in group:
                    row = per_model.loc[revision]
                    rows.append(
                        {
                            "suite": row["suite"], "model": model, "revision": revision,
                            "step": row["step"], "tensor": tensor, "group": group[0],
                            "group_size": len(group),
                            "identical_to": ";".join(r for r in group if r != revision),
                            "sha256": row[column],
                        }
                    )
    return pd.DataFrame.from_records(rows, columns=IDENTICAL_COLUMNS)


def attention_table(
    paths: list, identical: pd.DataFrame | None = None, model_order: list[str] | None = None
) -> pd.DataFrame:
    """One row per checkpoint x layer x head x kind with the low-rank metrics.

    relative_depth = (layer + 1) / n_layers (the block's output depth, as in Fig. 2);
    identical_weights flags the revisions listed in the identical-heads table; model_order:
    row order of the models (the plan's), by name when None.
    """
    if not paths:
        raise ValueError("no attention files to tabulate")
    frames = []
    for path in paths:
        arrays, attrs = read_attention(path)
        n_layers, n_heads = attrs["n_layers"], attrs["n_heads"]
        layer, head = np.meshgrid(np.arange(n_layers), np.arange(n_heads), indexing="ij")
        for kind in ATTENTION_KINDS:
            frames.append(
                pd.DataFrame(
                    {
                        **{k: attrs[k] for k in RECORD_KEYS},
                        "layer": layer.ravel(),
                        "relative_depth": (layer.ravel() + 1) / n_layers,
                        "head": head.ravel(),
                        "kind": kind,
                        "d_head": attrs["d_head"],
                        **{name: arrays[f"{kind}/{name}"].ravel() for name in ATTENTION_SCALARS},
                    }
                )
            )
    table = pd.concat(frames, ignore_index=True)
    flagged = set() if identical is None else set(zip(identical["model"], identical["revision"]))
    table["identical_weights"] = [(m, r) in flagged for m, r in zip(table["model"], table["revision"])]
    return in_model_order(table, model_order, ["step", "kind", "layer", "head"])


def recorded_source(path) -> tuple[str, str, str]:
    """(model, revision, lmsat source hash) recorded in a per-checkpoint output: a JSON
    record or an HDF5 file (attributes); the hash is "" for a file from before it."""
    if Path(path).suffix == ".json":
        record = read_json(path)  # unreadable: a named error
        return record["model"], record["revision"], record.get("lmsat_source", "")
    with h5py.File(path, "r") as f:
        versions = json.loads(f.attrs.get("versions", "{}"))
        return str(f.attrs["model"]), str(f.attrs["revision"]), versions.get("lmsat_source", "")


def with_provenance(table: pd.DataFrame, config_sha256: str, inputs=()) -> pd.DataFrame:
    """`table` with the config hash, library versions and lmsat source hash that made it,
    as constant columns. With the per-checkpoint `inputs` it was built from, each row also
    gets `row_lmsat_source`: the source hash of the code that computed that checkpoint's
    result, so rows computed before a library edit stand out (and a warning says so)."""
    table = table.copy()
    table["config_sha256"] = config_sha256
    versions = library_versions()
    table["lmsat_source_sha256"] = versions.pop("lmsat_source")
    for name, version in versions.items():
        table[f"{name}_version"] = version
    if inputs:
        made_by = {(model, revision): source for model, revision, source in map(recorded_source, inputs)}
        table["row_lmsat_source"] = [made_by.get(key, "") for key in zip(table["model"], table["revision"])]
        stale = table.loc[table["row_lmsat_source"] != source_sha256(), ["model", "revision"]].drop_duplicates()
        if len(stale):
            log.warning(
                "%d checkpoints were computed by other lmsat code than this table's (column row_lmsat_source); "
                "rerun them with --forcerun if the library change matters: %s",
                len(stale), ", ".join(f"{m}@{r}" for m, r in stale.itertuples(index=False)),
            )
    return table


def write_csv(table: pd.DataFrame, path, config_sha256: str | None = None, inputs=()) -> None:
    """Write a table atomically (the file appears only once complete); with `config_sha256`,
    an aggregated table also records the config, library versions and source that made it
    (and with `inputs`, the source that made each row: with_provenance). Every CSV table of
    the workflow is written here."""
    if config_sha256 is not None:
        table = with_provenance(table, config_sha256, inputs)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        table.to_csv(tmp, index=False)
