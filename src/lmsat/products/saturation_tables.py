"""The saturation tables: loss along training (Fig. 1a) with its implausible-loss flags, the
saturation verdicts, the best and final checkpoints, Table 1, and the scaling-law fits."""

from __future__ import annotations

import math

import numpy as np

from lmsat.core.integrity import corrupt
from lmsat.core.lazy import lazy_module
from lmsat.products.table_rows import in_model_order, metric_records
from lmsat.saturation.downstream import CHECKPOINT_ORDER, TABLE1_TASKS, metric_value
from lmsat.saturation.downstream import METRICS as TABLE1_METRICS
from lmsat.saturation.verdict import DEFAULT_ALPHA, DEFAULT_MIN_CHECKPOINTS, VERDICT_COLUMNS, verdict_from_paired

pd = lazy_module("pandas")  # imported by the first job that builds a table, not by every metric job

LOSS_COLUMNS = ["suite", "model", "revision", "step", "tokens", "loss", "loss_sem", "is_best", "is_final", "implausible_loss"]
# A loss is implausible for its step when it is back near ln V (a uniform guess over the head's
# V rows: an untrained or zeroed model's loss) after the run had learned: an earlier checkpoint
# got LEARNED nats or more below ln V (a perplexity e times below uniform), and this one lost
# FORGOTTEN of that or more. A fresh initialisation scores ln V within a few hundredths.
LEARNED, FORGOTTEN = 1.0, 0.9


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


def implausible_notes(records: list[dict], vocab_sizes: dict[str, int] | None = None,
                      steps_per_epoch: dict[str, float] | None = None) -> dict[str, list[str]]:
    """model -> a sentence per run of consecutive checkpoints of `records` (loss records) whose
    loss is implausible for its step (implausible_losses): where they are, their loss beside
    ln V, the earlier best and the share of what was learned that is lost, and the likely
    cause: overfitting where the training data had repeated by then (more than one epoch at
    the run's first flagged step, from `steps_per_epoch`: {model: optimizer steps per epoch},
    a local run's trainer_state.json), else a broken checkpoint or a divergence."""
    table = in_model_order(pd.DataFrame.from_records(records), None, ["step"])
    flags, uniform = implausible_losses(table, vocab_sizes).to_numpy(), uniform_losses(table, vocab_sizes)
    notes: dict[str, list[str]] = {}
    i = 0
    while i < len(table):
        if not flags[i]:
            i += 1
            continue
        first = i  # a run of flagged checkpoints of one model, in step order
        while i + 1 < len(table) and flags[i + 1] and table["model"].iloc[i + 1] == table["model"].iloc[first]:
            i += 1
        notes.setdefault(table["model"].iloc[first], []).append(_implausible_note(table, uniform, first, i,
                                                                                 steps_per_epoch or {}))
        i += 1
    return notes


def _implausible_note(table: pd.DataFrame, uniform: pd.Series, first: int, last: int, steps_per_epoch: dict) -> str:
    """implausible_notes's sentence on the flagged rows first..last of `table` (one model's, consecutive)."""
    rows = table.iloc[first:last + 1]
    start, end = rows.iloc[0], rows.iloc[-1]
    earlier = table[(table["model"] == start["model"]) & (table["step"] < start["step"])]
    best = earlier.loc[earlier["loss"].idxmin()]
    lost = (rows["loss"] - best["loss"]) / (uniform.iloc[first:last + 1] - best["loss"])
    ln_v = uniform.iloc[first:last + 1]
    if len(rows) == 1:
        where = f"{start['revision']} (step {int(start['step'])}): loss {start['loss']:.3f}"
        share = f"{100 * lost.iloc[0]:.0f}%"
    else:
        where = (f"{start['revision']} to {end['revision']} (steps {int(start['step'])} to {int(end['step'])}, "
                 f"{len(rows)} checkpoints in a row): loss {rows['loss'].min():.3f} to {rows['loss'].max():.3f}")
        share = f"{100 * lost.min():.0f}% to {100 * lost.max():.0f}%"
    near = f"{ln_v.iloc[0]:.3f}" if ln_v.nunique() == 1 else f"{ln_v.min():.3f} to {ln_v.max():.3f}"
    text = (f"{where} {'is' if len(rows) == 1 else 'are'} back near ln V = {near} (a uniform guess over the head's "
            f"rows, an untrained model's loss) after {best['revision']} (step {int(best['step'])}) reached "
            f"{best['loss']:.3f}: {share} of what the run had learned is lost. ")
    per_epoch = steps_per_epoch.get(start["model"])
    epoch = start["step"] / per_epoch if per_epoch else math.nan
    if epoch > 1:
        return text + (f"By step {int(start['step'])} the training data had been gone through {epoch:.3g} times "
                       f"({per_epoch:g} steps per epoch, from trainer_state.json): the data repeat, so the likely "
                       "cause is overfitting to them (a held-out loss climbs as the model memorises its training "
                       "text). A loss that jumps there from near the best in one checkpoint may still be a broken "
                       "one (untrained weights saved). Kept (implausible_loss in the loss table)")
    return text + ("A broken checkpoint (zeroed, or untrained weights saved) or a divergence; "
                   + ("they are" if len(rows) > 1 else "it is")
                   + " kept (implausible_loss in the loss table): check "
                   + ("them" if len(rows) > 1 else "it") + " before reading the verdict")


