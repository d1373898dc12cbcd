# The report's own results (sections and targets: REPORT_SECTIONS in common.smk): each table
# a caption cites rendered as a sortable HTML page next to its figure, the summary page
# (the run's key numbers beside the paper's values), and one named target per figure or
# table (`snakemake fig1a` makes Fig. 1a and its tables, and nothing else).


localrules:
    render_table,
    summarize_run,
    fig1b,
    table1,
    fig6,
    fig7,
    fig8,
    ground_truth,
    summary,


rule render_table:
    input:
        "results/{run}/tables/{table}.csv",
    output:
        report(
            "results/{run}/report/{table}.html",
            caption="../report/table.rst",
            category=table_category,
            subcategory=table_subcategory,
        ),
    log:
        "logs/{run}/render_table/{table}.log",
    wildcard_constraints:
        table="|".join(SECTION_OF_TABLE),
    conda:
        "../../envs/lmsat.yaml"
    params:
        caption=table_caption,
    script:
        "../scripts/render_table.py"


rule summarize_run:
    input:
        unpack(summary_inputs),
    output:
        html=report(
            "results/{run}/report/summary.html",
            caption="../report/summary.rst",
            category="Summary",
        ),
        comparison="results/{run}/tables/paper_comparison.csv",
        published="results/{run}/tables/published_evals.csv",
    log:
        "logs/{run}/summarize_run.log",
    conda:
        "../../envs/lmsat.yaml"
    params:
        suites={name: m.suite for name, m in MODELS.items()},
        hidden_sizes={name: m.hidden_size for name, m in MODELS.items()},
        eval_tokens=CONFIG["sample"]["n_tokens"],
        corpus=CONFIG["sample"]["corpus"],
        config_sha256=CONFIG_SHA256,
        figures=summary_figures(),
        num_fewshot=EVALUATION["num_fewshot"],
    script:
        "../scripts/summarize_run.py"


rule fig1b:
    input:
        target("fig1b"),


rule table1:
    input:
        target("table1"),


rule fig6:
    input:
        target("fig6"),


rule fig7:
    input:
        target("fig7"),


rule fig8:
    input:
        target("fig8"),


rule ground_truth:
    input:
        target("ground_truth"),


# The metric figures' targets, one per registry section (lmsat.figures.FIGURES).
for name in METRIC_SECTIONS:

    rule:
        name:
            name
        input:
            target(name),
        localrule: True


rule summary:
    input:
        SUMMARY_HTML,
