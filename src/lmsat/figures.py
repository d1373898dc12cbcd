"""The paper's figures, drawn from the tidy tables (PNG and PDF of each)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from lmsat.io import atomic_path  # noqa: E402


def save_figure(fig, paths) -> None:
    """Save `fig` to each path (format from the suffix), atomically, then close it."""
    for path in paths:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=Path(path).suffix[1:], dpi=150, bbox_inches="tight")
    plt.close(fig)


def panel_grid(n: int, width: float = 3.4, height: float = 2.3):
    """A grid of n panels, at most as tall as it is wide (a report shows a figure at its width,
    so a tall column of panels is cut off at the top of a browser window), filled row by row.
    Panels beyond n are hidden. Returns (fig, axes in reading order)."""
    ncols = max(1, min(n, int(np.ceil(np.sqrt(n)))))
    nrows = int(np.ceil(n / ncols))
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(width * ncols, height * nrows + 0.6), sharex=True, squeeze=False, layout="constrained"
    )
    flat = list(axes.ravel())
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def label_grid(axes, xlabel: str, ylabel: str) -> None:
    """Axis labels of a panel_grid: y on the first column, x (with tick labels) on the lowest
    panel of each column."""
    ncols = axes[0].get_subplotspec().get_gridspec().ncols
    for index, ax in enumerate(axes):
        if index % ncols == 0:
            ax.set_ylabel(ylabel)
        if index + ncols >= len(axes):
            ax.set_xlabel(xlabel)
            ax.xaxis.set_tick_params(labelbottom=True)


LOSS_CAP_PERCENTILE = 90  # Fig. 1a's y axis ends just above this percentile of a model's losses


def plot_loss_curves(table, paths, entropy_rate: float | None = None) -> "plt.Figure":
    """Fig. 1a (draw_loss_curves), saved to each of `paths`; returns the figure."""
    fig = draw_loss_curves(table, entropy_rate)
    save_figure(fig, paths)
    return fig


def draw_loss_curves(table, entropy_rate: float | None = None):
    """Fig. 1a: loss vs training tokens, one panel per model in table order (by size: smallest
    first, row by row).

    Points get darker as the loss approaches the model's minimum; the best checkpoint is a
    star. Step 0 (0 tokens) has no place on the log axis and is left out, and with it the
    models released without intermediate checkpoints (GPT-2, OPT, ... at `main`, step 0). The y axis ends
    just above the LOSS_CAP_PERCENTILE-th percentile of the model's losses, so that the early
    steep descent does not flatten the late rise; points above it are drawn as triangles on
    the top edge and the panel says how many there are and how high they go.
    """
    models = list(dict.fromkeys(table.loc[table["tokens"] > 0, "model"]))
    if not models:
        raise ValueError("loss table: no checkpoint past step 0, so no model has a loss curve for Fig. 1a")
    fig, axes = panel_grid(len(models))
    cmap = plt.get_cmap("Blues")
    for ax, model in zip(axes, models):
        rows = table[(table["model"] == model) & (table["tokens"] > 0)]
        loss = rows["loss"].to_numpy()
        shade = 0.35 + 0.65 * (1 - (loss - loss.min()) / max(loss.max() - loss.min(), 1e-12))  # darker near the min
        span = max(loss.max() - loss.min(), 0.02 * abs(loss.mean()), 1e-12)  # a flat curve gets a margin too
        bottom = loss.min() - 0.1 * span - (0.1 if entropy_rate is None else 0)
        if entropy_rate is not None:
            bottom = min(bottom, entropy_rate - 0.05 * span)
        top = np.percentile(loss, LOSS_CAP_PERCENTILE) + 0.1 * span
        above = loss > top
        ax.plot(rows["tokens"], np.minimum(loss, top), color="0.75", lw=1, zorder=1)
        ax.scatter(rows["tokens"][~above], loss[~above], c=cmap(shade[~above]), s=18, zorder=2, edgecolors="none")
        if above.any():
            ax.scatter(rows["tokens"][above], np.full(above.sum(), top), marker="^", s=22, color="0.55", zorder=2,
                       clip_on=False, label="off the axis")
            ax.text(0.98, 0.96, f"{above.sum()} above the axis (up to {loss.max():.2f})", transform=ax.transAxes,
                    ha="right", va="top", fontsize=7, color="0.35")
        best = rows[rows["is_best"]]
        ax.scatter(best["tokens"], best["loss"], marker="*", s=140, color="crimson", zorder=3, label="best")
        if entropy_rate is not None:
            ax.axhline(entropy_rate, color="k", ls="--", lw=0.8, label="entropy rate")
        ax.set_xscale("log")
        ax.set_title(model, fontsize=9, loc="left")
        ax.set_ylim(bottom, top)
    label_grid(axes, "training tokens", "loss (nats)")
    axes[0].legend(fontsize=7, loc="lower left")
    return fig
