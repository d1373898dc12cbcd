# Staging: everything a compute job would otherwise fetch from the network, put on disk
# first (lmsat.staging). Hub checkpoints: fetch.smk; here hub tokenizers, the prefix of each
# hub dataset corpus its jobs read, and lm-eval task datasets. These rules (and the fetch
# rules: lmsat.staging.STAGING_RULES) are the only ones that reach the network; every other
# job imports lmsat.offline (HF_HUB_OFFLINE=1, HF_DATASETS_OFFLINE=1) and fails in seconds,
# naming the missing staged file, if staging was skipped. Where they run is the profile's
# choice (profiles/slurm: a transfer partition via set-resources, or the submit node with
# config fetch.staging_on: submit_node). `snakemake stage_all` stages all but the
# checkpoints up front (e.g. on a login node before submitting the rest). The tokenizer and
# corpus specs as jobs see them (pointing at their staged copies): common.smk.
from lmsat.staging import STAGING_RULES

if FETCH["staging_on"] == "submit_node":
    # what `localrules:` compiles to, for the one list of staging rules (lmsat.staging)
    workflow.localrules(*STAGING_RULES)


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


rule stage_all:
    input:
        get_staging_targets,
    localrule: True


# the hub tokenizers (not the toy's, not a local directory)
HUB_TOKENIZERS = [
    n for n, s in CONFIG["tokenizers"].items() if needs_staging_tokenizer(s)
]


rule stage_tokenizer:
    output:
        directory("results/{run}/staged/tokenizers/{tokenizer}"),
    log:
        "logs/{run}/stage_tokenizer/{tokenizer}.log",
    wildcard_constraints:
        tokenizer=_alternatives(HUB_TOKENIZERS) or "(?!)",
    retries: FETCH["retries"]
    conda:
        "../../envs/lmsat.yaml"
    resources:
        mem_mb=2000,
        runtime=lambda wildcards, attempt: 15 * attempt,
    params:
        spec=lambda wildcards: CONFIG["tokenizers"][wildcards.tokenizer],
    script:
        "../scripts/stage_tokenizer.py"


# the hub dataset corpora (not local files, not the synthetic language)
HUB_CORPORA = [n for n, s in CONFIG["corpora"].items() if needs_staging_corpus(s)]


def corpus_consumers(corpus):
    """Every job kind that reads hub corpus `corpus`, with its tokenizer and how far it reads
    (lmsat.staging.CorpusConsumer): what stage_corpus must stage. Mirrors the budgets of
    lmsat.corpus.build_sample, count_corpus_ngrams and build_head_cache."""
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


rule stage_corpus:
    input:
        tokenizers=get_consumer_tokenizers,
    output:
        "results/{run}/staged/corpora/{corpus}.jsonl",
    log:
        "logs/{run}/stage_corpus/{corpus}.log",
    wildcard_constraints:
        corpus=_alternatives(HUB_CORPORA) or "(?!)",
    retries: FETCH["retries"]
    conda:
        "../../envs/lmsat.yaml"
    resources:
        mem_mb=4000,
        runtime=lambda wildcards, attempt: FETCH["runtime"] * attempt,
    params:
        spec=lambda wildcards: CONFIG["corpora"][wildcards.corpus],
        consumers=lambda wildcards: corpus_consumers(wildcards.corpus),
        tokenizers=lambda wildcards: {
            c["tokenizer"]: tokenizer_spec(c["tokenizer"])
            for c in corpus_consumers(wildcards.corpus)
        },
    script:
        "../scripts/stage_corpus.py"


STAGED_DATASETS = f"results/{RUN}/staged/datasets"


rule stage_lmeval_task:
    output:
        "results/{run}/staged/lmeval/{task}.json",
    log:
        "logs/{run}/stage_lmeval_task/{task}.log",
    retries: FETCH["retries"]
    conda:
        "../../envs/lmsat.yaml"
    resources:
        mem_mb=4000,
        runtime=lambda wildcards, attempt: 30 * attempt,
    params:
        datasets_cache=STAGED_DATASETS,
    script:
        "../scripts/stage_lmeval_task.py"
