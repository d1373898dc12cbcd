"""Figures of representation degeneration (Godey et al. 2024, Figs. 2-5, and low-rank attention).

Each function draws one figure from a tidy table of `lmsat.degeneration.weight_files`, saves every path it
is given (PNG and PDF) and returns the figure. Models are drawn by size (`in_table_order`).
Training time is on a log axis of tokens, so step 0 (0 tokens) is left out of the
along-training panels, as in Fig. 1a. Revisions whose LM head or input embedding is
bit-identical to another revision's (`identical_weights`) are drawn hollow (points) or dashed
(curves), and a note says so.

    plot_anisotropy_depth(layers, ["fig2.png", "fig2.pdf"], suites=["toy"])
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from lmsat.figures.registry import DEGENERATION, figure
from lmsat.figures.style import (
    IDENTICAL_NOTE,
    colours,
    in_table_order,
    label_grid,
    log_axis,
    named_steps_room,
    note,
    panel_grid,
    plt,
    save_figure,
    step_colorbar,
    step_colours,
)

ATTENTION_PANELS = (  # (column, y label); linear axes show "towards 1" and "towards 0" as such
    ("effective_rank", "effective rank"),
    ("nuclear_ratio", "nuclear ratio"),
    ("balance_gap", "balance gap"),
)


@figure("fig2_anisotropy_depth", tables=("anisotropy_layers",), target="fig2", category=DEGENERATION,
        title="Fig. 2: anisotropy by depth", options={"suites": "figures.anisotropy_suites"})
def plot_anisotropy_depth(layers: pd.DataFrame, paths, suites: list[str] | None = None):
    """Fig. 2: anisotropy vs relative layer depth at each model's final checkpoint.

    One panel per suite (`suites`, default every suite of the table), one line per model (by size);
    depth 0 is the embedding output, 1 the last layer (post final norm).
    """
    suites = list(suites or in_table_order(layers, "suite"))
    unknown = sorted(set(suites) - set(layers["suite"]))
    if unknown:
        raise ValueError(f"suites {unknown} have no anisotropy records; drop them from figures.anisotropy_suites")
    final = layers[layers["is_final"]]
    fig, axes = panel_grid(len(suites), 3.6, 3.0, ncols=4, pad=0.4, sharex=False, sharey=True)
    for ax, suite in zip(axes, suites):
        rows = final[final["suite"] == suite]
        models = in_table_order(rows)
        palette = colours(models)
        for model in models:
            curve = rows[rows["model"] == model].sort_values("relative_depth")
            ax.plot(curve["relative_depth"], curve["anisotropy"], "o-", ms=3, lw=1.2, color=palette[model], label=model)
        ax.set_title(suite, fontsize=9, loc="left")
        ax.set_xlabel("relative layer depth")
        ax.set_xlim(-0.03, 1.03)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, loc="best")
    axes[0].set_ylabel("anisotropy (mean cosine)")
    return save_figure(fig, paths)


@figure("fig3_anisotropy_training", tables=("anisotropy_training",), target="fig3", category=DEGENERATION,
        title="Fig. 3: anisotropy along training")
def plot_anisotropy_training(training: pd.DataFrame, paths):
    """Fig. 3: loss along training, points coloured by last-layer anisotropy; a panel per model,
    by size (in_table_order), row by row."""
    from matplotlib.colors import Normalize

    rows_all = training[training["tokens"] > 0]
    models = in_table_order(rows_all)
    norm = Normalize(rows_all["anisotropy_last"].min(), rows_all["anisotropy_last"].max())
    fig, axes = panel_grid(len(models))  # no taller than wide: a report shows it whole
    for ax, model in zip(axes, models):
        rows = rows_all[rows_all["model"] == model]
        ax.plot(rows["tokens"], rows["loss"], color="0.75", lw=1, zorder=1)
        points = ax.scatter(
            rows["tokens"], rows["loss"], c=rows["anisotropy_last"], cmap="magma_r", norm=norm, s=22, zorder=2,
            edgecolors="0.3", linewidths=0.3,
        )
        log_axis(ax, "x")
        ax.set_title(model, fontsize=9, loc="left")
    label_grid(axes, "training tokens", "loss (nats)")
    fig.colorbar(points, ax=list(axes), label="last-layer anisotropy", shrink=0.6)
    return save_figure(fig, paths)


@figure("fig4_head_spectra", tables=("spectra",), target="fig4", category=DEGENERATION, title="Fig. 4: head spectra",
        cites=("identical_weights",))
def plot_head_spectra(spectra: pd.DataFrame, paths):
    """Fig. 4: LM-head singular values / the largest, one curve per checkpoint (colour = step:
    each step its own colour, `step_colours`; the colour bar names every step, or for more steps
    than it can name is a ruler of steps with a tick at each).

    A panel per model with checkpoints along training; models released without intermediate
    checkpoints (one revision at step 0, e.g. GPT-2 at `main`) are left out, unless no model
    has any (then each draws its one spectrum).
    """
    along = spectra.groupby("model", sort=False)["step"].transform("max") > 0
    spectra = spectra[along] if along.any() else spectra
    models = in_table_order(spectra)
    fig, axes = panel_grid(len(models), 3.4, 2.8, ncols=4, pad=0.4, sharex=False, sharey=True)
    room = named_steps_room(fig)
    colour, mappable, steps = step_colours(spectra["step"], room)
    for ax, model in zip(axes, models):
        rows = spectra[spectra["model"] == model]
        for (_, step, flagged), curve in rows.groupby(["revision", "step", "identical_weights"], sort=False):
            ax.plot(
                curve["index"], curve["normalised"], color=colour[int(step)], lw=0.9 if flagged else 1.1,
                ls="--" if flagged else "-", alpha=0.9,
            )
        ax.set_title(model, fontsize=9, loc="left")
        ax.set_xlabel("singular value index")
        ax.set_ylim(0, 1.03)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(r"$\sigma_i / \sigma_1$")
    step_colorbar(fig, mappable, steps, room, list(axes), label="training step", shrink=0.9)
    if spectra["identical_weights"].any():
        note(fig, IDENTICAL_NOTE)
    return save_figure(fig, paths)


@figure("fig5_singular_entropy", tables=("singular_entropy",), target="fig5", category=DEGENERATION,
        title="Fig. 5: singular entropy", options={"power": "spectra.entropy_power"})
def plot_singular_entropy(entropy: pd.DataFrame, paths, power: int = 1):
    """Fig. 5: singular entropy KL(p || uniform) of the head along training, a line per model (by size).

    power 1: p ~ sigma (default); 2: p ~ sigma^2 (columns singular_entropy_sigma[2]).
    """
    if power not in (1, 2):
        raise ValueError(f"power={power!r} must be 1 (p ~ sigma) or 2 (p ~ sigma^2); see spectra.entropy_power")
    column = "singular_entropy_sigma" if power == 1 else "singular_entropy_sigma2"
    rows_all = entropy[entropy["tokens"] > 0]
    models = in_table_order(rows_all)
    palette = colours(models)
    fig, ax = plt.subplots(figsize=(6, 3.6), layout="constrained")
    for model in models:
        rows = rows_all[rows_all["model"] == model]
        colour = palette[model]
        ax.plot(rows["tokens"], rows[column], lw=1.2, color=colour, label=model)
        ok, flagged = rows[~rows["identical_weights"]], rows[rows["identical_weights"]]
        ax.scatter(ok["tokens"], ok[column], s=16, color=colour, zorder=3)
        ax.scatter(flagged["tokens"], flagged[column], s=16, facecolors="none", edgecolors=colour, zorder=3)
    log_axis(ax, "x")
    ax.set_xlabel("training tokens")
    ax.set_ylabel(singular_entropy_label(power))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    if rows_all["identical_weights"].any():
        note(fig, IDENTICAL_NOTE)
    return save_figure(fig, paths)


def singular_entropy_label(power: int) -> str:
    """Fig. 5's y label: what the "singular entropy" is, a KL divergence to the uniform
    distribution, and its direction (an entropy reads the other way round: higher, flatter)."""
    p = r"$p \propto \sigma$" if power == 1 else r"$p \propto \sigma^2$"
    return f"KL(p || uniform) (nats), {p}\n0 = flat; higher = more degenerate"


def attention_medians(attention: pd.DataFrame) -> pd.DataFrame:
    """Median over heads of each metric, per checkpoint x layer x kind (what the figure draws)."""
    keys = ["suite", "model", "revision", "step", "tokens", "identical_weights", "kind", "layer", "relative_depth"]
    columns = [name for name, _ in ATTENTION_PANELS]
    return attention.groupby(keys, sort=False)[columns].median().reset_index()


@figure("attention_lowrank", tables=("attention_lowrank",), target="attention", category="Low-rank attention",
        title="Low-rank attention products")
def plot_attention_lowrank(attention: pd.DataFrame, paths):
    """Low-rank attention along training: a row per model (by size), a column per metric.

    Lines are layers (colour = relative depth), solid for qk = W_Q^T W_K, dashed for
    vo = W_O W_V, each the median over the layer's heads.
    """
    from matplotlib.colors import ListedColormap, Normalize

    medians = attention_medians(attention[attention["tokens"] > 0])
    models = in_table_order(medians)
    cmap = plt.get_cmap("plasma")
    fig, axes = plt.subplots(
        len(models), len(ATTENTION_PANELS), figsize=(3.4 * len(ATTENTION_PANELS), 2.0 * len(models) + 0.8),
        sharex=True, squeeze=False, layout="constrained",
    )
    for row, model in zip(axes, models):
        rows = medians[medians["model"] == model]
        for ax, (column, label) in zip(row, ATTENTION_PANELS):
            for (kind, layer, depth), curve in rows.groupby(["kind", "layer", "relative_depth"], sort=True):
                curve = curve.sort_values("step")
                colour = cmap(0.85 * depth)
                ax.plot(curve["tokens"], curve[column], ls="-" if kind == "qk" else "--", lw=1.1, color=colour)
                flagged = curve[curve["identical_weights"]]
                ax.scatter(flagged["tokens"], flagged[column], s=14, facecolors="none", edgecolors=colour, zorder=3)
            log_axis(ax, "x")
            ax.grid(alpha=0.3)
            ax.set_ylabel(label, fontsize=8)
        row[0].set_title(model, fontsize=9, loc="left")
    for ax in axes[-1]:
        ax.set_xlabel("training tokens")
    handles = [
        plt.Line2D([], [], color="0.3", ls="-", label=r"qk: $W_Q^\top W_K$"),
        plt.Line2D([], [], color="0.3", ls="--", label=r"vo: $W_O W_V$"),
    ]
    axes[0, -1].legend(handles=handles, fontsize=7, loc="best")
    mappable = plt.cm.ScalarMappable(norm=Normalize(0, 1), cmap=ListedColormap(cmap(np.linspace(0, 0.85, 256))))
    fig.colorbar(mappable, ax=axes.ravel().tolist(), label="relative layer depth", shrink=0.6)
    if medians["identical_weights"].any():
        note(fig, "hollow: head or embedding bit-identical to another revision's (tables/identical_weights.csv)")
    return save_figure(fig, paths)


@figure("effective_rank", tables=("effective_rank",), target="effective_rank", category=DEGENERATION,
        title="Effective rank of the last layer")
def plot_effective_rank(table: pd.DataFrame, paths):
    """Effective rank (solid: as is, dashed: centred) and singular entropy of the last-layer
    representations along training; a line per model, by size (in_table_order)."""
    rows_all = table[table["tokens"] > 0]
    models = in_table_order(rows_all)
    colour = colours(models)
    fig, axes = panel_grid(2)
    for model in models:
        rows = rows_all[rows_all["model"] == model]
        axes[0].plot(rows["tokens"], rows["effective_rank"], color=colour[model], marker="o", ms=3, label=model)
        axes[0].plot(rows["tokens"], rows["effective_rank_centered"], color=colour[model], ls="--", lw=1)
        axes[1].plot(rows["tokens"], rows["singular_entropy"], color=colour[model], marker="o", ms=3, label=model)
    for ax, ylabel in zip(axes, ("effective rank", singular_entropy_label(1))):  # Fig. 5's KL, of the representations
        log_axis(ax, "x")
        ax.set_xlabel("training tokens")
        ax.set_ylabel(ylabel)
    styles = [plt.Line2D([], [], color="0.3", marker="o", ms=3, label="effective rank as is"),
              plt.Line2D([], [], color="0.3", ls="--", lw=1, label="effective rank centred (mean row removed)")]
    handles, _ = axes[0].get_legend_handles_labels()
    # under the panels: beside the models, what solid and dashed are (a legend in the panel covers its curves)
    fig.legend(handles=[*handles, *styles], loc="outside lower center", ncol=min(len(handles) + 2, 4), fontsize=7,
               frameon=False)
    return save_figure(fig, paths)
