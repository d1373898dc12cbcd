# The workflow's Python: config loading and validation, the plan's tables, the input
# functions (get_*) and helpers several stages share, then each stage's own in a section
# named after its rule file.
import copy
import re
import sys
from dataclasses import asdict, replace
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.sourcecache import LocalSourceFile
from snakemake.utils import update_config

# This workflow's own files (src/, schema, captions) are found from this file, never from
# workflow.basedir: as a `module` of another workflow, that is the deploying workflow's.
if not isinstance(workflow.current_basedir, LocalSourceFile):
    raise WorkflowError(
        f"lmsat is deployed from {workflow.current_basedir}, which is not a local directory: "
        "its jobs and planner import the lmsat library beside the workflow (src/), which a "
        "remote module does not carry. Fix: clone the repository at the tag you want and "
        "point the module at the clone's workflow/Snakefile (docs/module.md: using lmsat inside "
        "another workflow)."
    )
WORKFLOW_DIR = Path(workflow.current_basedir).resolve().parent  # <checkout>/workflow
LMSAT_SRC = WORKFLOW_DIR.parent / "src"
# Plan with the lmsat beside this workflow, as its jobs do (workflow/scripts/_lmsat_src.py),
# whether or not (or whichever) lmsat is installed or comes first on PYTHONPATH; one
# imported before (by a deploying workflow) is forgotten here, not reused.
sys.path[:] = [str(LMSAT_SRC)] + [p for p in sys.path if p != str(LMSAT_SRC)]
for _name in [n for n in sys.modules if n == "lmsat" or n.startswith("lmsat.")]:
    _file = getattr(sys.modules[_name], "__file__", None) or "."
    if LMSAT_SRC not in Path(_file).resolve().parents:
        del sys.modules[_name]

from lmsat.bottleneck import head_ranks, head_train_fields, learning_rates, set_corpora
from lmsat.config import (
    config_sha256,
    load_plan,
    load_yaml,
    ngram_tokenizers,
    result_config,
    run_of_config_file,
)
from lmsat.corpus import corpus_inputs
from lmsat.evaluation import OFFLINE_TASKS, STORYCLOZE_2016_FILES
from lmsat.fetch import checkpoint_disk_mb, estimated_parameters
from lmsat.bottleneck import shard_count  # the head cache's shard files
from lmsat.integrity import selected_revision as checked_selection
from lmsat.hub import repo_dir
from lmsat.figures import FIGURES
from lmsat.fingerprint import FETCHED_MARKER, changed_files, weights_fingerprint
from lmsat.io import read_json
from lmsat.metrics import METRICS, table_metric
from lmsat.staging import (
    STAGING_RULES,
    needs_staging_corpus,
    needs_staging_tokenizer,
)

if Path(sys.modules["lmsat"].__file__ or ".").resolve().parent != LMSAT_SRC / "lmsat":
    raise WorkflowError(  # e.g. an import hook of the environment handed out another one
        f"lmsat was imported from {sys.modules['lmsat'].__file__}, not from this "
        f"workflow's {LMSAT_SRC}; fix: remove what installs that import hook"
    )

# Every config file Snakemake read is read again with lmsat's strict loader: a key given
# twice is an error naming file, key and lines (Snakemake's loader silently keeps the last).
READ_CONFIGS = {
    str(path): load_yaml(path)
    for path in [*workflow.overwrite_configfiles, *workflow.configfiles]
}
if not workflow.modifier.is_main_snakefile():
    # A module plans the config its `module` statement passes (`config: config`, or any
    # dict), as given: never re-read from the deploying workflow's files, never changed.
    chosen = copy.deepcopy(config)
else:
    # `configfile:` in the Snakefile would be merged under any --configfile, so the paper's
    # config would also plan the toy suite; a --configfile replaces the default instead.
    chosen = {}
    for path in workflow.overwrite_configfiles or workflow.configfiles:
        update_config(chosen, READ_CONFIGS[str(path)])
    update_config(chosen, workflow.config_settings.overwrite_config)
    config.clear()
    config.update(chosen)

