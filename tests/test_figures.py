"""What the figures draw: the plotted data equals the table's, panels and legends by size (the
table's order), the labels; and the capped axis and labels that do not overlap. No file is
read back: each plot function returns its figure, drawn from a small tidy table."""

import numpy as np
import pandas as pd
import pytest

from lmsat.figures.bottleneck import (
    PAPER_RISE_WERROR,
    plot_ground_truth,
    plot_ngram_werror,
    plot_rank_heads,
    plot_werror_loss,
)
from lmsat.figures.degeneration import (
    ATTENTION_PANELS,
    IDENTICAL_NOTE,
    attention_medians,
    plot_anisotropy_depth,
    plot_anisotropy_training,
    plot_attention_lowrank,
    plot_head_spectra,
    plot_singular_entropy,
)
from lmsat.figures.saturation import LOSS_CAP_PERCENTILE, plot_loss_curves, plot_scaling_fit, shortfall_labels
from lmsat.figures.style import in_table_order, panel_grid, plt, save_figure

# By size (lmsat.planning.model_entries.by_size: suite by suite, smallest first): neither by name nor by width.
BY_SIZE = ["toy-d16", "toy-d32", "toy-d128", "other-d8"]


def panels(fig):
    """The visible panels that carry a title (colour bars carry none), in drawing order."""
    return [ax for ax in fig.axes if ax.get_visible() and ax.get_title(loc="left")]


def titles(fig):
    return [ax.get_title(loc="left") for ax in panels(fig)]


def legend(ax):
    return [text.get_text() for text in ax.get_legend().get_texts()]


def figure_legend(fig):
    """The texts of the figure's one legend (Fig. 1a's, above its panels)."""
    (shared,) = fig.legends
    return [text.get_text() for text in shared.get_texts()]


def labelled(ax):
    """label -> Line2D of the labelled lines of `ax` (matplotlib names unlabelled ones '_child')."""
    return {line.get_label(): line for line in ax.lines if not line.get_label().startswith("_")}


def assert_line(line, x, y):
    np.testing.assert_allclose(np.asarray(line.get_xdata(), dtype=float), np.asarray(x, dtype=float))
    np.testing.assert_allclose(np.asarray(line.get_ydata(), dtype=float), np.asarray(y, dtype=float))


def test_models_are_in_the_tables_order():
    table = pd.DataFrame(dict(model=["b", "b", "a", "c", "a"], corpus=["x", "y", "x", "x", "y"]))
    assert in_table_order(table) == ["b", "a", "c"]
    assert in_table_order(table, "corpus") == ["x", "y"]


