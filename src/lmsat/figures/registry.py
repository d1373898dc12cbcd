"""The one registry of figures: every figure, declared once beside its plot function.

    @figure("fig1a_loss", tables=("loss",), target="fig1a", category=SATURATION,
            title="Fig. 1a: loss along training", entropy_rate="sample", cites=("best_final",))
    def plot_loss_curves(table, paths, entropy_rate=None): ...

A figure names the tables it draws (metric tables of lmsat.products.metrics or tables other rules
write; the workflow knows both), and is planned exactly when all of them are. Its caption is
workflow/report/<stem>.rst; the workflow draws it with rule plot_figure. This module imports
no matplotlib, pandas or torch (the workflow reads FIGURES at DAG time).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

SATURATION, DEGENERATION = "Saturation", "Representation degeneration"
BOTTLENECK = "Softmax bottleneck"
ENTROPY_RATES = ("", "sample", "heads")


@dataclass(frozen=True)
class Figure:
    stem: str  # results/{run}/figures/<stem>.png and .pdf; caption workflow/report/<stem>.rst
    draw: Callable  # draw(*tables in order, paths=[...], **options) -> matplotlib Figure
    tables: tuple[str, ...]  # the tables it draws, in draw's argument order; planned when all are
    target: str  # its named target rule and report section (`snakemake fig1a`)
    category: str  # report category
    title: str  # report subcategory
    optional: tuple[str, ...] = ()  # tables drawn after `tables` when planned (None otherwise)
    options: dict[str, str] = field(default_factory=dict)  # draw keyword -> dotted config key
    entropy_rate: str = ""  # "sample" / "heads": draws that corpus's entropy rate when synthetic
    cites: tuple[str, ...] = ()  # other tables its caption cites (rendered in its section)

    def plot(self, frames: dict, paths, **options):
        """Draw from `frames` (table name -> DataFrame; an optional table may be missing)."""
        drawn = [frames[name] for name in self.tables] + [frames.get(name) for name in self.optional]
        return self.draw(*drawn, paths=paths, **options)


FIGURES: dict[str, Figure] = {}  # stem -> Figure, in the report's order (lmsat.figures)


def figure(stem: str, **declared):
    """Register the decorated plot function as figure `stem` (keywords: Figure's fields)."""
    if declared.get("entropy_rate", "") not in ENTROPY_RATES:
        raise ValueError(f"figure {stem}: entropy_rate must be one of {ENTROPY_RATES}")

    def decorate(draw):
        if stem in FIGURES:
            raise ValueError(f"figure {stem!r} is registered twice")
        FIGURES[stem] = Figure(stem=stem, draw=draw, **declared)
        return draw

    return decorate
