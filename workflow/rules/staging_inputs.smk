# The input functions and helpers of the rules in staging.smk, used by them only; it
# includes this file above its rules (`snakemake --lint` flags a file that mixes rules
# and functions). What several stages share: common.smk.


def get_staging_targets(wildcards):
    """The staged tokenizers, corpora and lm-eval task data of the plan (rule stage_all);
    checkpoints are fetched as their readers need them (fetch.smk)."""
    tokenizers = {m.tokenizer for m in MODELS.values()}
    corpora = {CONFIG["sample"]["corpus"]}
    if NGRAM_CORPORA:
        tokenizers |= set(NGRAM_TOKENIZERS)
        corpora |= set(NGRAM_CORPORA)
    if BOTTLENECK["models"]:
        corpora |= set(HEAD_SET_CORPORA.values())
    return (
        [p for t in sorted(tokenizers) for p in tokenizer_inputs(t) if "staged" in p]
        + [p for c in sorted(corpora) for p in corpus_files(c) if "staged" in p]
        + [lmeval_task_staged(t) for t in EVALUATION["tasks"] if lmeval_task_staged(t)]
    )


# the hub tokenizers (not the toy's, not a local directory) and hub dataset corpora
HUB_TOKENIZERS = [
    n for n, s in CONFIG["tokenizers"].items() if needs_staging_tokenizer(s)
]
HUB_CORPORA = [n for n, s in CONFIG["corpora"].items() if needs_staging_corpus(s)]


def corpus_consumers(corpus):
    """Every job kind that reads hub corpus `corpus`, with its tokenizer and how far it reads
    (lmsat.planning.staging.CorpusConsumer): what stage_corpus must stage. Mirrors the budgets of
    lmsat.data.corpus.build_sample, count_corpus_ngrams and build_head_cache."""
    spec, sample = CONFIG["corpora"][corpus], CONFIG["sample"]
    cap = spec["max_documents"]
    consumers = []
    if corpus == sample["corpus"]:
        consumers += [
            dict(
                job="sample_eval_tokens",
                tokenizer=tokenizer,
                tokens=sample["pool_factor"] * sample["n_tokens"],
                documents=cap,
            )
            for tokenizer in sorted({m.tokenizer for m in MODELS.values()})
        ]
    if corpus in NGRAM_CORPORA:
        consumers += [
            dict(job="count_corpus_ngrams", tokenizer=t, tokens=NGRAMS["max_tokens"])
            for t in NGRAM_TOKENIZERS
        ]
    if BOTTLENECK["models"] and corpus in HEAD_SET_CORPORA.values():
        sizes = {"train": BOTTLENECK["train_tokens"], "eval": BOTTLENECK["eval_tokens"]}
        wanted = sum(sizes[s] for s, c in HEAD_SET_CORPORA.items() if c == corpus)
        n_pool = BOTTLENECK["pool_factor"] * wanted
        if corpus == sample["corpus"]:  # the eval sample's windows are kept out
            n_pool += -(-sample["n_tokens"] // sample["seq_len"]) * sample["seq_len"]
        consumers += [
            dict(
                job="build_head_cache",
                tokenizer=MODELS[m].tokenizer,
                tokens=n_pool,
                documents=cap,
            )
            for m in BOTTLENECK["models"]
        ]
    return consumers


def get_consumer_tokenizers(wildcards):
    """Tokenizer files of every job that reads corpus `wildcards.corpus` (stage_corpus)."""
    names = sorted({c["tokenizer"] for c in corpus_consumers(wildcards.corpus)})
    return [path for name in names for path in tokenizer_inputs(name)]
