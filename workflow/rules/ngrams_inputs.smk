# The input functions and helpers of the rules in ngrams.smk, used by them only; it
# includes this file above its rules (`snakemake --lint` flags a file that mixes rules
# and functions). What several stages share: common.smk.


def get_ngram_inputs(wildcards):
    """The corpus and tokenizer files; the synthetic language too when the toy tokenizer
    counts the synthetic corpus (its true n-gram matrix is stored beside the counts)."""
    synthetic = CONFIG["corpora"][wildcards.corpus]["type"] == "synthetic"
    toy = CONFIG["tokenizers"][wildcards.tokenizer]["source"] == "toy"
    return dict(
        corpus=get_sample_inputs(wildcards),
        language=TOY_LANGUAGE if synthetic and toy else [],
    )
