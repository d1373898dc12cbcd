"""EleutherAI's published record of Pythia as a run: the tables of a suite whose source is
the published evaluations (`source: published` in config; the data: lmsat.data.published_evals).

No model is loaded and nothing is downloaded: every number comes from the packaged CSV of
EleutherAI's own lm-eval results (harness before 0.4), zero-shot, at its 27 steps. The
tables are the counterparts of a model run's, and say what they are not:

- `published_loss`: LAMBADA (lambada_openai) last-word perplexity along training, with its
  log (the "loss" here, nats per LAMBADA target word, not the Pile validation loss the
  paper plots), its delta-method standard error ppl_se / ppl, and the best (lowest
  perplexity) and final checkpoints flagged.
- `published_table1`: Table 1 for every size: every published task and metric at the best
  and the final checkpoint, with the published standard errors; the best checkpoint is the
  one of lowest LAMBADA perplexity, as the paper picks it by the lowest loss. The paper's
  own Table 1 values (Pythia-160M, paper_values.yaml) stand beside the published 160M cells
  of the tasks both have, with whether they agree within 2 published standard errors.
- `published_scaling_fit` / `published_scaling_shortfall`: Fig. 1b's counterpart, a power
  law in N alone, log(ppl) = A / N^alpha, fitted on the models >= min_params (the paper's
  410M). Only A and alpha are fitted: Hoffmann et al.'s B, beta and E are constants of the
  Pile loss and do not apply to LAMBADA log-perplexity; the data term B/T^beta is dropped
  (B = 0: every final checkpoint saw the same 300B tokens, so a data term is a constant the
  fit cannot tell from E), and E is fixed at 0 (the floor of a log-perplexity, ppl = 1):
  six sizes cannot pin a third constant, and a free E trades off against A and alpha.
- `published_verdicts`: the saturation verdict of every model (lmsat.saturation.verdict,
  verdict_from_estimates on log(ppl) with the delta-method errors, taken as independent:
  conservative, since one test set scores every checkpoint). Step 0, the untrained
  initialisation, is left out: saturation is a rise late in training, and a comparison
  with a random model's perplexity (in the thousands) only widens the test's max.
"""

from __future__ import annotations

import math
from importlib import resources

import numpy as np
import pandas as pd
import yaml

from lmsat.data.published_evals import published_evals
from lmsat.errors import ConfigError
from lmsat.saturation.verdict import NULL_DRAWS, VERDICT_COLUMNS, verdict_from_estimates

LOSS_TASK, LOSS_METRIC = "lambada_openai", "perplexity"
SHOTS = 0
TOKENS_PER_STEP = 2_097_152  # Pythia: 1024 sequences x 2048 tokens per step
DEFAULT_MIN_PARAMS = 400_000_000  # the paper fits on Pythia >= 410M
# Parameter counts of the Pythia models (Biderman et al. 2023, Table 1): (total, non-embedding).
# The deduped twins have the same architecture.
PYTHIA_PARAMS = {
    "70m": (70_426_624, 18_915_328),
    "160m": (162_322_944, 85_056_000),
    "410m": (405_334_016, 302_311_424),
    "1b": (1_011_781_632, 805_736_448),
    "1.4b": (1_414_647_808, 1_208_602_624),
    "2.8b": (2_775_208_960, 2_517_652_480),
    "6.9b": (6_857_302_016, 6_444_163_072),
    "12b": (11_846_072_320, 11_327_027_200),
}
LABEL = "EleutherAI's published lm-eval results (harness < 0.4), not this run's measurements"
LOSS_COLUMNS = ["suite", "model", "deduped", "n_params", "step", "tokens", "perplexity", "perplexity_stderr",
                "loss", "loss_se", "is_best", "is_final"]
TABLE1_COLUMNS = ["suite", "model", "n_params", "checkpoint", "step", "task", "metric", "value", "stderr",
                  "paper", "paper_difference", "paper_agrees", "paper_note"]
# The paper's Table 1 columns (paper_values.yaml) -> the published (task, metric), and the
# factor that puts the paper's value in the CSV's unit (accuracies: % -> fraction).
PAPER_COLUMNS = {
    "Lambada (ppl.) ↓": ("lambada_openai", "perplexity", 1.0),
    "Lambada ↑": ("lambada_openai", "acc", 0.01),
    "SciQ ↑": ("sciq", "acc", 0.01),
    "ARC-e ↑": ("arc_easy", "acc", 0.01),
}


