# The workflow's Python: config validation, model/revision/metric tables, input functions.
import re
from dataclasses import asdict
from pathlib import Path

from lmsat.config import config_sha256, load_plan
from lmsat.corpus import corpus_inputs
from lmsat.fetch import checkpoint_disk_mb, estimated_parameters
from lmsat.metrics import METRICS
from snakemake.common.configfile import load_configfile
from snakemake.utils import update_config

# `configfile:` in the Snakefile would be merged under any --configfile, so the paper's
# config would also plan the toy suite; a --configfile replaces the default instead.
if workflow.overwrite_configfiles:
    chosen = {}
    for path in workflow.overwrite_configfiles:
        update_config(chosen, load_configfile(path))
    update_config(chosen, workflow.config_settings.overwrite_config)
    config.clear()
    config.update(chosen)

# Validated once, at DAG time, with errors naming the key and the fix; no hub is reached.
PLAN = load_plan(
    config, Path(workflow.current_basedir).parent / "schemas" / "config.schema.yaml"
)
CONFIG = PLAN.config
# Recorded in every aggregated table, so a table names the config that made it.
CONFIG_SHA256 = config_sha256(CONFIG)
MODELS = PLAN.models
TOY_LANGUAGE = "results/toy/language.h5"
TOY_TOKENIZER = "results/toy/tokenizer/tokenizer.json"
FETCH = CONFIG["fetch"]
HUB_MODELS = [name for name, m in MODELS.items() if m.source == "hub"]
CHECKPOINT_DISK_MB = {
    name: checkpoint_disk_mb(MODELS[name], FETCH["bytes_per_param"])
    for name in HUB_MODELS
}


def _alternatives(values):
    return "|".join(re.escape(v) for v in sorted(set(values)))


wildcard_constraints:
    model=_alternatives(MODELS),
    revision=_alternatives(r for m in MODELS.values() for r in m.revisions),
    metric=_alternatives(METRICS),
    corpus=_alternatives(CONFIG["corpora"]),
    tokenizer=_alternatives(CONFIG["tokenizers"]),


def uses_toy_suite():
    return any(m.source == "toy" for m in MODELS.values())


def checkpoint_files(pattern, **extra):
    """`pattern` formatted for every (model, revision) of the plan."""
    return [
        pattern.format(model=model, revision=revision, **extra)
        for model, revision in PLAN.checkpoints()
    ]


def sample_of_model(wildcards):
    return PLAN.sample_path(MODELS[wildcards.model].tokenizer)


def fetched_checkpoint(path):
    """The fetch rule's output; temp() so that Snakemake deletes it after its last consumer."""
    return temp(directory(path)) if FETCH["remove_after_use"] else directory(path)


def weights_of(model, revision):
    """What must exist before `revision` of `model` can be loaded: the toy suite's trained
    model, or the checkpoint fetched from the hub. ancient(): a checkpoint fetched again
    (e.g. the best one for lm-eval, after its first copy was removed) is the same weights,
    so its newer files must not rerun the finished jobs that read the first copy."""
    entry = MODELS[model]
    if entry.source == "toy":
        return f"results/toy/models/{model}.json"
    if entry.source == "hub":
        return ancient(entry.cache_dir(revision))
    return []


def checkpoint_weights(wildcards):
    return weights_of(wildcards.model, wildcards.revision)


def final_checkpoint_weights(wildcards):
    return weights_of(wildcards.model, MODELS[wildcards.model].final_revision)


def model_params(wildcards):
    return asdict(MODELS[wildcards.model])


def model_tokenizer(model):
    """config['tokenizers'] entry of `model`."""
    return CONFIG["tokenizers"][MODELS[model].tokenizer]


def tokenizer_files(wildcards):
    """The toy tokenizer is built by the pipeline; others come with their checkpoint."""
    return TOY_TOKENIZER if model_tokenizer(wildcards.model)["source"] == "toy" else []


def model_mem_mb(model, base_mb, attempt):
    """Memory of a job that loads `model`: the model in float32 (4 bytes a parameter, +20%)
    beside the job's own `base_mb`; a retry after an OOM asks for `attempt` times that.
    """
    weights_mb = 4 * estimated_parameters(MODELS[model]) / 1e6
    return int((base_mb + 1.2 * weights_mb) * attempt)


