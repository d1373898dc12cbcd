# Per-checkpoint weight analyses: the LM-head spectrum (Godey et al. 4.2) and the low-rank
# attention metrics (Kobayashi et al.). One job per checkpoint writes both files: loading
# the checkpoint (torch + transformers import, then the weights) costs more than either
# analysis, so a job per file would load every checkpoint twice. CPU only (float64 linear
# algebra on d x d matrices).

MODEL_TOKENIZERS = {
    name: CONFIG["tokenizers"][m.tokenizer] for name, m in MODELS.items()
}


rule analyse_checkpoint_weights:
    input:
        weights=checkpoint_weights,
        tokenizer=lambda wildcards: (
            TOY_TOKENIZER
            if MODEL_TOKENIZERS[wildcards.model]["source"] == "toy"
            else []
        ),
    output:
        spectra="results/spectra/{model}/{revision}.h5",
        attention="results/attention/{model}/{revision}.h5",
    log:
        "logs/analyse_checkpoint_weights/{model}/{revision}.log",
    benchmark:
        "benchmarks/out/analyse_checkpoint_weights/{model}/{revision}.tsv"
    conda:
        "../../envs/lmsat.yaml"
    threads: 1
    resources:
        mem_mb=lambda wildcards, attempt: CONFIG["weights"]["mem_mb"] * attempt,
        runtime=lambda wildcards, attempt: CONFIG["weights"]["runtime"] * attempt,
    params:
        model=model_params,
        record=checkpoint_record,
        tokenizer=lambda wildcards: MODEL_TOKENIZERS[wildcards.model],
        drop_padding_rows=CONFIG["spectra"]["drop_padding_rows"],
        dtype=CONFIG["weights"]["dtype"],
        threads=1,
    script:
        "../scripts/analyse_checkpoint_weights.py"
