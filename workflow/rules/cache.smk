# The hidden-state cache: one forward of the eval sample per checkpoint, stored as HDF5.


rule extract_hidden_states:
    input:
        sample=sample_of_model,
        weights=checkpoint_weights,
    output:
        "results/cache/{model}/{revision}.h5",
    log:
        "logs/extract_hidden_states/{model}/{revision}.log",
    benchmark:
        "benchmarks/out/extract_hidden_states/{model}/{revision}.tsv"
    conda:
        "../../envs/lmsat.yaml"
    threads: CONFIG["threads"]
    resources:
        mem_mb=lambda wildcards, attempt: CONFIG["extraction"]["mem_mb"] * attempt,
        runtime=lambda wildcards, attempt: CONFIG["extraction"]["runtime"] * attempt,
        gpu=lambda wildcards: 1 if CONFIG["device"] == "cuda" else 0,
    params:
        model=model_params,
        extraction=CONFIG["extraction"],
        device=CONFIG["device"],
        seed=CONFIG["seed"],
        threads=CONFIG["threads"],
    script:
        "../scripts/extract_hidden_states.py"
