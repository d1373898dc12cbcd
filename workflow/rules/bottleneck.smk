# The softmax bottleneck (Godey et al. 5.1, App. B): rank-constrained heads W = A B trained
# on a frozen model's cached last-layer representations, one job per (model, r, peak lr);
# per (model, r) the lr with the lowest eval loss is kept, and tabulated with the W-error of
# the model's own head (results/spectra of cache.smk). Figs. 6 and 8 and the ground-truth
# figure are drawn by rule plot_figure (products.smk).
# Input functions and helpers: bottleneck_inputs.smk.


include: "bottleneck_inputs.smk"


localrules:
    tabulate_bottleneck,


rule build_head_cache:
    input:
        unpack(get_head_cache_inputs),
    output:
        train=head_shards("train"),
        eval=head_shards("eval"),
        manifest="<results>/bottleneck/cache/{model}/manifest.json",
    log:
        "<logs>/build_head_cache/{model}.log",
    benchmark:
        "<benchmarks>/build_head_cache/{model}.tsv"
    conda:
        "../../envs/lmsat.yaml"
    threads: CONFIG["threads"]
    resources:
        mem_mb=lambda wildcards, attempt: model_mem_mb(
            wildcards.model, BOTTLENECK["cache_mem_mb"], attempt
        ),
        runtime=lambda wildcards, attempt: BOTTLENECK["cache_runtime"] * attempt,
        gpu=1 if CONFIG["device"] == "cuda" else 0,
    params:
        model=get_final_model_params,
        tokenizer=lambda wildcards: model_tokenizer(wildcards.model),
        corpora=HEAD_SET_CORPORA,
        corpus_specs={
            c: corpus_spec(c)
            for c in sorted(set(HEAD_SET_CORPORA.values()))
            if c in CONFIG["corpora"]  # none: a published record alone
        },
        sample_corpus=CONFIG["sample"]["corpus"],
        seq_len=CONFIG["sample"]["seq_len"],
        train_tokens=BOTTLENECK["train_tokens"],
        eval_tokens=BOTTLENECK["eval_tokens"],
        pool_factor=BOTTLENECK["pool_factor"],
        storage_dtype=BOTTLENECK["storage_dtype"],
        chunk_tokens=BOTTLENECK["chunk_tokens"],
        dtype=CONFIG["extraction"]["dtype"],
        batch_size=CONFIG["extraction"]["batch_size"],
        seed=CONFIG["seed"],
    script:
        "../scripts/build_head_cache.py"


rule train_rank_head:
    input:
        manifest="<results>/bottleneck/cache/{model}/manifest.json",
        train=head_shards("train"),
        eval=head_shards("eval"),
    output:
        "<results>/bottleneck/runs/{model}/r{rank}/lr{lr}.json",
    log:
        "<logs>/train_rank_head/{model}/r{rank}/lr{lr}.log",
    benchmark:
        "<benchmarks>/train_rank_head/{model}/r{rank}/lr{lr}.tsv"
    wildcard_constraints:
        rank=r"\d+",
        lr=_alternatives(HEAD_LRS),
    conda:
        "../../envs/lmsat.yaml"
    threads: CONFIG["threads"]
    resources:
        mem_mb=lambda wildcards, attempt: BOTTLENECK["head_mem_mb"] * attempt,
        runtime=lambda wildcards, attempt: BOTTLENECK["head_runtime"] * attempt,
        gpu=1 if CONFIG["device"] == "cuda" else 0,
    params:
        settings=head_train_fields(BOTTLENECK),
        lr=lambda wildcards: HEAD_LRS[wildcards.lr],
        state_dir=lambda wildcards: (
            f"results/{RUN}/bottleneck/state/{wildcards.model}/r{wildcards.rank}/lr{wildcards.lr}"
        ),
        seed=CONFIG["seed"],
    script:
        "../scripts/train_rank_head.py"


rule tabulate_bottleneck:
    input:
        runs=[run for model in BOTTLENECK["models"] for run in head_runs(model)],
        manifests=expand(
            "<results>/bottleneck/cache/{model}/manifest.json",
            model=BOTTLENECK["models"],
        ),
        spectra=[final_spectrum(model) for model in BOTTLENECK["models"]],
    output:
        heads="<results>/tables/bottleneck_heads.csv",
        search="<results>/tables/bottleneck_lr_search.csv",
    log:
        "<logs>/tabulate_bottleneck.log",
    conda:
        "../../envs/lmsat.yaml"
    params:
        config_sha256=CONFIG_SHA256,
        models=list(MODELS),
        rise_tolerance=BOTTLENECK["rise_tolerance"],
    script:
        "../scripts/tabulate_bottleneck.py"
