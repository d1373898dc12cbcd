# The Python of the softmax-bottleneck rules (bottleneck.smk, ngrams.smk): config checks,
# the rank / learning-rate / shard tables and the input functions they cite by name.
from lmsat.bottleneck import check_config as check_bottleneck_config
from lmsat.bottleneck import check_ngram_config, head_ranks, learning_rates
from lmsat.bottleneck import set_corpora, train_settings
from lmsat.headcache import shard_count

BOTTLENECK = CONFIG["bottleneck"]
check_bottleneck_config(CONFIG, MODELS)
HEAD_LRS = learning_rates(BOTTLENECK)  # path label -> peak learning rate
HEAD_SET_CORPORA = set_corpora(CONFIG)  # train / eval -> corpus
HEAD_SHARDS = {
    name: range(
        shard_count(
            BOTTLENECK[f"{name}_tokens"],
            CONFIG["sample"]["seq_len"],
            BOTTLENECK["shard_tokens"],
        )
    )
    for name in ("train", "eval")
}


def head_shards(name, model="{model}", run="{run}"):
    return [
        f"results/{run}/bottleneck/cache/{model}/{name}_{shard:04d}.h5"
        for shard in HEAD_SHARDS[name]
    ]


def head_cache_inputs(wildcards):
    corpora = set(HEAD_SET_CORPORA.values())
    return dict(
        weights=final_checkpoint_weights(wildcards),
        corpora=[f for c in sorted(corpora) for f in corpus_files(c)],
        tokenizer=tokenizer_inputs(MODELS[wildcards.model].tokenizer),
        sample=(
            sample_of_model(wildcards) if CONFIG["sample"]["corpus"] in corpora else []
        ),
    )


def head_runs(model):
    ranks = head_ranks(BOTTLENECK, MODELS[model].hidden_size)
    return [
        f"results/{RUN}/bottleneck/runs/{model}/r{rank}/lr{lr}.json"
        for rank in ranks
        for lr in HEAD_LRS
    ]


def final_spectrum(model):
    return f"results/{RUN}/spectra/{model}/{MODELS[model].final_revision}.h5"


def heads_on_synthetic():
    """Whether the heads' eval pairs come from the synthetic language (entropy rate known)."""
    corpus = CONFIG["corpora"][HEAD_SET_CORPORA["eval"]]
    return bool(BOTTLENECK["models"]) and corpus["type"] == "synthetic"


def bottleneck_outputs():
    outputs = []
    if BOTTLENECK["models"]:
        outputs += [
            "results/{run}/tables/bottleneck_heads.csv",
            "results/{run}/tables/bottleneck_lr_search.csv",
        ]
        outputs += expand(
            "results/{run}/figures/{fig}.{ext}",
            run="{run}",
            fig=("fig6_rank_heads", "fig8_werror_loss"),
            ext=("png", "pdf"),
        )
    if CONFIG["ngrams"]["ground_truth"]["sample_sizes"]:
        outputs += expand(
            "results/{run}/figures/ground_truth_bottleneck.{ext}",
            run="{run}",
            ext=("png", "pdf"),
        )
    return outputs


NGRAMS = CONFIG["ngrams"]
NGRAM_CORPORA = NGRAMS["corpora"]  # empty: no Fig. 7
NGRAM_TOKENIZERS = NGRAMS["tokenizers"] or sorted(
    {m.tokenizer for m in MODELS.values()}
)
check_ngram_config(CONFIG, NGRAM_TOKENIZERS, NGRAM_CORPORA)


def ngram_inputs(wildcards):
    synthetic = CONFIG["corpora"][wildcards.corpus]["type"] == "synthetic"
    toy = CONFIG["tokenizers"][wildcards.tokenizer]["source"] == "toy"
    return dict(
        corpus=sample_inputs(wildcards),
        language=TOY_LANGUAGE if synthetic and toy else [],
    )


def ngram_outputs():
    if not NGRAM_CORPORA:
        return []
    return [
        "results/{run}/tables/ngram_werror.csv",
        "results/{run}/figures/fig7_ngram_werror.png",
        "results/{run}/figures/fig7_ngram_werror.pdf",
    ]
