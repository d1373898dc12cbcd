# Per-checkpoint metrics (lmsat.products.metrics.METRICS; `metrics:` in the config picks them): a
# cache metric's record per checkpoint x metric, a record per checkpoint x metric of the
# metrics that compare its cache with its final and previous checkpoints' (reads=
# "cache_pairs"), and one generic rule for every metric table
# (their figures: rule plot_figure, products.smk). Weight metrics are computed by rule
# analyse_checkpoint (cache.smk), which loads each checkpoint once.
# Input functions and helpers: metrics_inputs.smk.


include: "metrics_inputs.smk"


localrules:
    tabulate_metric,


rule compute_checkpoint_metric:
    input:
        cache="<results>/cache/{model}/{revision}.h5",
        sample=get_sample,
    output:
        "<results>/metrics/{metric}/{model}/{revision}.json",
    log:
        "<logs>/compute_checkpoint_metric/{metric}/{model}/{revision}.log",
    conda:
        "../../envs/lmsat.yaml"
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        record=get_checkpoint_record,
    script:
        "../scripts/compute_checkpoint_metric.py"


rule compare_checkpoint_caches:
    input:
        unpack(get_comparison_caches),
        sample=get_sample,
    output:
        "<results>/metrics/{metric}/{model}/{revision}.json",
    log:
        "<logs>/compare_checkpoint_caches/{metric}/{model}/{revision}.log",
    wildcard_constraints:
        metric=_alternatives(CACHE_PAIR_METRICS) or "(?!)",
    conda:
        "../../envs/lmsat.yaml"
    resources:
        # three caches' `layers`, a hidden state at a time (float64, SVDs of k x d): seconds for
        # the toy, minutes per checkpoint at Pythia's widths on a CPU (not measured); as the
        # checkpoint job's runtime, more at each retry
        mem_mb=lambda wildcards, attempt: 2000 * attempt,
        runtime=lambda wildcards, attempt: CONFIG["extraction"]["runtime"] * attempt,
    params:
        record=get_checkpoint_record,
        references=get_comparison_references,
    script:
        "../scripts/compare_checkpoint_caches.py"


rule tabulate_metric:
    input:
        unpack(get_metric_table_inputs),
    output:
        "<results>/tables/{table}.csv",
    log:
        "<logs>/tabulate_metric/{table}.log",
    wildcard_constraints:
        table=_alternatives(METRIC_TABLES),
    conda:
        "../../envs/lmsat.yaml"
    params:
        metric=lambda wildcards: METRIC_TABLES[wildcards.table],
        options=get_table_options,
        config_sha256=CONFIG_SHA256,
        models=list(MODELS),
        gone=GONE,
    script:
        "../scripts/tabulate_metric.py"
