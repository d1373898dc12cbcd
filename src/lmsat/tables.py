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


# ---- best and final checkpoints, Table 1

BEST_FINAL_COLUMNS = ["suite", "model", "kind", "revision", "step", "tokens", "loss", "loss_sem"]


def select_checkpoints(loss: pd.DataFrame) -> pd.DataFrame:
    """best_final.csv: the rows flagged is_best / is_final in a loss table (loss_table), one
    per model x kind, models in the loss table's order (by size)."""
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
    return table[BEST_FINAL_COLUMNS]


def table1(records: list[dict], tasks: list[str]) -> pd.DataFrame:
    """Table 1 (lmsat.evaluation.make_table1) of evaluate_checkpoint records, with each row's
    revision in the index; rendered by lmsat.evaluation.write_table, written as CSV by
    write_csv(table.reset_index(), ...)."""
    from lmsat.evaluation import make_table1

    revisions = {}
    for record in records:
        key = (record["model"], record["checkpoint"])
        if revisions.setdefault(key, record["revision"]) != record["revision"]:
            raise ValueError(
                f"records of {key} were evaluated at revisions {revisions[key]} and {record['revision']}; "
                "delete results/evaluation and rerun"
            )
    table = make_table1(records, tasks=tasks)
    decimals = table.attrs["decimals"]
    table = table.set_index(pd.Index([revisions[key] for key in table.index], name="revision"), append=True)
    table.attrs["decimals"] = decimals
    return table


# ---- softmax bottleneck

HEAD_COLUMNS = [
    "model", "revision", "hidden_size", "vocab_size", "kind", "rank", "peak_lr", "eval_loss", "eval_acc",
    "n_eval_tokens", "loss_gap", "reference_loss_sem", "w_error", "risen", "rise_point",
]
SEARCH_COLUMNS = ["model", "rank", "peak_lr", "eval_loss", "eval_acc", "train_loss", "chosen"]


def own_head_werror(singular_values, ranks) -> dict[int, float]:
    """W-error(r) = ||sigma_{r+1:}||_2 / ||W||_F of the model's own head at each r."""
    from lmsat.werror import w_error_curve

    _, werror = w_error_curve(singular_values)
    return {r: float(werror[min(r, len(werror) - 1)]) for r in ranks}


def heads_tables(runs: list[dict], manifests: dict, spectra: dict, tolerance: float,
                 model_order: list[str] | None = None):
    """(heads, lr_search) tables from the runs of every (model, r, lr).

    runs: dicts with model, rank, peak_lr, eval_loss, eval_acc, train_loss; manifests: model
    -> cache manifest (revision, hidden_size, vocab_size, reference); spectra: model -> the
    singular values of its own head. Per (model, r) the run with the lowest eval loss is
    chosen (the paper's per-r learning-rate search). A rank has `risen` when its loss
    exceeds the reference head's by more than `tolerance` x that loss; the `rise_point` is
    the largest such rank, i.e. the smallest W-error at which the loss has risen. Rows
    follow `model_order` (the plan's, by size: in_model_order), by name when None.
    """
    import math

    search = pd.DataFrame(runs, columns=[c for c in SEARCH_COLUMNS if c != "chosen"])
    if search.empty:
        raise ValueError("heads_tables: no runs; the bottleneck rules produced nothing to tabulate")
    best = search.loc[search.groupby(["model", "rank"])["eval_loss"].idxmin()]
    search["chosen"] = search.index.isin(best.index)
    rows = []
    for model, manifest in manifests.items():
        reference = manifest["reference"]
        chosen = best[best["model"] == model].sort_values("rank")
        if chosen.empty:
            raise ValueError(f"heads_tables: no runs of model {model}")
        werror = own_head_werror(spectra[model], list(chosen["rank"]) + [manifest["hidden_size"]])
        common = dict(
            model=model, revision=manifest["revision"], hidden_size=manifest["hidden_size"],
            vocab_size=manifest["vocab_size"], n_eval_tokens=reference["n_tokens"],
            reference_loss_sem=reference["loss_sem"],
        )
        for run in chosen.itertuples():
            gap = run.eval_loss - reference["eval_loss"]
            rows.append(dict(
                common, kind="low_rank", rank=int(run.rank), peak_lr=run.peak_lr, eval_loss=run.eval_loss,
                eval_acc=run.eval_acc, loss_gap=gap, w_error=werror[run.rank],
                risen=bool(gap > tolerance * reference["eval_loss"]),
            ))
        rows.append(dict(
            common, kind="full_head", rank=manifest["hidden_size"], peak_lr=math.nan,
            eval_loss=reference["eval_loss"], eval_acc=reference["eval_acc"], loss_gap=0.0,
            w_error=werror[manifest["hidden_size"]], risen=False,
        ))
    heads = pd.DataFrame(rows)
    heads["rise_point"] = False
    for model, group in heads[heads["kind"] == "low_rank"].groupby("model", sort=False):
        risen = group[group["risen"]]
        if not risen.empty:
            heads.loc[risen["rank"].idxmax(), "rise_point"] = True
    heads = in_model_order(heads[HEAD_COLUMNS], model_order, [])  # stable: ranks, then the own head
    return heads, in_model_order(search[SEARCH_COLUMNS], model_order, ["rank", "peak_lr"])


def read_head_inputs(run_paths, manifest_paths, spectra_paths) -> tuple[list[dict], dict, dict]:
    """(runs, manifests by model, own-head singular values by model) for heads_tables, each
    file checked against what its path promises (lmsat.io.IdentityError naming it):
    runs/{model}/r{rank}/lr{lr}.json its model, rank and learning rate; cache/{model}/
    manifest.json its model; the spectra file its model and the manifest's revision (the
    W-error must be of the head the pairs were cached with)."""
    from lmsat.bottleneck import lr_label
    from lmsat.degeneration import read_spectrum
    from lmsat.io import check_identity

    runs = []
    for path in map(Path, run_paths):
        run = read_json(path)
        found = dict(model=run.get("model"), rank=run.get("rank"), peak_lr=lr_label(float(run.get("peak_lr", "nan"))))
        promised = dict(model=path.parent.parent.name, rank=path.parent.name[1:], peak_lr=path.stem[2:])
        check_identity(path, found, promised)
        runs.append(run)
    manifests = {}
    for path in map(Path, manifest_paths):
        manifest = read_json(path)
        check_identity(path, manifest, dict(model=path.parent.name))
        manifests[manifest["model"]] = manifest
    spectra = {}
    for path in spectra_paths:
        values, attrs = read_spectrum(path)  # checks model and revision against its path
        model = attrs["model"]
        if model in manifests:
            check_identity(path, attrs, dict(model=model, revision=manifests[model]["revision"]))
        spectra[model] = values
    return runs, manifests, spectra


def monotone_violations(heads, slack: float) -> list[tuple[str, int, int]]:
    """(model, r, r') pairs with r < r' whose chosen loss at r' exceeds the one at r by > slack."""
    bad = []
    for model, group in heads[heads["kind"] == "low_rank"].groupby("model"):
        group = group.sort_values("rank")
        losses, ranks = group["eval_loss"].to_numpy(), group["rank"].to_numpy()
        for i in range(len(ranks)):
            for j in range(i + 1, len(ranks)):
                if losses[j] > losses[i] + slack:
                    bad.append((model, int(ranks[i]), int(ranks[j])))
    return bad
