"""The paper's figures, drawn from the tidy tables: one module per paper section, one style.

- `style`: the Agg backend, save_figure, panel grids and labels, colours, and the one order
  of models (by size: the tables' order, `in_table_order`).
- `saturation`: Fig. 1a (loss curves) and Fig. 1b (scaling law).
- `degeneration`: Figs. 2-5 (anisotropy, head spectra, singular entropy) and low-rank attention.
- `bottleneck`: Figs. 6-8 (rank-r heads, n-gram W-error) and the ground-truth check.

Every plot function takes its table(s) and the paths to write, saves the figure to each and
returns it, so a test can read what was drawn.
"""
