# The workflow's products, from two registries: every table by name (metric tables:
# lmsat.products.metrics, written by tabulate_metric; the others: RULE_TABLES below, each written
# by a rule of its own) and every figure (lmsat.figures.FIGURES, each declared beside its
# plot function). A figure is planned exactly when all its tables are, drawn by the one
# rule plot_figure, and is in the report with its caption workflow/report/<stem>.rst. The
# final outputs, the report's sections and the named target rules all come from here:
# adding a figure takes its plot function and its caption, no rule (docs/extending.md).
# The rules are in report.smk (snakemake --lint wants rules and functions apart).
from lmsat.figures import FIGURES
from lmsat.figures.published import PUBLISHED as PUBLISHED_CATEGORY

PUBLISHED_TABLES = [
    "published_loss",
    "published_table1",
    "published_scaling_fit",
    "published_scaling_shortfall",
    "published_verdicts",
]
PUBLISHED_TABLE1_SECTION = (
    PUBLISHED_CATEGORY,
    "Table 1 for every size (published)",
    [],
    ["published_table1"],
)
PUBLISHED_SUMMARY = f"results/{RUN}/report/published_summary.html"

# Tables that rules of their own write (results/<run>/tables/<name>.csv); name -> (the
# rule's name, whether this config runs it). Figures name them as they name metric tables.
RULE_TABLES = {
    "best_final": ("select_checkpoints", bool(MODELS)),
    "scaling_fit": ("fit_scaling_law", SCALING["enabled"] and bool(MODELS)),
    "scaling_shortfall": ("fit_scaling_law", SCALING["enabled"] and bool(MODELS)),
    "table1": ("make_table1", bool(EVALUATION["tasks"]) and bool(MODELS)),
    "bottleneck_heads": ("tabulate_bottleneck", bool(BOTTLENECK["models"])),
    "bottleneck_lr_search": ("tabulate_bottleneck", bool(BOTTLENECK["models"])),
    "ngram_werror": ("tabulate_ngrams", bool(NGRAM_CORPORA)),
    "ngram_ground_truth": (
        "ngram_ground_truth",
        bool(NGRAMS["ground_truth"]["sample_sizes"]),
    ),
    "paper_comparison": ("summarize_run", bool(MODELS)),
    "published_evals": ("summarize_run", bool(MODELS)),
    **{name: ("summarize_published", bool(PUBLISHED)) for name in PUBLISHED_TABLES},
}
# Report sections of a table that no figure draws: target -> (category, title, [], tables).
TABLE_SECTIONS = {
    "table1": ("Saturation", "Table 1: best vs final downstream", [], ["table1"]),
    "published_table1": PUBLISHED_TABLE1_SECTION,
}
# every table: name -> the rule that writes it
TABLES = {name: "tabulate_metric" for name in table_metric()}
for _name, (_writer, _) in RULE_TABLES.items():
    if _name in TABLES:
        raise WorkflowError(
            f"table {_name}: both metric {table_metric()[_name]} (lmsat.products.metrics) and rule "
            f"{_writer} (RULE_TABLES in workflow/rules/products.smk) write it; fix: rename one"
        )
    TABLES[_name] = _writer
PLANNED_TABLES = [*METRIC_TABLES, *(n for n, (_, on) in RULE_TABLES.items() if on)]
CAPTIONS = WORKFLOW_DIR / "report"
for _stem, _figure in FIGURES.items():
    for _table in (*_figure.tables, *_figure.optional, *_figure.cites):
        if _table not in TABLES:
            raise WorkflowError(
                f"figure {_stem} (lmsat.figures) names table {_table!r}, which no metric "
                "tabulates (lmsat.products.metrics) and no rule writes (RULE_TABLES in "
                f"workflow/rules/products.smk); tables: {', '.join(sorted(TABLES))}"
            )
    if not (CAPTIONS / f"{_stem}.rst").is_file():
        raise WorkflowError(
            f"figure {_stem} (lmsat.figures) has no caption; fix: write its one-paragraph "
            f"caption to {CAPTIONS / f'{_stem}.rst'}"
        )
PLANNED_FIGURES = [
    stem
    for stem, figure in FIGURES.items()
    if all(table in PLANNED_TABLES for table in figure.tables)
]


