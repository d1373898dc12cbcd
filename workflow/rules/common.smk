# The workflow's Python: config loading and validation, the plan's tables, the input
# functions (get_*) and helpers several stages share, then each stage's own in a section
# named after its rule file.
import copy
import functools
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

import lmsat.runtime.warm as warm_interpreter
from lmsat.bottleneck.rank_grid import (
    head_ranks,
    head_train_fields,
    learning_rates,
    set_corpora,
    shard_count,  # the head cache's shard files
)
from lmsat.checkpoints.fetch import (
    checkpoint_disk_mb,
    estimated_parameters,
    stored_bytes_per_param,
)
from lmsat.checkpoints.local_hub import repo_dir
from lmsat.core.fingerprint import FETCHED_MARKER, changed_files, weights_fingerprint
from lmsat.core.integrity import selected_revision as checked_selection
from lmsat.core.io import read_json, read_record
from lmsat.core.job_inputs import is_storage_url
from lmsat.core.names import PATH_NAME_PATTERN, checkpoint_path
from lmsat.data.corpus import corpus_inputs
from lmsat.planning.config_files import (
    config_sha256,
    config_sources,
    load_yaml,
    read_config_files,
    result_config,
)
from lmsat.planning.bucket_runs import S3Folders
from lmsat.planning.load import load_plan
from lmsat.planning.refusals import ngram_tokenizers
from lmsat.planning.run_claim import check_run_claim, write_run_claim
from lmsat.planning.slicing import run_of_config_file
from lmsat.planning.storage import (
    answer_stored_files,
    check_storage_run_claim,
    recheck_directories as recheck_storage_directories,
    remember_buckets,
    reuse_input_sizes,
    write_storage_run_claim,
)
from lmsat.planning.staging import (
    STAGING_RULES,
    needs_staging_corpus,
    needs_staging_tokenizer,
)
from lmsat.products.metrics import METRICS, table_metric
from lmsat.saturation.downstream import OFFLINE_TASKS, STORYCLOZE_2016_FILES

if Path(sys.modules["lmsat"].__file__ or ".").resolve().parent != LMSAT_SRC / "lmsat":
    raise WorkflowError(  # e.g. an import hook of the environment handed out another one
        f"lmsat was imported from {sys.modules['lmsat'].__file__}, not from this "
        f"workflow's {LMSAT_SRC}; fix: remove what installs that import hook"
    )

# Every config file Snakemake read is read again with lmsat's strict loader: a key given
# twice is an error naming file, key and lines (Snakemake's loader silently keeps the last),
# and a file that is no config (a target written after --configfile, which takes every
# argument after it) is named, with how to write the target.
SCHEMA = load_yaml(WORKFLOW_DIR / "schemas" / "config.schema.yaml")
READ_CONFIGS = read_config_files(
    [*workflow.overwrite_configfiles, *workflow.configfiles],
    SCHEMA if workflow.modifier.is_main_snakefile() else None,
)
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
# Relative pins files (revisions.pins) are read from beside the run's config file (the last
# --configfile, which names the run), wherever the run is; a module's config: the working directory.
CONFIG_DIR = (
    Path((workflow.overwrite_configfiles or workflow.configfiles)[-1]).resolve().parent
    if workflow.modifier.is_main_snakefile()
    and (workflow.overwrite_configfiles or workflow.configfiles)
    else None
)


def storage_folders():
    """How planning reads an own run kept in a bucket (a local model's id: s3://...): with
    the endpoint and credentials of Snakemake's s3 storage settings, if given."""
    settings = (workflow.storage_provider_settings or {}).get("s3")
    settings = settings.get_settings(None) if settings is not None else None
    if settings is None:
        return None
    return S3Folders(settings.endpoint_url, settings.access_key, settings.secret_key)


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
    config_dir=CONFIG_DIR,
    folders=storage_folders(),
)
RUN = PLAN.run


# Where the run's files go, written <results>/..., <logs>/..., <benchmarks>/... in the rules
# (RUN, above): the run's name is in every path's constant prefix, which Snakemake's
# output index matches a file against; a {run} wildcard made every file a candidate of every
# rule's outputs.
pathvars:
    results=f"results/{RUN}",
    logs=f"logs/{RUN}",
    benchmarks=f"benchmarks/out/{RUN}",


