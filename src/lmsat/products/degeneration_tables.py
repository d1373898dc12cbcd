"""The degeneration tables: anisotropy by layer and along training (Figs. 2, 3), head spectra,
singular entropy and identical weights (Figs. 4, 5), low-rank attention, the weight
diagnostics and the representation similarity between checkpoints."""

from __future__ import annotations

import logging
import math

import numpy as np

from lmsat.core.integrity import check_values, corrupt, require_keys
from lmsat.core.lazy import lazy_module
from lmsat.degeneration.spectra import effective_rank, identical_heads, singular_entropy, stable_rank
from lmsat.degeneration.weight_files import ATTENTION_KINDS, ATTENTION_SCALARS, RECORD_KEYS, read_attention, read_spectrum
from lmsat.products.table_rows import flag_final, in_model_order, metric_records

pd = lazy_module("pandas")  # imported by the first job that builds a table, not by every metric job
log = logging.getLogger(__name__)


def anisotropy_from_records(files, needed: dict, model_order: list[str] | None, part: int) -> pd.DataFrame:
    files = list(files)
    records = metric_records(files, ("anisotropy_layers", "anisotropy_last"))
    for path, record in zip(files, records):  # the zero vectors left out: counts, one per layer
        zero = {key: record[key] for key in ("zero_rows_layers", "zero_rows_last") if key in record}
        where = f"{record['model']}@{record['revision']}"
        check_values(path, where, zero, {"zero_rows_layers": (0, record["layer_sample"]), "zero_rows_last": (0, math.inf)})
        if len(zero.get("zero_rows_layers", record["anisotropy_layers"])) != len(record["anisotropy_layers"]):
            raise corrupt(path, f"{where}: `zero_rows_layers` has {len(zero['zero_rows_layers'])} entries for "
                                f"{len(record['anisotropy_layers'])} layers")
    return anisotropy_tables(records, needed["loss"], model_order)[part]


def spectra_from_files(files, needed: dict, model_order: list[str] | None, part: int) -> pd.DataFrame:
    return spectra_tables(list(files), model_order, curves=part == 0)[part]


def attention_from_files(files, needed: dict, model_order: list[str] | None) -> pd.DataFrame:
    return attention_table(list(files), needed["identical_weights"], model_order)


