# Per-checkpoint metrics, one job per checkpoint x metric; names resolve in lmsat.metrics.


rule compute_checkpoint_metric:
    input:
        unpack(metric_inputs),
    output:
        "results/{run}/metrics/{metric}/{model}/{revision}.json",
    log:
        "logs/{run}/compute_checkpoint_metric/{metric}/{model}/{revision}.log",
    group:
        "checkpoint_metrics"  # seconds each: batched into SLURM jobs (profiles/slurm)
    conda:
        "../../envs/lmsat.yaml"
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        record=checkpoint_record,
        model=model_params,
    script:
        "../scripts/compute_checkpoint_metric.py"
