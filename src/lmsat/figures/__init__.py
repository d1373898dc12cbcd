"""The paper's figures, drawn from the tidy tables: one module per paper section, one style.

- `style`: the Agg backend, save_figure, panel grids and labels, colours, and the one order
  of models (by size: the tables' order, `in_table_order`).
- `saturation`: Fig. 1a (loss curves) and Fig. 1b (scaling law).
- `degeneration`: Figs. 2-5 (anisotropy, head spectra, singular entropy) and low-rank attention.
- `bottleneck`: Figs. 6-8 (rank-r heads, n-gram W-error) and the ground-truth check.

Every plot function takes its table(s) and the paths to write, saves the figure to each and
returns it, so a test can read what was drawn.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Figure:
    """A figure drawn from per-checkpoint metric tables (rule plot_metric_figure)."""

    draw: Callable  # (tables {name: DataFrame}, paths, **options) -> matplotlib Figure
    tables: tuple[str, ...]  # the tables it draws (its report section cites them)
    target: str  # its named target rule and report section (`snakemake fig1a`)
    category: str  # report category
    title: str  # report subcategory
    options: dict[str, str] = field(default_factory=dict)  # draw keyword -> dotted config key
    entropy_rate: bool = False  # draws the synthetic language's entropy rate when it is known
    caption: str = ""  # report caption when workflow/report/<stem>.rst does not exist
    cites: tuple[str, ...] = ()  # other tables its caption cites


def _draw(module: str, function: str, *tables: str):
    """A plot function of lmsat.figures.<module>, called with `tables` in order, imported
    when a plotting job draws it (the workflow reads FIGURES at DAG time)."""

    def draw(frames, paths, **options):
        from importlib import import_module

        plot = getattr(import_module(f"lmsat.figures.{module}"), function)
        return plot(*(frames[name] for name in tables), paths, **options)

    return draw


SATURATION, DEGENERATION = "Saturation", "Representation degeneration"
# stem -> Figure, in the report's order
FIGURES: dict[str, Figure] = {
    "fig1a_loss": Figure(
        _draw("saturation", "plot_loss_curves", "loss"), ("loss",), "fig1a", SATURATION,
        "Fig. 1a: loss along training", entropy_rate=True, cites=("best_final",),
    ),
    "fig2_anisotropy_depth": Figure(
        _draw("degeneration", "plot_anisotropy_depth", "anisotropy_layers"), ("anisotropy_layers",), "fig2",
        DEGENERATION, "Fig. 2: anisotropy by depth", options={"suites": "figures.anisotropy_suites"},
    ),
    "fig3_anisotropy_training": Figure(
        _draw("degeneration", "plot_anisotropy_training", "anisotropy_training"), ("anisotropy_training",), "fig3",
        DEGENERATION, "Fig. 3: anisotropy along training",
    ),
    "fig4_head_spectra": Figure(
        _draw("degeneration", "plot_head_spectra", "spectra"), ("spectra", "identical_weights"), "fig4",
        DEGENERATION, "Fig. 4: head spectra",
    ),
    "fig5_singular_entropy": Figure(
        _draw("degeneration", "plot_singular_entropy", "singular_entropy"), ("singular_entropy",), "fig5",
        DEGENERATION, "Fig. 5: singular entropy", options={"power": "spectra.entropy_power"},
    ),
    "attention_lowrank": Figure(
        _draw("degeneration", "plot_attention_lowrank", "attention_lowrank"), ("attention_lowrank",), "attention",
        "Low-rank attention", "Low-rank attention products",
    ),
    "effective_rank": Figure(
        _draw("degeneration", "plot_effective_rank", "effective_rank"), ("effective_rank",), "effective_rank",
        DEGENERATION, "Effective rank of the last layer",
        caption="**Effective rank of the last-layer representations along training.** Roy and Vetterli's "
        "effective rank exp(H(p)), p = s / sum(s), of the singular values s of the last layer's representations "
        "of every token of the eval sample (left: as they are; dashed: with their mean removed, which takes out "
        "the common direction behind anisotropy), and their singular entropy KL(p || uniform) (right), against "
        "training tokens (log scale; step 0 left out), a line per model, by size. Table: "
        "``results/tables/effective_rank.csv``.",
    ),
}