# Validated once, at DAG time, with errors naming the key and the fix; no hub is reached.
# An unnamed run is named after its config file (config/pythia.yaml -> results/pythia).
SCHEMA = load_yaml(WORKFLOW_DIR / "schemas" / "config.schema.yaml")
PLAN = load_plan(
    chosen,
    SCHEMA,
    default_run=(
        run_of_config_file(
            workflow.overwrite_configfiles[-1],
            WORKFLOW_DIR.parent / "config" / "config.yaml",
        )
        if workflow.overwrite_configfiles
        else "default"
    ),
)
RUN = PLAN.run
# Where this run's files go is the workflow's to say; the library computes on the paths it
# is given: the files the pipeline builds itself (toy tokenizer, synthetic corpus) are read
# from their spec like any local file, and each model's entry names the hub cache that its
# jobs load its checkpoints from ("" = a local directory).
# the hub cache that rule train_toy_model publishes the toy suite's checkpoints to
TOY_HUB_CACHE = f"results/{RUN}/toy/hub"
for _spec in PLAN.config["tokenizers"].values():
    if _spec["source"] == "toy":
        _spec["id"] = f"results/{RUN}/toy/tokenizer"
for _spec in PLAN.config["corpora"].values():
    if _spec["type"] == "synthetic":
        _spec["files"] = [f"results/{RUN}/corpora/synthetic/{_spec['split']}.txt"]


def hub_cache(entry):
    """Where `entry`'s checkpoints are, "{revision}" for the revision: the toy suite's hub
    cache, or the one that rule fetch_checkpoint fills for each revision of a hub model.
    """
    if entry.source == "toy":
        return TOY_HUB_CACHE
    if entry.source == "hub":
        return f"results/{RUN}/weights/{entry.name}/{{revision}}"
    return ""


PLAN = replace(
    PLAN,
    **{
        field: {n: replace(e, hub_cache=hub_cache(e)) for n, e in entries.items()}
        for field, entries in (("models", PLAN.models), ("trained", PLAN.trained))
    },
)
CONFIG = PLAN.config
# Jobs read operational settings (schema: `operational: true`; resources, threads, device,
# retries) from the validated config, never through params: raising mem_mb after an OOM
# or changing the device must not rerun a finished job. RESULT_CONFIG is what may reach
# params, and its hash is recorded in every table.
if not workflow.modifier.is_main_snakefile():
    # this module's own: the dict the deploying workflow passed stays as it was
    config = copy.deepcopy(CONFIG)
else:
    config.clear()
    config.update(CONFIG)
RESULT_CONFIG = result_config(CONFIG, SCHEMA)
CONFIG_SHA256 = config_sha256(RESULT_CONFIG)
MODELS = PLAN.models
TOY_LANGUAGE = f"results/{RUN}/toy/language.h5"
TOY_TOKENIZER = f"results/{RUN}/toy/tokenizer/tokenizer.json"
FETCH = CONFIG["fetch"]
# The analysis sections, validated and cross-checked by load_plan (lmsat.config).
EVALUATION = CONFIG["evaluation"]
# in the plan's order (by size): Table 1's rows follow its records
EVALUATED_MODELS = [m for m in MODELS if m in EVALUATION["models"]] or list(MODELS)
CHECKPOINT_KINDS = ("best", "final")
TASK_DIR = f"results/{RUN}/evaluation/tasks"
SCALING = CONFIG["scaling"]
BOTTLENECK = CONFIG["bottleneck"]
HEAD_SET_CORPORA = set_corpora(CONFIG)  # train / eval -> corpus
NGRAMS = CONFIG["ngrams"]
NGRAM_CORPORA = NGRAMS["corpora"]  # empty: no Fig. 7
NGRAM_TOKENIZERS = ngram_tokenizers(CONFIG, MODELS)
# The planned metrics (lmsat.metrics; load_plan checks the names and what their tables
# need), the tables they aggregate into and the figures that draw those (lmsat.figures).
PLANNED_METRICS = CONFIG["metrics"] or list(METRICS)
CACHE_METRICS = [m for m in PLANNED_METRICS if METRICS[m].reads == "cache"]
WEIGHT_METRICS = [m for m in PLANNED_METRICS if METRICS[m].reads == "weights"]
WEIGHT_METRIC_FILES = {
    m: f"results/{{run}}/{m}/{{model}}/{{revision}}.h5" for m in WEIGHT_METRICS
}
METRIC_TABLES = {
    table: metric
    for table, metric in table_metric().items()
    if metric in PLANNED_METRICS
}
METRIC_FIGURES = [
    stem for stem in FIGURES if any(stem in METRICS[m].figures for m in PLANNED_METRICS)
]
# A slice (`select`) writes under a run directory of its own (lmsat.config.slice_run).
if any(CONFIG["select"].values()) and workflow.is_main_process:
    print(
        f"lmsat: this selection is a slice; it writes under results/{RUN}/",
        file=sys.stderr,
    )


