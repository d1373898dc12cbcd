# One job per checkpoint loads it once and writes everything that needs its weights: every
# planned weights metric (lmsat.metrics: the LM-head spectrum of Godey et al. 4.2, the
# low-rank attention metrics of Kobayashi et al.) and the hidden-state cache (one forward
# of the eval sample, stored as HDF5). Loading (torch + transformers import, then the
# weights) costs more than the weight analyses together, so separate jobs would load every
# checkpoint twice (and fetch it twice).


def get_checkpoint_weights(wildcards):
    """The checkpoint the job loads, or what stands for it (common.smk: weights_of)."""
    return weights_of(wildcards.model, wildcards.revision)


def get_tokenizer_files(wildcards):
    """The toy tokenizer is built by the pipeline; a hub one is staged (tokenizer_inputs)."""
    return tokenizer_inputs(MODELS[wildcards.model].tokenizer)


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


rule analyse_checkpoint:
    input:
        sample=get_sample,
        weights=get_checkpoint_weights,
        tokenizer=get_tokenizer_files,
    output:
        **WEIGHT_METRIC_FILES,
        cache="results/{run}/cache/{model}/{revision}.h5",
    log:
        "logs/{run}/analyse_checkpoint/{model}/{revision}.log",
    benchmark:
        "benchmarks/out/{run}/analyse_checkpoint/{model}/{revision}.tsv"
    conda:
        "../../envs/lmsat.yaml"
    threads: CONFIG["threads"]
    resources:
        mem_mb=lambda wildcards, attempt: checkpoint_job_mem_mb(
            wildcards.model, CONFIG["extraction"]["mem_mb"], attempt
        ),
        runtime=lambda wildcards, attempt: CONFIG["extraction"]["runtime"] * attempt,
        gpu=lambda wildcards: 1 if CONFIG["device"] == "cuda" else 0,
    params:
        model=get_model_params,
        record=get_checkpoint_record,
        tokenizer=lambda wildcards: model_tokenizer(wildcards.model),
        drop_padding_rows=CONFIG["spectra"]["drop_padding_rows"],
        extraction=RESULT_CONFIG["extraction"],
        weight_metrics=WEIGHT_METRICS,
        seed=CONFIG["seed"],
    script:
        "../scripts/analyse_checkpoint.py"