for _note in PLAN.notes:  # what planning left out of the config, and how to keep it
    print(f"lmsat: note: {_note}", file=sys.stderr)
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
# A run name is a claim on results/<run>/: planning refuses to replace finished outputs of
# another result config (lmsat.planning.run_claim.check_run_claim) unless replace_results is set.
CONFIG_SOURCES = (
    config_sources(
        workflow.overwrite_configfiles or workflow.configfiles,
        dict(workflow.config_settings.config),  # the --config items only
    )
    if workflow.modifier.is_main_snakefile()
    else "the config dict a `module` statement passed"
)
# A storage run keeps its claim in the bucket, beside its outputs (lmsat.planning.storage).
STORAGE_PREFIX = (
    (workflow.storage_settings.default_storage_prefix or "").rstrip("/")
    if workflow.storage_settings is not None
    and workflow.storage_settings.default_storage_provider
    else None
)
if STORAGE_PREFIX is None:
    check_run_claim(
        f"results/{RUN}",
        RESULT_CONFIG,
        CONFIG_SOURCES,
        CONFIG["replace_results"],
        claimed=workflow.modifier.is_main_snakefile(),  # a module's run writes no claim
    )
elif workflow.is_main_process:
    check_storage_run_claim(
        workflow.storage_registry.default_storage_provider.object(
            f"{STORAGE_PREFIX}/results/{RUN}"
        ),
        f"{STORAGE_PREFIX}/results/{RUN}",
        RESULT_CONFIG,
        CONFIG_SOURCES,
        CONFIG["replace_results"],
        claimed=workflow.modifier.is_main_snakefile(),
    )


# Recorded when the run starts executing (never by a dry run); as a module, lmsat leaves the
# deploying workflow's own handlers in place, records nothing and starts no warm interpreter.
# The warm interpreter (lmsat.runtime.warm) forks a local run's jobs from one process that has
# imported torch, transformers and lm-eval; it ends with this Snakemake process.
if workflow.modifier.is_main_snakefile():

    onstart:
        if STORAGE_PREFIX is None:
            write_run_claim(f"results/{RUN}", RESULT_CONFIG, CONFIG_SOURCES)
        else:
            write_storage_run_claim(
                storage_object(f"results/{RUN}"), RESULT_CONFIG, CONFIG_SOURCES
            )
        warm_interpreter.start(
            f"logs/{RUN}/warm_interpreter.log",
            jobs=sum(1 for _ in workflow.dag.needrun_jobs()),
            local=workflow.local_exec,
            enabled=CONFIG["warm_start"],
        )

    onsuccess:
        warm_interpreter.stop()

    onerror:
        warm_interpreter.stop()


MODELS = PLAN.models
# The suite of EleutherAI's published record (source: published; published.smk), if any.
PUBLISHED = {n: s for n, s in CONFIG["suites"].items() if s["source"] == "published"}
TOY_LANGUAGE = f"results/{RUN}/toy/language.h5"
# the toy tokenizer: a directory (tokenizer.json and its configs), one output and input whole
TOY_TOKENIZER = f"results/{RUN}/toy/tokenizer"
FETCH = CONFIG["fetch"]
# The analysis sections, validated and cross-checked by load_plan (lmsat.planning).
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
# The planned metrics (lmsat.products.metrics; load_plan checks the names and what their tables
# need) and the tables they aggregate into (the figures: products.smk).
PLANNED_METRICS = (CONFIG["metrics"] or list(METRICS)) if MODELS else []
CACHE_METRICS = [m for m in PLANNED_METRICS if METRICS[m].reads == "cache"]
WEIGHT_METRICS = [m for m in PLANNED_METRICS if METRICS[m].reads == "weights"]
# metrics of a checkpoint's cache beside its final and previous checkpoints' (rule
# compare_checkpoint_caches, metrics.smk)
CACHE_PAIR_METRICS = [m for m in PLANNED_METRICS if METRICS[m].reads == "cache_pairs"]
WEIGHT_METRIC_FILES = {
    m: f"results/{RUN}/{m}/{{model}}/{{revision}}.h5" for m in WEIGHT_METRICS
}
METRIC_TABLES = {
    table: metric
    for table, metric in table_metric().items()
    if metric in PLANNED_METRICS
}


def metric_file_pattern(metric):
    """The per-checkpoint file of planned metric `metric`, {model} and {revision} to fill."""
    if METRICS[metric].reads == "weights":
        return WEIGHT_METRIC_FILES[metric]
    return f"results/{RUN}/metrics/{metric}/{{model}}/{{revision}}.json"


