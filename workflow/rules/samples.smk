# The eval token sample: built once per corpus x tokenizer, shared by all checkpoints.


rule sample_eval_tokens:
    input:
        get_sample_inputs,
    output:
        "<results>/samples/{corpus}/{tokenizer}.h5",
    log:
        "<logs>/sample_eval_tokens/{corpus}/{tokenizer}.log",
    conda:
        "../../envs/lmsat.yaml"
    resources:
        mem_mb=4000,
        runtime=60,
    params:
        corpus=lambda wildcards: corpus_spec(wildcards.corpus),
        tokenizer=lambda wildcards: tokenizer_spec(wildcards.tokenizer),
        sample=CONFIG["sample"],
        seed=CONFIG["seed"],
    script:
        "../scripts/sample_eval_tokens.py"
