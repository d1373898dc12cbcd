# n-gram W-error of corpora (Godey et al. 5.1, Fig. 7): one job per corpus x tokenizer
# counts the n-grams and takes every singular value of the context matrix; and the
# ground-truth check on a small synthetic language whose true n-gram matrix is known
# (Fig. 7 and the ground-truth figure: rule plot_figure, products.smk).
# Input functions and helpers: ngrams_inputs.smk.


include: "ngrams_inputs.smk"


localrules:
    tabulate_ngrams,


rule count_corpus_ngrams:
    input:
        unpack(get_ngram_inputs),
    output:
        "<results>/ngrams/{corpus}/{tokenizer}.h5",
    log:
        "<logs>/count_corpus_ngrams/{corpus}/{tokenizer}.log",
    benchmark:
        "<benchmarks>/count_corpus_ngrams/{corpus}/{tokenizer}.tsv"
    conda:
        "../../envs/lmsat.yaml"
    resources:
        mem_mb=lambda wildcards, attempt: NGRAMS["mem_mb"] * attempt,
        runtime=lambda wildcards, attempt: NGRAMS["runtime"] * attempt,
        gpu=1 if CONFIG["device"] == "cuda" else 0,
    params:
        corpus=lambda wildcards: corpus_spec(wildcards.corpus),
        tokenizer=lambda wildcards: tokenizer_spec(wildcards.tokenizer),
        order=NGRAMS["order"],
        max_tokens=NGRAMS["max_tokens"],
    script:
        "../scripts/count_corpus_ngrams.py"


rule ngram_ground_truth:
    output:
        "<results>/tables/ngram_ground_truth.csv",
    log:
        "<logs>/ngram_ground_truth.log",
    conda:
        "../../envs/lmsat.yaml"
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        config_sha256=CONFIG_SHA256,
        language=NGRAMS["ground_truth"]["language"],
        sample_sizes=NGRAMS["ground_truth"]["sample_sizes"],
        order=NGRAMS["order"],
        seed=CONFIG["seed"],
    script:
        "../scripts/ngram_ground_truth.py"


rule tabulate_ngrams:
    input:
        expand(
            "<results>/ngrams/{corpus}/{tokenizer}.h5",
            corpus=NGRAM_CORPORA,
            tokenizer=NGRAM_TOKENIZERS,
        ),
    output:
        "<results>/tables/ngram_werror.csv",
    log:
        "<logs>/tabulate_ngrams.log",
    conda:
        "../../envs/lmsat.yaml"
    params:
        config_sha256=CONFIG_SHA256,
    script:
        "../scripts/tabulate_ngrams.py"