def checkpoint_record(wildcards):
    """Suite, step and token count of one checkpoint, for its metric records."""
    model = MODELS[wildcards.model]
    step = model.step(wildcards.revision)
    return dict(
        suite=model.suite,
        model=model.name,
        revision=wildcards.revision,
        step=step,
        tokens=step * model.tokens_per_step,
    )


def sample_inputs(wildcards):
    corpus = CONFIG["corpora"][wildcards.corpus]
    tokenizer = CONFIG["tokenizers"][wildcards.tokenizer]
    return corpus_inputs(corpus) + (
        [TOY_TOKENIZER] if tokenizer["source"] == "toy" else []
    )


def metric_inputs(wildcards):
    if METRICS[wildcards.metric].source == "cache":
        return dict(
            cache=f"results/cache/{wildcards.model}/{wildcards.revision}.h5",
            sample=sample_of_model(wildcards),
        )
    return dict(weights=checkpoint_weights(wildcards))


def synthetic_reference():
    """The synthetic language (for its entropy rate) when the eval corpus is synthetic."""
    corpus = CONFIG["corpora"][CONFIG["sample"]["corpus"]]
    return TOY_LANGUAGE if corpus["type"] == "synthetic" else []


def final_outputs():
    """Everything the workflow makes by default: the core outputs, the rendered tables and summary."""
    return core_outputs() + report_outputs()


def core_outputs():
    return (
        [
            "results/tables/loss.csv",
            "results/figures/fig1a_loss.png",
            "results/figures/fig1a_loss.pdf",
            "results/figures/fig2_anisotropy_depth.png",
            "results/figures/fig2_anisotropy_depth.pdf",
            "results/figures/fig3_anisotropy_training.png",
            "results/figures/fig3_anisotropy_training.pdf",
            "results/figures/fig4_head_spectra.png",
            "results/figures/fig4_head_spectra.pdf",
            "results/figures/fig5_singular_entropy.png",
            "results/figures/fig5_singular_entropy.pdf",
            "results/figures/attention_lowrank.png",
            "results/figures/attention_lowrank.pdf",
            "results/tables/identical_weights.csv",
        ]
        + bottleneck_outputs()
        + ngram_outputs()
        + evaluation_outputs()
        + scaling_outputs()
    )


# ---------------------------------------------------------------- the report and named targets
# One entry per section of the report and per named target rule (`snakemake fig1a`,
# rules in report.smk): category, subcategory, its figures (results/figures/<stem>.png and
# .pdf) and the tables its caption cites (results/tables/<name>.csv, rendered by rule
# render_table as results/report/<name>.html next to the figure).
REPORT_SECTIONS = {
    "fig1a": (
        "Saturation",
        "Fig. 1a: loss along training",
        ["fig1a_loss"],
        ["loss", "best_final"],
    ),
    "fig1b": (
        "Saturation",
        "Fig. 1b: scaling law",
        ["fig1b_scaling"],
        ["scaling_fit", "scaling_shortfall"],
    ),
    "table1": ("Saturation", "Table 1: best vs final downstream", [], ["table1"]),
    "fig2": (
        "Representation degeneration",
        "Fig. 2: anisotropy by depth",
        ["fig2_anisotropy_depth"],
        ["anisotropy_layers"],
    ),
    "fig3": (
        "Representation degeneration",
        "Fig. 3: anisotropy along training",
        ["fig3_anisotropy_training"],
        ["anisotropy_training"],
    ),
    "fig4": (
        "Representation degeneration",
        "Fig. 4: head spectra",
        ["fig4_head_spectra"],
        ["spectra", "identical_weights"],
    ),
    "fig5": (
        "Representation degeneration",
        "Fig. 5: singular entropy",
        ["fig5_singular_entropy"],
        ["singular_entropy"],
    ),
    "attention": (
        "Low-rank attention",
        "Low-rank attention products",
        ["attention_lowrank"],
        ["attention_lowrank"],
    ),
    "fig6": (
        "Softmax bottleneck",
        "Fig. 6: rank-constrained heads",
        ["fig6_rank_heads"],
        ["bottleneck_heads", "bottleneck_lr_search"],
    ),
    "fig7": (
        "Softmax bottleneck",
        "Fig. 7: n-gram W-error",
        ["fig7_ngram_werror"],
        ["ngram_werror"],
    ),
    "fig8": ("Softmax bottleneck", "Fig. 8: loss vs W-error", ["fig8_werror_loss"], []),
    "ground_truth": (
        "Softmax bottleneck",
        "Ground truth of the bottleneck",
        ["ground_truth_bottleneck"],
        ["ngram_ground_truth"],
    ),
}
SUMMARY_HTML = "results/report/summary.html"
CAPTIONS = Path(workflow.current_basedir).parent / "report"
SECTION_OF_FIGURE = {
    stem: target
    for target, (_, _, stems, _) in REPORT_SECTIONS.items()
    for stem in stems
}
SECTION_OF_TABLE = {
    name: target
    for target, (_, _, _, names) in REPORT_SECTIONS.items()
    for name in names
}