def size_of(model: str) -> str:
    return model.removeprefix("pythia-").removesuffix("-deduped")


def n_params_of(model: str, params: str = "non_embedding") -> float:
    total, non_embedding = PYTHIA_PARAMS[size_of(model)]
    return float(non_embedding if params == "non_embedding" else total)


def check_models(models: list[str], key: str, evals: pd.DataFrame | None = None) -> None:
    """ConfigError naming `key` for a model the published record does not hold."""
    evals = published_evals() if evals is None else evals
    known = list(dict.fromkeys(evals["model"]))
    for index, model in enumerate(models):
        if model not in known or size_of(model) not in PYTHIA_PARAMS:
            raise ConfigError(f"{key}[{index}].name", f"model {model!r} has no published evaluations",
                              f"use one of: {', '.join(known)}")


def record_of(models: list[str], evals: pd.DataFrame | None = None) -> pd.DataFrame:
    """The zero-shot rows of `models` (in that order, then by step)."""
    evals = published_evals() if evals is None else evals
    rows = evals[(evals["shots"] == SHOTS) & evals["model"].isin(models)].copy()
    rows["_order"] = rows["model"].map({m: i for i, m in enumerate(models)})
    return rows.sort_values(["_order", "step", "task", "metric"], kind="stable").drop(columns="_order")


def loss_table(suite: str, models: list[str], params: str = "non_embedding",
               evals: pd.DataFrame | None = None) -> pd.DataFrame:
    rows = record_of(models, evals)
    ppl = rows[(rows["task"] == LOSS_TASK) & (rows["metric"] == LOSS_METRIC)]
    missing = [m for m in models if m not in set(ppl["model"])]
    if missing:
        raise ValueError(f"published record: no zero-shot {LOSS_TASK} {LOSS_METRIC} for {missing}")
    table = pd.DataFrame(dict(
        suite=suite, model=ppl["model"].to_numpy(), deduped=ppl["model"].str.endswith("-deduped").to_numpy(),
        n_params=[n_params_of(m, params) for m in ppl["model"]], step=ppl["step"].to_numpy(),
        tokens=ppl["step"].to_numpy() * TOKENS_PER_STEP, perplexity=ppl["value"].to_numpy(),
        perplexity_stderr=ppl["stderr"].to_numpy(),
    ))
    table["loss"] = np.log(table["perplexity"])
    table["loss_se"] = table["perplexity_stderr"] / table["perplexity"]  # delta method: se(log x) = se(x) / x
    trained = table[table["step"] > 0]
    table["is_best"] = table.index.isin(trained.groupby("model", sort=False)["perplexity"].idxmin().values)
    table["is_final"] = table.index.isin(table.groupby("model", sort=False)["step"].idxmax().values)
    return table[LOSS_COLUMNS]


def paper_table1() -> dict[tuple[str, str], float]:
    """(checkpoint, column) -> the paper's Pythia-160M Table 1 value (paper_values.yaml)."""
    text = resources.files("lmsat.products").joinpath("paper_values.yaml").read_text(encoding="utf-8")
    return {(v["checkpoint"], v["column"]): float(v["value"]) for v in yaml.safe_load(text)["values"]
            if v.get("measure") == "table1" and v.get("model") == "pythia-160m"}


