"""What every figure shares: the Agg backend, saving, panel grids and their labels, colours,
and the one order of models.

Models are drawn by size everywhere, smallest first (panels row by row, legend entries,
colours from light-on-dark viridis). The order is the table's: every tidy table is written in
the plan's order (`lmsat.config.by_size`: suite by suite, then non-embedding parameters,
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

from lmsat.figures.numbers import compact_number as compact_number  # re-exported for the plots
from lmsat.io import atomic_path


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
    table is written in the plan's order, lmsat.config.by_size)."""
    return list(dict.fromkeys(table[column]))


def colours(names, cmap: str = "viridis") -> dict:
    """name -> colour, along `cmap` from 0 to 0.85 in the order given (the yellow end is skipped:
    too light on white)."""
    names = list(names)
    scale = plt.get_cmap(cmap)
    return {name: scale(0.85 * i / max(len(names) - 1, 1)) for i, name in enumerate(names)}


def save_figure(fig, paths):
    """Save `fig` to each path (format from the suffix), atomically, then close it; returns the
    figure (closed, its artists still inspectable)."""
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


def note(fig, text: str) -> None:
    """A grey footnote under the figure."""
    fig.text(0.01, -0.01, text, fontsize=7, color="0.35", ha="left", va="top")


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


def step_colours(steps, cmap: str = "viridis"):
    """Each distinct step its own colour, evenly along `cmap` (0 to 0.85) by rank, so 8 steps
    from 50 to 400 are as far apart as 8 from 0 to 143,000. Returns (step -> colour, a
    colour-bar mappable whose ticks are the steps)."""
    from matplotlib.colors import BoundaryNorm, ListedColormap

    steps = sorted(set(int(step) for step in steps))
    scale = plt.get_cmap(cmap)
    colour = {step: scale(0.85 * i / max(len(steps) - 1, 1)) for i, step in enumerate(steps)}
    norm = BoundaryNorm(np.arange(len(steps) + 1) - 0.5, len(steps))
    mappable = plt.cm.ScalarMappable(norm=norm, cmap=ListedColormap([colour[step] for step in steps]))
    return colour, mappable, steps


def step_colorbar(fig, mappable, steps, axes, max_labels: int = 8, **kwargs):
    """A colour bar of step_colours: one band per step, at most `max_labels` of them labelled
    (the first, the last, and evenly between)."""
    from matplotlib.ticker import NullLocator

    bar = fig.colorbar(mappable, ax=axes, **kwargs)
    shown = sorted(set(np.linspace(0, len(steps) - 1, min(len(steps), max_labels)).round().astype(int)))
    bar.set_ticks(shown)
    bar.set_ticklabels([f"{steps[i]:,}" for i in shown])
    bar.ax.yaxis.set_minor_locator(NullLocator())
    return bar


def overlaps(a, b) -> bool:
    """Whether two display-space bounding boxes overlap (touching edges do not)."""
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def drop_crowded_labels(fig, texts, inside) -> list:
    """Remove every text of `texts` (in priority order) that overlaps one kept before it or
    leaves the axes `inside`; returns those kept. For point labels of a short run (r=2, r=4
    drawn on top of each other)."""
    renderer = fig.canvas.get_renderer()
    frame = inside.get_window_extent(renderer)
    kept, boxes = [], []
    for text in texts:
        box = text.get_window_extent(renderer)
        if box.x0 < frame.x0 or box.x1 > frame.x1 or box.y0 < frame.y0 or box.y1 > frame.y1 or any(
            overlaps(box, other) for other in boxes
        ):
            text.remove()
            continue
        kept.append(text)
        boxes.append(box)
    return kept