def drawn_tables(figure):
    """The tables `figure` draws in this config: all of its own, the planned optional ones."""
    optional = [name for name in figure.optional if name in PLANNED_TABLES]
    return [*figure.tables, *optional]


# ---------------------------------------------------------------- the report's sections
# One entry per section of the report and per named target rule (`snakemake fig1a`, rules
# in report.smk): category, subcategory, its figures (results/figures/<stem>.png and .pdf)
# and the tables it draws or its captions cite (results/tables/<name>.csv, rendered by rule
# render_table as results/report/<name>.html, in the first section that names the table),
# category by category in order of first appearance.
_SECTIONS = {}
for _stem, _figure in FIGURES.items():
    _section = _SECTIONS.setdefault(
        _figure.target, (_figure.category, _figure.title, [], [])
    )
    _section[2].append(_stem)
    _section[3].extend(
        t for t in drawn_tables(_figure) + list(_figure.cites) if t not in _section[3]
    )
_SECTIONS.update(TABLE_SECTIONS)
_CATEGORIES = list(dict.fromkeys(category for category, *_ in _SECTIONS.values()))
REPORT_SECTIONS = dict(
    sorted(_SECTIONS.items(), key=lambda item: _CATEGORIES.index(item[1][0]))
)
SECTION_OF_TABLE = {}
for _target, (_, _, _, _names) in REPORT_SECTIONS.items():
    for _name in _names:
        SECTION_OF_TABLE.setdefault(_name, _target)


def section_files(target):
    """The figures (PNG, PDF), tables (CSV) and rendered tables (HTML) of one section."""
    _, _, stems, names = REPORT_SECTIONS[target]
    return (
        [
            f"results/{RUN}/figures/{stem}.{ext}"
            for stem in stems
            for ext in ("png", "pdf")
        ]
        + [f"results/{RUN}/tables/{name}.csv" for name in names]
        + [f"results/{RUN}/report/{name}.html" for name in names]
    )


def sections_made():
    """The sections this config makes: a planned figure, or (Table 1) a planned table."""
    return [
        target
        for target, (_, _, stems, names) in REPORT_SECTIONS.items()
        if any(stem in PLANNED_FIGURES for stem in stems)
        or (not stems and any(name in PLANNED_TABLES for name in names))
    ]


# ---------------------------------------------------------------- final outputs


def table_outputs():
    """Every planned table: the metric tables and every output of the rules that write the
    others (Table 1's .md and .tex beside its CSV, the summary page beside its tables).
    """
    outputs = [f"results/{RUN}/tables/{name}.csv" for name in METRIC_TABLES]
    for writer in dict.fromkeys(r for r, on in RULE_TABLES.values() if on):
        written = [planned_path(f) for f in getattr(rules, writer).output]
        for name in [n for n, (r, _) in RULE_TABLES.items() if r == writer]:
            if f"results/{RUN}/tables/{name}.csv" not in written:
                raise WorkflowError(
                    f"RULE_TABLES (workflow/rules/products.smk): rule {writer} does not "
                    f"write results/{RUN}/tables/{name}.csv (it writes {', '.join(written)})"
                )
        outputs += list(written)
    return outputs


def figure_outputs():
    return [
        f"results/{RUN}/figures/{stem}.{ext}"
        for stem in PLANNED_FIGURES
        for ext in ("png", "pdf")
    ]


def report_outputs():
    """The rendered tables of every section this config makes."""
    return [
        f"results/{RUN}/report/{name}.html"
        for target in sections_made()
        for name in REPORT_SECTIONS[target][3]
    ]


def checkpoint_outputs():
    """Every per-checkpoint file of the plan, and the samples they are computed from: the
    hidden-state caches, weight-metric files and metric records the tables are built from.
    Snakemake makes a missing file again only for a job that runs or for a target, so
    without `all` naming them a lost one stayed lost while the tables after it were up to
    date: a --forcerun of analyse_checkpoint killed after Snakemake removed a job's outputs
    (the other forced jobs rewrote their small files byte for byte, which Snakemake's input
    checksums count as unchanged), or a file deleted by hand (docs/faults.md's "delete it and
    rerun"). Named here, a plain rerun makes it again, and everything after it."""
    if not PLANNED_METRICS:
        return []
    samples = [sample_file(model) for model in MODELS]
    cache = checkpoint_files(f"results/{RUN}/cache/{{model}}/{{revision}}.h5")
    return (
        samples
        + cache
        + [f for metric in PLANNED_METRICS for f in metric_files(metric)]
    )


