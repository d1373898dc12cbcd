"""Rule fit_scaling_law: fit L(N, T) = A/N^alpha + B/T^beta + E and compare every checkpoint.

Inputs: results/tables/best_final.csv (each model's best and final checkpoint) and the
parameter counts of results/params/{model}.json (for models whose n_params the config
leaves at 0). Outputs:
  scaling_fit.csv        one row: A, alpha, their standard errors and 95% CIs, the fixed
                         B, beta, E, the settings, and the mean shortfall of the models
                         below min_params (the paper - ~8% final, ~4% best)
  scaling_shortfall.csv  one row per model x kind (best/final): N, T, measured and
                         predicted loss, shortfall in % (> 0 = worse than the law)
"""

import _lmsat_src  # noqa: F401 (first: this workflow's src/ on sys.path)
import lmsat.offline  # noqa: F401 (first: compute jobs never reach the network)
import logging

import numpy as np
import pandas as pd

from lmsat.io import atomic_path, read_record, setup_logging
from lmsat.scaling import fit_scaling_law, predict, shortfall
from lmsat.tables import with_provenance

STATISTICS = [  # of a fit: standard errors, 95% t-intervals, bootstrap percentile intervals
    "A_se", "alpha_se", "A_ci_low", "A_ci_high", "alpha_ci_low", "alpha_ci_high",
    "bootstrap_A_ci_low", "bootstrap_A_ci_high", "bootstrap_alpha_ci_low", "bootstrap_alpha_ci_high",
]
FIT_COLUMNS = [
    "source", "A", "alpha", *STATISTICS, "n_bootstrap", "B", "beta", "E", "params", "min_params", "fit_on",
    "n_points", "n_sizes", "fitted_models", "mean_shortfall_best_pct", "mean_shortfall_final_pct",
]
FIT_KINDS = {"final": ("final",), "best": ("best",), "best_and_final": ("best", "final")}
log = logging.getLogger(__name__)


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


def main(snakemake):
    setup_logging(snakemake.log[0])
    params = snakemake.params
    settings = params.scaling
    configured, selection = scaled_models(params.n_params, pd.read_csv(snakemake.input.selection), settings["models"])
    sizes = model_sizes(configured, [read_record(path, "model") for path in snakemake.input.counts], settings["params"])
    fit_row, table = scaling_tables(selection, sizes, settings, seed=params.seed)
    log.info("law:\n%s\nshortfall:\n%s", fit_row.T.to_string(), table.to_string())
    for frame, path in ((fit_row, snakemake.output.fit), (table, snakemake.output.shortfall)):
        with atomic_path(path) as tmp:
            with_provenance(frame, params.config_sha256).to_csv(tmp, index=False)


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