def table1(loss: pd.DataFrame, evals: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every published zero-shot task and metric at each model's best and final checkpoint."""
    models = list(dict.fromkeys(loss["model"]))
    rows = record_of(models, evals)
    paper = {(kind, task, metric): (value * factor, column)
             for (kind, column), value in paper_table1().items()
             for task, metric, factor in [PAPER_COLUMNS.get(column, (None, None, None))] if task}
    out = []
    for model in models:
        per_model = loss[loss["model"] == model]
        for kind, flag in (("best", "is_best"), ("final", "is_final")):
            chosen = per_model[per_model[flag]].iloc[0]
            cells = rows[(rows["model"] == model) & (rows["step"] == chosen["step"])]
            for cell in cells.itertuples():
                value, stderr = float(cell.value), float(cell.stderr)
                reference, column = paper.get((kind, cell.task, cell.metric), (math.nan, ""))
                if model != "pythia-160m":
                    reference, column = math.nan, ""
                difference = value - reference
                agrees = bool(abs(difference) <= 2 * stderr) if column else None
                note = "" if not column else (
                    f"paper {column} {reference:.4g}: {'within' if agrees else 'NOT within'} 2 published "
                    f"standard errors of the published {kind} checkpoint (step {int(chosen['step'])})")
                out.append(dict(suite=chosen["suite"], model=model, n_params=chosen["n_params"], checkpoint=kind,
                                step=int(chosen["step"]), task=cell.task, metric=cell.metric, value=value,
                                stderr=stderr, paper=reference, paper_difference=difference, paper_agrees=agrees,
                                paper_note=note))
    return pd.DataFrame(out, columns=TABLE1_COLUMNS)


def scaling(loss: pd.DataFrame, min_params: float, fit_on: str = "final", bootstrap: int = 0, seed: int = 0,
            params: str = "non_embedding"):
    """(fit row, shortfall table) of log(ppl) = A / N^alpha on the models >= min_params,
    through lmsat.products.saturation_tables.scaling_tables with B = 0, E = 0 (see the module's docstring)."""
    from lmsat.products.saturation_tables import scaling_tables

    picked = []
    for kind, flag in (("best", "is_best"), ("final", "is_final")):
        rows = loss[loss[flag]]
        picked.append(pd.DataFrame(dict(suite=rows["suite"], model=rows["model"], kind=kind,
                                        revision=[f"step{s}" for s in rows["step"]], step=rows["step"],
                                        tokens=rows["tokens"], loss=rows["loss"], loss_sem=rows["loss_se"])))
    selection = pd.concat(picked, ignore_index=True)
    sizes = dict(zip(loss["model"], loss["n_params"]))
    settings = dict(B=0.0, beta=1.0, E=0.0, A=None, alpha=None, min_params=min_params, fit_on=fit_on,
                    bootstrap=bootstrap, params=params)
    return scaling_tables(selection, sizes, settings, seed=seed)


def verdicts(loss: pd.DataFrame, alpha: float = 0.05) -> pd.DataFrame:
    """One saturation verdict per model (VERDICT_COLUMNS), on log(ppl) at steps > 0."""
    rows = []
    for model, per_model in loss[loss["step"] > 0].groupby("model", sort=False):
        per_model = per_model.sort_values("step")
        verdict = verdict_from_estimates(per_model["step"], per_model["loss"], per_model["loss_se"], alpha=alpha)
        rows.append(dict(model=model, **verdict.as_row()))
    return pd.DataFrame(rows, columns=VERDICT_COLUMNS)


def verdict_line(row) -> str:
    """One line per model: its verdict, the rise of log(ppl) and its interval, best and final step."""
    head = f"{row['model']}: {row['verdict']}"
    if row["verdict"] == "too few checkpoints":
        return f"{head} ({int(row['checkpoints'])} checkpoints)"
    if row["best_step"] == row["final_step"]:  # no rise to report, never a rise of 0 as a finding
        return f"{head}; the final checkpoint (step {int(row['final_step'])}) is the best"
    level = round(100 * (1 - 2 * row["alpha"]))
    # No Monte Carlo draw as large: p is (0 + 1) / (draws + 1), a bound, not an estimate
    floor = 1 / (NULL_DRAWS + 1)
    p_value = f"p = {row['p_value']:.3g}" if row["p_value"] > floor * 1.5 else f"p <= {floor:.0e}"  # Monte Carlo
    return (f"{head}; best step {int(row['best_step'])}, final step {int(row['final_step'])}; rise of "
            f"log-perplexity {row['rise']:.3f} (ppl x{math.exp(row['rise']):.2f}), {level}% interval "
            f"[{row['rise_low']:.3f}, {row['rise_high']:.3f}], {p_value}")


def verdict_summary(table: pd.DataFrame) -> str:
    saturating = table.loc[table["verdict"] == "saturates", "model"].tolist()
    return (f"{len(saturating)} of {len(table)} published Pythia models saturate by the max-t test on LAMBADA "
            f"log-perplexity: {', '.join(saturating) or 'none'}.")


def tables(suite: str, models: list[str], min_params: float) -> dict[str, pd.DataFrame]:
    """Every table of the published record, by its workflow name."""
    loss = loss_table(suite, models)
    fit, shortfall = scaling(loss, min_params)
    return dict(published_loss=loss, published_table1=table1(loss), published_scaling_fit=fit,
                published_scaling_shortfall=shortfall, published_verdicts=verdicts(loss))


def summary_page(products: dict[str, pd.DataFrame], source: dict, figures=()) -> str:
    """The published record's summary page: which sizes saturate (the verdicts first), the
    fit's constants and shortfalls, and the paper's Table 1 beside the published 160M cells."""
    import html

    from lmsat.products.report import figure_links, html_table, interval_reading, page

    verdict_table, fit = products["published_verdicts"], products["published_scaling_fit"].iloc[0]
    table = products["published_table1"]
    beside = table[table["paper_note"].fillna("") != ""]
    disagree = beside[beside["paper_agrees"].astype(str) == "False"]
    facts = [
        f"{LABEL}: {source['repository']} at commit {source['commit'][:12]} ({source['license']}).",
        verdict_summary(verdict_table),
        "Test: lmsat.saturation.verdict.verdict_from_estimates, a one-sided max-t test of the final checkpoint against every "
        "earlier one (steps > 0) on log(LAMBADA ppl), standard errors ppl_se / ppl (delta method) taken as "
        "independent, which is conservative. rise: the final's log(ppl) minus the lowest earlier one (negative: the "
        "final is the lowest); its interval bounds the true rise simultaneously over which earlier step is truly best "
        f"({round(100 * (1 - 2 * verdict_table['alpha'].iloc[0]))}%) and always contains the measured rise: above 0 "
        "it is the verdict saturates, below 0 the final is better than every earlier step beyond noise, across 0 "
        "neither is shown.",
        f"Power law log(ppl) = {fit['A']:.4g} / N^{fit['alpha']:.4g} fitted on {int(fit['n_sizes'])} sizes >= "
        f"{fit['min_params']:.3g} non-embedding parameters (B = 0, E = 0: Hoffmann's constants describe the Pile "
        f"loss, not LAMBADA); mean shortfall of the smaller models: final {fit['mean_shortfall_final_pct']:+.1f}%, "
        f"best {fit['mean_shortfall_best_pct']:+.1f}% (the paper: ~8% and ~4% on the Pile loss).",
        "Best checkpoint = lowest LAMBADA perplexity, as the paper picks it by the lowest loss.",
        f"The paper's Table 1 (Pythia-160M) beside the published 160M cells: {len(beside) - len(disagree)} of "
        f"{len(beside)} within 2 published standard errors"
        + ("" if disagree.empty else "; they differ for " + "; ".join(
            f"{r.checkpoint} {r.task} {r.metric}: paper {r.paper:.4g}, published {r.value:.4g} ± {r.stderr:.2g}"
            for r in disagree.itertuples()))
        + ". The paper's StoryCloze and WikiText columns have no published counterpart.",
    ]
    lines = "".join(f"<li>{html.escape(verdict_line(r))}</li>" for r in verdict_table.to_dict("records"))
    shown = verdict_table[["model", "verdict", "best_step", "final_step", "rise", "rise_low", "rise_high",
                           "p_value", "checkpoints"]].assign(
        **{"the interval is": [interval_reading(r.rise_low, r.rise_high) for r in verdict_table.itertuples()]})
    body = (
        f"<h1>EleutherAI's published record of Pythia</h1>\n<p class=\"note\">{html.escape(LABEL)}</p>\n"
        + (figure_links(list(figures)) if figures else "")
        + "<ul>" + "".join(f"<li>{html.escape(f)}</li>" for f in facts) + "</ul>\n"
        + "<h2>Saturation verdicts (LAMBADA log-perplexity)</h2>\n" + html_table(shown) + f"\n<ul>{lines}</ul>\n"
        + "<h2>The paper's Table 1 beside the published Pythia-160M</h2>\n"
        + html_table(beside[["checkpoint", "step", "task", "metric", "value", "stderr", "paper", "paper_difference",
                             "paper_agrees"]])
    )
    return page("lmsat: EleutherAI's published record of Pythia", body)
