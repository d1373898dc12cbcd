# The input functions and helpers of the rules in cache.smk, used by them only; it
# includes this file above its rules (`snakemake --lint` flags a file that mixes rules
# and functions). What several stages share: common.smk.


def get_checkpoint_weights(wildcards):
    """The checkpoint the job loads, or what stands for it (weights_of)."""
    return weights_of(wildcards.model, wildcards.revision)


def get_tokenizer_files(wildcards):
    """The toy tokenizer is built by the pipeline; a hub one is staged (tokenizer_inputs)."""
    return tokenizer_inputs(MODELS[wildcards.model].tokenizer)


def checkpoint_job_mem_mb(model, base_mb, attempt):
    """Host memory of rule analyse_checkpoint beside its own `base_mb`. It loads the
    checkpoint in its stored dtype (fetch.stored_dtype: 2 bytes a parameter for
    float16/bfloat16 checkpoints like Pythia's, 4 for float32 ones) straight onto its
    device: on a GPU the host holds no copy of the weights (memory-mapped files; a quarter
    of them as margin for a shard in flight), on the CPU the model in the wider of the
    stored and forward dtypes (+20%). A retry after an OOM asks for `attempt` times this.
    """
    forward_bytes = 4 if CONFIG["extraction"]["dtype"] == "float32" else 2
    stored_bytes = stored_bytes_per_param(MODELS[model], FETCH)
    if CONFIG["device"] == "cuda":
        weights_mb = 0.25 * stored_bytes * estimated_parameters(MODELS[model]) / 1e6
    else:
        weights_mb = (
            1.2
            * max(stored_bytes, forward_bytes)
            * estimated_parameters(MODELS[model])
            / 1e6
        )
    return int((base_mb + weights_mb) * attempt)
