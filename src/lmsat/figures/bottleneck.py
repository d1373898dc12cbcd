"""Figures of the softmax bottleneck (Godey et al. 2024, Figs. 6, 7, 8) and the ground truth.

Each draws from a tidy table (`lmsat.products.bottleneck_tables.heads_tables`, `lmsat.bottleneck.corpus_werror`), saves
every path it is given (PNG and PDF) and returns the figure. Models are drawn by size
(`in_table_order`).

    heads = pd.read_csv("results/default/tables/bottleneck_heads.csv")
    plot_rank_heads(heads, ["fig6.png", "fig6.pdf"])
"""

from __future__ import annotations

import pandas as pd

from lmsat.figures.registry import BOTTLENECK, figure
from lmsat.figures.style import colours, compact_number, in_table_order, log_axis, plt, save_figure

PAPER_RISE_WERROR = 0.6  # "performance starts decreasing when the W-error outgrows 0.6" (Fig. 8)


def _rank_axis(ax, heads: pd.DataFrame) -> None:
    ax.set_xscale("log", base=2)
    ranks = sorted(set(heads["rank"]))
    ax.set_xticks(ranks)
    ax.set_xticklabels([compact_number(r) for r in ranks], fontsize=7)
    ax.set_xlabel("head rank r")


def _rank_curves(ax, heads: pd.DataFrame, column: str, colors: dict) -> None:
    """One line per model (by size) over its low-rank heads; the model's own head as a dotted
    level and a star."""
    for model in in_table_order(heads):
        rows = heads[heads["model"] == model]
        low = rows[rows["kind"] == "low_rank"].sort_values("rank")
        full = rows[rows["kind"] == "full_head"].iloc[0]
        d = int(full["hidden_size"])
        ax.plot(low["rank"], low[column], "o-", color=colors[model], ms=4, label=f"{model} (d={d})")
        ax.axhline(full[column], color=colors[model], ls=":", lw=1)
        ax.plot([d], [full[column]], "*", color=colors[model], ms=10, mec="k", mew=0.5)


@figure("fig6_rank_heads", tables=("bottleneck_heads",), target="fig6", category=BOTTLENECK,
        title="Fig. 6: rank-constrained heads", cites=("bottleneck_lr_search",))
def plot_rank_heads(heads: pd.DataFrame, paths):
    """Fig. 6: eval cross-entropy and top-1 accuracy of the rank-r heads against r."""
    colors = colours(in_table_order(heads))
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(9, 3.6))
    _rank_curves(ax_loss, heads, "eval_loss", colors)
    _rank_curves(ax_acc, heads, "eval_acc", colors)
    ax_loss.set_ylabel("eval cross-entropy (nats)")
    ax_acc.set_ylabel("eval top-1 accuracy")
    for ax in (ax_loss, ax_acc):
        _rank_axis(ax, heads)
        ax.grid(alpha=0.3)
    ax_loss.legend(fontsize=7, title="dotted / star: own head", title_fontsize=7)
    fig.tight_layout()
    return save_figure(fig, paths)


@figure("fig7_ngram_werror", tables=("ngram_werror",), target="fig7", category=BOTTLENECK,
        title="Fig. 7: n-gram W-error")
def plot_ngram_werror(table: pd.DataFrame, paths):
    """Fig. 7: W-error(d) of the n-gram matrix of each corpus, one panel per tokenizer (the
    paper - (a) Llama-2, (b) Pythia), one line per corpus (truth dashed)."""
    tokenizers = in_table_order(table, "tokenizer")
    colors = colours(in_table_order(table, "corpus"))
    fig, axes = plt.subplots(1, len(tokenizers), figsize=(5.5 * len(tokenizers), 3.8), squeeze=False, sharey=True)
    for ax, tokenizer in zip(axes[0], tokenizers):
        for corpus in in_table_order(table[table["tokenizer"] == tokenizer], "corpus"):
            rows = table[(table["corpus"] == corpus) & (table["tokenizer"] == tokenizer) & (table["d"] > 0)]
            for kind, style in (("empirical", "-"), ("truth", "--")):
                curve = rows[rows["kind"] == kind]
                if curve.empty:
                    continue
                first = curve.iloc[0]
                label = f"{corpus} ({int(first['n_tokens']):,} tokens, {int(first['n_contexts']):,} contexts)"
                if kind == "truth":
                    label = f"{corpus}: true {int(first['order'])}-gram matrix"
                ax.plot(curve["d"], curve["werror"], style, color=colors[corpus], lw=1.3, label=label)
        ax.axhline(0.5, color="0.6", lw=0.8, ls=":")
        log_axis(ax, "x")
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("rank d")
        ax.set_title(f"{tokenizer} tokenizer", fontsize=9, loc="left")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    axes[0, 0].set_ylabel("W-error(d)")
    fig.tight_layout()
    return save_figure(fig, paths)


