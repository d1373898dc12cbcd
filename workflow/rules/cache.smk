# One job per checkpoint loads it once and writes everything that needs its weights: every
# planned weights metric (lmsat.products.metrics: the LM-head spectrum of Godey et al. 4.2, the
# low-rank attention metrics of Kobayashi et al.) and the hidden-state cache (one forward
# of the eval sample, stored as HDF5). Loading (torch + transformers import, then the
# weights) costs more than the weight analyses together, so separate jobs would load every
# checkpoint twice (and fetch it twice).
# Input functions and helpers: cache_inputs.smk.


include: "cache_inputs.smk"


rule analyse_checkpoint:
    input:
        sample=get_sample,
        weights=get_checkpoint_weights,
        tokenizer=get_tokenizer_files,
    output:
        **WEIGHT_METRIC_FILES,
        cache="<results>/cache/{model}/{revision}.h5",
    log:
        "<logs>/analyse_checkpoint/{model}/{revision}.log",
    benchmark:
        "<benchmarks>/analyse_checkpoint/{model}/{revision}.tsv"
    conda:
        "../../envs/lmsat.yaml"
    threads: CONFIG["threads"]
    resources:
        mem_mb=lambda wildcards, attempt: checkpoint_job_mem_mb(
            wildcards.model, CONFIG["extraction"]["mem_mb"], attempt
        ),
        runtime=lambda wildcards, attempt: CONFIG["extraction"]["runtime"] * attempt,
        gpu=1 if CONFIG["device"] == "cuda" else 0,
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
