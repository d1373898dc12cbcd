# The report's own results (its sections: REPORT_SECTIONS in products.smk): each table a
# section names rendered as a sortable HTML page next to its figure, the summary page (the
# run's key numbers beside the paper's values), and one named target per section
# (`snakemake fig1a` makes Fig. 1a and its tables, and nothing else).


localrules:
    render_table,
    summarize_run,
    summary,


SUMMARY_HTML = f"results/{RUN}/report/summary.html"


def table_category(wildcards):
    return REPORT_SECTIONS[SECTION_OF_TABLE[wildcards.table]][0]


def table_subcategory(wildcards):
    return REPORT_SECTIONS[SECTION_OF_TABLE[wildcards.table]][1]


def get_table_caption(wildcards):
    """Caption text of a rendered table: workflow/report/<table>.rst where the table has its
    own, and always the figure or table whose caption cites it."""
    name = wildcards.table
    own = CAPTIONS / f"{name}.rst"
    text = own.read_text() if own.exists() else ""
    section = REPORT_SECTIONS[SECTION_OF_TABLE[name]][1]
    return one_line(
        f"{text} ``results/{RUN}/tables/{name}.csv``, cited by {section}; click a column "
        "header to sort, and download the CSV from the link above the table."
    )


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
        caption=get_table_caption,
    script:
        "../scripts/render_table.py"


def summary_figures():
    """[title, PNG path] of every figure this config makes, in the report's order: the
    summary links each (one click from it to the figure and its caption)."""
    figures = []
    for _, title, stems, _ in REPORT_SECTIONS.values():
        for stem in stems:
            if stem in PLANNED_FIGURES:
                path = f"results/{RUN}/figures/{stem}.png"
                figures.append(
                    [title if len(stems) == 1 else f"{title} ({stem})", path]
                )
    return figures


def get_summary_inputs(wildcards):
    """The tables the summary reads: loss always; the fit, Table 1, the rank-r heads and the
    identical weights when the config makes them (the summary builds from whatever the run
    has), and beside Table 1 EleutherAI's published evaluations (lmsat.published)."""
    inputs = dict(loss=f"results/{RUN}/tables/loss.csv")
    named = dict(
        fit="scaling_fit",
        shortfall="scaling_shortfall",
        table1="table1",
        heads="bottleneck_heads",
    )
    for key, name in named.items():
        if name in PLANNED_TABLES:
            inputs[key] = f"results/{RUN}/tables/{name}.csv"
    if "table1" in PLANNED_TABLES:
        inputs["evaluations"] = evaluation_records()
    if "identical_weights" in PLANNED_TABLES:
        inputs["identical"] = f"results/{RUN}/tables/identical_weights.csv"
    return inputs


rule summarize_run:
    input:
        unpack(get_summary_inputs),
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


def target_files(target):
    """Input of the named target rule `target`; an error if the config makes none."""
    if target not in sections_made():
        raise ValueError(
            f"target {target}: this config makes no {target} (its config section turns it off); "
            f"targets this config makes: {', '.join(sections_made())}"
        )
    return section_files(target)


def get_target_files(name):
    """Input function of the named target rule `name` (evaluated only when it is targeted)."""
    return lambda wildcards: target_files(name)


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