def section_files(target):
    """The figures (PNG, PDF), tables (CSV) and rendered tables (HTML) of one section."""
    _, _, stems, names = REPORT_SECTIONS[target]
    return (
        [f"results/figures/{stem}.{ext}" for stem in stems for ext in ("png", "pdf")]
        + [f"results/tables/{name}.csv" for name in names]
        + [f"results/report/{name}.html" for name in names]
    )


def sections_made():
    """The sections whose figure or table this config makes (final_outputs names it)."""
    made = set(core_outputs())
    return [
        target
        for target in REPORT_SECTIONS
        if any(path in made for path in section_files(target))
    ]


def target_files(target):
    """Input of the named target rule `target` (report.smk); an error if the config makes none."""
    if target not in sections_made():
        raise ValueError(
            f"target {target}: this config makes no {target} (its config section turns it off); "
            f"targets this config makes: {', '.join(sections_made())}"
        )
    return section_files(target)


def target(name):
    """Input function of the named target rule `name` (evaluated only when it is targeted)."""
    return lambda wildcards: target_files(name)


def figure_report(path):
    """`path` (results/figures/<stem>.png or .pdf) marked for the report, in its section,
    with the figure's caption (workflow/report/<stem>.rst)."""
    stem = Path(path).stem
    category, subcategory, _, _ = REPORT_SECTIONS[SECTION_OF_FIGURE[stem]]
    return report(
        path,
        caption=f"../report/{stem}.rst",
        category=category,
        subcategory=subcategory,
    )


def table_category(wildcards):
    return REPORT_SECTIONS[SECTION_OF_TABLE[wildcards.table]][0]


def table_subcategory(wildcards):
    return REPORT_SECTIONS[SECTION_OF_TABLE[wildcards.table]][1]


def table_caption(wildcards):
    """Caption text of a rendered table: workflow/report/<table>.rst where the table has its
    own, and always the figure or table whose caption cites it."""
    name = wildcards.table
    own = CAPTIONS / f"{name}.rst"
    text = own.read_text() if own.exists() else ""
    section = REPORT_SECTIONS[SECTION_OF_TABLE[name]][1]
    return (
        f"{text}\n\n``results/tables/{name}.csv``, cited by {section}; click a column "
        "header to sort, and download the CSV from the link above the table."
    ).strip()


def report_outputs():
    """The rendered tables of every section this config makes, and the summary page."""
    return [
        f"results/report/{name}.html"
        for target in sections_made()
        for name in REPORT_SECTIONS[target][3]
    ] + [SUMMARY_HTML]


def summary_inputs(wildcards):
    """The tables the summary reads: loss and the fit always, Table 1 and the rank-r heads
    when the config makes them."""
    made = sections_made()
    inputs = dict(
        loss="results/tables/loss.csv",
        fit="results/tables/scaling_fit.csv",
        shortfall="results/tables/scaling_shortfall.csv",
    )
    if "table1" in made:
        inputs["table1"] = "results/tables/table1.csv"
    if "fig6" in made:
        inputs["heads"] = "results/tables/bottleneck_heads.csv"
    return inputs
