"""Fig. 1b of Godey et al. (2024): measured loss of each model's best and final checkpoints
against the scaling law fitted on the larger models (PNG and PDF).

    fit = pd.read_csv("results/tables/scaling_fit.csv").iloc[0]
    points = pd.read_csv("results/tables/scaling_shortfall.csv")
    plot_scaling_fit(points, fit, ["fig1b.png", "fig1b.pdf"])
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from lmsat.figures import plt, save_figure
from lmsat.scaling import predict

LABEL_BOX = dict(boxstyle="round,pad=0.15", facecolor="white", edgecolor="none", alpha=0.85)  # over the curves
STYLES = {  # kind -> (colour, marker) of its points and curve
    "final": ("tab:blue", "o"),
    "best": ("tab:orange", "*"),
}


def law_curve(n_params, tokens, n_grid, **constants) -> np.ndarray:
    """The law along n_grid, at token counts log-interpolated between the models' own.

    A kind's token count differs by model for best checkpoints (and is one value for final
    ones, where the curve is then exactly L(N, T_final)); outside the models' range T is
    held at the nearest model's.
    """
    order = np.argsort(n_params)
    log_n = np.log(np.asarray(n_params, dtype=np.float64)[order])
    log_t = np.log(np.asarray(tokens, dtype=np.float64)[order])
    grid_tokens = np.exp(np.interp(np.log(n_grid), log_n, log_t))
    return predict(n_grid, grid_tokens, **constants)


def shortfall_labels(points: pd.DataFrame, min_params: float) -> list[dict]:
    """The shortfall labels of the models below the fit threshold: the final checkpoint's to
    the right of its point (above the model's name), the best one's to the left (so no two
    labels of a model overlap), and one label "best = final" when both are the same
    checkpoint (same token count)."""
    labels = []
    small = points[points["n_params"] < min_params]
    for model, rows in small.groupby("model", sort=False):
        by_kind = {row.kind: row for row in rows.itertuples()}
        best, final = by_kind.get("best"), by_kind.get("final")
        if best is not None and final is not None and best.tokens == final.tokens:
            labels.append(dict(model=model, kind="final", n_params=final.n_params, measured=final.measured,
                               text=f"{final.shortfall_pct:+.1f}% (best = final)", dx=7, ha="left"))
            continue
        for row, dx, ha in ((final, 7, "left"), (best, -7, "right")):
            if row is not None:
                labels.append(dict(model=model, kind=row.kind, n_params=row.n_params, measured=row.measured,
                                   text=f"{row.shortfall_pct:+.1f}%", dx=dx, ha=ha))
    return labels


def plot_scaling_fit(points: pd.DataFrame, fit, paths) -> None:
    """Fig. 1b (draw_scaling_fit), saved to each of `paths`."""
    save_figure(draw_scaling_fit(points, fit), paths)


def draw_scaling_fit(points: pd.DataFrame, fit):
    """Fig. 1b: loss vs parameters N (log), measured best/final points and the law's curves.

    points: scaling_shortfall.csv rows (model, n_params, kind, tokens, measured, predicted,
    shortfall_pct, fitted); fit: the scaling_fit.csv row (A, alpha, B, beta, E, min_params,
    params, source). Fitted points are drawn with a black edge; each point below the fit
    threshold is labelled with its shortfall in % (shortfall_labels), each final point with its
    model's name.
    """
    constants = {key: float(fit[key]) for key in ("A", "alpha", "B", "beta", "E")}
    n_min, n_max = points["n_params"].min(), points["n_params"].max()
    n_grid = np.geomspace(n_min / 1.5, n_max * 1.5, 200)
    fig, ax = plt.subplots(figsize=(6, 4.2))
    for kind in [k for k in STYLES if k in set(points["kind"])]:
        colour, marker = STYLES[kind]
        rows = points[points["kind"] == kind].sort_values("n_params")
        mean = rows.loc[rows["n_params"] < fit["min_params"], "shortfall_pct"].mean()
        label = f"{kind} checkpoints" + ("" if np.isnan(mean) else f" (mean shortfall {mean:+.1f}%)")
        ax.plot(n_grid, law_curve(rows["n_params"], rows["tokens"], n_grid, **constants), color=colour, lw=1.2,
                ls="-" if kind == "final" else "--", label=f"law at {kind} token counts")
        edge = np.where(rows["fitted"].astype(bool), "black", "none")
        ax.scatter(rows["n_params"], rows["measured"], color=colour, marker=marker, s=120 if marker == "*" else 45,
                   edgecolors=edge, linewidths=1.0, zorder=3, label=label)
        if kind == "final":
            for row in rows.itertuples():
                ax.annotate(row.model, (row.n_params, row.measured), textcoords="offset points", xytext=(7, -10),
                            ha="left", va="center", fontsize=6, color="0.3", bbox=LABEL_BOX)
    for label in shortfall_labels(points, fit["min_params"]):
        colour = STYLES[label["kind"]][0] if label["kind"] in STYLES else "0.2"
        ax.annotate(label["text"], (label["n_params"], label["measured"]), textcoords="offset points",
                    xytext=(label["dx"], 0), ha=label["ha"], va="center", fontsize=7, color=colour, bbox=LABEL_BOX)
    ax.axvline(fit["min_params"], color="0.6", ls=":", lw=1)
    ax.text(fit["min_params"], ax.get_ylim()[0], " fit threshold", va="bottom", fontsize=7, color="0.4")
    how = "fitted" if fit["source"] == "fit" else "fixed"
    ax.set_title(f"L = {constants['A']:.4g}/N^{constants['alpha']:.3f} + {constants['B']:.4g}/T^{constants['beta']:.3g}"
                 f" + {constants['E']:.4g}  (A, alpha {how})", fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel(f"parameters N ({str(fit['params']).replace('_', '-')})")
    ax.set_ylabel("loss (nats/token)")
    ax.legend(fontsize=7, loc="best")
    return fig
