"""Tidy tables aggregated over checkpoints (one row per model x revision)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import h5py
import pandas as pd

from lmsat.io import atomic_path, library_versions, read_json, source_sha256

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