@figure("fig8_werror_loss", tables=("bottleneck_heads",), target="fig8", category=BOTTLENECK,
        title="Fig. 8: loss vs W-error")
def plot_werror_loss(heads: pd.DataFrame, paths):
    """Fig. 8: final loss of the rank-r heads against the W-error of the model's own head at r.

    Each point is labelled with its rank where the label fits (inside the axes, clear of the
    data, the legend and the labels of larger ranks: save_figure's optional labels); where a
    model's loss starts to rise is a dashed line with its own legend entry, so no label is drawn
    at the axes' edge.
    """
    colors = colours(in_table_order(heads))
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    ax.axvline(PAPER_RISE_WERROR, color="0.7", lw=3, alpha=0.5, label="paper: rise past ~0.6")
    labels = []
    for i, model in enumerate(in_table_order(heads)):
        rows = heads[heads["model"] == model]
        low = rows[rows["kind"] == "low_rank"].sort_values("w_error")
        full = rows[rows["kind"] == "full_head"].iloc[0]
        rise = low[low["rise_point"]]
        ax.plot(low["w_error"], low["eval_loss"], "o-", color=colors[model], ms=4, label=model)
        ax.axhline(full["eval_loss"], color=colors[model], ls=":", lw=1)
        for row in low.itertuples():  # above the first model's points, below the next's; leftwards near x = 1
            right = row.w_error > 0.8
            labels.append(ax.annotate(
                f"r={row.rank}", (row.w_error, row.eval_loss), fontsize=6, color=colors[model],
                xytext=(-4 if right else 4, 4 if i % 2 == 0 else -9), textcoords="offset points",
                ha="right" if right else "left",
            ))
        if not rise.empty:
            x = float(rise["w_error"].iloc[0])
            ax.axvline(x, color=colors[model], ls="--", lw=1, label=f"{model}: loss rises at W-error {x:.2f}")
    ax.set_xlim(-0.02, 1.02)
    ax.margins(y=0.15)
    ax.set_xlabel("W-error of the model's own head at rank r")
    ax.set_ylabel("eval cross-entropy of the rank-r head (nats)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return save_figure(fig, paths, optional=labels)


@figure("ground_truth_bottleneck", tables=("ngram_ground_truth",), optional=("bottleneck_heads",),
        target="ground_truth", category=BOTTLENECK, title="Ground truth of the bottleneck", entropy_rate="heads")
def plot_ground_truth(curves: pd.DataFrame, heads: pd.DataFrame | None, entropy_rate: float | None, paths):
    """Ground truth: empirical n-gram W-error curves against the true matrix's (left) and the
    rank-r head losses against the synthetic language's entropy rate (right, when given)."""
    with_heads = heads is not None and entropy_rate is not None
    fig, axes = plt.subplots(1, 2 if with_heads else 1, figsize=(10 if with_heads else 5.5, 3.8), squeeze=False)
    ax = axes[0, 0]
    samples = sorted(set(curves.loc[curves["kind"] == "empirical", "n_tokens"]))
    cmap = plt.get_cmap("plasma")
    for i, n in enumerate(samples):
        rows = curves[(curves["kind"] == "empirical") & (curves["n_tokens"] == n)]
        ax.plot(rows["d"], rows["werror"], color=cmap(0.8 * i / max(len(samples) - 1, 1)), lw=1.2,
                label=f"{n:,} tokens ({int(rows['n_contexts'].iloc[0]):,} contexts)")
    truth = curves[curves["kind"] == "truth"]
    contexts = int(truth["n_contexts"].iloc[0])
    ax.plot(truth["d"], truth["werror"], color="k", lw=2, label=f"truth ({contexts:,} contexts)")
    buckets = curves[curves["kind"] == "buckets"]
    if not buckets.empty:
        ax.plot(buckets["d"], buckets["werror"], color="0.5", ls="--", lw=1, label="bucket matrix (rows unweighted)")
    order = int(truth["order"].iloc[0])
    ax.set_xlabel("rank d")
    ax.set_ylabel(f"W-error(d) of the {order}-gram matrix")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6)
    ax.set_title("n-gram W-error converges to the truth", fontsize=9, loc="left")
    if with_heads:
        ax = axes[0, 1]
        colors = colours(in_table_order(heads))
        _rank_curves(ax, heads, "eval_loss", colors)
        ax.axhline(entropy_rate, color="k", lw=1.5, ls="--", label=f"entropy rate {entropy_rate:.3f}")
        _rank_axis(ax, heads)
        ax.set_ylabel("eval cross-entropy (nats)")
        ax.set_ylim(min(entropy_rate, heads["eval_loss"].min()) - 0.1, None)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        ax.set_title("rank-r head loss approaches the entropy rate from above", fontsize=9, loc="left")
    fig.tight_layout()
    return save_figure(fig, paths)

