"""Rule summarize_run: the report's summary page (results/<run>/report/summary.html), the paper
comparison table (results/<run>/tables/paper_comparison.csv) and EleutherAI's published evaluations
of the run's Pythia checkpoints beside its own lm-eval results (results/<run>/tables/published_evals.csv)."""

import _lmsat_src  # noqa: F401 (first: this workflow's src/ on sys.path)
import lmsat.runtime.offline  # noqa: F401 (first: compute jobs never reach the network)
import lmsat.runtime.warm_start  # noqa: F401 (then: a local run's warm interpreter takes the job, if it serves it)

import logging
import os
from pathlib import Path

import pandas as pd

from lmsat.core.io import atomic_path, read_record, setup_logging
from lmsat.data.published_evals import compare, published_evals
from lmsat.data.published_evals import source as published_source
from lmsat.products.event_tables import event_order_facts
from lmsat.products.report import comparison_text, dynamics_rows, gradient_fact, key_numbers, paper_comparison, paper_values, summary_page
from lmsat.products.table_files import read_table, write_csv

log = logging.getLogger(__name__)


def shortfalls(fit) -> str:
    """The mean shortfalls of the models below the fit threshold, or why there are none."""
    final, best = fit["mean_shortfall_final_pct"], fit["mean_shortfall_best_pct"]
    if pd.isna(final) and pd.isna(best):
        return f"every model is at or above the fit threshold ({fit['min_params']:.4g} parameters): no shortfall."
    return f"mean shortfall of the models below the fit: final {final:+.1f}%, best {best:+.1f}%."


def scaling_fact(fit) -> str:
    if fit is None:
        return "Scaling law (Fig. 1b): not planned (scaling.enabled: false)."
    return (
        f"Scaling law (Fig. 1b): A = {fit['A']:.4g}, alpha = {fit['alpha']:.4g} ({fit['source']}), "
        f"B = {fit['B']:.4g}, beta = {fit['beta']:.3g}, E = {fit['E']:.4g}; " + shortfalls(fit)
    )


def run_checkpoints(loss: pd.DataFrame) -> pd.DataFrame:
    """(model, revision, checkpoint) of every checkpoint of the loss table; checkpoint is
    best, final, 'best = final' or ''."""
    best, final = loss["is_best"].astype(bool), loss["is_final"].astype(bool)
    kind = pd.Series("", index=loss.index).mask(best, "best").mask(final, "final").mask(best & final, "best = final")
    return pd.DataFrame(dict(model=loss["model"], revision=loss["revision"], checkpoint=kind))


def main(snakemake):
    setup_logging(snakemake.log[0])
    inputs, params = snakemake.input, snakemake.params
    tables = os.path.dirname(snakemake.output.comparison)  # results/<run>/tables, as the page names it
    loss = read_table(inputs.loss)
    fit = read_table(inputs.fit).iloc[0] if "fit" in inputs.keys() else None  # scaling.enabled: false
    shortfall = read_table(inputs.shortfall) if "shortfall" in inputs.keys() else None
    table1 = read_table(inputs.table1) if "table1" in inputs.keys() else None
    heads = read_table(inputs.heads) if "heads" in inputs.keys() else None
    verdicts = read_table(inputs.verdicts) if "verdicts" in inputs.keys() else None  # metrics without loss
    alpha = read_table(inputs.alpha) if "alpha" in inputs.keys() else None  # the weight and similarity diagnostics
    similarity = read_table(inputs.similarity) if "similarity" in inputs.keys() else None
    dynamics = dynamics_rows(loss, alpha, similarity) if alpha is not None or similarity is not None else None
    paper = paper_values()
    comparison = paper_comparison(paper, dict(params.suites), fit=fit, table1=table1, heads=heads)
    numbers = key_numbers(loss, dict(params.hidden_sizes), shortfall=shortfall, heads=heads)
    models = ", ".join(f"{name} (d={d})" for name, d in params.hidden_sizes.items())
    facts = [
        f"Models, smallest first: {models}.",
        f"{len(loss)} checkpoints scored on {params.eval_tokens:,} tokens of corpus {params.corpus}.",
        scaling_fact(fit),
        *([gradient_fact(read_table(inputs.gradient), tables)] if "gradient" in inputs.keys() else []),
        *(event_order_facts(read_table(inputs.event_order), read_table(inputs.event_prediction)
                            if "event_prediction" in inputs.keys() else None) if "event_order" in inputs.keys() else []),
        f"Config sha256 {params.config_sha256[:12]}.",
    ]
    records = [read_record(path, "model", "checkpoint", "task") for path in inputs.get("evaluations", [])]
    identical = read_table(inputs.identical) if "identical" in inputs.keys() else None
    published = compare(records, published_evals(), run_checkpoints(loss), identical)
    log.info("key numbers:\n%s\ncompared with the paper:\n%s", numbers.to_string(), comparison_text(comparison))
    for row in ([] if verdicts is None else verdicts.to_dict("records")):  # what the reader of a verdict must know
        if isinstance(row.get("notes"), str) and row["notes"]:
            log.warning("%s: %s; %s", row["model"], row["verdict"], row["notes"])
    log.info("%d published evaluations of the run's Pythia checkpoints, %d beside a result of the run",
             len(published), published["measured"].notna().sum())
    # links between the planned paths (results/<run>/report/ to results/<run>/figures/): in a
    # storage run the page is written to a local copy elsewhere and read in the bucket
    here = f"results/{params.run}/report"
    figures = [(title, path, os.path.relpath(path, here)) for title, path in params.figures]
    with atomic_path(snakemake.output.html) as tmp:
        Path(tmp).write_text(
            summary_page("lmsat: run summary", facts, numbers, comparison, paper["source"], figures=figures,
                         published=published, published_source=published_source(),
                         shots=params.num_fewshot, verdicts=verdicts, dynamics=dynamics, tables=tables),
            encoding="utf-8",
        )
    write_csv(comparison, snakemake.output.comparison, params.config_sha256)
    write_csv(published, snakemake.output.published, params.config_sha256)


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
