"""Figures of the peers' per-layer measures along training: representation similarity across
checkpoints (CKA, as pico-analyze) and weight diagnostics (WeightWatcher's alpha, stable and
MP soft rank; pico-analyze's sparsity and condition numbers).

Training time is on a log axis of tokens, so step 0 is left out, as in Fig. 1a. Models are
drawn by size (`in_table_order`), each in its own colour (`colours`).

    plot_weight_alpha(weight_alpha_table, ["weight_alpha.png"])
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from lmsat.figures.registry import figure
from lmsat.figures.style import colours, in_table_order, label_grid, log_axis, note, panel_grid, plt, save_figure

DYNAMICS = "Training dynamics"  # short: the report's menu widens to its longest category
HEAD = "head"  # the LM head's matrix name (lmsat.degeneration.weight_diagnostics.HEAD)
# column -> (its margin's column, the margin from which it is reproducible on another CPU):
# lmsat.degeneration.weight_diagnostics.REPRODUCIBLE (not imported: it brings h5py at DAG time)
REPRODUCIBLE = {"alpha": ("alpha_D_margin", 0.02), "mp_softrank": ("mp_softrank_margin", 0.01)}


@figure("representation_similarity", tables=("representation_similarity",), target="representation_similarity",
        category=DYNAMICS, title="Representation similarity across checkpoints (CKA)")
def plot_representation_similarity(similarity: pd.DataFrame, paths):
    """Linear CKA of each layer's representations with the final checkpoint's (solid) and with
    the previous checkpoint's (dotted), along training; a panel per model, a colour per
    relative depth (0 = embeddings, 1 = the last layer)."""
    rows_all = similarity[similarity["tokens"] > 0]
    models = in_table_order(rows_all)
    from matplotlib.colors import ListedColormap

    fig, axes = panel_grid(len(models), sharey=True)
    cmap = ListedColormap(plt.get_cmap("viridis")(np.linspace(0, 0.9, 256)))  # no pale yellow on white
    for ax, model in zip(axes, models):
        rows = rows_all[rows_all["model"] == model]
        for (layer, depth), per_layer in rows.groupby(["layer", "relative_depth"], sort=True):
            colour = cmap(float(depth))
            for reference, style in (("final", "-"), ("previous", ":")):
                curve = per_layer[per_layer["reference"] == reference].sort_values("tokens")
                ax.plot(curve["tokens"], curve["cka"], style, color=colour, lw=1.2, marker="o" if style == "-" else None,
                        ms=2.5, label=f"layer {layer}" if reference == "final" else None)
        log_axis(ax, "x")
        ax.set_ylim(-0.03, 1.03)
        ax.grid(alpha=0.3)
        ax.set_title(model, fontsize=9, loc="left")
    label_grid(axes, "training tokens", "linear CKA")
    bar = fig.colorbar(plt.cm.ScalarMappable(cmap=cmap, norm=plt.Normalize(0, 1)), ax=list(axes), shrink=0.6)
    bar.set_label("relative depth (0 = embeddings)")
    bar.set_ticks([0, 0.5, 1])
    note(fig, "solid: with the final checkpoint; dotted: with the previous checkpoint (same tokens, tables/"
              "representation_similarity.csv)")
    return save_figure(fig, paths)


def reproducible(table: pd.DataFrame, column: str) -> pd.Series | None:
    """Per row, whether its `column` is reproducible on another CPU: its fit's margin at least
    REPRODUCIBLE's (a fit chosen by less may choose otherwise there); None for a column without
    a margin, or a table without it."""
    if column not in REPRODUCIBLE or REPRODUCIBLE[column][0] not in table:
        return None
    margin, least = REPRODUCIBLE[column]
    return table[margin] >= least


def _along_training(ax, table: pd.DataFrame, column: str, models, palette) -> None:
    """Per model: the LM head's `column` (solid; a hollow marker where its fit is not
    reproducible, `reproducible`) and its median over the blocks' matrices (dashed), along
    training; NaN values (documented by their status) left out."""
    for model in models:
        rows = table[(table["model"] == model) & (table["tokens"] > 0)]
        head = rows[rows["matrix"] == HEAD].sort_values("tokens")
        blocks = rows[rows["matrix"] != HEAD].groupby("tokens")[column].median().sort_index()
        solid = reproducible(head, column)
        solid = pd.Series(True, index=head.index) if solid is None else solid
        ax.plot(head["tokens"], head[column], "-", lw=1.3, color=palette[model], label=model)
        ax.plot(head["tokens"][solid], head[column][solid], "o", ms=2.5, color=palette[model])
        ax.plot(head["tokens"][~solid], head[column][~solid], "o", ms=3.5, mfc="white", mec=palette[model], mew=1.0)
        ax.plot(blocks.index, blocks.to_numpy(), "--", lw=1.0, color=palette[model])
    log_axis(ax, "x")
    ax.grid(alpha=0.3)


def reproducibility_note(table: pd.DataFrame) -> str:
    """How many fits of the table are not reproducible on another CPU, per column with a margin."""
    parts = []
    for column, (margin, least) in REPRODUCIBLE.items():
        flags = reproducible(table, column)
        if flags is None:
            continue
        fitted = table[column].notna()
        parts.append(f"{column} for {int((~flags & fitted).sum())} of {int(fitted.sum())} fits ({margin} < {least:g})")
    return ("; not reproducible on another CPU (hollow: the head's): " + ", ".join(parts)) if parts else ""


def _panels(table: pd.DataFrame, panels, paths, footnote: str):
    models = in_table_order(table)
    palette = colours(models)
    fig, axes = panel_grid(len(panels), 3.6, 2.6, ncols=len(panels) if len(panels) <= 3 else 2)
    for ax, (column, label, scale) in zip(axes, panels):
        _along_training(ax, table, column, models, palette)
        if scale == "log":
            log_axis(ax, "y")
        ax.set_ylabel(label)
    label_grid(axes, "training tokens", panels[0][1])
    for ax, (_, label, _) in zip(axes, panels):
        ax.set_ylabel(label)
    axes[0].legend(fontsize=6, loc="best")
    note(fig, footnote)
    return save_figure(fig, paths)


@figure("weight_alpha", tables=("weight_alpha",), target="weight_alpha", category=DYNAMICS,
        title="Weight spectra: power-law alpha, stable rank, MP soft rank (WeightWatcher)")
def plot_weight_alpha(table: pd.DataFrame, paths):
    """WeightWatcher's alpha, stable rank and MP soft rank along training: the LM head
    (solid) and the median over every block's linear layers (dashed), a colour per model; the
    head's alpha and soft rank hollow where their fit is not reproducible on another CPU
    (reproducible), and the footnote counting such fits among all (reproducibility_note)."""
    panels = [("alpha", "power-law alpha", "linear"), ("stable_rank", "stable rank", "log"),
              ("mp_softrank", "MP soft rank", "linear")]
    fitted = table["alpha_n"].dropna()
    footnote = ("solid: LM head; dashed: median over the blocks' linear layers. alpha fitted on the top "
                f"{int(fitted.min()) if len(fitted) else 0}-{int(fitted.max()) if len(fitted) else 0} eigenvalues "
                f"(alpha_n){reproducibility_note(table)}. tables/weight_alpha.csv, with alpha_sigma and alpha_D")
    return _panels(table, panels, paths, footnote)


@figure("weight_sparsity", tables=("weight_sparsity",), target="weight_sparsity", category=DYNAMICS,
        title="Weight sparsity and condition numbers (pico-analyze)")
def plot_weight_sparsity(table: pd.DataFrame, paths):
    """pico-analyze's Gini and Hoyer sparsity, proportional effective rank and condition
    number along training: the LM head (solid) and the median over the blocks' linear
    layers (dashed), a colour per model."""
    finite = table.replace([np.inf], np.nan)
    panels = [("gini", "Gini of |w|", "linear"), ("hoyer", "Hoyer sparsity", "linear"),
              ("per", "proportional effective rank", "linear"), ("condition_number", "condition number", "log")]
    return _panels(finite, panels, paths, "solid: LM head; dashed: median over the blocks' linear layers "
                                          "(tables/weight_sparsity.csv)")
