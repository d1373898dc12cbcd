"""The paper's figures, drawn from the tidy tables: one module per paper section, one style.

- `style`: the Agg backend, save_figure, panel grids and labels, colours, and the one order
  of models (by size: the tables' order, `in_table_order`); `ticks`: log-axis ticks;
  `legibility`: legends and labels off the data and the ticks (save_figure applies it).
- `registry`: `@figure`, which declares a figure beside its plot function, and `FIGURES`.
- `saturation`: Fig. 1a (loss curves) and Fig. 1b (scaling law).
- `degeneration`: Figs. 2-5 (anisotropy, head spectra, singular entropy) and low-rank attention.
- `bottleneck`: Figs. 6-8 (rank-r heads, n-gram W-error) and the ground-truth check.

Every plot function takes its table(s) and the paths to write, saves the figure to each and
returns it, so a test can read what was drawn. Each figure of the workflow is declared once,
beside its plot function, with `@figure(...)` (lmsat.figures.registry): a new module here
registers its figures by being here (every module of this package is imported below).
"""

from __future__ import annotations

import pkgutil
from importlib import import_module

from lmsat.figures.registry import BOTTLENECK, DEGENERATION, FIGURES, SATURATION, Figure, figure

# The paper's sections first (the report's order), then any other module, by name; `ticks`
# (matplotlib's subclasses) is imported where an axis is drawn.
PAPER_MODULES = ("saturation", "degeneration", "bottleneck")
_OTHERS = sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name not in (*PAPER_MODULES, "ticks"))
for _name in [*PAPER_MODULES, *_OTHERS]:
    import_module(f"{__name__}.{_name}")

__all__ = ["BOTTLENECK", "DEGENERATION", "FIGURES", "SATURATION", "Figure", "figure"]
