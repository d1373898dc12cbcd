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
