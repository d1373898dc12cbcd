"""Every tidy table of the workflow, and its one CSV writer (write_csv, with provenance).

Per-checkpoint metric tables (their builders take (files, needed tables, model order), as
lmsat.metrics.Table registers them): loss (Fig. 1a), anisotropy by layer and along
training (Figs. 2, 3), head spectra, singular entropy and identical weights (Figs. 4, 5),
low-rank attention, and any metric's scalars along training (scalars_from_records).
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import h5py
import numpy as np

from lmsat.degeneration import ATTENTION_KINDS, ATTENTION_SCALARS, RECORD_KEYS, read_attention, read_spectrum
from lmsat.evaluation import CHECKPOINT_ORDER, TABLE1_TASKS, metric_value
from lmsat.evaluation import METRICS as TABLE1_METRICS
from lmsat.integrity import BOUNDS, check_values, corrupt, csv_with_checksum, require_keys, verify_csv, verify_hdf5
from lmsat.io import atomic_path, check_identity, library_versions, promised_by_path, read_json, read_record, source_sha256
from lmsat.lazy import lazy_module
from lmsat.spectra import effective_rank, identical_heads, singular_entropy, stable_rank
from lmsat.verdict import DEFAULT_ALPHA, DEFAULT_MIN_CHECKPOINTS, VERDICT_COLUMNS, verdict_from_paired

pd = lazy_module("pandas")  # imported by the first job that builds a table, not by every metric job
log = logging.getLogger(__name__)

LOSS_COLUMNS = ["suite", "model", "revision", "step", "tokens", "loss", "loss_sem", "is_best", "is_final", "implausible_loss"]
# A loss is implausible for its step when it is back near ln V (a uniform guess over the head's
# V rows: an untrained or zeroed model's loss) after the run had learned: an earlier checkpoint
# got LEARNED nats or more below ln V (a perplexity e times below uniform), and this one lost
# FORGOTTEN of that or more. A fresh initialisation scores ln V within a few hundredths.
LEARNED, FORGOTTEN = 1.0, 0.9


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


def loss_table(records: list[dict], model_order: list[str] | None = None,
               vocab_sizes: dict[str, int] | None = None) -> pd.DataFrame:
    """Loss per checkpoint with the loss-minimising (best) and last (final) revision flagged,
    and each implausible loss (implausible_losses; kept: a divergence is a finding).

    records: dicts with suite, model, revision, step, tokens, loss, loss_sem (and the loss
    metric's uniform_loss = ln V); model_order: row order of the models (the plan's, smallest
    first), by name when None; vocab_sizes: the head rows V of each model where the records
    do not give ln V (records of an older lmsat; 0 = unknown).
    """
    table = pd.DataFrame.from_records(records)
    if table.empty:
        raise ValueError("no loss records to tabulate")
    table = in_model_order(table, model_order, ["step"])
    best = table.groupby("model")["loss"].idxmin()
    final = table.groupby("model")["step"].idxmax()
    table["is_best"] = table.index.isin(best.values)
    table["is_final"] = table.index.isin(final.values)
    table["implausible_loss"] = implausible_losses(table, vocab_sizes)
    return table[LOSS_COLUMNS]


def uniform_losses(table: pd.DataFrame, vocab_sizes: dict[str, int] | None = None) -> pd.Series:
    """ln V of each row: the loss of a uniform guess over the model's V head rows, from its
    record (`uniform_loss`), else from `vocab_sizes`; NaN where neither knows V."""
    known = {model: math.log(v) for model, v in (vocab_sizes or {}).items() if v and v > 0}
    fallback = table["model"].map(known).astype(float)
    if "uniform_loss" not in table:
        return fallback
    return pd.to_numeric(table["uniform_loss"], errors="coerce").astype(float).fillna(fallback)


def implausible_losses(table: pd.DataFrame, vocab_sizes: dict[str, int] | None = None) -> pd.Series:
    """Per row of a loss table (sorted by model, then step): whether its loss is back near ln V
    (uniform_losses) after the run had learned: an earlier checkpoint of its model got
    LEARNED nats or more below ln V, and this one lost FORGOTTEN (90%) or more of that. A
    trained model does not forget nearly everything: that is the loss of a zeroed or
    untrained model (a broken checkpoint) or of a run that diverged. False where V is
    unknown, and at a model's first checkpoints (step 0 is at ln V by design)."""
    uniform = uniform_losses(table, vocab_sizes)
    learned = uniform - table.groupby("model", sort=False)["loss"].transform(lambda loss: loss.shift().cummin())
    return ((learned >= LEARNED) & (table["loss"] >= uniform - (1 - FORGOTTEN) * learned)).astype(bool)


