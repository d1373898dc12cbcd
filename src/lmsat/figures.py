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


def plot_loss_curves(table, paths, entropy_rate: float | None = None) -> "plt.Figure":
    """Fig. 1a: loss vs training tokens, one panel per model (smallest on top).

    Points get darker as the loss approaches the model's minimum; the best checkpoint is a
    star. Step 0 (0 tokens) has no place on the log axis and is left out, and with it the
    models released without intermediate checkpoints (GPT-2, OPT, ... at `main`, step 0).
    """
    models = list(dict.fromkeys(table.loc[table["tokens"] > 0, "model"]))
    if not models:
        raise ValueError("loss table: no checkpoint past step 0, so no model has a loss curve for Fig. 1a")
    fig, axes = plt.subplots(len(models), 1, figsize=(6, 1.9 * len(models) + 0.6), sharex=True, squeeze=False)
    cmap = plt.get_cmap("Blues")
    for ax, model in zip(axes[:, 0], models):
        rows = table[(table["model"] == model) & (table["tokens"] > 0)]
        loss = rows["loss"].to_numpy()
        span = max(loss.max() - loss.min(), 1e-12)
        shade = 0.35 + 0.65 * (1 - (loss - loss.min()) / span)  # darker near the minimum
        ax.plot(rows["tokens"], loss, color="0.75", lw=1, zorder=1)
        ax.scatter(rows["tokens"], loss, c=cmap(shade), s=18, zorder=2, edgecolors="none")
        best = rows[rows["is_best"]]
        ax.scatter(best["tokens"], best["loss"], marker="*", s=140, color="crimson", zorder=3, label="best")
        if entropy_rate is not None:
            ax.axhline(entropy_rate, color="k", ls="--", lw=0.8, label="entropy rate")
        ax.set_xscale("log")
        ax.set_ylabel("loss (nats)")
        ax.set_title(model, fontsize=9, loc="left")
        ax.set_ylim(loss.min() - 0.1 * span - (0.1 if entropy_rate is None else 0), np.percentile(loss, 90) + 0.1 * span)
        if entropy_rate is not None:
            ax.set_ylim(min(ax.get_ylim()[0], entropy_rate - 0.05 * span), ax.get_ylim()[1])
    axes[0, 0].legend(fontsize=7, loc="upper right")
    axes[-1, 0].set_xlabel("training tokens")
    save_figure(fig, paths)
    return fig  # closed; its axes stay inspectable