def loss_from_records(files, needed: dict, model_order: list[str] | None,
                      vocab_sizes: dict[str, int] | None = None) -> pd.DataFrame:
    return loss_table(metric_records(files, ("loss", "loss_sem")), model_order, vocab_sizes)


# The saturation_verdicts table: a verdict per model and, beside it, what its reader must know
SATURATION_VERDICT_COLUMNS = [*VERDICT_COLUMNS, "notes"]


def verdicts_from_records(files, needed: dict, model_order: list[str] | None, alpha: float = DEFAULT_ALPHA,
                          min_checkpoints: int = DEFAULT_MIN_CHECKPOINTS, vocab_sizes: dict[str, int] | None = None,
                          gone=(), steps_per_epoch: dict[str, float] | None = None) -> pd.DataFrame:
    """One row per model (SATURATION_VERDICT_COLUMNS): its saturation verdict (lmsat.saturation.verdict),
    a paired max-t test of its final checkpoint against every earlier one, from the
    per-sequence mean losses of its loss records (`sequence_loss`: the same eval sequences at
    every checkpoint). Reads the loss metric's JSON records only (each reduced from a cache's
    `loss` dataset), never a hidden-state array. A model with fewer than `min_checkpoints`
    checkpoints gets `too few checkpoints`. `notes`: each run of checkpoints whose loss is
    implausible for its step, with its likely cause (implausible_notes, overfitting past one
    epoch of `steps_per_epoch`), and the checkpoints among `gone`
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
        notes = implausible_notes([record for _, record in items], vocab_sizes, steps_per_epoch).get(model, [])
        vanished = [record["revision"] for _, record in items if f"{model}@{record['revision']}" in set(gone)]
        if vanished:
            best = next(record["revision"] for _, record in items if int(record["step"]) == verdict.best_step)
            lead = f"its best checkpoint {best} (step {verdict.best_step}) is no longer on disk; " if best in vanished else ""
            notes.append(f"{lead}{len(vanished)} of its {len(items)} checkpoints are no longer on disk "
                         f"({', '.join(vanished)}): measured before they went, their records "
                         "are kept (on_disk false in the tables)")
        rows.append({"model": model, **verdict.as_row(), "notes": "; ".join(notes)})
    return in_model_order(pd.DataFrame(rows), model_order, [])[SATURATION_VERDICT_COLUMNS]


# ---- best and final checkpoints, Table 1

BEST_FINAL_COLUMNS = ["suite", "model", "kind", "revision", "step", "tokens", "loss", "loss_sem", "implausible_loss"]


def select_checkpoints(loss: pd.DataFrame) -> pd.DataFrame:
    """best_final.csv: the rows flagged is_best / is_final in a loss table (loss_table), one
    per model x kind, models in the loss table's order (by size), each with the loss table's
    implausible_loss (a final back near ln V: Table 1 and Fig. 1b read these rows)."""
    if "implausible_loss" not in loss:
        raise ValueError("loss table: no implausible_loss column (written by an older lmsat); delete "
                         "results/<run>/tables/loss.csv and rerun (rule tabulate_metric makes it again)")
    rows = []
    for kind in ("best", "final"):
        flagged = loss[loss[f"is_{kind}"].astype(bool)].assign(kind=kind)
        counts = flagged.groupby("model").size()
        missing = sorted(set(loss["model"]) - set(counts.index))
        if missing or (counts > 1).any():
            raise ValueError(
                f"loss table: models {missing or sorted(counts[counts > 1].index)} need exactly one "
                f"is_{kind} row; rebuild results/tables/loss.csv with lmsat.products.saturation_tables.loss_table"
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
        raise ValueError(f"tasks: no metric registered for {unknown}; add them to lmsat.saturation.downstream.METRICS")
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


# ---- Fig. 1b: the scaling-law fit and the shortfall (rule fit_scaling_law; the fit: lmsat.saturation.scaling)

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
    from lmsat.saturation.scaling import fit_scaling_law, predict, shortfall  # here: scipy is not needed at DAG time

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
            # the loss table's flag, carried with the loss it marks (empty: not known, a published record)
            implausible_loss=points["implausible_loss"] if "implausible_loss" in points else pd.NA,
        )
    ).sort_values(["n_params", "kind"], kind="stable")
    below = table[table["n_params"] < min_params]
    for kind in ("best", "final"):
        row[f"mean_shortfall_{kind}_pct"] = below.loc[below["kind"] == kind, "shortfall_pct"].mean()
    return pd.DataFrame([row])[FIT_COLUMNS], table.reset_index(drop=True)
