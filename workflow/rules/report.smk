# The products and the report (their registries, sections and input functions:
# products.smk): every figure drawn by the one rule plot_figure, each table a section names
# rendered as a sortable HTML page next to its figure, the summary page (the run's key
# numbers beside the paper's values), and one named target per section (`snakemake fig1a`
# makes Fig. 1a and its tables, and nothing else).


localrules:
    plot_figure,
    render_table,
    summarize_run,
    summary,


rule plot_figure:
    input:
        unpack(get_figure_inputs),
    output:
        png=figure_report("<results>/figures/{figure}.png"),
        pdf=figure_report("<results>/figures/{figure}.pdf"),
    log:
        "<logs>/plot_figure/{figure}.log",
    wildcard_constraints:
        figure=_alternatives(PLANNED_FIGURES) or "(?!)",
    conda:
        "../../envs/lmsat.yaml"
    params:
        options=get_figure_options,
        caption=get_figure_caption,
    script:
        "../scripts/plot_figure.py"


rule render_table:
    input:
        "<results>/tables/{table}.csv",
    output:
        report(
            "<results>/report/{table}.html",
            caption="../report/table.rst",
            category=table_category,
            subcategory=table_subcategory,
        ),
    log:
        "<logs>/render_table/{table}.log",
    wildcard_constraints:
        table="|".join(SECTION_OF_TABLE),
    conda:
        "../../envs/lmsat.yaml"
    params:
        caption=get_table_caption,
    script:
        "../scripts/render_table.py"


rule summarize_run:
    input:
        unpack(get_summary_inputs),
    output:
        html=report(
            "<results>/report/summary.html",
            caption="../report/summary.rst",
            category="Summary",
        ),
        comparison="<results>/tables/paper_comparison.csv",
        published="<results>/tables/published_evals.csv",
    log:
        "<logs>/summarize_run.log",
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
        run=RUN,
    script:
        "../scripts/summarize_run.py"


# One named target per report section (`snakemake fig1a`, `snakemake table1`, ...).
for name in REPORT_SECTIONS:

    rule:
        name:
            name
        input:
            get_target_files(name),
        localrule: True


rule summary:
    input:
        SUMMARY_HTML,
