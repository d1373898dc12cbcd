"""The gradient bottleneck along training (Godey & Artzi 2026): the share of the loss's logit
gradient the LM head passes back, per model, beside what a random subspace of its rank keeps.

    plot_gradient_bottleneck(table, ["gradient_bottleneck.png", "gradient_bottleneck.pdf"])

Training time is on a log axis of tokens, so step 0 is left out as in the other figures
along training (its row is in the table).
"""

from __future__ import annotations

import pandas as pd

from lmsat.figures.registry import BOTTLENECK, figure
from lmsat.figures.style import colours, in_table_order, log_axis, panel_grid, plt, save_figure

Z95 = 1.959963984540054  # the two-sided 95% normal quantile: error bars are mean +- Z95 SE


@figure("gradient_bottleneck", tables=("gradient_bottleneck",), target="gradient_bottleneck", category=BOTTLENECK,
        title="Gradient bottleneck along training")
def plot_gradient_bottleneck(table: pd.DataFrame, paths):
    """Three panels along training, a line per model (by size): (a) the mean share of each
    token's logit-gradient energy inside the head's column space, with rank / V (a random
    direction's share) dashed in the model's colour; (b) that share over rank / V (1: as a
    random subspace; below: worse); (c) (b) by target frequency, frequent solid, rare dotted.
    Error bars: 95% intervals over sequences."""
    rows_all = table[table["tokens"] > 0]
    models = in_table_order(rows_all)
    colour = colours(models)
    fig, axes = panel_grid(3, width=3.6, height=2.8, ncols=3)
    for model in models:
        rows = rows_all[rows_all["model"] == model].sort_values("step")
        c, reference = colour[model], rows["random_energy"]
        axes[0].errorbar(rows["tokens"], rows["energy_kept"], yerr=Z95 * rows["energy_kept_sem"], color=c, marker="o",
                         ms=3, lw=1.2, capsize=0, label=model)
        axes[0].axhline(float(reference.iloc[-1]), color=c, ls="--", lw=0.9)
        axes[1].errorbar(rows["tokens"], rows["energy_kept"] / reference, yerr=Z95 * rows["energy_kept_sem"] / reference,
                         color=c, marker="o", ms=3, lw=1.2, capsize=0, label=model)
        axes[2].plot(rows["tokens"], rows["energy_kept_frequent"] / reference, color=c, lw=1.2)
        axes[2].plot(rows["tokens"], rows["energy_kept_rare"] / reference, color=c, lw=1.2, ls=":")
    for ax in axes[1:]:
        ax.axhline(1.0, color="0.4", lw=0.8)
    for ax, ylabel in zip(axes, ("energy share kept", "kept / (rank / V)", "kept / (rank / V), by target")):
        log_axis(ax, "x")
        ax.set_xlabel("training tokens")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    log_axis(axes[0], "y")
    axes[0].legend(fontsize=7, loc="best", title="dashed: rank / V", title_fontsize=7)
    axes[2].legend(handles=[plt.Line2D([], [], color="0.3", lw=1.2, label="frequent targets"),
                            plt.Line2D([], [], color="0.3", lw=1.2, ls=":", label="rare targets")], fontsize=7, loc="best")
    return save_figure(fig, paths)