def _alternatives(values):
    return "|".join(re.escape(v) for v in sorted(set(values)))


wildcard_constraints:
    run=re.escape(RUN),
    model=_alternatives(MODELS),
    revision=_alternatives(r for m in MODELS.values() for r in m.revisions),
    metric=_alternatives(CACHE_METRICS) or "(?!)",
    corpus=_alternatives(CONFIG["corpora"]),
    tokenizer=_alternatives(CONFIG["tokenizers"]),
    kind="|".join(CHECKPOINT_KINDS),
    task=_alternatives(EVALUATION["tasks"]) or "(?!)",


# ---------------------------------------------------------------- checkpoints and models (shared)


def get_sample(wildcards):
    """The eval token sample of the model's tokenizer (made by rule sample_eval_tokens)."""
    corpus, tokenizer = CONFIG["sample"]["corpus"], MODELS[wildcards.model].tokenizer
    return f"results/{RUN}/samples/{corpus}/{tokenizer}.h5"


def tracked_weights(model, revision):
    """The directory of `revision` of `model` if the pipeline did not make it: a local
    checkpoint, or a hub cache staged by hand (no FETCHED_MARKER in it, or no longer there
    once its record exists: removed by hand after use). None for the toy suite and for
    downloads. Rule record_weights fingerprints these; their readers depend on the record.
    """
    entry = MODELS[model]
    if entry.source == "local":
        return entry.pretrained_source(revision)[0]
    if entry.source != "hub":
        return None
    cache = Path(entry.cache_dir(revision))
    if cache.is_dir():
        return None if (cache / FETCHED_MARKER).exists() else str(cache)
    record = Path(weights_record(model, revision))
    return str(cache) if record.exists() else None


def weights_record(model, revision):
    return f"results/{RUN}/weights/records/{model}/{revision}.json"


def weights_of(model, revision):
    """What must exist before `revision` of `model` can be loaded: the toy suite's trained
    model, the record of weights the pipeline did not make (tracked_weights), or the
    checkpoint fetched from the hub. ancient(): a checkpoint fetched again (e.g. the best
    one for lm-eval, after its first copy was removed) is the same weights, so its newer
    files must not rerun the finished jobs that read the first copy."""
    entry = MODELS[model]
    if entry.source == "toy":
        return f"results/{RUN}/toy/models/{model}.json"
    if tracked_weights(model, revision):
        return weights_record(model, revision)
    if entry.source == "hub":
        return ancient(entry.cache_dir(revision))
    return []


def check_toy_hub():
    """Stop the plan if a toy model's published checkpoints changed after its training job
    recorded them (lmsat.fingerprint): every table would describe weights no longer there.
    """
    for name, entry in MODELS.items():
        manifest = Path(f"results/{RUN}/toy/models/{name}.json")
        if entry.source != "toy" or not manifest.exists():
            continue
        recorded = read_json(manifest).get("published")
        if recorded is None:  # trained before lmsat recorded what it published
            continue
        repository = repo_dir(entry.cache_dir(entry.final_revision), entry.id)
        changed = changed_files(recorded, weights_fingerprint(repository))
        if changed:
            raise ValueError(
                f"toy model {name}: {len(changed)} file(s) of its published checkpoints in {repository} "
                f"changed after its training job (train_toy_model) wrote them ({', '.join(changed[:3])}"
                f"{', ...' if len(changed) > 3 else ''}), so the tables would describe weights that are no "
                f"longer there. Fix: delete {manifest} (snakemake then retrains {name} and reruns every job "
                "that read it), or put the published files back"
            )


if workflow.is_main_process:  # not again in every job's own parse of the workflow
    check_toy_hub()


def get_final_checkpoint_weights(wildcards):
    """The model's final checkpoint, or what stands for it (weights_of)."""
    return weights_of(wildcards.model, MODELS[wildcards.model].final_revision)


