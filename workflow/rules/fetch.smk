# Hub checkpoints: one job per (hub model, revision) downloads its files into a hub cache of
# its own, results/weights/{model}/{revision}, from which every job that loads it reads
# offline (common.smk: weights_of). Transient hub faults are retried inside the
# job with backoff (lmsat.checkpoints.fetch), and the job itself is restarted `fetch.retries` times. With
# fetch.remove_after_use the files are temp(): deleted once no pending job needs them; a
# fetch that would leave less than fetch.min_free_mb free waits for such deletions, so
# fetching cannot run ahead of the jobs that read the checkpoints until the disk is full.
# Input functions and helpers: fetch_inputs.smk.


include: "fetch_inputs.smk"


rule fetch_checkpoint:
    output:
        fetched_checkpoint("<results>/weights/{model}/{revision}"),
    log:
        "<logs>/fetch_checkpoint/{model}/{revision}.log",
    benchmark:
        "<benchmarks>/fetch_checkpoint/{model}/{revision}.tsv"
    wildcard_constraints:
        model=_alternatives(HUB_MODELS) or "(?!)",
    retries: FETCH["retries"]
    conda:
        "../../envs/lmsat.yaml"
    resources:
        mem_mb=1000,
        runtime=lambda wildcards, attempt: FETCH["runtime"] * attempt,
        disk_mb=lambda wildcards, attempt: CHECKPOINT_DISK_MB[wildcards.model] * attempt,
    params:
        model=get_model_params,
    script:
        "../scripts/fetch_checkpoint.py"


# lm-eval of a model's best revision is planned only once the loss table exists, when the
# first copy of that revision has been read and deleted. It reads a copy of its own: fetching
# the first copy again would make Snakemake rerun every job that read it.
use rule fetch_checkpoint as fetch_best_checkpoint with:
    output:
        fetched_checkpoint("<results>/weights/best/{model}/{revision}"),
    log:
        "<logs>/fetch_best_checkpoint/{model}/{revision}.log",
    benchmark:
        "<benchmarks>/fetch_best_checkpoint/{model}/{revision}.tsv"


# Weights the pipeline did not download (a local checkpoint, a hub cache staged by hand at
# <results>/weights/{model}/{revision}) are never deleted; their readers depend on this
# record instead, whose param is the files' fingerprint (common.smk: tracked_weights): a
# checkpoint changed after a run reruns the record, and so every job that read it.
localrules:
    record_weights,


rule record_weights:
    output:
        "<results>/weights/records/{model}/{revision}.json",
    log:
        "<logs>/record_weights/{model}/{revision}.log",
    conda:
        "../../envs/lmsat.yaml"
    params:
        directory=lambda wildcards: tracked_weights(wildcards.model, wildcards.revision),
        fingerprint=get_recorded_fingerprint,
    script:
        "../scripts/record_weights.py"
