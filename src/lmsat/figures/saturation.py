"""Figures of saturation (Godey et al. 2024, Fig. 1): loss along training, one panel per model
(Fig. 1a), and each model's best and final loss against the scaling law fitted on the larger
models (Fig. 1b). Each draws from a tidy table, saves every path it is given (PNG and PDF)
and returns the figure.

    plot_loss_curves(pd.read_csv("results/default/tables/loss.csv"), ["fig1a.png", "fig1a.pdf"])
    fit = pd.read_csv("results/default/tables/scaling_fit.csv").iloc[0]
    points = pd.read_csv("results/default/tables/scaling_shortfall.csv")
    plot_scaling_fit(points, fit, ["fig1b.png", "fig1b.pdf"])
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from lmsat.figures.registry import SATURATION, figure
from lmsat.figures.style import (
    compact_number,
    in_table_order,
    label_grid,
    log_axis,
    panel_grid,
    plt,
    save_figure,
    shared_legend,
)

LOSS_CAP_PERCENTILE = 90  # Fig. 1a's y axis ends just above this percentile of a model's losses ...
LOSS_CAP_SHARE = 1 / 3  # ... when the first checkpoints above it would otherwise take more than this share of it
LABEL_BOX = dict(boxstyle="round,pad=0.15", facecolor="white", edgecolor="none", alpha=0.85)  # over the curves
STYLES = {  # Fig. 1b: kind -> (colour, marker) of its points and curve
    "final": ("tab:blue", "o"),
    "best": ("tab:orange", "*"),
}


@figure("fig1a_loss", tables=("loss",), target="fig1a", category=SATURATION,
        title="Fig. 1a: loss along training", entropy_rate="sample", cites=("best_final",))
def plot_loss_curves(table: pd.DataFrame, paths, entropy_rate: float | None = None):
    """Fig. 1a: loss vs training tokens, one panel per model by size (in_table_order: smallest
    first, row by row).

    Points get darker as the loss approaches the model's minimum; the best checkpoint is a
    star. Step 0 (0 tokens) has no place on the log axis and is left out, and with it the
    models released without intermediate checkpoints (GPT-2, OPT, ... at `main`, step 0). The y axis ends
    just above the LOSS_CAP_PERCENTILE-th percentile of the model's losses, so that the early
    steep descent does not flatten the late rise; points above it are drawn as triangles on
    the top edge and the panel's right title says how many there are and how high they go. The
    cap applies only when that is so (loss_axis_top): on a short run whose first checkpoint is
    not far above the rest, every point is drawn. One legend for every panel, above them, so
    none covers a panel's data (its best star, say).
    """
    along = table[table["tokens"] > 0]
    models = in_table_order(along)
    if not models:
        raise ValueError("loss table: no checkpoint past step 0, so no model has a loss curve for Fig. 1a")
    fig, axes = panel_grid(len(models))
    cmap = plt.get_cmap("Blues")
    for ax, model in zip(axes, models):
        rows = along[along["model"] == model]
        loss = rows["loss"].to_numpy()
        shade = 0.35 + 0.65 * (1 - (loss - loss.min()) / max(loss.max() - loss.min(), 1e-12))  # darker near the min
        span = max(loss.max() - loss.min(), 0.02 * abs(loss.mean()), 1e-12)  # a flat curve gets a margin too
        bottom = loss.min() - 0.1 * span - (0.1 if entropy_rate is None else 0)
        if entropy_rate is not None:
            bottom = min(bottom, entropy_rate - 0.05 * span)
        top = loss_axis_top(loss, span)
        above = loss > top
        ax.plot(rows["tokens"], np.minimum(loss, top), color="0.75", lw=1, zorder=1)
        ax.scatter(rows["tokens"][~above], loss[~above], c=cmap(shade[~above]), s=18, zorder=2, edgecolors="none")
        if above.any():
            ax.scatter(rows["tokens"][above], np.full(above.sum(), top), marker="^", s=22, color="0.55", zorder=2,
                       clip_on=False, label="off the axis")
            ax.set_title(f"{above.sum()} above (up to {loss.max():.2f})", loc="right", fontsize=7, color="0.35")
        best = rows[rows["is_best"]]
        ax.scatter(best["tokens"], best["loss"], marker="*", s=140, color="crimson", zorder=3, label="best")
        if entropy_rate is not None:
            ax.axhline(entropy_rate, color="k", ls="--", lw=0.8, label="entropy rate")
        log_axis(ax, "x")
        ax.set_title(model, fontsize=9, loc="left")
        ax.set_ylim(bottom, top)
    label_grid(axes, "training tokens", "loss (nats)")
    shared_legend(fig, axes)
    return save_figure(fig, paths)


def loss_axis_top(loss: np.ndarray, span: float) -> float:
    """The top of a Fig. 1a panel for `loss` in step order: just above the LOSS_CAP_PERCENTILE-th
    percentile when the points above it are the first checkpoints (the early descent) and
    drawing them would take more than LOSS_CAP_SHARE of the axis (the cap zooms in on the
    rest by 1.5x or more); otherwise just above the highest loss (nothing hidden)."""
    capped = np.percentile(loss, LOSS_CAP_PERCENTILE) + 0.1 * span
    above = loss > capped
    first = above.any() and not above[int(above.sum()):].any()  # the points above are a prefix
    if first and loss.max() - capped > LOSS_CAP_SHARE * (loss.max() - loss.min() + 0.1 * span):
        return capped
    return loss.max() + 0.1 * span


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
    from lmsat.saturation.scaling import predict  # here: scipy is not needed at DAG time (FIGURES)

    return predict(n_grid, grid_tokens, **constants)


def shortfall_labels(points: pd.DataFrame, min_params: float) -> list[dict]:
    """The shortfall labels of the models below the fit threshold, by size: the final
    checkpoint's to the right of its point (above the model's name), the best one's to the left
    (so no two labels of a model overlap), and one label "best = final" when both are the same
    checkpoint (same token count)."""
    labels = []
    small = points[points["n_params"] < min_params]
    for model in in_table_order(small):
        by_kind = {row.kind: row for row in small[small["model"] == model].itertuples()}
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


FITTED_CONSTANTS = 2  # A and alpha: a law through this many sizes passes through each


def exact_fit_note(points: pd.DataFrame, fit) -> str:
    """A second title line when the fit is exactly determined: fitted (not fixed) on no more
    distinct sizes than it has constants, the law passes through every fitted size, so there is
    no residual to judge it by and no interval (A_se, alpha_se are NaN); otherwise ''."""
    sizes = points.loc[points["fitted"].astype(bool), "n_params"].nunique()
    if fit["source"] != "fit" or sizes > FITTED_CONSTANTS:
        return ""
    return f"\nA, alpha fitted on {sizes} sizes only: the law passes through them exactly (no residual, no interval)"


def plot_scaling_fit(points: pd.DataFrame, fit, paths):
    """Fig. 1b: loss vs parameters N (log), measured best/final points and the law's curves.

    points: scaling_shortfall.csv rows (model, n_params, kind, tokens, measured, predicted,
    shortfall_pct, fitted); fit: the scaling_fit.csv row (A, alpha, B, beta, E, min_params,
    params, source). Fitted points are drawn with a black edge; each point below the fit
    threshold is labelled with its shortfall in % (shortfall_labels), each final point with its
    model's name. A fit on no more sizes than it has constants says so in its title
    (exact_fit_note).
    """
    constants = {key: float(fit[key]) for key in ("A", "alpha", "B", "beta", "E")}
    n_min, n_max = points["n_params"].min(), points["n_params"].max()
    n_grid = np.geomspace(n_min / 1.5, n_max * 1.5, 200)
    fig, ax = plt.subplots(figsize=(6, 4.2), layout="constrained")
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
    ax.axvline(fit["min_params"], color="0.6", ls=":", lw=1, label=f"fit threshold N >= {compact_number(fit['min_params'])}")
    how = "fitted" if fit["source"] == "fit" else "fixed"
    ax.set_title(f"L = {constants['A']:.4g}/N^{constants['alpha']:.3f} + {constants['B']:.4g}/T^{constants['beta']:.3g}"
                 f" + {constants['E']:.4g}  (A, alpha {how})" + exact_fit_note(points, fit), fontsize=8)
    log_axis(ax, "x")
    ax.set_xlabel(f"parameters N ({str(fit['params']).replace('_', '-')})")
    ax.set_ylabel("loss (nats/token)")
    ax.legend(fontsize=7, loc="best")
    return save_figure(fig, paths)


@figure("fig1b_scaling", tables=("scaling_fit", "scaling_shortfall"), target="fig1b", category=SATURATION,
        title="Fig. 1b: scaling law")
def plot_scaling_tables(fit: pd.DataFrame, shortfall: pd.DataFrame, paths):
    """Fig. 1b from its two tables (scaling_fit.csv holds one row: the fit)."""
    return plot_scaling_fit(shortfall, fit.iloc[0], paths)
