"""Figures of EleutherAI's published record of Pythia (lmsat.products.published_run): the
counterparts of Fig. 1a and Fig. 1b, drawn from LAMBADA last-word perplexity as an older
lm-eval harness measured it, not from the Pile validation loss the paper plots.

    plot_published_curves(pd.read_csv("results/published/tables/published_loss.csv"), ["a.png"])
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from lmsat.figures.registry import figure
from lmsat.figures.saturation import LABEL_BOX, STYLES, law_curve, shortfall_labels
from lmsat.figures.style import colours, in_table_order, log_axis, plt, save_figure

# Short: the report's menu is as wide as its longest category. Every caption of the section
# says that these are EleutherAI's measurements, not the run's.
PUBLISHED = "Published record (EleutherAI)"
ZOOM_DECADES = 1  # the published Fig. 1a's right panel: the last decade of tokens
SOURCE_NOTE = "EleutherAI's published lm-eval (< 0.4) results, zero-shot: LAMBADA last-word perplexity, not the Pile loss"


def sizes_in_order(table: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(m.removesuffix("-deduped") for m in in_table_order(table)))


@figure("published_fig1a", tables=("published_loss",), target="published_fig1a", category=PUBLISHED,
        title="Fig. 1a counterpart: published LAMBADA perplexity along training", cites=("published_verdicts",))
def plot_published_curves(table: pd.DataFrame, paths):
    """LAMBADA perplexity against training tokens, one colour per size, the deduped twin dashed,
    each model's best (lowest-perplexity) checkpoint a star. Left: every checkpoint, both axes
    log (step 0, 0 tokens, has no place on them and is left out). Right: the last decade of
    tokens (ZOOM_DECADES), where saturation shows, on a linear perplexity axis (a log one and the
    early 1e9 spike squeeze it into the corner of the left panel)."""
    along = table[table["tokens"] > 0]
    if along.empty:
        raise ValueError("published_loss: no checkpoint past step 0 to draw")
    sizes = sizes_in_order(along)
    palette = colours(sizes)
    fig, (ax, zoom) = plt.subplots(1, 2, figsize=(11, 4.4), layout="constrained", width_ratios=(1.1, 1))
    last = along["tokens"].max()
    window = (last / 10**ZOOM_DECADES, last * 1.04)
    for model in in_table_order(along):
        rows = along[along["model"] == model].sort_values("step")
        deduped = model.endswith("-deduped")
        colour = palette[model.removesuffix("-deduped")]
        best = rows[rows["is_best"].astype(bool)]
        for panel in (ax, zoom):
            panel.plot(rows["tokens"], rows["perplexity"], color=colour, lw=1.2, ls="--" if deduped else "-",
                       label=model.removeprefix("pythia-") if panel is ax else None)
            panel.scatter(best["tokens"], best["perplexity"], marker="*", s=90, color=colour, edgecolors="black",
                          linewidths=0.5, zorder=3)
    ax.scatter([], [], marker="*", s=90, color="white", edgecolors="black", label="best checkpoint")
    ax.axvspan(*window, color="0.92", zorder=0, label="right: the last decade, zoomed")
    log_axis(ax, "x")
    ax.set_yscale("log")
    ax.set_ylabel("LAMBADA perplexity (published)")
    ax.set_title("every checkpoint (log-log)", fontsize=8, loc="left")
    in_window = along[(along["tokens"] >= window[0]) & (along["tokens"] <= window[1])]["perplexity"]
    span = in_window.max() - in_window.min()
    zoom.set_xlim(*window)
    log_axis(zoom, "x")
    zoom.set_ylim(max(in_window.min() - 0.05 * span, 0), in_window.max() + 0.05 * span)
    zoom.set_ylabel("LAMBADA perplexity (linear)")
    zoom.set_title("the last decade of tokens, linear perplexity", fontsize=8, loc="left")
    zoom.grid(alpha=0.3)
    for panel in (ax, zoom):
        panel.set_xlabel("training tokens")
    fig.suptitle(SOURCE_NOTE, fontsize=7)
    fig.legend(*ax.get_legend_handles_labels(), loc="outside right upper", fontsize=6,
               title="solid: Pile, dashed: deduped", title_fontsize=6, frameon=False)
    return save_figure(fig, paths)


@figure("published_fig1b", tables=("published_scaling_fit", "published_scaling_shortfall"),
        target="published_fig1b", category=PUBLISHED,
        title="Fig. 1b counterpart: published LAMBADA log-perplexity against the power law")
def plot_published_scaling(fit: pd.DataFrame, points: pd.DataFrame, paths):
    """log(LAMBADA ppl) of each model's best (stars) and final (circles) checkpoint against N,
    and the power law A / N^alpha fitted on the models >= min_params (black-edged points);
    each smaller model's point is labelled with its shortfall in %."""
    fit = fit.iloc[0]
    constants = {key: float(fit[key]) for key in ("A", "alpha", "B", "beta", "E")}
    n_grid = np.geomspace(points["n_params"].min() / 1.5, points["n_params"].max() * 1.5, 200)
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    final = points[points["kind"] == "final"]
    ax.plot(n_grid, law_curve(final["n_params"], final["tokens"], n_grid, **constants), color="0.2", lw=1.2,
            label=f"log ppl = {constants['A']:.3g} / N^{constants['alpha']:.3f} (fit on N >= {fit['min_params']:.3g})")
    for kind in ("final", "best"):
        colour, marker = STYLES[kind]
        rows = points[points["kind"] == kind]
        mean = rows.loc[rows["n_params"] < fit["min_params"], "shortfall_pct"].mean()
        edge = np.where(rows["fitted"].astype(bool), "black", "none")
        ax.scatter(rows["n_params"], rows["measured"], color=colour, marker=marker, s=110 if marker == "*" else 40,
                   edgecolors=edge, linewidths=1.0, zorder=3, alpha=0.85,
                   label=f"{kind} checkpoints" + ("" if np.isnan(mean) else f" (mean shortfall {mean:+.1f}%)"))
    pile = points[~points["model"].str.endswith("-deduped")]  # one label per size: the Pile-trained twin's
    for label in shortfall_labels(pile, fit["min_params"]):
        ax.annotate(f"{label['model'].removeprefix('pythia-')} {label['text']}", (label["n_params"], label["measured"]),
                    textcoords="offset points", xytext=(label["dx"], 0), ha=label["ha"], va="center", fontsize=6,
                    color=STYLES[label["kind"]][0], bbox=LABEL_BOX)
    ax.axvline(fit["min_params"], color="0.6", ls=":", lw=1)
    log_axis(ax, "x")
    ax.set_xlabel(f"parameters N ({str(fit['params']).replace('_', '-')})")
    ax.set_ylabel("log LAMBADA perplexity (published)")
    ax.set_title(SOURCE_NOTE + "; B, beta, E of Hoffmann et al. do not apply", fontsize=7)
    ax.legend(fontsize=7, loc="upper right")
    return save_figure(fig, paths)
