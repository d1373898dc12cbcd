"""What the figures draw: panel order, the capped axis, labels that do not overlap."""

import numpy as np
import pandas as pd

from lmsat.figures import LOSS_CAP_PERCENTILE, draw_loss_curves, plt
from lmsat.figures_saturation import draw_scaling_fit, shortfall_labels


def loss_rows(models):
    """loss.csv rows: each model's loss falls along 12 steps then rises by 0.05 at the end."""
    rows = []
    for model in models:
        for step in range(12):
            loss = 6.0 / (1 + step) + 3.0 + (0.05 if step == 11 else 0.0)
            rows.append(dict(model=model, step=step, tokens=step * 1000, loss=loss, is_best=step == 10))
    return pd.DataFrame(rows)


def test_loss_panels_follow_table_order_in_a_grid_no_taller_than_wide():
    order = ["toy-d16", "toy-d32", "toy-d64", "toy-d128", "toy-d256"]  # by size, not by name
    fig = draw_loss_curves(loss_rows(order))
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title(loc="left") for ax in panels] == order
    # reading order: row by row, smallest top left
    positions = [(-round(ax.get_position().y0, 3), round(ax.get_position().x0, 3)) for ax in panels]
    assert positions == sorted(positions)
    width, height = fig.get_size_inches()
    assert height <= width
    plt.close(fig)


def test_capped_loss_axis_says_how_many_points_are_above_it():
    table = loss_rows(["m"])
    fig = draw_loss_curves(table)
    ax = fig.axes[0]
    loss = table.loc[table["tokens"] > 0, "loss"].to_numpy()
    top = ax.get_ylim()[1]
    assert np.percentile(loss, LOSS_CAP_PERCENTILE) < top < loss.max()
    above = int((loss > top).sum())
    notes = [t.get_text() for t in ax.texts]
    assert notes == [f"{above} above the axis (up to {loss.max():.2f})"]
    plt.close(fig)


def shortfall(best_tokens):
    rows = []
    for model, n in (("small", 1e6), ("large", 1e8)):
        rows.append(dict(model=model, n_params=n, kind="final", tokens=800, measured=3.0, predicted=2.9,
                         shortfall_pct=3.4, fitted=n > 1e7))
        rows.append(dict(model=model, n_params=n, kind="best", tokens=best_tokens, measured=2.99, predicted=2.95,
                         shortfall_pct=1.4, fitted=n > 1e7))
    return pd.DataFrame(rows)


def test_shortfall_labels_of_one_checkpoint_merge_and_others_sit_on_either_side():
    same = shortfall(best_tokens=800)
    labels = shortfall_labels(same, min_params=1e7)
    assert [label["text"] for label in labels] == ["+3.4% (best = final)"]
    apart = shortfall_labels(shortfall(best_tokens=600), min_params=1e7)
    assert [(label["kind"], label["text"], label["ha"]) for label in apart] == [
        ("final", "+3.4%", "left"), ("best", "+1.4%", "right")
    ]
    assert apart[0]["dx"] > 0 > apart[1]["dx"]


def test_scaling_figure_draws_the_merged_label():
    fit = pd.Series(dict(A=1.0, alpha=0.3, B=4.5, beta=0.28, E=2.6, min_params=1e7, params="non_embedding",
                         source="fit"))
    fig = draw_scaling_fit(shortfall(best_tokens=800), fit)
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "+3.4% (best = final)" in texts and "+3.4%" not in texts and "small" in texts
    plt.close(fig)


def test_loss_table_rows_follow_the_plan_order():
    from lmsat.tables import loss_table

    records = [dict(suite="toy", model=m, revision=f"step{s}", step=s, tokens=s, loss=1.0 + s, loss_sem=0.0)
               for m in ("toy-d128", "toy-d16", "toy-d32") for s in (1, 0)]
    table = loss_table(records, ["toy-d16", "toy-d32", "toy-d128"])
    assert list(dict.fromkeys(table["model"])) == ["toy-d16", "toy-d32", "toy-d128"]
    assert list(table["step"][:2]) == [0, 1]
    assert list(dict.fromkeys(loss_table(records)["model"])) == ["toy-d128", "toy-d16", "toy-d32"]  # by name