def get_final_outputs():
    """Everything the workflow makes by default (the input of `all`): tables, figures, report,
    and the per-checkpoint files they are built from (checkpoint_outputs)."""
    outputs = (
        table_outputs() + figure_outputs() + report_outputs() + checkpoint_outputs()
    )
    return list(dict.fromkeys(outputs))


# ---------------------------------------------------------------- rule plot_figure


def get_figure_inputs(wildcards):
    """The figure's tables, and the synthetic language when it draws that entropy rate."""
    figure = FIGURES[wildcards.figure]
    inputs = {name: f"results/{RUN}/tables/{name}.csv" for name in drawn_tables(figure)}
    return dict(inputs, language=entropy_rate_language(figure))


def entropy_rate_language(figure):
    """The synthetic language whose entropy rate `figure` draws: that of the eval sample's
    corpus ("sample") or of the rank-r heads' eval pairs ("heads"), when it is synthetic.
    """
    if not figure.entropy_rate:
        return []
    corpus = {"sample": CONFIG["sample"]["corpus"], "heads": HEAD_SET_CORPORA["eval"]}
    synthetic = CONFIG["corpora"][corpus[figure.entropy_rate]]["type"] == "synthetic"
    return TOY_LANGUAGE if synthetic else []


def get_figure_options(wildcards):
    """The config values a figure draws with (its `options`: keyword -> dotted config key)."""
    options = {}
    for keyword, dotted in FIGURES[wildcards.figure].options.items():
        value = CONFIG
        for key in dotted.split("."):
            value = value[key]
        options[keyword] = value
    return options


def one_line(caption):
    """A caption (one RST paragraph) on one line, its "quotes" curly, the run's directory in
    its paths (a caption names results/<run>/...): the report lists a job's params with each
    newline as a literal \\n and each straight double quote as \\", and a paragraph's lines
    joined render the same."""
    caption = caption.replace("results/<run>/", f"results/{RUN}/")
    return re.sub(r'"([^"]*)"', "\u201c\\1\u201d", " ".join(caption.split()))


def get_figure_caption(wildcards):
    """The figure's caption, workflow/report/<stem>.rst (the report shows it)."""
    return one_line((CAPTIONS / f"{wildcards.figure}.rst").read_text())


def figure_report(path):
    """`path` (<results>/figures/{figure}.png or .pdf) marked for the report, in its
    section, with its caption (get_figure_caption, shown through report/figure.rst)."""
    return report(
        path,
        caption="../report/figure.rst",
        category=lambda wildcards: FIGURES[wildcards.figure].category,
        subcategory=lambda wildcards: FIGURES[wildcards.figure].title,
    )


# ---------------------------------------------------------------- the report (report.smk)
# a run of the published record alone: its own page (published.smk) is the summary
SUMMARY_HTML = f"results/{RUN}/report/summary.html" if MODELS else PUBLISHED_SUMMARY


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
    """The tables the summary reads: loss and its saturation verdicts always; the fit,
    Table 1, the rank-r heads, the identical weights, the gradient bottleneck, the head's
    weight diagnostics, the representation similarity and the order of events when the
    config makes them (the summary builds from whatever the run has), and beside Table 1
    EleutherAI's published evaluations (lmsat.data.published_evals)."""
    inputs = dict(loss=f"results/{RUN}/tables/loss.csv")
    if "saturation_verdicts" in PLANNED_TABLES:
        inputs["verdicts"] = f"results/{RUN}/tables/saturation_verdicts.csv"
    named = dict(
        fit="scaling_fit",
        shortfall="scaling_shortfall",
        table1="table1",
        heads="bottleneck_heads",
        alpha="weight_alpha",
        similarity="representation_similarity",
        gradient="gradient_bottleneck",
        event_order="event_order",
        event_prediction="event_prediction",
    )
    for key, name in named.items():
        if name in PLANNED_TABLES:
            inputs[key] = f"results/{RUN}/tables/{name}.csv"
    if "table1" in PLANNED_TABLES:
        inputs["evaluations"] = evaluation_records()
    if "identical_weights" in PLANNED_TABLES:
        inputs["identical"] = f"results/{RUN}/tables/identical_weights.csv"
    return inputs


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