def vanished_checkpoints():
    """{model: (revision, ...)}: checkpoints of local models that this run measured (a
    per-checkpoint file of a planned metric under results/<run>/) whose directories have
    left the run folder since (a Trainer's save_total_limit rotates old checkpoints away).
    A run keeps what it measured: their files stay inputs of the tables, marked on_disk
    false there, and no job is planned for them (the revision wildcard admits the planned
    revisions only, so nothing can remake or overwrite them)."""
    found = {}
    for name, entry in MODELS.items():
        if entry.source != "local" or is_storage_url(
            entry.id
        ):  # a bucket's: never rotated
            continue
        for metric in PLANNED_METRICS:
            pattern = metric_file_pattern(metric)
            folder = Path(pattern.format(model=name, revision="x")).parent
            suffix = Path(pattern).suffix
            for path in sorted(folder.glob(f"*{suffix}")) if folder.is_dir() else ():
                revision = path.name[: -len(suffix)]
                if (
                    re.fullmatch(PATH_NAME_PATTERN, revision)
                    and revision not in entry.revisions
                    and not checkpoint_path(entry.id, revision).exists()
                ):
                    found.setdefault(name, {})[revision] = None
    natural = lambda name: [
        int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)
    ]
    return {name: tuple(sorted(found[name], key=natural)) for name in found}


VANISHED = vanished_checkpoints()
GONE = [
    f"{model}@{revision}"
    for model, revisions in VANISHED.items()
    for revision in revisions
]
if VANISHED and workflow.is_main_process:
    for _model, _revisions in VANISHED.items():
        print(
            f"lmsat: note: model {_model}: {len(_revisions)} checkpoint(s) this run measured are no longer in "
            f"{MODELS[_model].id} ({', '.join(_revisions)}; rotated away by a Trainer's save_total_limit?): "
            "their records stay in the tables, marked on_disk false, and the verdict keeps them. To drop them, "
            f"delete their files: results/{RUN}/*/{_model}/<revision>.* and results/{RUN}/metrics/*/{_model}/<revision>.json",
            file=sys.stderr,
        )


@functools.lru_cache(maxsize=None)
def run_checkpoints(model):
    """[(revision, step)] of every checkpoint of `model` whose loss this run's loss table
    holds, in training order: the planned ones and those that left the disk (VANISHED, with
    their loss records, step read there). Its last is the final the loss table, the verdict
    and best_final.csv name, so every comparison "with the final" uses it too."""
    entry = MODELS[model]
    found = dict(zip(entry.revisions, entry.steps))
    for revision in VANISHED.get(model, ()):
        path = Path(metric_file_pattern("loss").format(model=model, revision=revision))
        if path.is_file():
            found[revision] = int(read_record(path, "model", "revision")["step"])
    return tuple(sorted(found.items(), key=lambda item: item[1]))


def run_final(model):
    """The revision of `model`'s final checkpoint in this run's tables (run_checkpoints)."""
    return run_checkpoints(model)[-1][0]


if CACHE_PAIR_METRICS and workflow.is_main_process:
    for _model, _revisions in VANISHED.items():
        _final = run_final(_model)
        if (
            _final in _revisions
            and not Path(f"results/{RUN}/cache/{_model}/{_final}.h5").is_file()
        ):
            print(
                f"lmsat: note: model {_model}: the cache of its final checkpoint {_final} (no longer on disk) is gone "
                f"too, so {', '.join(CACHE_PAIR_METRICS)} cannot compare a checkpoint with it: the records made "
                "against it are kept, a checkpoint measured since has no rows 'final' (never another checkpoint "
                "under that name)",
                file=sys.stderr,
            )


# A slice (`select`) writes under a run directory of its own (lmsat.planning.slicing.slice_run).
if any(CONFIG["select"].values()) and workflow.is_main_process:
    print(
        f"lmsat: this selection is a slice; it writes under results/{RUN}/",
        file=sys.stderr,
    )


def _alternatives(values):
    """A wildcard constraint matching exactly `values`; none matches nothing ("(?!)"): an
    empty constraint would leave the wildcard free, and Snakemake would try every rule for
    every file (a published run's tables through tabulate_metric's input function)."""
    values = sorted(set(values))
    return "|".join(re.escape(v) for v in values) if values else "(?!)"


wildcard_constraints:
    model=_alternatives(MODELS),
    revision=_alternatives(r for m in MODELS.values() for r in m.revisions),
    metric=_alternatives(CACHE_METRICS) or "(?!)",
    corpus=_alternatives(CONFIG["corpora"]),
    tokenizer=_alternatives(CONFIG["tokenizers"]),
    kind="|".join(CHECKPOINT_KINDS),
    task=_alternatives(EVALUATION["tasks"]) or "(?!)",


