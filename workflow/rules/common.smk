# The workflow's Python: config validation, model/revision/metric tables, input functions.
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
        "point the module at the clone's workflow/Snakefile (README: using lmsat inside "
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
from lmsat.headcache import shard_count
from lmsat.integrity import selected_revision as checked_selection
from lmsat.hub import repo_dir
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
CONFIG = PLAN.config
RUN = PLAN.run
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
HUB_MODELS = [name for name, m in MODELS.items() if m.source == "hub"]
CHECKPOINT_DISK_MB = {
    name: checkpoint_disk_mb(MODELS[name], FETCH["bytes_per_param"])
    for name in HUB_MODELS
}
# The analysis sections, validated and cross-checked by load_plan (lmsat.config).
EVALUATION = CONFIG["evaluation"]
# in the plan's order (by size): Table 1's rows follow its records
EVALUATED_MODELS = [m for m in MODELS if m in EVALUATION["models"]] or list(MODELS)
CHECKPOINT_KINDS = ("best", "final")
TASK_DIR = f"results/{RUN}/evaluation/tasks"
SCALING = CONFIG["scaling"]
SCALED_MODELS = SCALING["models"] or list(MODELS)
BOTTLENECK = CONFIG["bottleneck"]
HEAD_LRS = learning_rates(BOTTLENECK)  # path label -> peak learning rate
HEAD_SET_CORPORA = set_corpora(CONFIG)  # train / eval -> corpus
HEAD_SHARDS = {
    name: range(
        shard_count(
            BOTTLENECK[f"{name}_tokens"],
            CONFIG["sample"]["seq_len"],
            BOTTLENECK["shard_tokens"],
        )
    )
    for name in ("train", "eval")
}
NGRAMS = CONFIG["ngrams"]
NGRAM_CORPORA = NGRAMS["corpora"]  # empty: no Fig. 7
NGRAM_TOKENIZERS = ngram_tokenizers(CONFIG, MODELS)
# The planned metrics (lmsat.metrics; load_plan checks the names and what their tables
# need) and the tables they aggregate into (the figures: products.smk).
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


def checkpoint_files(pattern, **extra):
    """`pattern` formatted for every (model, revision) of the plan."""
    return [
        pattern.format(run=RUN, model=model, revision=revision, **extra)
        for model, revision in PLAN.checkpoints()
    ]


def sample_of_model(wildcards):
    """The eval token sample of the model's tokenizer (rule sample_eval_tokens)."""
    corpus, tokenizer = CONFIG["sample"]["corpus"], MODELS[wildcards.model].tokenizer
    return f"results/{RUN}/samples/{corpus}/{tokenizer}.h5"


def fetched_checkpoint(path):
    """The fetch rule's output; temp() so that Snakemake deletes it after its last consumer."""
    return temp(directory(path)) if FETCH["remove_after_use"] else directory(path)


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


def recorded_fingerprint(wildcards):
    """Fingerprint of a tracked checkpoint (lmsat.fingerprint), a param of record_weights:
    changed files change it, which reruns the record and so every job that read them. A hub
    cache staged by hand and removed after use keeps its recorded fingerprint."""
    directory = tracked_weights(wildcards.model, wildcards.revision)
    if Path(directory).is_dir():
        return weights_fingerprint(directory)
    return read_json(weights_record(wildcards.model, wildcards.revision))["fingerprint"]


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


def checkpoint_weights(wildcards):
    return weights_of(wildcards.model, wildcards.revision)


def final_checkpoint_weights(wildcards):
    return weights_of(wildcards.model, MODELS[wildcards.model].final_revision)


def model_at(model, revision):
    """The entry of `model` as a param of a job that reads only `revision`: adding
    revisions to a suite (or subsampling it otherwise) must not rerun the jobs of the
    revisions it already had."""
    entry = MODELS[model]
    return asdict(replace(entry, revisions=(revision,), steps=(entry.step(revision),)))


def trained_model_params(wildcards):
    """The toy model's entry as it is trained (PLAN.trained): every revision of its
    schedule, whichever ones a slice selects, so a selection never retrains it."""
    return asdict(PLAN.trained[wildcards.model])