def implausible_notes(records: list[dict], vocab_sizes: dict[str, int] | None = None) -> dict[str, list[str]]:
    """model -> a sentence per checkpoint of `records` (loss records) whose loss is
    implausible for its step (implausible_losses), with its loss, ln V, the earlier best and
    the share of what was learned that is lost."""
    table = in_model_order(pd.DataFrame.from_records(records), None, ["step"])
    flags, uniform = implausible_losses(table, vocab_sizes), uniform_losses(table, vocab_sizes)
    notes: dict[str, list[str]] = {}
    for i in np.flatnonzero(flags.to_numpy()):
        row = table.iloc[i]
        earlier = table[(table["model"] == row["model"]) & (table["step"] < row["step"])]
        best = earlier.loc[earlier["loss"].idxmin()]
        lost = (row["loss"] - best["loss"]) / (uniform.iloc[i] - best["loss"])
        notes.setdefault(row["model"], []).append(
            f"{row['revision']} (step {int(row['step'])}): loss {row['loss']:.3f} is back near ln V = {uniform.iloc[i]:.3f} "
            f"(a uniform guess over the head's rows, an untrained model's loss) after {best['revision']} (step "
            f"{int(best['step'])}) reached {best['loss']:.3f}: {100 * lost:.0f}% of what the run had learned is lost. "
            "A broken checkpoint (zeroed, or untrained weights saved) or a divergence; it is kept (implausible_loss in "
            "the loss table): check it before reading the verdict")
    return notes



# ---------------------------------------------------------------- per-checkpoint metric tables


def metric_records(files, values: tuple[str, ...] = ()) -> list[dict]:
    """The JSON records of rule compute_checkpoint_metric, each checked against its path and
    its checksum; each of `values` must be there, a number, finite and within the bounds
    the truth sets (lmsat.integrity.BOUNDS): an IntegrityError naming file, checkpoint and key."""
    records = []
    for path in files:
        record = read_record(path, "metric", "model", "revision")
        where = f"{record.get('model')}@{record.get('revision')}"
        require_keys(path, where, record, values)
        check_values(path, where, {key: record[key] for key in values})
        records.append(record)
    return records


def loss_from_records(files, needed: dict, model_order: list[str] | None,
                      vocab_sizes: dict[str, int] | None = None) -> pd.DataFrame:
    return loss_table(metric_records(files, ("loss", "loss_sem")), model_order, vocab_sizes)


# The saturation_verdicts table: a verdict per model and, beside it, what its reader must know
SATURATION_VERDICT_COLUMNS = [*VERDICT_COLUMNS, "notes"]