def model_at(model, revision):
    """The entry of `model` as a param of a job that reads only `revision`: adding
    revisions to a suite (or subsampling it otherwise) must not rerun the jobs of the
    revisions it already had."""
    entry = MODELS[model]
    return asdict(replace(entry, revisions=(revision,), steps=(entry.step(revision),)))


def get_model_params(wildcards):
    """The model's entry, as a job param: narrowed to the job's revision if it has one."""
    if "revision" in wildcards.keys():
        return model_at(wildcards.model, wildcards.revision)
    return asdict(MODELS[wildcards.model])


def get_final_model_params(wildcards):
    """The model's entry, as a param of a job that reads only its final revision."""
    return model_at(wildcards.model, MODELS[wildcards.model].final_revision)


# ---------------------------------------------------------------- tokenizers and corpora (shared)
# As the jobs of every stage see them: a hub tokenizer or dataset points at its staged copy
# (staging.smk; its jobs are the only ones besides the fetches that reach the network).


def tokenizer_spec(name):
    """config['tokenizers'][name] as jobs see it: a hub tokenizer points at its staged copy."""
    spec = CONFIG["tokenizers"][name]
    if needs_staging_tokenizer(spec):
        return {**spec, "staged": f"results/{RUN}/staged/tokenizers/{name}"}
    return spec


def tokenizer_inputs(name):
    """What must exist before tokenizer `name` loads: the toy tokenizer the pipeline builds,
    or the staged copy of a hub tokenizer; a local directory is the user's."""
    spec = tokenizer_spec(name)
    if spec["source"] == "toy":
        return [TOY_TOKENIZER]
    return [spec["staged"]] if "staged" in spec else []


def corpus_spec(name):
    """config['corpora'][name] as jobs see it: a hub dataset points at its staged prefix."""
    spec = CONFIG["corpora"][name]
    if needs_staging_corpus(spec):
        return {**spec, "staged": f"results/{RUN}/staged/corpora/{name}.jsonl"}
    return spec


def corpus_files(name):
    """Files corpus `name` reads (its local files, or its staged prefix)."""
    spec = corpus_spec(name)
    return corpus_inputs(spec) + ([spec["staged"]] if "staged" in spec else [])


def lmeval_task_staged(task):
    """The staging manifest of an lm-eval task whose datasets come from the hub (none for the
    task YAMLs the pipeline writes from local files)."""
    if task_files(task) or task == "storycloze_2016":
        return []
    return f"results/{RUN}/staged/lmeval/{task}.json"


def model_tokenizer(model):
    """config['tokenizers'] entry of `model`, as jobs see it (tokenizer_spec)."""
    return tokenizer_spec(MODELS[model].tokenizer)


def model_mem_mb(model, base_mb, attempt):
    """Memory of a job that loads `model`: the model in float32 (4 bytes a parameter, +20%)
    beside the job's own `base_mb`; a retry after an OOM asks for `attempt` times that.
    """
    weights_mb = 4 * estimated_parameters(MODELS[model]) / 1e6
    return int((base_mb + 1.2 * weights_mb) * attempt)


def get_checkpoint_record(wildcards):
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


def get_sample_inputs(wildcards):
    """The files of corpus `wildcards.corpus` and of tokenizer `wildcards.tokenizer`."""
    return corpus_files(wildcards.corpus) + tokenizer_inputs(wildcards.tokenizer)


def metric_figure_inputs(wildcards):
    """Rule plot_metric_figure: the figure's tables (and the synthetic language for the
    entropy rate, when the figure draws it)."""
    figure = FIGURES[wildcards.figure]
    inputs = {name: f"results/{RUN}/tables/{name}.csv" for name in figure.tables}
    return dict(inputs, language=synthetic_reference() if figure.entropy_rate else [])


def metric_figure_options(wildcards):
    """The config values a figure draws with (FIGURES[...].options: keyword -> dotted key)."""
    options = {}
    for keyword, dotted in FIGURES[wildcards.figure].options.items():
        value = CONFIG
        for key in dotted.split("."):
            value = value[key]
        options[keyword] = value
    return options


def synthetic_reference():
    """The synthetic language (for its entropy rate) when the eval corpus is synthetic."""
    corpus = CONFIG["corpora"][CONFIG["sample"]["corpus"]]
    return TOY_LANGUAGE if corpus["type"] == "synthetic" else []


