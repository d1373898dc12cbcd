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

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # the only place: every figure module imports plt from here
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from lmsat.io import atomic_path  # noqa: E402

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