def verdicts_from_records(files, needed: dict, model_order: list[str] | None, alpha: float = DEFAULT_ALPHA,
                          min_checkpoints: int = DEFAULT_MIN_CHECKPOINTS, vocab_sizes: dict[str, int] | None = None,
                          gone=()) -> pd.DataFrame:
    """One row per model (SATURATION_VERDICT_COLUMNS): its saturation verdict (lmsat.verdict),
    a paired max-t test of its final checkpoint against every earlier one, from the
    per-sequence mean losses of its loss records (`sequence_loss`: the same eval sequences at
    every checkpoint). Reads the loss metric's JSON records only (each reduced from a cache's
    `loss` dataset), never a hidden-state array. A model with fewer than `min_checkpoints`
    checkpoints gets `too few checkpoints`. `notes`: each checkpoint whose loss is
    implausible for its step (implausible_notes), and the checkpoints among `gone`
    ("model@revision": measured, no longer on disk; their records are kept), the best above all."""
    records = metric_records(files, ("loss", "sequence_loss"))
    if not records:
        raise ValueError("no loss records to test for saturation")
    by_model: dict[str, list[tuple[str, dict]]] = {}
    for path, record in zip(files, records):
        by_model.setdefault(record["model"], []).append((str(path), record))
    rows = []
    for model, items in by_model.items():
        items.sort(key=lambda item: item[1]["step"])
        steps = [int(record["step"]) for _, record in items]
        if len(set(steps)) < len(steps):
            twice = sorted({s for s in steps if steps.count(s) > 1})
            raise ValueError(f"{model}: two loss records of step(s) {twice} ({', '.join(p for p, _ in items)}); "
                             "fix: one revision per step in the plan")
        counts = {len(record["sequence_loss"]) for _, record in items}
        if len(counts) > 1:
            raise corrupt(items[-1][0], f"{model}'s checkpoints were scored on {sorted(counts)} sequences, "
                          "not the same eval sample (a paired test needs the same sequences at every checkpoint)")
        per_sequence = np.array([record["sequence_loss"] for _, record in items], dtype=np.float64)  # (K, n_seq)
        verdict = verdict_from_paired(steps, per_sequence, alpha=alpha, min_checkpoints=min_checkpoints)
        notes = implausible_notes([record for _, record in items], vocab_sizes).get(model, [])
        vanished = [record["revision"] for _, record in items if f"{model}@{record['revision']}" in set(gone)]
        if vanished:
            best = next(record["revision"] for _, record in items if int(record["step"]) == verdict.best_step)
            lead = f"its best checkpoint {best} (step {verdict.best_step}) is no longer on disk; " if best in vanished else ""
            notes.append(f"{lead}{len(vanished)} of its {len(items)} checkpoints are no longer on disk "
                         f"({', '.join(vanished)}): measured before they went, their records "
                         "are kept (on_disk false in the tables)")
        rows.append({"model": model, **verdict.as_row(), "notes": "; ".join(notes)})
    return in_model_order(pd.DataFrame(rows), model_order, [])[SATURATION_VERDICT_COLUMNS]


def anisotropy_from_records(files, needed: dict, model_order: list[str] | None, part: int) -> pd.DataFrame:
    records = metric_records(files, ("anisotropy_layers", "anisotropy_last"))
    return anisotropy_tables(records, needed["loss"], model_order)[part]


def spectra_from_files(files, needed: dict, model_order: list[str] | None, part: int) -> pd.DataFrame:
    return spectra_tables(list(files), model_order, curves=part == 0)[part]


def attention_from_files(files, needed: dict, model_order: list[str] | None) -> pd.DataFrame:
    return attention_table(list(files), needed["identical_weights"], model_order)


def scalars_from_records(files, needed: dict, model_order: list[str] | None, columns: tuple[str, ...]) -> pd.DataFrame:
    """One row per checkpoint: RECORD_KEYS, is_final and the metric's scalar `columns`,
    in the plan's model order and by step (any metric's values along training)."""
    records = metric_records(files, tuple(c for c in columns if c != "n_tokens"))
    if not records:
        raise ValueError(f"no records to tabulate (columns {list(columns)})")
    table = _flag_final(pd.DataFrame.from_records(records))
    return in_model_order(table, model_order, ["step"])[[*RECORD_KEYS, "is_final", *columns]]