def anisotropy_tables(
    records: list[dict], loss: pd.DataFrame, model_order: list[str] | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Tables of Fig. 2 (per layer) and Fig. 3 (last layer and loss along training).

    records: anisotropy metric records (RECORD_KEYS + anisotropy_layers, anisotropy_last,
    n_layers, layer_sample, n_tokens, zero_rows_layers, zero_rows_last); loss:
    results/tables/loss.csv (model, revision, loss); model_order: row order of the models (the
    plan's), by name when None. Each row's n_tokens counts the vectors measured, zero_rows the
    zero vectors left out (no direction; a record from before they were counted had none:
    that lmsat refused them).
    """
    if not records:
        raise ValueError("no anisotropy records to tabulate")
    records = [{"zero_rows_layers": [0] * len(r["anisotropy_layers"]), "zero_rows_last": 0, **r} for r in records]
    per_checkpoint = in_model_order(flag_final(pd.DataFrame.from_records(records)), model_order, ["step"])
    rows = []
    for record in per_checkpoint.to_dict("records"):
        n_layers = record["n_layers"]
        for layer, (value, zero) in enumerate(zip(record["anisotropy_layers"], record["zero_rows_layers"])):
            rows.append(
                {
                    **{k: record[k] for k in RECORD_KEYS},
                    "is_final": record["is_final"],
                    "layer": layer,
                    "n_layers": n_layers,
                    "relative_depth": layer / n_layers,
                    "anisotropy": value,
                    "n_tokens": record["layer_sample"] - zero,
                    "zero_rows": zero,
                }
            )
    layers = pd.DataFrame.from_records(rows)
    per_checkpoint = per_checkpoint.rename(columns={"zero_rows_last": "zero_rows"})
    training = per_checkpoint[[*RECORD_KEYS, "is_final", "anisotropy_last", "n_tokens", "zero_rows"]].merge(
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
    paths: list, model_order: list[str] | None = None, curves: bool = True
) -> tuple[pd.DataFrame | None, pd.DataFrame, pd.DataFrame]:
    """Tables of Fig. 4 (normalised spectra), Fig. 5 (singular entropy) and identical weights.

    Singular entropy KL(p || uniform) with p ~ sigma and with p ~ sigma^2 (both columns).
    model_order: row order of the models (the plan's), by name when None. curves=False skips
    the Fig. 4 table (one row per singular value: millions at the paper's scale) -> None.
    """
    if not paths:
        raise ValueError("no spectra files to tabulate")
    summary, values = [], {}
    for path in paths:
        s, attrs = read_spectrum(path)
        record = {k: attrs[k] for k in RECORD_KEYS}
        values[record["model"], record["revision"]] = s
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
    entropy = in_model_order(flag_final(pd.DataFrame.from_records(summary)), model_order, ["step"])
    identical = identical_weights_table(entropy)
    flagged = identical.groupby(["model", "revision"], sort=False)["identical_to"].agg(
        lambda members: ";".join(dict.fromkeys(";".join(members).split(";")))  # over tensors
    )
    keys = pd.MultiIndex.from_frame(entropy[["model", "revision"]])
    entropy["identical_weights"] = keys.isin(flagged.index)
    entropy["identical_to"] = flagged.reindex(keys).fillna("").to_numpy()
    return (_spectrum_curves(entropy, values) if curves else None), entropy, identical


def _spectrum_curves(entropy: pd.DataFrame, values: dict) -> pd.DataFrame:
    """Fig. 4's table: each checkpoint's singular values, in entropy's row order (models in
    the plan's order, then by step) and by index; built from arrays, not per-file frames."""
    spectra = [values[model, revision] for model, revision in zip(entropy["model"], entropy["revision"])]
    sizes = [s.size for s in spectra]
    columns = {k: np.repeat(entropy[k].to_numpy(), sizes) for k in RECORD_KEYS}
    return pd.DataFrame(
        {
            **columns,
            "index": np.concatenate([np.arange(1, n + 1) for n in sizes]),
            "singular_value": np.concatenate(spectra),
            "normalised": np.concatenate([s / s[0] for s in spectra]),
            "identical_weights": np.repeat(entropy["identical_weights"].to_numpy(), sizes),
        }
    )


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


# ---- the peers' per-layer measures: weight diagnostics (WeightWatcher, pico-analyze) and
# representation similarity across checkpoints (lmsat.degeneration.weight_diagnostics, lmsat.degeneration.similarity)

WEIGHT_KEYS = ["layer", "matrix", "rows", "cols"]
SIMILARITY_MEASURES = ("cka", "cka_debiased", "svcca", "pwcca")
# in [0, 1] up to rounding; debiased CKA may fall below 0 (an unbiased estimate of a value near 0)
SIMILARITY_BOUNDS = {"cka": (-1e-9, 1 + 1e-9), "svcca": (-1e-9, 1 + 1e-9), "pwcca": (-1e-9, 1 + 1e-9),
                     "cka_debiased": (-1.0, 1 + 1e-9)}


def weight_diagnostics_from_files(files, needed: dict, model_order: list[str] | None, part: str) -> pd.DataFrame:
    """One row per checkpoint x matrix (every linear layer of every block in forward order,
    then the LM head, `matrix` "head", layer n_layers): the WeightWatcher columns (part
    "alpha": alpha with its fit, stable and MP soft rank) or the pico-analyze ones (part
    "sparsity": PER, Gini, Hoyer, condition number, norms), each with `status` ("ok", or
    why some values are NaN: lmsat.degeneration.weight_diagnostics)."""
    from lmsat.degeneration.weight_diagnostics import ALPHA_COLUMNS, SPARSITY_COLUMNS, read_diagnostics

    columns = {"alpha": ALPHA_COLUMNS, "sparsity": SPARSITY_COLUMNS}[part]
    frames = []
    for path in files:
        arrays, attrs = read_diagnostics(path)
        frame = pd.DataFrame({"layer": arrays["layer"], "matrix": arrays["name"], "rows": arrays["rows"],
                              "cols": arrays["cols"], **{c: arrays[c] for c in columns}, "status": arrays["status"]})
        for key in reversed(RECORD_KEYS):
            frame.insert(0, key, attrs[key])
        frames.append(frame)
    if not frames:
        raise ValueError("no weight diagnostics files to tabulate")
    table = flag_final(pd.concat(frames, ignore_index=True))
    if "alpha_n" in table:
        table["alpha_n"] = table["alpha_n"].round().astype("Int64")  # a count; empty where alpha is not fitted
    table["order"] = table.groupby(["model", "revision"]).cumcount()  # forward order within a checkpoint
    table = in_model_order(table, model_order, ["step", "order"])
    return table[[*RECORD_KEYS, "is_final", *WEIGHT_KEYS, *columns, "status"]]


def similarity_from_records(files, needed: dict, model_order: list[str] | None) -> pd.DataFrame:
    """One row per checkpoint x reference (the model's final checkpoint, and the previous one
    where there is one) x hidden state (layer 0 = embeddings, n_layers = the last layer, post
    final norm): linear CKA, debiased CKA, SVCCA and PWCCA (lmsat.degeneration.similarity) over the same
    n_tokens sampled tokens."""
    records = metric_records(files, ("n_layers", "n_tokens", "final_step", "previous_step"))
    if not records:
        raise ValueError("no representation similarity records to tabulate")
    rows = []
    for path, record in zip(files, records):
        where = f"{record['model']}@{record['revision']}"
        require_keys(path, where, record, ("final_revision", "previous_revision"))
        for reference in ("final", "previous"):
            if not record[f"{reference}_revision"]:
                continue  # the first checkpoint has no previous one
            series = {m: record.get(f"{m}_{reference}") for m in SIMILARITY_MEASURES}
            lengths = {m: len(v) if isinstance(v, list) else None for m, v in series.items()}
            if set(lengths.values()) != {record["n_layers"] + 1}:
                raise corrupt(path, f"{where}: {reference} similarities of lengths {lengths}, not n_layers + 1 = "
                                    f"{record['n_layers'] + 1}")
            check_values(path, where, {m: np.asarray(v, dtype=np.float64) for m, v in series.items()}, SIMILARITY_BOUNDS)
            for layer in range(record["n_layers"] + 1):
                rows.append({**{k: record[k] for k in RECORD_KEYS}, "reference": reference,
                             "reference_revision": record[f"{reference}_revision"],
                             "reference_step": record[f"{reference}_step"], "layer": layer, "n_layers": record["n_layers"],
                             "relative_depth": layer / record["n_layers"],
                             **{m: float(series[m][layer]) for m in SIMILARITY_MEASURES}, "n_tokens": record["n_tokens"]})
    table = flag_final(pd.DataFrame.from_records(rows))
    table = in_model_order(table, model_order, ["step", "reference", "layer"])
    return table[[*RECORD_KEYS, "is_final", "reference", "reference_revision", "reference_step", "layer", "n_layers",
                  "relative_depth", *SIMILARITY_MEASURES, "n_tokens"]]