def test_save_figure_writes_each_format_by_suffix_and_returns_the_figure(tmp_path):
    fig, (ax,) = panel_grid(1)
    ax.plot([1, 2], [3, 4])
    paths = [tmp_path / "f.png", tmp_path / "f.pdf"]
    assert save_figure(fig, paths) is fig
    assert paths[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and paths[1].read_bytes()[:5] == b"%PDF-"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.pdf", "f.png"]  # no temporary left behind
    assert_line(fig.axes[0].lines[0], [1, 2], [3, 4])  # closed, still inspectable


def test_panel_grid_hides_the_panels_beyond_n():
    fig, axes = panel_grid(5, ncols=4)
    assert len(axes) == 5 and sum(ax.get_visible() for ax in fig.axes) == 5 and len(fig.axes) == 8
    plt.close(fig)


# ------------------------------------------------------------------ Fig. 1a, 1b


def loss_rows(models, drop=6.0, power=1):
    """loss.csv rows: each model's loss falls along 12 steps (as drop / (1 + step)^power) then
    rises by 0.05 at the end."""
    rows = []
    for k, model in enumerate(models):
        for step in range(12):
            loss = drop / (1 + step) ** power + 3.0 - 0.1 * k + (0.05 if step == 11 else 0.0)
            rows.append(dict(model=model, step=step, tokens=step * 1000, loss=loss, is_best=step == 10))
    return pd.DataFrame(rows)


def test_loss_panels_follow_table_order_in_a_grid_no_taller_than_wide():
    order = ["toy-d16", "toy-d32", "toy-d64", "toy-d128", "toy-d256"]  # by size, not by name
    fig = plot_loss_curves(loss_rows(order), [])
    assert titles(fig) == order
    # reading order: row by row, smallest top left
    positions = [(-round(ax.get_position().y0, 3), round(ax.get_position().x0, 3)) for ax in panels(fig)]
    assert positions == sorted(positions)
    width, height = fig.get_size_inches()
    assert height <= width


def test_loss_panels_draw_each_models_rows_past_step_0():
    table = loss_rows(BY_SIZE)
    fig = plot_loss_curves(table, [], entropy_rate=2.5)
    assert titles(fig) == BY_SIZE
    for ax, model in zip(panels(fig), BY_SIZE):
        rows = table[(table["model"] == model) & (table["tokens"] > 0)]
        top = ax.get_ylim()[1]
        curve, rate = ax.lines
        assert_line(curve, rows["tokens"], np.minimum(rows["loss"], top))  # capped at the axis' top
        assert_line(rate, [0, 1], [2.5, 2.5])
        best = rows[rows["is_best"]]
        star = ax.collections[-1]
        np.testing.assert_allclose(star.get_offsets(), best[["tokens", "loss"]].to_numpy())
        assert ax.get_xscale() == "log"
    first, *_, last = panels(fig)
    assert first.get_ylabel() == "loss (nats)" and last.get_xlabel() == "training tokens"
    # one legend above the panels, none in a panel (where it covered the best star, issue 44)
    assert figure_legend(fig) == ["best", "entropy rate"]  # the first checkpoint is not far above: all drawn
    assert all(ax.get_legend() is None for ax in panels(fig))
    assert fig.legends[0].get_window_extent().y0 >= max(ax.get_window_extent().y1 for ax in panels(fig))


def test_capped_loss_axis_says_how_many_points_are_above_it():
    table = loss_rows(["m"], drop=60.0, power=3)  # a steep early descent: 10.5, 5.2, 3.9, ... 3.05
    fig = plot_loss_curves(table, [])
    ax = fig.axes[0]
    loss = table.loc[table["tokens"] > 0, "loss"].to_numpy()
    top = ax.get_ylim()[1]
    assert np.percentile(loss, LOSS_CAP_PERCENTILE) < top < loss.max()
    above = int((loss > top).sum())
    assert (loss[:above] > top).all() and above >= 1  # the first checkpoints
    assert ax.get_title(loc="right") == f"{above} above (up to {loss.max():.2f})" and not ax.texts  # off the data
    assert figure_legend(fig) == ["off the axis", "best"]


def test_loss_axis_hides_nothing_when_the_first_checkpoints_are_not_far_above():
    from lmsat.figures.saturation import loss_axis_top

    for loss in ([4.0, 3.6, 3.5, 3.55], [6.0, 5.0, 4.5, 4.2, 4.0, 3.9, 3.8, 3.7], [3.0, 3.1, 9.0]):
        loss = np.array(loss)
        span = loss.max() - loss.min()
        assert loss_axis_top(loss, span) > loss.max()  # the last: a late outlier, not the early descent
    steep = np.array([10.8, 10.7, 10.2, 9.0, 7.5, 5.0, 4.0] + [3.5 - 0.01 * i for i in range(60)])  # Pythia's shape
    assert loss_axis_top(steep, steep.max() - steep.min()) < 9.0


def test_loss_figure_leaves_out_models_released_at_step_0_only():
    table = pd.concat([loss_rows(["p1"]), pd.DataFrame([dict(model="g1", step=0, tokens=0, loss=3.5, is_best=True)])])
    assert titles(plot_loss_curves(table, [])) == ["p1"]
    with pytest.raises(ValueError, match="no checkpoint past step 0"):
        plot_loss_curves(table[table["model"] == "g1"], [])


def shortfall(best_tokens, models=(("small", 1e6), ("large", 1e8))):
    rows = []
    for model, n in models:
        rows.append(dict(model=model, n_params=n, kind="final", tokens=800, measured=3.0 - np.log10(n) / 10,
                         predicted=2.9, shortfall_pct=3.4, fitted=n > 1e7))
        rows.append(dict(model=model, n_params=n, kind="best", tokens=best_tokens, measured=2.99 - np.log10(n) / 10,
                         predicted=2.95, shortfall_pct=1.4, fitted=n > 1e7))
    return pd.DataFrame(rows)


FIT = pd.Series(dict(A=1.0, alpha=0.3, B=4.5, beta=0.28, E=2.6, min_params=1e7, params="non_embedding", source="fit"))


def test_shortfall_labels_of_one_checkpoint_merge_and_others_sit_on_either_side():
    same = shortfall(best_tokens=800)
    labels = shortfall_labels(same, min_params=1e7)
    assert [label["text"] for label in labels] == ["+3.4% (best = final)"]
    apart = shortfall_labels(shortfall(best_tokens=600), min_params=1e7)
    assert [(label["kind"], label["text"], label["ha"]) for label in apart] == [
        ("final", "+3.4%", "left"), ("best", "+1.4%", "right")
    ]
    assert apart[0]["dx"] > 0 > apart[1]["dx"]
    models = (("s1", 1e5), ("s2", 1e6), ("large", 1e8))
    assert [label["model"] for label in shortfall_labels(shortfall(800, models), 1e7)] == ["s1", "s2"]  # by size


def test_scaling_figure_draws_the_merged_label():
    fig = plot_scaling_fit(shortfall(best_tokens=800), FIT, [])
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "+3.4% (best = final)" in texts and "+3.4%" not in texts and "small" in texts


def test_scaling_figure_draws_the_measured_points_and_the_law():
    from lmsat.figures.saturation import law_curve

    points = shortfall(best_tokens=600)
    ax = plot_scaling_fit(points, FIT, []).axes[0]
    constants = {key: FIT[key] for key in ("A", "alpha", "B", "beta", "E")}
    laws = labelled(ax)
    for kind, scatter in zip(("final", "best"), ax.collections):
        rows = points[points["kind"] == kind].sort_values("n_params")
        np.testing.assert_allclose(scatter.get_offsets(), rows[["n_params", "measured"]].to_numpy())
        law = laws[f"law at {kind} token counts"]
        x = np.asarray(law.get_xdata())
        np.testing.assert_allclose(law.get_ydata(), law_curve(rows["n_params"], rows["tokens"], x, **constants))
    assert legend(ax) == [
        "law at final token counts", "final checkpoints (mean shortfall +3.4%)",
        "law at best token counts", "best checkpoints (mean shortfall +1.4%)", "fit threshold N >= 10M",
    ]
    assert ax.get_xlabel() == "parameters N (non-embedding)" and ax.get_ylabel() == "loss (nats/token)"
    assert ax.get_title().startswith("L = 1/N^0.300 + 4.5/T^0.28 + 2.6") and "(A, alpha fitted)" in ax.get_title()
    names = [t.get_text() for t in ax.texts if t.get_text() in ("small", "large")]
    assert names == ["small", "large"]


def sizes(*n_params, fitted_from=0.0):
    """scaling_shortfall rows of a final and a best checkpoint per size, fitted from `fitted_from`."""
    rows = []
    for n in n_params:
        for kind, shift in (("final", 0.0), ("best", -0.01)):
            rows.append(dict(model=f"m{n:.0e}", n_params=n, kind=kind, tokens=800, measured=3.0 - np.log10(n) / 10 + shift,
                             predicted=2.9, shortfall_pct=0.0, fitted=kind == "final" and n >= fitted_from))
    return pd.DataFrame(rows)


@pytest.mark.parametrize("points, source, says", [
    (sizes(1e6, 1e8), "fit", True),  # an own run of two widths, or the default run's two fitted toys
    (sizes(1e5, 1e6, 1e8, fitted_from=1e6), "fit", True),  # three sizes, two of them fitted
    (sizes(1e6, 1e7, 1e8), "fit", False),  # three fitted: a residual, an interval
    (sizes(1e6, 1e8), "fixed", False),  # constants from the config: nothing fitted
])
def test_scaling_figure_says_when_the_law_passes_exactly_through_its_two_sizes(points, source, says):
    """Issue 44: a law fitted on two sizes has no residual and no interval; the figure says so."""
    fit = FIT.copy()
    fit["source"] = source
    title = plot_scaling_fit(points, fit, []).axes[0].get_title()
    note = "A, alpha fitted on 2 sizes only: the law passes through them exactly (no residual, no interval)"
    assert (note in title) == says, title


def published_rows():
    """published_loss.csv rows: three models at the record's steps (0 ... 143000); the smallest
    rises in the last decade, its best checkpoint there (step 53000)."""
    rows = []
    steps = [0, 1000, 3000] + list(range(13000, 143001, 10000))
    for k, model in enumerate(("pythia-70m", "pythia-70m-deduped", "pythia-160m")):
        for step in steps:
            ppl = 1e6 / (1 + step) ** 1.2 + 20 - 5 * k + (0.001 * max(step - 53000, 0) if k < 2 else 0.0)
            rows.append(dict(model=model, step=step, tokens=step * 2_097_152, perplexity=ppl))
    table = pd.DataFrame(rows)
    best = table[table["step"] > 0].groupby("model")["perplexity"].idxmin()
    return table.assign(is_best=table.index.isin(best))


def test_published_fig1a_zooms_on_the_last_decade_on_a_linear_axis():
    """Issue 44: the late phase, where saturation shows, had a fifth of the log-log plot's
    width; a second panel draws the last decade of tokens on a linear perplexity axis, with
    every model's curve and its best-checkpoint star."""
    from lmsat.figures.published import plot_published_curves

    table = published_rows()
    fig = plot_published_curves(table, [])
    full, zoom = [ax for ax in fig.axes if ax.get_visible()]
    last = table["tokens"].max()
    np.testing.assert_allclose(zoom.get_xlim(), (last / 10, last * 1.04))
    assert zoom.get_xscale() == "log" and zoom.get_yscale() == "linear" and full.get_yscale() == "log"
    shown = table[(table["tokens"] >= last / 10)]["perplexity"]
    low, high = zoom.get_ylim()
    assert low <= shown.min() and shown.max() <= high and high - low < 1.2 * (shown.max() - shown.min())
    models = in_table_order(table)
    for ax in (full, zoom):
        curves = [line for line in ax.get_lines() if len(line.get_xdata()) > 1]
        assert len(curves) == len(models)
        for line, model in zip(curves, models):
            rows = table[(table["model"] == model) & (table["tokens"] > 0)].sort_values("step")
            assert_line(line, rows["tokens"], rows["perplexity"])
        stars = [c.get_offsets() for c in ax.collections if len(c.get_offsets())]
        best = table[table["is_best"]]
        np.testing.assert_allclose(np.concatenate(stars), best[["tokens", "perplexity"]].to_numpy())
    assert full.get_legend() is None and len(fig.legends) == 1  # one legend, beside the panels


# ------------------------------------------------------------------ Figs. 2-5, low-rank attention


def layer_rows(suites):
    rows = []
    for suite, models in suites.items():
        for k, model in enumerate(models):
            for is_final, shift in ((False, 0.3), (True, 0.0)):
                for depth in (0.0, 0.5, 1.0):
                    rows.append(dict(suite=suite, model=model, is_final=is_final, relative_depth=depth,
                                     anisotropy=depth / 2 + 0.1 * k + shift))
    return pd.DataFrame(rows)


def test_fig2_draws_a_panel_per_suite_and_the_final_layers_of_each_model():
    suites = {"toy": BY_SIZE[:3], "other": BY_SIZE[3:]}
    layers = layer_rows(suites)
    fig = plot_anisotropy_depth(layers, [], suites=["other", "toy"])
    assert titles(fig) == ["other", "toy"]
    for ax, suite in zip(panels(fig), ["other", "toy"]):
        assert legend(ax) == suites[suite]
        for model, line in labelled(ax).items():
            rows = layers[(layers["model"] == model) & layers["is_final"]]
            assert_line(line, rows["relative_depth"], rows["anisotropy"])
        assert ax.get_xlabel() == "relative layer depth"
    assert panels(fig)[0].get_ylabel() == "anisotropy (mean cosine)"
    with pytest.raises(ValueError, match="figures.anisotropy_suites"):
        plot_anisotropy_depth(layers, [], suites=["gpt2"])


def training_rows(models):
    return pd.DataFrame([
        dict(model=model, step=step, tokens=100 * step, loss=5.0 - step / 10 - k, anisotropy_last=0.1 * step + k)
        for k, model in enumerate(models) for step in (0, 1, 4, 8)
    ])


def test_fig3_draws_loss_coloured_by_anisotropy_a_panel_per_model():
    training = training_rows(BY_SIZE)
    fig = plot_anisotropy_training(training, [])
    assert titles(fig) == BY_SIZE
    for ax, model in zip(panels(fig), BY_SIZE):
        rows = training[(training["model"] == model) & (training["tokens"] > 0)]
        assert_line(ax.lines[0], rows["tokens"], rows["loss"])
        points = ax.collections[0]
        np.testing.assert_allclose(points.get_offsets(), rows[["tokens", "loss"]].to_numpy())
        np.testing.assert_allclose(points.get_array(), rows["anisotropy_last"])
    assert panels(fig)[0].get_ylabel() == "loss (nats)" and panels(fig)[-1].get_xlabel() == "training tokens"
    colorbar = [ax for ax in fig.axes if ax not in panels(fig) and ax.get_visible()]
    assert [ax.get_ylabel() for ax in colorbar] == ["last-layer anisotropy"]


def spectra_rows(models, flagged=()):
    return pd.DataFrame([
        dict(suite="toy", model=model, revision=f"step{step}", step=step, tokens=step,
             identical_weights=(model, step) in flagged, index=i, normalised=1 / (i + 1 + step + k))
        for k, model in enumerate(models) for step in (0, 10, 100) for i in range(4)
    ])


def test_fig4_draws_a_spectrum_per_checkpoint_a_panel_per_model():
    spectra = spectra_rows(BY_SIZE, flagged={("toy-d32", 10)})
    fig = plot_head_spectra(spectra, [])
    assert titles(fig) == BY_SIZE
    for ax, model in zip(panels(fig), BY_SIZE):
        assert len(ax.lines) == 3
        for line, step in zip(ax.lines, (0, 10, 100)):
            rows = spectra[(spectra["model"] == model) & (spectra["step"] == step)]
            assert_line(line, rows["index"], rows["normalised"])
            assert line.get_linestyle() == ("--" if (model, step) == ("toy-d32", 10) else "-")
        assert ax.get_xlabel() == "singular value index"
    assert panels(fig)[0].get_ylabel() == r"$\sigma_i / \sigma_1$"
    assert [t.get_text() for t in fig.texts] == [IDENTICAL_NOTE]


def entropy_rows(models, flagged=()):
    return pd.DataFrame([
        dict(model=model, step=step, tokens=step, identical_weights=(model, step) in flagged,
             singular_entropy_sigma=0.1 * step + k, singular_entropy_sigma2=0.2 * step + k)
        for k, model in enumerate(models) for step in (0, 10, 100)
    ])


@pytest.mark.parametrize("power, column, unit", [
    (1, "singular_entropy_sigma", r"$p \propto \sigma$"), (2, "singular_entropy_sigma2", r"$p \propto \sigma^2$"),
])
def test_fig5_draws_a_line_per_model_in_size_order(power, column, unit):
    entropy = entropy_rows(BY_SIZE, flagged={("toy-d16", 100)})
    fig = plot_singular_entropy(entropy, [], power=power)
    ax = fig.axes[0]
    assert legend(ax) == BY_SIZE
    for model, line in labelled(ax).items():
        rows = entropy[(entropy["model"] == model) & (entropy["tokens"] > 0)]
        assert_line(line, rows["tokens"], rows[column])
    hollow = [c for c in ax.collections if len(c.get_offsets()) and not len(c.get_facecolor())]
    assert [tuple(c.get_offsets()[0]) for c in hollow] == [(100, entropy.loc[2, column])]
    # what it is (a KL divergence to uniform, not an entropy) and which way is worse (issue 44)
    assert ax.get_xlabel() == "training tokens"
    assert ax.get_ylabel() == f"KL(p || uniform) (nats), {unit}\n0 = flat; higher = more degenerate"
    assert [t.get_text() for t in fig.texts] == [IDENTICAL_NOTE]


def test_fig5_refuses_an_unknown_power():
    with pytest.raises(ValueError, match="entropy_power"):
        plot_singular_entropy(entropy_rows(BY_SIZE), [], power=3)


def attention_rows(models):
    rows = []
    for k, model in enumerate(models):
        for step in (0, 10, 100):
            for kind in ("qk", "vo"):
                for layer in (0, 1):
                    for head in range(3):
                        value = 1 + k + step / 100 + layer + head + (kind == "vo")
                        rows.append(dict(suite="toy", model=model, revision=f"step{step}", step=step, tokens=step,
                                         identical_weights=False, kind=kind, layer=layer, relative_depth=layer / 2,
                                         head=head, effective_rank=value, nuclear_ratio=value / 10,
                                         balance_gap=-value))
    return pd.DataFrame(rows)


def test_attention_figure_draws_the_head_medians_a_row_per_model_a_column_per_metric():
    attention = attention_rows(BY_SIZE)
    fig = plot_attention_lowrank(attention, [])
    medians = attention_medians(attention[attention["tokens"] > 0])
    assert titles(fig) == BY_SIZE  # the first panel of each row
    grid = [ax for ax in fig.axes if ax.get_ylabel() in dict(ATTENTION_PANELS).values()]
    assert len(grid) == len(BY_SIZE) * len(ATTENTION_PANELS)
    for index, ax in enumerate(grid):
        model = BY_SIZE[index // len(ATTENTION_PANELS)]
        column, label = ATTENTION_PANELS[index % len(ATTENTION_PANELS)]
        assert ax.get_ylabel() == label
        curves = [(kind, layer) for kind in ("qk", "vo") for layer in (0, 1)]  # kind, then layer
        assert len(ax.lines) == len(curves)
        for line, (kind, layer) in zip(ax.lines, curves):
            rows = medians[(medians["model"] == model) & (medians["kind"] == kind) & (medians["layer"] == layer)]
            assert_line(line, rows["tokens"], rows[column])
            assert line.get_linestyle() == ("-" if kind == "qk" else "--")
    assert [ax.get_xlabel() for ax in grid[-len(ATTENTION_PANELS):]] == ["training tokens"] * len(ATTENTION_PANELS)
    assert legend(grid[len(ATTENTION_PANELS) - 1]) == [r"qk: $W_Q^\top W_K$", r"vo: $W_O W_V$"]


# ------------------------------------------------------------------ Figs. 6-8, ground truth

# By size across suites (lmsat.planning.model_entries.by_size: suite by suite), so not by width: d=64 before d=32.
HEAD_MODELS = (("toy-d64", 64), ("other-d32", 32))


def heads_rows():
    rows = []
    for k, (model, d) in enumerate(HEAD_MODELS):
        for rank in (2, 4, 8):
            rows.append(dict(model=model, hidden_size=d, kind="low_rank", rank=rank, eval_loss=3.0 - rank / 10 + k,
                             eval_acc=0.1 * rank, w_error=1 / rank, rise_point=rank == 2))
        rows.append(dict(model=model, hidden_size=d, kind="full_head", rank=d, eval_loss=2.0 + k, eval_acc=0.9,
                         w_error=0.0, rise_point=False))
    return pd.DataFrame(rows)


def test_fig6_draws_the_rank_curves_of_each_model_in_the_tables_order():
    heads = heads_rows()
    fig = plot_rank_heads(heads, [])
    ax_loss, ax_acc = fig.axes
    labels = [f"{model} (d={d})" for model, d in HEAD_MODELS]
    assert legend(ax_loss) == labels
    for ax, column in ((ax_loss, "eval_loss"), (ax_acc, "eval_acc")):
        for (model, d), label in zip(HEAD_MODELS, labels):
            low = heads[(heads["model"] == model) & (heads["kind"] == "low_rank")]
            full = heads[(heads["model"] == model) & (heads["kind"] == "full_head")].iloc[0]
            curve, level, star = ax.lines[3 * labels.index(label):3 * labels.index(label) + 3]
            assert curve.get_label() == label
            assert_line(curve, low["rank"], low[column])
            assert list(level.get_ydata()) == [full[column]] * 2
            assert_line(star, [d], [full[column]])
        assert ax.get_xlabel() == "head rank r" and ax.get_xscale() == "log"
    assert ax_loss.get_ylabel() == "eval cross-entropy (nats)" and ax_acc.get_ylabel() == "eval top-1 accuracy"


def test_fig8_draws_loss_against_w_error_and_the_rise_points():
    heads = heads_rows()
    ax = plot_werror_loss(heads, []).axes[0]
    assert legend(ax)[0] == "paper: rise past ~0.6"
    assert list(ax.lines[0].get_xdata()) == [PAPER_RISE_WERROR] * 2
    for model, line in labelled(ax).items():
        if model in dict(HEAD_MODELS):
            low = heads[(heads["model"] == model) & (heads["kind"] == "low_rank")].sort_values("w_error")
            assert_line(line, low["w_error"], low["eval_loss"])
    assert legend(ax)[1:] == [text for model, _ in HEAD_MODELS for text in (model, f"{model}: loss rises at W-error 0.50")]
    assert ax.get_xlabel() == "W-error of the model's own head at rank r"
    assert ax.get_ylabel() == "eval cross-entropy of the rank-r head (nats)"


def ngram_rows():
    rows = []
    for tokenizer in ("llama2", "pythia"):
        for c, corpus in enumerate(("wikitext", "imdb", "pile")):  # table order, not by name
            for kind in ("empirical", "truth") if corpus == "pile" else ("empirical",):
                for d, werror in ((0, 1.0), (1, 0.9), (10, 0.5), (100, 0.1)):
                    rows.append(dict(corpus=corpus, tokenizer=tokenizer, kind=kind, order=2, n_tokens=1000 * (c + 1),
                                     n_contexts=50, vocab_size=200, d=d, werror=werror - 0.01 * c
                                     - 0.02 * (kind == "truth")))
    return pd.DataFrame(rows)


def test_fig7_draws_a_panel_per_tokenizer_a_line_per_corpus():
    table = ngram_rows()
    fig = plot_ngram_werror(table, [])
    assert titles(fig) == ["llama2 tokenizer", "pythia tokenizer"]
    for ax, tokenizer in zip(fig.axes, ("llama2", "pythia")):
        assert legend(ax) == [
            "wikitext (1,000 tokens, 50 contexts)", "imdb (2,000 tokens, 50 contexts)",
            "pile (3,000 tokens, 50 contexts)", "pile: true 2-gram matrix",
        ]
        for line in ax.lines[:-1]:  # the last: the 0.5 guide
            corpus = line.get_label().split(" ")[0].rstrip(":")
            kind = "truth" if "true" in line.get_label() else "empirical"
            rows = table[(table["tokenizer"] == tokenizer) & (table["corpus"] == corpus) & (table["kind"] == kind)
                         & (table["d"] > 0)]
            assert_line(line, rows["d"], rows["werror"])
        assert ax.get_xlabel() == "rank d"
    assert fig.axes[0].get_ylabel() == "W-error(d)"


def test_ground_truth_draws_the_samples_the_truth_and_the_heads_against_the_entropy_rate():
    curves = ngram_rows()
    curves = curves[curves["tokenizer"] == "llama2"]
    curves = curves.assign(n_tokens=curves["n_tokens"] * (curves["kind"] == "empirical"))  # the truth: 0 tokens
    heads = heads_rows()
    fig = plot_ground_truth(curves, heads, 1.5, [])
    truth_ax, heads_ax = fig.axes
    lines = labelled(truth_ax)
    for n in (1000, 2000, 3000):
        rows = curves[(curves["kind"] == "empirical") & (curves["n_tokens"] == n)]
        assert_line(lines[f"{n:,} tokens (50 contexts)"], rows["d"], rows["werror"])
    truth = curves[curves["kind"] == "truth"]
    assert_line(lines["truth (50 contexts)"], truth["d"], truth["werror"])
    assert truth_ax.get_ylabel() == "W-error(d) of the 2-gram matrix"
    assert legend(heads_ax) == [f"{model} (d={d})" for model, d in HEAD_MODELS] + ["entropy rate 1.500"]
    assert heads_ax.get_title(loc="left") == "rank-r head loss approaches the entropy rate from above"
    alone = plot_ground_truth(curves, None, None, [])
    assert len(alone.axes) == 1 and legend(alone.axes[0]) == legend(truth_ax)


def test_loss_table_rows_follow_the_plan_order():
    from lmsat.products.saturation_tables import loss_table

    records = [dict(suite="toy", model=m, revision=f"step{s}", step=s, tokens=s, loss=1.0 + s, loss_sem=0.0)
               for m in ("toy-d128", "toy-d16", "toy-d32") for s in (1, 0)]
    table = loss_table(records, ["toy-d16", "toy-d32", "toy-d128"])
    assert list(dict.fromkeys(table["model"])) == ["toy-d16", "toy-d32", "toy-d128"]
    assert list(table["step"][:2]) == [0, 1]
    assert list(dict.fromkeys(loss_table(records)["model"])) == ["toy-d128", "toy-d16", "toy-d32"]  # by name