def final_outputs():
    """Everything the workflow makes by default: the core outputs, the rendered tables and summary."""
    return core_outputs() + report_outputs()


def core_outputs():
    """Every planned metric's tables and figures, and the other sections' outputs."""
    return (
        [f"results/{RUN}/tables/{table}.csv" for table in METRIC_TABLES]
        + [
            f"results/{RUN}/figures/{stem}.{ext}"
            for stem in METRIC_FIGURES
            for ext in ("png", "pdf")
        ]
        + expand(
            bottleneck_outputs()
            + ngram_outputs()
            + evaluation_outputs()
            + scaling_outputs(),
            run=RUN,
        )
    )


# ---------------------------------------------------------------- Table 1 (evaluation.smk)


def evaluation_outputs():
    """Table 1, when tasks are configured (for final_outputs in common.smk)."""
    if not EVALUATION["tasks"]:
        return []
    return [
        "results/{run}/tables/table1.csv",
        "results/{run}/tables/table1.md",
        "results/{run}/tables/table1.tex",
    ]


def task_files(task):
    """Task YAMLs (and data) the pipeline writes for `task`; none for lm-eval's own tasks."""
    if task in OFFLINE_TASKS:
        return [f"{TASK_DIR}/{task}.yaml", f"{TASK_DIR}/{task}.jsonl"]
    if task == "storycloze_2016" and EVALUATION["storycloze_dir"]:
        return [f"{TASK_DIR}/storycloze_2016.yaml"]
    return []


def evaluation_records():
    return [
        f"results/{RUN}/evaluation/{model}/{kind}/{task}.json"
        for model in EVALUATED_MODELS
        for kind in CHECKPOINT_KINDS
        for task in EVALUATION["tasks"]
    ]


# ---------------------------------------------------------------- Fig. 1b (scaling.smk)


def scaling_outputs():
    """The fit, the shortfall table and Fig. 1b (for final_outputs in common.smk), unless
    scaling.enabled is false."""
    if not SCALING["enabled"]:
        return []
    return [
        "results/{run}/tables/scaling_fit.csv",
        "results/{run}/tables/scaling_shortfall.csv",
        "results/{run}/figures/fig1b_scaling.png",
        "results/{run}/figures/fig1b_scaling.pdf",
    ]


# ---------------------------------------------------------------- softmax bottleneck (bottleneck.smk, ngrams.smk)


def heads_on_synthetic():
    """Whether the heads' eval pairs come from the synthetic language (entropy rate known)."""
    corpus = CONFIG["corpora"][HEAD_SET_CORPORA["eval"]]
    return bool(BOTTLENECK["models"]) and corpus["type"] == "synthetic"


def bottleneck_outputs():
    outputs = []
    if BOTTLENECK["models"]:
        outputs += [
            "results/{run}/tables/bottleneck_heads.csv",
            "results/{run}/tables/bottleneck_lr_search.csv",
        ]
        outputs += expand(
            "results/{run}/figures/{fig}.{ext}",
            run="{run}",
            fig=("fig6_rank_heads", "fig8_werror_loss"),
            ext=("png", "pdf"),
        )
    if CONFIG["ngrams"]["ground_truth"]["sample_sizes"]:
        outputs += expand(
            "results/{run}/figures/ground_truth_bottleneck.{ext}",
            run="{run}",
            ext=("png", "pdf"),
        )
    return outputs


def ngram_outputs():
    if not NGRAM_CORPORA:
        return []
    return [
        "results/{run}/tables/ngram_werror.csv",
        "results/{run}/figures/fig7_ngram_werror.png",
        "results/{run}/figures/fig7_ngram_werror.pdf",
    ]


# ---------------------------------------------------------------- the report and named targets
# One entry per section of the report and per named target rule (`snakemake fig1a`,
# rules in report.smk): category, subcategory, its figures (results/figures/<stem>.png and
# .pdf) and the tables its caption cites (results/tables/<name>.csv, rendered by rule
# render_table as results/report/<name>.html next to the figure). The metric figures'
# sections come from their registry (lmsat.figures.FIGURES), the others are listed here.
METRIC_SECTIONS = {}
for stem, figure in FIGURES.items():
    section = METRIC_SECTIONS.setdefault(
        figure.target, (figure.category, figure.title, [], [])
    )
    section[2].append(stem)
    section[3].extend(t for t in figure.tables + figure.cites if t not in section[3])