def model_params(wildcards):
    """The model's entry, as a job param: narrowed to the job's revision if it has one."""
    if "revision" in wildcards.keys():
        return model_at(wildcards.model, wildcards.revision)
    return asdict(MODELS[wildcards.model])


def final_model_params(wildcards):
    return model_at(wildcards.model, MODELS[wildcards.model].final_revision)


# ---------------------------------------------------------------- staging (staging.smk)
# Jobs of lmsat.staging.STAGING_RULES are the only ones that reach the network; every other
# job imports lmsat.offline and reads what they staged. The profile decides where they run.
STAGED_DATASETS = f"results/{RUN}/staged/datasets"
HUB_TOKENIZERS = [
    n for n, s in CONFIG["tokenizers"].items() if needs_staging_tokenizer(s)
]
HUB_CORPORA = [n for n, s in CONFIG["corpora"].items() if needs_staging_corpus(s)]


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


def corpus_consumers(corpus):
    """Every job kind that reads hub corpus `corpus`, with its tokenizer and how far it reads
    (lmsat.staging.CorpusConsumer): what stage_corpus must stage. Mirrors the budgets of
    lmsat.corpus.build_sample, count_corpus_ngrams and build_head_cache."""
    spec, sample = CONFIG["corpora"][corpus], CONFIG["sample"]
    cap = spec["max_documents"]
    consumers = []
    if corpus == sample["corpus"]:
        consumers += [
            dict(
                job="sample_eval_tokens",
                tokenizer=tokenizer,
                tokens=sample["pool_factor"] * sample["n_tokens"],
                documents=cap,
            )
            for tokenizer in sorted({m.tokenizer for m in MODELS.values()})
        ]
    if corpus in NGRAM_CORPORA:
        consumers += [
            dict(job="count_corpus_ngrams", tokenizer=t, tokens=NGRAMS["max_tokens"])
            for t in NGRAM_TOKENIZERS
        ]
    if BOTTLENECK["models"] and corpus in HEAD_SET_CORPORA.values():
        sizes = {"train": BOTTLENECK["train_tokens"], "eval": BOTTLENECK["eval_tokens"]}
        wanted = sum(sizes[s] for s, c in HEAD_SET_CORPORA.items() if c == corpus)
        n_pool = BOTTLENECK["pool_factor"] * wanted
        if corpus == sample["corpus"]:  # the eval sample's windows are kept out
            n_pool += -(-sample["n_tokens"] // sample["seq_len"]) * sample["seq_len"]
        consumers += [
            dict(
                job="build_head_cache",
                tokenizer=MODELS[m].tokenizer,
                tokens=n_pool,
                documents=cap,
            )
            for m in BOTTLENECK["models"]
        ]
    return consumers


def corpus_consumer_tokenizers(wildcards):
    """Tokenizer files of every job that reads corpus `wildcards.corpus` (stage_corpus)."""
    names = sorted({c["tokenizer"] for c in corpus_consumers(wildcards.corpus)})
    return [path for name in names for path in tokenizer_inputs(name)]


def lmeval_task_staged(task):
    """The staging manifest of an lm-eval task whose datasets come from the hub (none for the
    task YAMLs the pipeline writes from local files)."""
    if task_files(task) or task == "storycloze_2016":
        return []
    return f"results/{RUN}/staged/lmeval/{task}.json"


def staging_targets(wildcards):
    """The staged tokenizers, corpora and lm-eval task data of the plan (rule stage_all);
    checkpoints are fetched as their readers need them (fetch.smk)."""
    tokenizers = {m.tokenizer for m in MODELS.values()}
    corpora = {CONFIG["sample"]["corpus"]}
    if NGRAM_CORPORA:
        tokenizers |= set(NGRAM_TOKENIZERS)
        corpora |= set(NGRAM_CORPORA)
    if BOTTLENECK["models"]:
        corpora |= set(HEAD_SET_CORPORA.values())
    return (
        [p for t in sorted(tokenizers) for p in tokenizer_inputs(t) if "staged" in p]
        + [p for c in sorted(corpora) for p in corpus_files(c) if "staged" in p]
        + [lmeval_task_staged(t) for t in EVALUATION["tasks"] if lmeval_task_staged(t)]
    )


def model_tokenizer(model):
    """config['tokenizers'] entry of `model`, as jobs see it (tokenizer_spec)."""
    return tokenizer_spec(MODELS[model].tokenizer)


def tokenizer_files(wildcards):
    """The toy tokenizer is built by the pipeline; a hub one is staged (tokenizer_inputs)."""
    return tokenizer_inputs(MODELS[wildcards.model].tokenizer)


def model_mem_mb(model, base_mb, attempt):
    """Memory of a job that loads `model`: the model in float32 (4 bytes a parameter, +20%)
    beside the job's own `base_mb`; a retry after an OOM asks for `attempt` times that.
    """
    weights_mb = 4 * estimated_parameters(MODELS[model]) / 1e6
    return int((base_mb + 1.2 * weights_mb) * attempt)


def checkpoint_job_mem_mb(model, base_mb, attempt):
    """Host memory of rule analyse_checkpoint beside its own `base_mb`. It loads the
    checkpoint in its stored dtype (2 bytes a parameter for float16/bfloat16 checkpoints
    like Pythia's) straight onto its device: on a GPU the host holds no copy of the weights
    (memory-mapped files; a quarter of them as margin for a shard in flight), on the CPU the
    model in the wider of the stored and forward dtypes (+20%). Float32 checkpoints on
    the CPU need more: a retry after an OOM asks for `attempt` times this.
    """
    forward_bytes = 4 if CONFIG["extraction"]["dtype"] == "float32" else 2
    if CONFIG["device"] == "cuda":
        weights_mb = 0.25 * 2 * estimated_parameters(MODELS[model]) / 1e6
    else:
        weights_mb = (
            1.2 * max(2, forward_bytes) * estimated_parameters(MODELS[model]) / 1e6
        )
    return int((base_mb + weights_mb) * attempt)


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
    return corpus_files(wildcards.corpus) + tokenizer_inputs(wildcards.tokenizer)


def metric_files(metric):
    """The per-checkpoint files of a planned metric, for every checkpoint of the plan."""
    if METRICS[metric].reads == "weights":
        return checkpoint_files(WEIGHT_METRIC_FILES[metric])
    return checkpoint_files(
        "results/{run}/metrics/{metric}/{model}/{revision}.json", metric=metric
    )


def metric_table_inputs(wildcards):
    """Rule tabulate_metric: the metric's per-checkpoint files and the tables it needs."""
    metric = METRICS[METRIC_TABLES[wildcards.table]]
    needs = metric.tables[wildcards.table].needs
    return dict(
        files=metric_files(metric.name),
        **{name: f"results/{RUN}/tables/{name}.csv" for name in needs},
    )


# ---------------------------------------------------------------- Table 1 (evaluation.smk)


def selected_revision(model, kind):
    """Revision of `model` picked as `kind`; the best one is read from the checkpoint output."""
    if kind == "final":
        return MODELS[model].final_revision
    selection = checkpoints.select_checkpoints.get(run=RUN).output[0]
    loss = f"results/{RUN}/tables/loss.csv"
    return checked_selection(selection, loss, model, kind, MODELS[model].revisions)


def task_files(task):
    """Task YAMLs (and data) the pipeline writes for `task`; none for lm-eval's own tasks."""
    if task in OFFLINE_TASKS:
        return [f"{TASK_DIR}/{task}.yaml", f"{TASK_DIR}/{task}.jsonl"]
    if task == "storycloze_2016" and EVALUATION["storycloze_dir"]:
        return [f"{TASK_DIR}/storycloze_2016.yaml"]
    return []


def storycloze_files(wildcards):
    """The manually downloaded Story Cloze 2016 CSVs (checked to exist before the job)."""
    data_dir = Path(EVALUATION["storycloze_dir"])
    return [str(data_dir / name) for name in STORYCLOZE_2016_FILES.values()]


def evaluation_inputs(wildcards):
    # Why a checkpoint (select_checkpoints): the best revision is known only once every loss
    # exists, and it shapes the DAG itself, not only a parameter. When a model's best
    # checkpoint is its final one (no saturation, as for the larger Pythia models), its "best"
    # job must not rerun lm-eval on the same weights but depend on the "final" job and copy
    # its JSON; which of the two a best job is depends on the contents of best_final.csv.
    # Final revisions come from the config, so a dry run plans every final job directly, and
    # every best job behind the checkpoint (its revision shown as <TBD>).
    # The selection is ancient(): best_final.csv is rewritten whenever loss.csv is (any
    # config change re-stamps loss.csv), but a best job must rerun only when its revision
    # (a param, so a rerun trigger) or the reused final JSON changes.
    model = MODELS[wildcards.model]
    tasks = task_files(wildcards.task)
    if wildcards.kind == "final":
        return dict(
            weights=weights_of(model.name, model.final_revision),
            tasks=tasks,
            staged=lmeval_task_staged(wildcards.task),
        )
    selection = ancient(checkpoints.select_checkpoints.get(run=RUN).output[0])
    best = selected_revision(model.name, "best")
    if best == model.final_revision:
        final = f"results/{RUN}/evaluation/{model.name}/final/{wildcards.task}.json"
        return dict(selection=selection, same_as=final)
    if model.source == "hub" and not tracked_weights(model.name, best):
        # a copy of its own (rule fetch_best_checkpoint); one staged by hand is read in place
        weights = f"results/{RUN}/weights/best/{model.name}/{best}"
    else:
        weights = weights_of(model.name, best)
    staged = lmeval_task_staged(wildcards.task)
    return dict(weights=weights, tasks=tasks, selection=selection, staged=staged)


def reuses_final(input):
    return "same_as" in input.keys()


def evaluation_records():
    return [
        f"results/{RUN}/evaluation/{model}/{kind}/{task}.json"
        for model in EVALUATED_MODELS
        for kind in CHECKPOINT_KINDS
        for task in EVALUATION["tasks"]
    ]


# ---------------------------------------------------------------- Fig. 1b (scaling.smk)


def parameter_counts():
    """Counts of the Fig. 1b models whose n_params the config leaves at 0 (read from their
    config)."""
    return [
        f"results/{RUN}/params/{name}.json"
        for name in SCALED_MODELS
        if MODELS[name].n_params == 0
    ]


# ---------------------------------------------------------------- softmax bottleneck (bottleneck.smk, ngrams.smk)


def head_shards(name, model="{model}", run="{run}"):
    return [
        f"results/{run}/bottleneck/cache/{model}/{name}_{shard:04d}.h5"
        for shard in HEAD_SHARDS[name]
    ]


def head_cache_inputs(wildcards):
    corpora = set(HEAD_SET_CORPORA.values())
    return dict(
        weights=final_checkpoint_weights(wildcards),
        corpora=[f for c in sorted(corpora) for f in corpus_files(c)],
        tokenizer=tokenizer_inputs(MODELS[wildcards.model].tokenizer),
        sample=(
            sample_of_model(wildcards) if CONFIG["sample"]["corpus"] in corpora else []
        ),
    )


def head_runs(model):
    ranks = head_ranks(BOTTLENECK, MODELS[model].hidden_size)
    return [
        f"results/{RUN}/bottleneck/runs/{model}/r{rank}/lr{lr}.json"
        for rank in ranks
        for lr in HEAD_LRS
    ]


def final_spectrum(model):
    return f"results/{RUN}/spectra/{model}/{MODELS[model].final_revision}.h5"


def ngram_inputs(wildcards):
    synthetic = CONFIG["corpora"][wildcards.corpus]["type"] == "synthetic"
    toy = CONFIG["tokenizers"][wildcards.tokenizer]["source"] == "toy"
    return dict(
        corpus=sample_inputs(wildcards),
        language=TOY_LANGUAGE if synthetic and toy else [],
    )
