# Staging: everything a compute job would otherwise fetch from the network, put on disk
# first (lmsat.planning.staging). Hub checkpoints: fetch.smk; here hub tokenizers, the prefix of each
# hub dataset corpus its jobs read, and lm-eval task datasets. These rules (and the fetch
# rules: lmsat.planning.staging.STAGING_RULES) are the only ones that reach the network; every other
# job imports lmsat.runtime.offline (HF_HUB_OFFLINE=1, HF_DATASETS_OFFLINE=1) and fails in seconds,
# naming the missing staged file, if staging was skipped. Where they run is the profile's
# choice (profiles/slurm: a transfer partition via set-resources, or the submit node with
# config fetch.staging_on: submit_node). `snakemake stage_all` stages all but the
# checkpoints up front (e.g. on a login node before submitting the rest). Input functions
# and helpers: staging_inputs.smk; the tokenizer and corpus specs as jobs
# see them (pointing at their staged copies): its section `tokenizers and corpora`.


include: "staging_inputs.smk"


if FETCH["staging_on"] == "submit_node":
    # what `localrules:` compiles to, for the one list of staging rules (lmsat.planning.staging)
    workflow.localrules(*STAGING_RULES)


rule stage_all:
    input:
        get_staging_targets,
    localrule: True


rule stage_tokenizer:
    output:
        directory("<results>/staged/tokenizers/{tokenizer}"),
    log:
        "<logs>/stage_tokenizer/{tokenizer}.log",
    wildcard_constraints:
        tokenizer=_alternatives(HUB_TOKENIZERS) or "(?!)",
    retries: FETCH["retries"]
    conda:
        "../../envs/lmsat.yaml"
    resources:
        mem_mb=2000,
        runtime=lambda wildcards, attempt: 15 * attempt,
    params:
        spec=lambda wildcards: CONFIG["tokenizers"][wildcards.tokenizer],
    script:
        "../scripts/stage_tokenizer.py"


rule stage_corpus:
    input:
        tokenizers=get_consumer_tokenizers,
    output:
        "<results>/staged/corpora/{corpus}.jsonl",
    log:
        "<logs>/stage_corpus/{corpus}.log",
    wildcard_constraints:
        corpus=_alternatives(HUB_CORPORA) or "(?!)",
    retries: FETCH["retries"]
    conda:
        "../../envs/lmsat.yaml"
    resources:
        mem_mb=4000,
        runtime=lambda wildcards, attempt: FETCH["runtime"] * attempt,
    params:
        spec=lambda wildcards: CONFIG["corpora"][wildcards.corpus],
        consumers=lambda wildcards: corpus_consumers(wildcards.corpus),
        tokenizers=lambda wildcards: {
            c["tokenizer"]: tokenizer_spec(c["tokenizer"])
            for c in corpus_consumers(wildcards.corpus)
        },
    script:
        "../scripts/stage_corpus.py"


rule stage_lmeval_task:
    output:
        manifest="<results>/staged/lmeval/{task}.json",
        # the task's own datasets cache (HF_DATASETS_CACHE), read by its evaluate_checkpoint jobs
        datasets=directory("<results>/staged/datasets/{task}"),
    log:
        "<logs>/stage_lmeval_task/{task}.log",
    retries: FETCH["retries"]
    conda:
        "../../envs/lmsat.yaml"
    resources:
        mem_mb=4000,
        runtime=lambda wildcards, attempt: 30 * attempt,
    script:
        "../scripts/stage_lmeval_task.py"
