"""What every figure shares: the Agg backend, saving, panel grids and their labels, colours,
and the one order of models.

Models are drawn by size everywhere, smallest first (panels row by row, legend entries,
colours from light-on-dark viridis). The order is the table's: every tidy table is written in
the plan's order (`lmsat.planning.model_entries.by_size`: suite by suite, then non-embedding parameters,
depth, width), so `in_table_order` keeps first appearance and no figure sorts on its own
(a sort by width or name would disagree with by_size, e.g. Pythia-1b and 1.4b share d=2048).

    fig, axes = panel_grid(len(models))
    label_grid(axes, "training tokens", "loss (nats)")
    save_figure(fig, ["fig.png", "fig.pdf"])
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np

from lmsat.core.io import atomic_path
from lmsat.figures.numbers import compact_number as compact_number  # re-exported for the plots


class _Pyplot:
    """matplotlib.pyplot on the Agg backend (the only place that sets it), imported on first
    use: the workflow imports every figure module at DAG time to read its registry entries,
    and matplotlib takes a good part of a second to import (pyplot over a second)."""

    def __getattr__(self, name):
        return getattr(_agg_pyplot(), name)


@cache
def _agg_pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot

    return matplotlib.pyplot


plt = _Pyplot()

IDENTICAL_NOTE = "hollow/dashed: head or embedding bit-identical to another revision's (tables/identical_weights.csv)"


def in_table_order(table, column: str = "model") -> list:
    """The distinct values of `column` in order of first appearance: for models, by size (every
    table is written in the plan's order, lmsat.planning.model_entries.by_size)."""
    return list(dict.fromkeys(table[column]))


def colours(names, cmap: str = "viridis") -> dict:
    """name -> colour, along `cmap` from 0 to 0.85 in the order given (the yellow end is skipped:
    too light on white)."""
    names = list(names)
    scale = plt.get_cmap(cmap)
    return {name: scale(0.85 * i / max(len(names) - 1, 1)) for i, name in enumerate(names)}


def save_figure(fig, paths, optional=()):
    """Keep every legend and label off the data and the ticks (legibility.keep_clear: each one
    that covers something moves to a free place; a text of `optional` with none is removed),
    then save `fig` to each path (format from the suffix), atomically, and close it; returns the
    figure (closed, its artists still inspectable)."""
    from lmsat.figures.legibility import keep_clear

    keep_clear(fig, optional=optional)
    for path in paths:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=Path(path).suffix[1:], dpi=150, bbox_inches="tight")
    plt.close(fig)
    return fig


def panel_grid(n: int, width: float = 3.4, height: float = 2.3, ncols: int | None = None, pad: float = 0.6,
               sharex: bool = True, sharey: bool = False):
    """A grid of n panels, filled row by row, `ncols` wide (default: the ceiling of sqrt(n), so
    the grid is at most as tall as it is wide: a report shows a figure at its width, so a tall
    column of panels is cut off at the top of a browser window). Panels beyond n are hidden.
    Returns (fig, axes in reading order)."""
    ncols = max(1, min(n, ncols or int(np.ceil(np.sqrt(n)))))
    nrows = int(np.ceil(n / ncols))
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(width * ncols, height * nrows + pad), sharex=sharex, sharey=sharey, squeeze=False,
        layout="constrained",
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


def shared_legend(fig, axes, **kwargs):
    """One legend of every labelled artist of `axes` (each label once, first seen first), above
    the panels, outside them (constrained layout makes room): a panel's legend would cover
    that panel's data."""
    entries = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    if entries:
        return fig.legend(entries.values(), entries.keys(), loc="outside upper center", ncol=len(entries),
                          fontsize=7, frameon=False, **kwargs)
    return None


def note(fig, text: str) -> None:
    """A grey footnote under the figure, in lines no wider than the figure (a 7-pt character is
    about 3.5 pt wide)."""
    import textwrap

    width = max(40, int(fig.get_figwidth() * 72 / 3.6))
    fig.text(0.01, -0.01, textwrap.fill(text, width), fontsize=7, color="0.35", ha="left", va="top")