def mark_on_disk(table: pd.DataFrame, gone) -> pd.DataFrame:
    """`table` with column on_disk (rows per checkpoint: those with a revision column): False
    for the checkpoints of `gone` ("model@revision"), measured before their directories went
    (a Trainer's save_total_limit rotates them away) and kept from their records."""
    if "revision" not in table or "model" not in table:
        return table
    gone = set(gone)
    return table.assign(on_disk=[f"{m}@{r}" not in gone for m, r in zip(table["model"], table["revision"])])


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
    entropy = in_model_order(_flag_final(pd.DataFrame.from_records(summary)), model_order, ["step"])
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
        if "revision" in table:
            table["row_lmsat_source"] = [made_by.get(key, "") for key in zip(table["model"], table["revision"])]
        else:  # a row per model (saturation_verdicts): the sources of all its checkpoints, ";"-joined if several
            of_model: dict[str, set[str]] = {}
            for (model, _), source in made_by.items():
                of_model.setdefault(model, set()).add(source)
            table["row_lmsat_source"] = [";".join(sorted(of_model.get(model, {""}))) for model in table["model"]]
        keys = [column for column in ("model", "revision") if column in table]
        stale = table.loc[table["row_lmsat_source"] != source_sha256(), keys].drop_duplicates()
        if len(stale):
            log.warning(
                "%d checkpoints were computed by other lmsat code than this table's (column row_lmsat_source); "
                "rerun them with --forcerun if the library change matters: %s",
                len(stale), ", ".join("@".join(map(str, key)) for key in stale.itertuples(index=False)),
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
        tmp.write_text(csv_with_checksum(table.to_csv(index=False, lineterminator="\n")))


def read_table(path) -> pd.DataFrame:
    """A table written by write_csv, after checking it against its checksum column (which
    is dropped): lmsat.integrity.IntegrityError naming the file otherwise."""
    return pd.read_csv(path).drop(columns=verify_csv(path))


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
    """Table 1 (make_table1) of evaluate_checkpoint records, with each row's
    revision in the index; rendered by write_table, written as CSV by
    write_csv(table.reset_index(), ...)."""
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


def make_table1(records, tasks=TABLE1_TASKS) -> pd.DataFrame:
    """Table 1: one row per (model, checkpoint kind), one column per metric of `tasks`.

    records: iterable of {"model": str, "checkpoint": "best" | "final" | ..., "results":
    run_lmeval dict}; records of the same model and checkpoint are merged (one JSON per
    task is fine). Tasks missing from a record (e.g. a skipped storycloze_2016) are nan.
    Headers carry the direction, e.g. "Lambada (ppl.) ↓"; accuracies are in %.
    """
    unknown = [task for task in tasks if task not in TABLE1_METRICS]
    if unknown:
        raise ValueError(f"tasks: no metric registered for {unknown}; add them to lmsat.evaluation.METRICS")
    specs = [spec for task in tasks for spec in TABLE1_METRICS[task]]
    rows: dict[tuple[str, str], dict[str, float]] = {}
    for record in records:
        missing = [key for key in ("model", "checkpoint", "results") if key not in record]
        if missing:
            raise ValueError(f"records: a record lacks {missing}; expected keys model, checkpoint, results")
        row = rows.setdefault((record["model"], record["checkpoint"]), {spec.header: math.nan for spec in specs})
        for spec in specs:
            value = metric_value(record["results"], spec)
            if not math.isnan(value):
                row[spec.header] = value
    models = list(dict.fromkeys(model for model, _ in rows))
    rank = {kind: i for i, kind in enumerate(CHECKPOINT_ORDER)}
    keys = sorted(rows, key=lambda key: (models.index(key[0]), rank.get(key[1], len(rank)), key[1]))
    index = pd.MultiIndex.from_tuples(keys, names=["model", "checkpoint"])
    table = pd.DataFrame([rows[key] for key in keys], index=index, columns=[spec.header for spec in specs])
    table.attrs["decimals"] = {spec.header: spec.decimals for spec in specs}
    return table


def _formatted(table: pd.DataFrame) -> list[list[str]]:
    decimals = table.attrs.get("decimals", {})
    cells = []
    for key, values in zip(table.index, table.itertuples(index=False)):
        key = key if isinstance(key, tuple) else (key,)
        numbers = [
            "–" if math.isnan(value) else f"{value:.{decimals.get(column, 2)}f}"
            for column, value in zip(table.columns, values)
        ]
        cells.append([str(part) for part in key] + numbers)
    return cells


def table_to_markdown(table: pd.DataFrame) -> str:
    """GitHub Markdown; missing values shown as –."""
    header = [str(name) for name in table.index.names] + [str(column) for column in table.columns]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] * len(table.index.names) + ["---:"] * len(table.columns)) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in _formatted(table)]
    return "\n".join(lines) + "\n"