# ---------------------------------------------------------------- storage (docs/cluster.md)
# A run whose files live in a storage provider (--default-storage-provider s3 ...): Snakemake
# maps every input and output path to an object under the prefix (STORAGE_PREFIX, above),
# and a job sees it as a local copy under .snakemake/storage/ (lmsat.core.job_inputs reads
# the specs' paths there).
# the directory() outputs: the toy hub and tokenizer, staged tokenizers and lm-eval datasets,
# fetched checkpoints (lmsat.planning.storage: the s3 plugin would not see them uploaded)
DIRECTORY_OUTPUTS = (
    r"(?:^|/)(?:toy/hub/models--[^/]+|toy/tokenizer|staged/(?:tokenizers|datasets)/[^/]+"
    r"|weights/(?:best/)?[^/]+/[^/]+)$"
)
if STORAGE_PREFIX is not None:
    recheck_storage_directories(DIRECTORY_OUTPUTS)
    reuse_input_sizes()  # two requests per input per scheduling round otherwise
    remember_buckets()  # a request before every "missing" and every upload otherwise
    # the run's files are files, but for DIRECTORY_OUTPUTS; what this process uploaded is asked once
    answer_stored_files(
        files=rf"^{re.escape(STORAGE_PREFIX)}/(?:results|logs|benchmarks)/",
        directories=DIRECTORY_OUTPUTS,
    )


def planned_path(f):
    """The path the workflow planned for a rule's input or output `f` (a storage run gives its
    rules' files as their local copies: .snakemake/storage/s3/<bucket>/<prefix>/<path>).
    """
    query = getattr(f.storage_object, "query", None) if f.is_storage else None
    if query is None or STORAGE_PREFIX is None or not query.startswith(STORAGE_PREFIX):
        return str(f)
    return query[len(STORAGE_PREFIX) :].lstrip("/")


def storage_object(path):
    """The storage object of planned path `path` (a storage run only)."""
    provider = workflow.storage_registry.default_storage_provider
    return provider.object(f"{STORAGE_PREFIX}/{path}")


def planned_file(path):
    """A local file holding planned file `path`, for planning to read (a table that shapes the
    DAG): `path` itself on a shared disk, a fresh local copy in a storage run."""
    if STORAGE_PREFIX is None:
        return path
    obj = storage_object(path)
    # the plugin's own call: an input function may run inside Snakemake's event loop
    obj.local_path().parent.mkdir(parents=True, exist_ok=True)
    obj.retrieve_object()
    return str(obj.local_path())


# ---------------------------------------------------------------- checkpoints and models (shared)


def get_sample(wildcards):
    """The eval token sample of the model's tokenizer (made by rule sample_eval_tokens)."""
    return sample_file(wildcards.model)


def sample_file(model):
    corpus, tokenizer = CONFIG["sample"]["corpus"], MODELS[model].tokenizer
    return f"results/{RUN}/samples/{corpus}/{tokenizer}.h5"


def checkpoint_files(pattern, **extra):
    """`pattern` formatted for every (model, revision) of the plan."""
    return [
        pattern.format(model=model, revision=revision, **extra)
        for model, revision in PLAN.checkpoints()
    ]


def metric_files(metric):
    """The per-checkpoint files of a planned metric, for every checkpoint of the plan, and
    those it made for checkpoints no longer on disk (VANISHED: kept, made by no job)."""
    pattern = metric_file_pattern(metric)
    kept = [
        pattern.format(model=model, revision=revision)
        for model, revisions in VANISHED.items()
        for revision in revisions
    ]
    return checkpoint_files(pattern) + [path for path in kept if Path(path).is_file()]