OTHER_SECTIONS = {
    "fig1b": (
        "Saturation",
        "Fig. 1b: scaling law",
        ["fig1b_scaling"],
        ["scaling_fit", "scaling_shortfall"],
    ),
    "table1": ("Saturation", "Table 1: best vs final downstream", [], ["table1"]),
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
# category by category, in order of first appearance (Saturation, ..., Softmax bottleneck)
_SECTIONS = {**METRIC_SECTIONS, **OTHER_SECTIONS}
_CATEGORIES = list(dict.fromkeys(category for category, *_ in _SECTIONS.values()))
REPORT_SECTIONS = dict(
    sorted(_SECTIONS.items(), key=lambda item: _CATEGORIES.index(item[1][0]))
)
SUMMARY_HTML = f"results/{RUN}/report/summary.html"
CAPTIONS = WORKFLOW_DIR / "report"
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
        [
            f"results/{RUN}/figures/{stem}.{ext}"
            for stem in stems
            for ext in ("png", "pdf")
        ]
        + [f"results/{RUN}/tables/{name}.csv" for name in names]
        + [f"results/{RUN}/report/{name}.html" for name in names]
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


def metric_figure_report(path):
    """`path` (results/figures/{figure}.png or .pdf) of rule plot_metric_figure, marked for
    the report in its section, with its caption (metric_figure_caption)."""
    return report(
        path,
        caption="../report/metric_figure.rst",
        category=lambda wildcards: FIGURES[wildcards.figure].category,
        subcategory=lambda wildcards: FIGURES[wildcards.figure].title,
    )


def one_line(caption):
    """A caption (one RST paragraph) on one line, its "quotes" curly: the report lists a job's
    params with each newline as a literal \\n and each straight double quote as \\", and a
    paragraph's lines joined render the same."""
    return re.sub(r'"([^"]*)"', "\u201c\\1\u201d", " ".join(caption.split()))


def metric_figure_caption(wildcards):
    """workflow/report/<stem>.rst where the figure has one, else its registry caption."""
    own = CAPTIONS / f"{wildcards.figure}.rst"
    return one_line(
        own.read_text() if own.exists() else FIGURES[wildcards.figure].caption
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
    return one_line(
        f"{text} ``results/{RUN}/tables/{name}.csv``, cited by {section}; click a column "
        "header to sort, and download the CSV from the link above the table."
    )


def report_outputs():
    """The rendered tables of every section this config makes, the summary page and the
    published evaluations beside it (named, so that a finished run makes the new table).
    """
    return [
        f"results/{RUN}/report/{name}.html"
        for target in sections_made()
        for name in REPORT_SECTIONS[target][3]
    ] + [SUMMARY_HTML, f"results/{RUN}/tables/published_evals.csv"]


def summary_figures():
    """[title, PNG path] of every figure this config makes, in the report's order: the
    summary links each (one click from it to the figure and its caption)."""
    made = set(core_outputs())
    figures = []
    for target in REPORT_SECTIONS:
        _, title, stems, _ = REPORT_SECTIONS[target]
        for stem in stems:
            path = f"results/{RUN}/figures/{stem}.png"
            if path in made:
                figures.append(
                    [title if len(stems) == 1 else f"{title} ({stem})", path]
                )
    return figures


def summary_inputs(wildcards):
    """The tables the summary reads: loss always; the fit, Table 1 and the rank-r heads
    when the config makes them (the summary builds from whatever the run has)."""
    made = sections_made()
    inputs = dict(loss=f"results/{RUN}/tables/loss.csv")
    if "fig1b" in made:
        inputs["fit"] = f"results/{RUN}/tables/scaling_fit.csv"
        inputs["shortfall"] = f"results/{RUN}/tables/scaling_shortfall.csv"
    if "table1" in made:
        inputs["table1"] = f"results/{RUN}/tables/table1.csv"
    if "fig6" in made:
        inputs["heads"] = f"results/{RUN}/tables/bottleneck_heads.csv"
    if "table1" in made:  # beside EleutherAI's published evaluations (lmsat.published)
        inputs["evaluations"] = evaluation_records()
    identical = f"results/{RUN}/tables/identical_weights.csv"
    if identical in core_outputs():
        inputs["identical"] = identical
    return inputs
