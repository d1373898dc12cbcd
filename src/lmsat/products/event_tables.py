"""The order of events (docs/event_order.md): per model, each series' change of trend against the
loss's rise (table event_order, lmsat.saturation.event_order), and across the models of one
size whether a series' value before the rise predicts it (table event_prediction,
lmsat.saturation.order_across). Both are tables of the loss metric; they read the other metrics'
per-checkpoint files where the plan makes them (Table.files_of): a series whose metric is
not planned is simply not there.

The series (SERIES): those measured on the eval sample (anisotropy, effective rank, the
gradient bottleneck) carry each eval sequence's influence, so their onsets resample the same
sequences as the loss; those of the weights alone (the head's spectrum, WeightWatcher's
alpha) have no sampling noise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from lmsat.core.lazy import lazy_module
from lmsat.products.table_rows import in_model_order, metric_records
from lmsat.saturation.verdict import DEFAULT_ALPHA, DEFAULT_MIN_CHECKPOINTS

pd = lazy_module("pandas")


@dataclass(frozen=True)
class SeriesSpec:
    name: str  # the series' name in the tables
    metric: str  # the metric whose per-checkpoint files hold it
    column: str  # its column (of the metric's records or table)
    kind: str  # "sample" (measured on the eval sample) or "weights"
    influence: str = ""  # the record key of its per-sequence influence ("" none; "gradient": from the file's sums)
    # what a change means, for the reader (the test is two-sided: any change of slope)
    reading: str = ""


SERIES = (
    SeriesSpec("anisotropy", "anisotropy", "anisotropy_last", "sample", "anisotropy_last_influence",
               "the last layer's mean pairwise cosine (Fig. 3); up: more anisotropic"),
    SeriesSpec("effective_rank", "effective_rank", "effective_rank", "sample", "effective_rank_influence",
               "the last layer's representations' effective rank; down: fewer directions used"),
    SeriesSpec("gradient_energy_kept", "gradient_bottleneck", "energy_kept", "sample", "gradient",
               "the share of the loss gradient the head passes back; down: a tighter bottleneck"),
    SeriesSpec("head_singular_entropy", "spectra", "singular_entropy_sigma", "weights", "",
               "the head's singular entropy, KL to uniform (Fig. 5); up: a more degenerate spectrum"),
    SeriesSpec("head_stable_rank", "spectra", "stable_rank", "weights", "",
               "the head's stable rank; down: its spectrum collapses onto its top direction"),
    SeriesSpec("head_alpha", "weight_diagnostics", "alpha", "weights", "",
               "WeightWatcher's power-law alpha of the head's eigenvalues; down: heavier-tailed"),
)
SERIES_METRICS = tuple(dict.fromkeys(spec.metric for spec in SERIES))

EVENT_ORDER_COLUMNS = ["model", "series", "kind", "verdict", "onset_step", "onset_low_step", "onset_high_step",
                       "onset_tokens", "onset_low_tokens", "onset_high_tokens", "lead_steps", "lead_low_steps",
                       "lead_high_steps", "lead_tokens", "lead_low_tokens", "lead_high_tokens", "change_p_value",
                       "slope_before", "slope_after", "window_start_step", "window_checkpoints", "checkpoints", "final_step",
                       "resolution_steps", "resampled", "alpha", "reading"]
EVENT_PREDICTION_COLUMNS = ["series", "step", "models", "compared", "strata", "tau", "p_value", "smallest_p",
                            "arrangements", "exact", "verdict", "alpha"]


# ---------------------------------------------------------------- each model's series


def _by_step(rows: list[dict], model: str, steps: np.ndarray, value) -> np.ndarray:
    """(K,) or (K, ...) of value(row) for the rows of `model`, aligned with `steps` (NaN where missing)."""
    found = {int(r["step"]): value(r) for r in rows if r["model"] == model}
    sample = next(iter(found.values()), None)
    shape = np.shape(sample) if sample is not None else ()
    out = np.full((len(steps), *shape), np.nan)
    for i, step in enumerate(steps):
        if step in found:
            out[i] = found[step]
    return out


def _records_of(files_of: dict, metric: str, keys: tuple[str, ...]) -> list[dict]:
    return metric_records(files_of.get(metric, []), keys) if metric in files_of else []


def _gradient_rows(files) -> list[dict]:
    """model, step, energy_kept and its per-sequence influence (the ratio estimator's: (E_j - m c_j) / C)."""
    from lmsat.bottleneck.gradient import read_gradient_file

    rows = []
    for path in files:
        found = read_gradient_file(path)
        sums, counts = np.asarray(found["energy_sum"])[:, 0], np.asarray(found["count"])[:, 0].astype(np.float64)
        total = counts.sum()
        mean = sums.sum() / total if total else math.nan
        rows.append(dict(model=found["model"], step=int(found["step"]), energy_kept=mean,
                         influence=(sums - mean * counts) / total if total else np.full(len(sums), np.nan)))
    return rows


def model_series(files, files_of: dict | None, model_order: list[str] | None) -> dict:
    """{model: dict(steps, tokens, revisions, losses (K, n), series [SeriesData])} from the loss
    records (`files`) and the series' per-checkpoint files (`files_of`: metric -> paths)."""
    from lmsat.products.degeneration_tables import spectra_tables, weight_diagnostics_from_files
    from lmsat.saturation.event_order import SeriesData

    files_of = dict(files_of or {})
    losses = metric_records(files, ("loss", "sequence_loss"))
    if not losses:
        raise ValueError("no loss records to order events against")
    sources: dict[str, list[dict]] = {}
    for spec in SERIES:
        if spec.metric not in files_of or spec.metric in sources:
            continue
        if spec.metric in ("anisotropy", "effective_rank"):
            sources[spec.metric] = _records_of(files_of, spec.metric, (spec.column,))
        elif spec.metric == "gradient_bottleneck":
            sources[spec.metric] = _gradient_rows(files_of[spec.metric])
        elif spec.metric == "spectra":
            entropy = spectra_tables(list(files_of[spec.metric]), model_order, curves=False)[1]
            sources[spec.metric] = entropy.to_dict("records")
        elif spec.metric == "weight_diagnostics":
            alpha = weight_diagnostics_from_files(files_of[spec.metric], {}, model_order, part="alpha")
            sources[spec.metric] = alpha[alpha["matrix"] == "head"].to_dict("records")
    models = {}
    order = in_model_order(pd.DataFrame.from_records([{"model": r["model"]} for r in losses]).drop_duplicates(),
                           model_order, [])["model"].tolist()
    for model in order:
        items = sorted((r for r in losses if r["model"] == model), key=lambda r: int(r["step"]))
        steps = np.array([int(r["step"]) for r in items], dtype=np.int64)
        if len(set(steps.tolist())) < len(steps):
            raise ValueError(f"{model}: two loss records of one step; fix: one revision per step in the plan")
        counts = {len(r["sequence_loss"]) for r in items}
        if len(counts) > 1:
            raise ValueError(f"{model}'s checkpoints were scored on {sorted(counts)} sequences, not one eval sample")
        per_unit = np.array([r["sequence_loss"] for r in items], dtype=np.float64)  # (K, n)
        series = []
        for spec in SERIES:
            rows = sources.get(spec.metric)
            if not rows or not any(r["model"] == model for r in rows):
                continue
            values = _by_step(rows, model, steps, lambda r: float(r[spec.column]) if r[spec.column] is not None
                              else math.nan)
            influence = None
            if spec.influence == "gradient":
                influence = _by_step(rows, model, steps, lambda r: np.asarray(r["influence"], dtype=np.float64))
            elif spec.influence and all(spec.influence in r for r in rows if r["model"] == model):
                influence = _by_step(rows, model, steps, lambda r: np.asarray(r[spec.influence], dtype=np.float64))
            if influence is not None:
                if influence.ndim != 2 or influence.shape[1] != per_unit.shape[1]:
                    raise ValueError(f"{model}: {spec.name}'s per-sequence influence has shape {influence.shape}, but "
                                     f"its loss records {per_unit.shape[1]} sequences: not the same eval sample. Fix: "
                                     f"delete results/<run>/metrics/*/{model}/ and rerun")
                measured = np.isfinite(values)
                if not np.isfinite(influence[measured]).all():
                    raise ValueError(f"{model}: {spec.name}'s per-sequence influence holds NaN or Inf")
                influence = np.where(measured[:, None], influence, 0.0)
            series.append(SeriesData(spec.name, spec.kind, values, influence))
        models[model] = dict(steps=steps, tokens=np.array([float(r["tokens"]) for r in items]),
                             revisions=[r["revision"] for r in items], losses=per_unit, series=series)
    return models


# ---------------------------------------------------------------- the tables


def _resolution(steps: np.ndarray, at: int) -> float:
    """The grid's spacing at checkpoint `at`: the wider of its two gaps (steps)."""
    gaps = [steps[at] - steps[at - 1]] if at > 0 else []
    gaps += [steps[at + 1] - steps[at]] if at + 1 < len(steps) else []
    return float(max(gaps)) if gaps else math.nan


def event_order_from_records(files, needed: dict, model_order: list[str] | None, alpha: float = DEFAULT_ALPHA,
                             min_checkpoints: int = DEFAULT_MIN_CHECKPOINTS, files_of: dict | None = None) -> pd.DataFrame:
    """One row per model x event (EVENT_ORDER_COLUMNS): the loss's rise first (verdict `rise`
    or `no rise`, as the saturation verdict of the same records says), then each series the
    plan measures, its change of trend and its lead over the rise (lmsat.saturation.event_order)."""
    from lmsat.saturation.event_order import order_events

    reading = {spec.name: spec.reading for spec in SERIES}
    rows = []
    for model, data in model_series(files, files_of, model_order).items():
        steps = data["steps"]
        _, events = order_events(steps, data["tokens"], data["losses"], data["series"], alpha=alpha,
                                 min_checkpoints=min_checkpoints)
        for event in events:
            row = event.as_row()
            at = int(np.flatnonzero(steps == row["onset_step"])[0]) if row["onset_step"] in steps else -1
            rows.append({**row, "model": model, "checkpoints": len(steps), "final_step": int(steps[-1]),
                         "resolution_steps": _resolution(steps, at) if at >= 0 else math.nan,
                         "reading": reading.get(event.series, "the eval loss; its best checkpoint, the rise's start")})
    return pd.DataFrame(rows)[EVENT_ORDER_COLUMNS]


def event_prediction_from_records(files, needed: dict, model_order: list[str] | None, alpha: float = DEFAULT_ALPHA,
                                  min_checkpoints: int = DEFAULT_MIN_CHECKPOINTS, sizes: dict | None = None,
                                  files_of: dict | None = None) -> pd.DataFrame:
    """One row per series (EVENT_PREDICTION_COLUMNS): across the models, does the series' value
    at the latest checkpoint step they all have before any model's best predict the rise
    (the final's loss minus the lowest earlier one), comparing models of one size only
    (`sizes`: model -> its size, the plan's; lmsat.saturation.order_across)."""
    from lmsat.saturation.order_across import NO_POWER, stratified_kendall
    from lmsat.saturation.verdict import verdict_from_paired

    models = model_series(files, files_of, model_order)
    sizes = dict(sizes or {})
    rises, bests, common = {}, {}, None
    for model, data in models.items():
        verdict = verdict_from_paired(data["steps"], data["losses"], alpha=alpha, min_checkpoints=min_checkpoints)
        rises[model], bests[model] = verdict.rise, verdict.best_step
        common = set(data["steps"].tolist()) if common is None else common & set(data["steps"].tolist())
    before = sorted(s for s in (common or ()) if s < min(bests.values()))
    step = before[-1] if before else -1
    rows = []
    for spec in SERIES:
        values, present = {}, []
        for model, data in models.items():
            found = next((s for s in data["series"] if s.name == spec.name), None)
            if found is None:
                continue
            present.append(model)
            at = np.flatnonzero(data["steps"] == step)
            values[model] = float(found.values[at[0]]) if len(at) else math.nan
        if not present:
            continue
        names = list(values)
        result = stratified_kendall([values[m] for m in names], [rises[m] for m in names],
                                    [sizes.get(m, m) for m in names], alpha)
        if step < 0:
            result.update(verdict=NO_POWER, p_value=math.nan)
        rows.append(dict(series=spec.name, step=step, models=len(names), **result, alpha=alpha))
    return pd.DataFrame(rows, columns=EVENT_PREDICTION_COLUMNS)


# ---------------------------------------------------------------- the summary's lines


def _interval(low, high, unit: str = "") -> str:
    return f"[{low:,.0f}, {high:,.0f}]{unit}"


def event_order_facts(order: pd.DataFrame, prediction: pd.DataFrame | None = None) -> list[str]:
    """The run summary's lines on the order of events: one per model (event_order.csv), then
    one across the models (event_prediction.csv) when there is one."""
    lines = []
    for model, rows in order.groupby("model", sort=False):
        loss = rows.iloc[0]
        level = f"{100 * (1 - 2 * float(loss['alpha'])):.0f}%"
        best = (f"best checkpoint step {int(loss['onset_step']):,} "
                f"{_interval(loss['onset_low_step'], loss['onset_high_step'])}")
        if loss["verdict"] != "rise":
            lines.append(f"Order of events, {model}: no rise ({best}), so nothing is ordered against it: every series "
                         "reads `no rise`. Table: results/tables/event_order.csv.")
            continue
        parts = []
        for verdict in ("leads", "lags", "together within the resolution", "no change", "too few checkpoints"):
            named = rows[rows["verdict"] == verdict]
            if named.empty:
                continue
            if verdict in ("leads", "lags"):
                shown = ", ".join(f"{r['series']} (lead {r['lead_steps']:+,.0f} steps "
                                  f"{_interval(r['lead_low_steps'], r['lead_high_steps'])})" for _, r in named.iterrows())
            else:
                shown = ", ".join(named["series"])
            parts.append(f"{verdict}: {shown}")
        if not parts:
            lines.append(f"Order of events, {model}: the loss rises after its {best}; no other series is measured "
                         "(metrics: anisotropy, effective_rank, gradient_bottleneck, spectra, weight_diagnostics give "
                         "them). Table: results/tables/event_order.csv.")
            continue
        lines.append(f"Order of events, {model}: the loss rises after its {best}; " + "; ".join(parts)
                     + f" (lead: the rise's step less the series' onset, positive when the series changed first; {level} "
                     "intervals). Order in time "
                     "is necessary for a cause, not sufficient (docs/event_order.md). Table: results/tables/event_order.csv.")
    if prediction is not None and len(prediction):
        verdicts = prediction["verdict"].value_counts()
        said = ", ".join(f"{verdict} ({count} series)" for verdict, count in verdicts.items())
        first = prediction.iloc[0]
        lines.append(f"Across models of one size (does a series' value at step {int(first['step']):,}, before every "
                     f"model's best, predict the rise; {int(first['strata'])} size(s) with two models or more): {said}. "
                     "Table: results/tables/event_prediction.csv.")
    return lines