def tracked_weights(model, revision):
    """The directory of `revision` of `model` if the pipeline did not make it: a local
    checkpoint, or a hub cache staged by hand (no FETCHED_MARKER in it, or no longer there
    once its record exists: removed by hand after use). None for the toy suite and for
    downloads. Rule record_weights fingerprints these; their readers depend on the record.
    """
    entry = MODELS[model]
    if entry.source == "local" and is_storage_url(entry.id):
        return None  # a revision in a bucket: an input of its own (weights_of)
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
    files must not rerun the finished jobs that read the first copy. A toy model's jobs load
    its published repository (and depend on its training record); a revision of an own run
    kept in a bucket (id: s3://...) is a storage input."""
    entry = MODELS[model]
    if entry.source == "toy":
        return [toy_repository(model), f"results/{RUN}/toy/models/{model}.json"]
    if entry.source == "local" and is_storage_url(entry.id):
        return storage(f"{entry.id.rstrip('/')}/{revision}")
    if tracked_weights(model, revision) and entry.source == "local" and STORAGE_PREFIX:
        # on this machine only: its readers run here (docs/cluster.md, "Your own files")
        directory = entry.pretrained_source(revision)[0]
        return [weights_record(model, revision), users_own(ancient(directory))]
    if tracked_weights(model, revision):
        return weights_record(model, revision)
    if entry.source == "hub":
        return ancient(entry.cache_dir(revision))
    return []


def toy_repository(model):
    """The toy model's published repository in the toy hub cache (rule train_toy_model)."""
    return str(repo_dir(TOY_HUB_CACHE, MODELS[model].id))


def check_toy_hub():
    """Stop the plan if a toy model's published checkpoints changed after its training job
    recorded them (lmsat.core.fingerprint): every table would describe weights no longer there.
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


def entry_param(entry):
    """A model's entry as a job param (a dict of its fields): `commits` only where a suite pins
    them (lmsat.checkpoints.pins), so that the params of every other job are those it had before pins.
    """
    fields = asdict(entry)
    if not fields["commits"]:
        del fields["commits"]
    return fields


def model_at(model, revision):
    """The entry of `model` as a param of a job that reads only `revision`: adding
    revisions to a suite (or subsampling it otherwise) must not rerun the jobs of the
    revisions it already had."""
    entry = MODELS[model]
    return entry_param(entry.at(revision))


def get_model_params(wildcards):
    """The model's entry, as a job param: narrowed to the job's revision if it has one."""
    if "revision" in wildcards.keys():
        return model_at(wildcards.model, wildcards.revision)
    return entry_param(MODELS[wildcards.model])


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
    if spec["source"] == "local" and is_storage_url(spec["id"]):  # in a bucket
        return [storage(spec["id"].rstrip("/"))]
    if spec["source"] == "local" and STORAGE_PREFIX is not None:  # on this machine
        return [users_own(spec["id"])]
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
    files = [
        users_own(f) if spec["type"] == "text_files" else f for f in corpus_inputs(spec)
    ]
    return files + ([spec["staged"]] if "staged" in spec else [])


def users_own(path):
    """A file or directory of the user's (a text corpus, a local tokenizer or checkpoint): in a
    storage run it is on this machine only, so local(): the jobs reading it run here."""
    return local(path) if STORAGE_PREFIX is not None else path


def lmeval_task_staged(task):
    """The staging manifest of an lm-eval task whose datasets come from the hub (none for the
    task YAMLs the pipeline writes from local files)."""
    if task_files(task) or task == "storycloze_2016":
        return []
    return f"results/{RUN}/staged/lmeval/{task}.json"


def lmeval_task_datasets(task):
    """The datasets cache rule stage_lmeval_task filled for `task` (beside its manifest)."""
    return f"results/{RUN}/staged/datasets/{task}" if lmeval_task_staged(task) else []


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


# ---------------------------------------------------------------- Table 1 (evaluation.smk, the report)


def task_files(task):
    """Task YAMLs (and data) the pipeline writes for `task`; none for lm-eval's own tasks."""
    if task in OFFLINE_TASKS:
        return [f"{TASK_DIR}/{task}.yaml", f"{TASK_DIR}/{task}.jsonl"]
    if task == "storycloze_2016" and EVALUATION["storycloze_dir"]:
        # the YAML and the copies of the manual download beside it (rule write_storycloze_task)
        return [f"{TASK_DIR}/storycloze_2016.yaml", *storycloze_copies()]
    return []


def storycloze_copies(task_dir=TASK_DIR):
    """Where the manually downloaded CSVs are copied (by write_storycloze_task), beside the task
    YAML, which names them relative to itself, so that an evaluation job reads its inputs.
    """
    return [f"{task_dir}/{name}" for name in STORYCLOZE_2016_FILES.values()]


def evaluation_records():
    return [
        f"results/{RUN}/evaluation/{model}/{kind}/{task}.json"
        for model in EVALUATED_MODELS
        for kind in CHECKPOINT_KINDS
        for task in EVALUATION["tasks"]
    ]


def keep_signatures():
    """Every input, params and resource function of every rule keeps its signature as
    `__signature__` (which inspect.signature returns as it is): Snakemake inspects a
    function's signature at each call, for every job, which was 8% of the Pythia plan's dry
    run. Called once every rule is defined (workflow/Snakefile)."""
    import inspect

    for planned in workflow.rules:
        for item in [*planned.input, *planned.params, *planned.resources.values()]:
            function = getattr(
                item, "_file", item
            )  # an input function, as Snakemake holds it
            if inspect.isfunction(function) and "__signature__" not in vars(function):
                function.__signature__ = inspect.signature(function)