def _latex_escape(text: str) -> str:
    for char, replacement in (("\\", r"\textbackslash{}"), ("&", r"\&"), ("%", r"\%"), ("_", r"\_"), ("#", r"\#")):
        text = text.replace(char, replacement)
    return text.replace("↑", r"$\uparrow$").replace("↓", r"$\downarrow$").replace("–", "--")


def table_to_latex(table: pd.DataFrame) -> str:
    """A booktabs tabular (needs \\usepackage{booktabs}); arrows as $\\uparrow$/$\\downarrow$."""
    n_keys = len(table.index.names)
    header = [str(name).capitalize() for name in table.index.names] + [str(column) for column in table.columns]
    lines = [
        r"\begin{tabular}{" + "l" * n_keys + "r" * len(table.columns) + "}",
        r"\toprule",
        " & ".join(_latex_escape(cell) for cell in header) + r" \\",
        r"\midrule",
    ]
    lines += [" & ".join(_latex_escape(cell) for cell in row) + r" \\" for row in _formatted(table)]
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines) + "\n"


def write_table(table: pd.DataFrame, path) -> None:
    """Render `table` as Markdown or LaTeX, chosen by the suffix of path. A CSV (full
    precision) is lmsat.tables.write_csv(table.reset_index(), path), the one CSV writer."""
    path = Path(path)
    writers = {
        ".md": lambda: path.write_text(table_to_markdown(table), encoding="utf-8"),
        ".tex": lambda: path.write_text(table_to_latex(table), encoding="utf-8"),
    }
    if path.suffix not in writers:
        raise ValueError(
            f"path {path}: unknown table format {path.suffix!r}; use .md or .tex "
            "(a .csv: lmsat.tables.write_csv(table.reset_index(), path))"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    writers[path.suffix]()


# ---- Fig. 1b: the scaling-law fit and the shortfall (rule fit_scaling_law; the fit: lmsat.scaling)

STATISTICS = [  # of a fit: standard errors, 95% t-intervals, bootstrap percentile intervals
    "A_se", "alpha_se", "A_ci_low", "A_ci_high", "alpha_ci_low", "alpha_ci_high",
    "bootstrap_A_ci_low", "bootstrap_A_ci_high", "bootstrap_alpha_ci_low", "bootstrap_alpha_ci_high",
]
FIT_COLUMNS = [
    "source", "A", "alpha", *STATISTICS, "n_bootstrap", "B", "beta", "E", "params", "min_params", "fit_on",
    "n_points", "n_sizes", "fitted_models", "mean_shortfall_best_pct", "mean_shortfall_final_pct",
]
FIT_KINDS = {"final": ("final",), "best": ("best",), "best_and_final": ("best", "final")}


def model_sizes(configured: dict[str, int], counts: list[dict], kind: str) -> dict[str, float]:
    """N of every model: the configured n_params, else the `kind` count of its JSON."""
    counted = {record["model"]: record[kind] for record in counts}
    sizes = {}
    for model, n_params in configured.items():
        if n_params:
            sizes[model] = float(n_params)
        elif model in counted:
            sizes[model] = float(counted[model])
        else:
            raise ValueError(f"model {model}: no parameter count (results/params/{model}.json) and n_params is 0")
    return sizes


def scaled_models(configured: dict[str, int], selection: pd.DataFrame, models: list[str]):
    """(n_params of, best_final rows of) the models of Fig. 1b: `models`, or all when empty."""
    if not models:
        return configured, selection
    return {m: configured[m] for m in models}, selection[selection["model"].isin(models)].reset_index(drop=True)


def scaling_tables(selection: pd.DataFrame, sizes: dict[str, float], settings: dict, seed: int = 0):
    """(fit row, shortfall table) from best_final rows, model sizes and config['scaling']."""
    from lmsat.scaling import fit_scaling_law, predict, shortfall  # here: scipy is not needed at DAG time

    points = selection.assign(n_params=selection["model"].map(sizes))
    unknown = sorted(points.loc[points["n_params"].isna(), "model"].unique())
    if unknown:
        raise ValueError(f"best_final.csv: models {unknown} are not in the plan; rebuild it")
    constants = dict(B=settings["B"], beta=settings["beta"], E=settings["E"])
    min_params = settings["min_params"]
    row = dict(params=settings["params"], min_params=min_params, fit_on=settings["fit_on"], **constants)
    row.update({column: np.nan for column in STATISTICS})  # stay nan for a published law
    if settings["A"] is not None:  # a published law: nothing to fit
        A, alpha = settings["A"], settings["alpha"]
        fitted = np.zeros(len(points), dtype=bool)
        row.update(source="fixed", A=A, alpha=alpha, n_bootstrap=0, n_points=0, n_sizes=0, fitted_models="")
    else:
        on = points[points["kind"].isin(FIT_KINDS[settings["fit_on"]])]
        on = on.drop_duplicates(["model", "revision"])  # best == final: one point
        fit = fit_scaling_law(on, min_params=min_params, bootstrap=settings["bootstrap"], seed=seed, **constants)
        A, alpha = fit.A, fit.alpha
        fitted_index = on.index[on["n_params"] >= min_params]
        fitted = points.index.isin(fitted_index)
        row.update(
            source="fit",
            A=A,
            alpha=alpha,
            A_se=fit.A_se,
            alpha_se=fit.alpha_se,
            A_ci_low=fit.A_ci[0],
            A_ci_high=fit.A_ci[1],
            alpha_ci_low=fit.alpha_ci[0],
            alpha_ci_high=fit.alpha_ci[1],
            bootstrap_A_ci_low=(fit.bootstrap_A_ci or (np.nan, np.nan))[0],
            bootstrap_A_ci_high=(fit.bootstrap_A_ci or (np.nan, np.nan))[1],
            bootstrap_alpha_ci_low=(fit.bootstrap_alpha_ci or (np.nan, np.nan))[0],
            bootstrap_alpha_ci_high=(fit.bootstrap_alpha_ci or (np.nan, np.nan))[1],
            n_bootstrap=fit.n_bootstrap,
            n_points=fit.n_points,
            n_sizes=fit.n_sizes,
            fitted_models=";".join(sorted(set(on.loc[fitted_index, "model"]))),
        )
    predicted = predict(points["n_params"], points["tokens"], A=A, alpha=alpha, **constants)
    table = pd.DataFrame(
        dict(
            suite=points["suite"],
            model=points["model"],
            n_params=points["n_params"],
            kind=points["kind"],
            revision=points["revision"],
            step=points["step"],
            tokens=points["tokens"],
            measured=points["loss"],
            predicted=predicted,
            shortfall_pct=shortfall(points["loss"], predicted),
            fitted=fitted,
        )
    ).sort_values(["n_params", "kind"], kind="stable")
    below = table[table["n_params"] < min_params]
    for kind in ("best", "final"):
        row[f"mean_shortfall_{kind}_pct"] = below.loc[below["kind"] == kind, "shortfall_pct"].mean()
    return pd.DataFrame([row])[FIT_COLUMNS], table.reset_index(drop=True)


# ---- Fig. 7 and the ground truth: W-error curves of n-gram matrices


def ngram_werror_table(paths) -> pd.DataFrame:
    """W-error(d) of every corpus x tokenizer n-gram spectrum file (rule count_corpus_ngrams),
    each checked against its path; a file with the true matrix's spectrum adds its curve."""
    from lmsat.ngram_werror import TABLE_COLUMNS, curve_rows

    tables = []
    for path in paths:
        with h5py.File(path, "r") as f:
            attrs = {k: f.attrs[k] for k in ("corpus", "tokenizer", "order", "n_tokens", "n_contexts", "vocab_size")}
            attrs = {k: (v.item() if hasattr(v, "item") else v) for k, v in attrs.items()}
            check_identity(path, attrs, promised_by_path(path, "corpus", "tokenizer"))
            verify_hdf5(f, path)
            spectra = {name: f[name][...] for name in ("singular_values", "truth_singular_values") if name in f}
            check_values(path, f"{attrs['corpus']} x {attrs['tokenizer']}", spectra,
                         bounds={name: BOUNDS["singular_values"] for name in spectra})
            tables.append(curve_rows(f["singular_values"][...], **attrs, kind="empirical"))
            if "truth_singular_values" in f:
                truth = dict(attrs, n_tokens=0, n_contexts=float(f.attrs["truth_n_contexts"]))
                tables.append(curve_rows(f["truth_singular_values"][...], **truth, kind="truth"))
    return pd.concat(tables, ignore_index=True)[TABLE_COLUMNS]


def ngram_ground_truth_table(spectra: dict, order: int, vocab_size: int, n_buckets: int) -> pd.DataFrame:
    """W-error curves of the synthetic language's true n-gram matrix, of samples of it
    (lmsat.ngram_werror.ground_truth_spectra) and of its bucket matrix; logs each sample's
    largest gap to the truth."""
    from lmsat.ngram_werror import TABLE_COLUMNS, curve_rows

    common = dict(corpus="synthetic", tokenizer="language", order=order, vocab_size=vocab_size)
    truth = curve_rows(spectra["truth"]["singular_values"], **common, kind="truth", n_tokens=0,
                       n_contexts=spectra["truth"]["n_contexts"])
    tables = [truth]
    for n, spectrum in spectra["samples"].items():
        curve = curve_rows(spectrum["singular_values"], **common, kind="empirical", n_tokens=n,
                           n_contexts=spectrum["n_contexts"])
        gap = (curve["werror"] - truth["werror"]).abs().max()
        log.info("%d tokens: %d of %d contexts seen, max |W-error gap| to the truth %.4f", n,
                 spectrum["n_contexts"], spectra["truth"]["n_contexts"], gap)
        tables.append(curve)
    tables.append(curve_rows(spectra["buckets"], **common, kind="buckets", n_tokens=0, n_contexts=n_buckets))
    return pd.concat(tables, ignore_index=True)[TABLE_COLUMNS]


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
        run = read_json(path, require_checksum=True)
        found = dict(model=run.get("model"), rank=run.get("rank"), peak_lr=lr_label(float(run.get("peak_lr", "nan"))))
        promised = dict(model=path.parent.parent.name, rank=path.parent.name[1:], peak_lr=path.stem[2:])
        check_identity(path, found, promised)
        where = f"{run['model']} rank {run['rank']} lr {run['peak_lr']}"
        require_keys(path, where, run, ("eval_loss", "eval_acc"))
        check_values(path, where, {key: run[key] for key in ("eval_loss", "eval_acc")})  # loss >= 0, accuracy in [0, 1]
        runs.append(run)
    manifests = {}
    for path in map(Path, manifest_paths):
        manifest = read_json(path, require_checksum=True)
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


# ---- the peers' per-layer measures: weight diagnostics (WeightWatcher, pico-analyze) and
# representation similarity across checkpoints (lmsat.weight_diagnostics, lmsat.similarity)

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
    why some values are NaN: lmsat.weight_diagnostics)."""
    from lmsat.weight_diagnostics import ALPHA_COLUMNS, SPARSITY_COLUMNS, read_diagnostics

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
    table = _flag_final(pd.concat(frames, ignore_index=True))
    if "alpha_n" in table:
        table["alpha_n"] = table["alpha_n"].round().astype("Int64")  # a count; empty where alpha is not fitted
    table["order"] = table.groupby(["model", "revision"]).cumcount()  # forward order within a checkpoint
    table = in_model_order(table, model_order, ["step", "order"])
    return table[[*RECORD_KEYS, "is_final", *WEIGHT_KEYS, *columns, "status"]]


def similarity_from_records(files, needed: dict, model_order: list[str] | None) -> pd.DataFrame:
    """One row per checkpoint x reference (the model's final checkpoint, and the previous one
    where there is one) x hidden state (layer 0 = embeddings, n_layers = the last layer, post
    final norm): linear CKA, debiased CKA, SVCCA and PWCCA (lmsat.similarity) over the same
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
    table = _flag_final(pd.DataFrame.from_records(rows))
    table = in_model_order(table, model_order, ["step", "reference", "layer"])
    return table[[*RECORD_KEYS, "is_final", "reference", "reference_revision", "reference_step", "layer", "n_layers",
                  "relative_depth", *SIMILARITY_MEASURES, "n_tokens"]]