def log_axis(ax, which: str = "x") -> None:
    """Set a log scale on `which` axis of `ax` with few, short, non-overlapping labels
    (CompactLogLocator, compact_number) and unlabelled minor ticks, for any data span."""
    from matplotlib.ticker import NullFormatter

    from lmsat.figures.ticks import CompactFormatter, CompactLogLocator

    axis = ax.xaxis if which == "x" else ax.yaxis
    (ax.set_xscale if which == "x" else ax.set_yscale)("log")
    axis.set_major_locator(CompactLogLocator())
    axis.set_major_formatter(CompactFormatter())
    axis.set_minor_formatter(NullFormatter())


STEP_LABEL_PT = 7  # font size of a colour bar's step labels
STEP_LABEL_PITCH = 1.35  # a label's height, in font sizes, with the gap to the next


def named_steps_room(fig, share: float = 0.9, margin_pt: float = 60) -> int:
    """How many step labels a colour bar spanning `share` of `fig`'s height (less `margin_pt`
    for the titles and the x labels) names without overlap."""
    length_pt = share * (fig.get_figheight() * 72 - margin_pt)
    return max(int(length_pt // (STEP_LABEL_PT * STEP_LABEL_PITCH)), 2)


def step_colours(steps, room: int, cmap: str = "viridis"):
    """Each distinct step its own colour, and a colour bar from which each is read.

    Up to `room` steps (named_steps_room: as many as the bar can name): evenly along `cmap`
    (0 to 0.85) by rank, one band per step, every band named, so 8 steps from 50 to 400 are as
    far apart as 8 from 0 to 143,000. More (Pythia's 154): the colour is the step itself on a
    log(1 + step) scale, and the bar is a ruler of steps with a tick at every step drawn.
    Returns (step -> colour, a colour-bar mappable, the steps in order); step_colorbar draws
    the bar.
    """
    from matplotlib.colors import BoundaryNorm, FuncNorm, LinearSegmentedColormap, ListedColormap

    steps = sorted(set(int(step) for step in steps))
    scale = plt.get_cmap(cmap)
    if len(steps) <= room:
        colour = {step: scale(0.85 * i / max(len(steps) - 1, 1)) for i, step in enumerate(steps)}
        norm = BoundaryNorm(np.arange(len(steps) + 1) - 0.5, len(steps))
        mappable = plt.cm.ScalarMappable(norm=norm, cmap=ListedColormap([colour[step] for step in steps]))
        return colour, mappable, steps
    norm = FuncNorm((np.log1p, np.expm1), vmin=steps[0], vmax=steps[-1])
    # fine enough that Pythia's last steps (142,000 and 143,000: 0.06% of the scale apart) differ
    anchors = scale(np.arange(int(0.85 * scale.N) + 1))  # the map's own colours up to 0.85, each once
    ruler = LinearSegmentedColormap.from_list("step ruler", anchors, N=4096)
    colour = {step: ruler(float(norm(step))) for step in steps}
    return colour, plt.cm.ScalarMappable(norm=norm, cmap=ruler), steps


def step_colorbar(fig, mappable, steps, room: int, axes, **kwargs):
    """The colour bar of step_colours(steps, room): every band named, or (more steps than
    `room`) a log(1 + step) ruler labelled at round steps no closer than 1/room of its length,
    whose minor ticks mark every step drawn."""
    from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator

    from lmsat.figures.ticks import CompactFormatter, CompactLogLocator

    bar = fig.colorbar(mappable, ax=axes, **kwargs)
    bar.ax.tick_params(labelsize=STEP_LABEL_PT)
    if len(steps) <= room:
        bar.set_ticks(range(len(steps)))
        bar.set_ticklabels([f"{step:,}" for step in steps])
        bar.ax.yaxis.set_minor_locator(NullLocator())
        return bar
    round_steps = [0] * (steps[0] == 0) + list(CompactLogLocator().tick_values(max(steps[0], 1), steps[-1]))
    spaced = []
    for step in round_steps:  # first come, first kept: 0, then 10, 100, ... (1 is too near 0)
        if not spaced or mappable.norm(step) - mappable.norm(spaced[-1]) >= 1 / room:
            spaced.append(step)
    bar.set_ticks(spaced)
    bar.ax.yaxis.set_major_formatter(CompactFormatter())
    bar.ax.yaxis.set_minor_locator(FixedLocator(steps))
    bar.ax.yaxis.set_minor_formatter(NullFormatter())
    bar.ax.tick_params(which="minor", length=2.5, width=0.4)
    return bar


def overlaps(a, b) -> bool:
    """Whether two display-space bounding boxes overlap (touching edges do not)."""
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1
