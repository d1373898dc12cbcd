"""The order of events (docs/event_order.md): each model's loss rise and each series' change of
trend, lined up on one axis of training steps, with their intervals and verdicts.

    plot_event_order(event_order_table, ["event_order.png", "event_order.pdf"])
"""

from __future__ import annotations

import math

import pandas as pd

from lmsat.figures.registry import SATURATION, figure
from lmsat.figures.style import compact_number, in_table_order, label_grid, note, panel_grid, plt, save_figure

# verdict -> (colour, marker, filled)
STYLE = {
    "rise": ("#b2182b", "v", True),
    "no rise": ("0.55", "v", False),
    "leads": ("#2166ac", "o", True),
    "lags": ("#e08214", "o", True),
    "together within the resolution": ("0.25", "o", True),
    "no change": ("0.6", "o", False),
    "too few checkpoints": ("0.6", "x", True),
}


@figure("event_order", tables=("event_order",), target="event_order", category=SATURATION,
        title="Which comes first: the change of trend of each series, or the rise of the loss", cites=("event_prediction",))
def plot_event_order(table: pd.DataFrame, paths):
    """A panel per model (by size): a row per event, the loss's best checkpoint (where its
    rise starts) on top and each series' change of trend below, on one axis of training
    steps. A marker at the onset, a bar over its interval (a series': its confidence set
    widened by one checkpoint on each side); the loss's interval is shaded across the panel,
    so a series whose bar lies left of the shading changed first. The axis spans the window,
    from the first checkpoint after the loss's fast fall to the final. Colour and marker say
    the verdict; a series with no change, or of a model with no rise, is hollow and claims
    no order."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    models = in_table_order(table)
    fig, axes = panel_grid(len(models), width=4.2, height=0.35 * table.groupby("model").size().max() + 1.0,
                           sharex=False, sharey=False)
    seen = {}
    for ax, model in zip(axes, models):
        rows = table[table["model"] == model].reset_index(drop=True)
        loss = rows.iloc[0]
        shade = STYLE.get(loss["verdict"], STYLE["no rise"])[0]
        if loss["onset_step"] >= 0:
            ax.axvspan(loss["onset_low_step"], loss["onset_high_step"], color=shade, alpha=0.15, lw=0)
            ax.axvline(loss["onset_step"], color=shade, lw=0.8, ls="--")
        for y, row in rows.iterrows():
            colour, marker, filled = STYLE.get(row["verdict"], ("0.5", "o", False))
            marker = marker if row["series"] == "loss" else "o"  # a triangle marks the loss's best only
            if row["onset_step"] < 0:  # no onset: too few checkpoints in the window to date a change
                ax.text(float(loss["window_start_step"]), y, f"  {row['verdict']} (window: {int(row['window_checkpoints'])} "
                        "checkpoints, too few)", va="center", fontsize=7, color="0.4")
                continue
            ax.plot([row["onset_low_step"], row["onset_high_step"]], [y, y], color=colour, lw=2.2, alpha=0.55,
                    solid_capstyle="butt")
            label = row["verdict"]
            ax.plot(row["onset_step"], y, marker=marker, ms=6, color=colour, mfc=colour if filled else "white",
                    mew=1.2, ls="none", label=label if label not in seen else None)
            seen[label] = True
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels([_label(row) for _, row in rows.iterrows()], fontsize=7)
        ax.set_ylim(len(rows) - 0.5, -0.5)
        low = float(loss["window_start_step"]) if loss["window_start_step"] >= 0 else float(rows["onset_low_step"].min())
        high = float(loss["final_step"])  # the window: the loss's fast fall done, to the final
        if math.isfinite(low) and math.isfinite(high) and high > low:
            pad = 0.03 * (high - low)
            ax.set_xlim(low - pad, high + pad)
        ax.xaxis.set_major_locator(MaxNLocator(5, integer=True))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: compact_number(value)))  # 20k, not 20000
        ax.grid(axis="x", alpha=0.3)
        ax.set_title(model, fontsize=9, loc="left")
    label_grid(axes, "training step", "")
    if seen:
        fig.legend(*_legend(seen), loc="outside upper center", ncol=min(len(seen), 4), fontsize=7, frameon=False)
    level = 1 - 2 * float(table["alpha"].iloc[0]) if len(table) else 0.9
    note(fig, f"From the first checkpoint after the loss's fast fall. Bars: each onset's interval;\nlead bounds "
              f"({level:.0%}) in tables/event_order.csv. Order is necessary for a cause, not sufficient.")
    return save_figure(fig, paths)


def _label(row) -> str:
    if row["series"] == "loss":
        return "loss (best ckpt)"
    lead = row["lead_steps"]
    return row["series"] + (f" ({lead:+,.0f})" if isinstance(lead, float) and math.isfinite(lead) else "")


def _legend(seen: dict):
    handles = []
    for label in seen:
        colour, marker, filled = STYLE.get(label, ("0.5", "o", False))
        handles.append(plt.Line2D([], [], marker=marker, ms=6, color=colour, mfc=colour if filled else "white", ls="none"))
    return handles, list(seen)