# ---------------------------------------------------------------- the gradient bottleneck

GRADIENT_COLUMNS = [
    "energy_kept", "energy_kept_sem", "norm_kept", "norm_kept_sem", "random_energy", "random_norm",
    "energy_kept_over_random", "energy_kept_pooled", "energy_kept_pooled_sem", "rank", "hidden_size", "vocab_rows",
    "d_over_v", "energy_kept_frequent", "energy_kept_frequent_sem", "energy_kept_rare", "energy_kept_rare_sem",
    "norm_kept_frequent", "norm_kept_frequent_sem", "norm_kept_rare", "norm_kept_rare_sem",
    "energy_kept_q05", "energy_kept_q25", "energy_kept_q50", "energy_kept_q75", "energy_kept_q95",
    "norm_kept_q05", "norm_kept_q25", "norm_kept_q50", "norm_kept_q75", "norm_kept_q95",
    "n_tokens", "n_seq", "frequent_types", "frequent_share",
]  # fmt: skip


def gradient_from_files(files, needed: dict, model_order: list[str] | None) -> pd.DataFrame:
    """One row per checkpoint (RECORD_KEYS, is_final, GRADIENT_COLUMNS) from the gradient
    bottleneck files of rule analyse_checkpoint (lmsat.gradient_bottleneck): the shares of
    each token's logit gradient kept in the head's column space, means with their standard
    errors over sequences, by target frequency, pooled (sum ||P g||^2 / sum ||g||^2), token
    quantiles, and the random-subspace reference rank / V beside them."""
    from lmsat.gradient_bottleneck import read_gradient_file, summarize

    rows = []
    for path in files:
        found = read_gradient_file(path)
        summary = summarize(found)
        summary["energy_kept_over_random"] = summary["energy_kept"] / summary["random_energy"] if summary["rank"] else math.nan
        rows.append({**{k: found[k] for k in RECORD_KEYS}, **summary})
    if not rows:
        raise ValueError("no gradient bottleneck files to tabulate")
    table = _flag_final(pd.DataFrame.from_records(rows))
    return in_model_order(table, model_order, ["step"])[[*RECORD_KEYS, "is_final", *GRADIENT_COLUMNS]]
