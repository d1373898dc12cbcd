# The input functions and helpers of the rules in bottleneck.smk, used by them only; it
# includes this file above its rules (`snakemake --lint` flags a file that mixes rules
# and functions). What several stages share: common.smk.


HEAD_LRS = learning_rates(BOTTLENECK)  # path label -> peak learning rate
# train / eval -> the shard numbers of the head cache of that set
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


def head_shards(name, model="{model}"):
    """The head cache's shard files of set `name` (train or eval)."""
    return [
        f"results/{RUN}/bottleneck/cache/{model}/{name}_{shard:04d}.h5"
        for shard in HEAD_SHARDS[name]
    ]


def get_head_cache_inputs(wildcards):
    """The final checkpoint, the train and eval corpora and the tokenizer; the eval sample
    too when a set's corpus is the sample's (its windows are kept out of the sets)."""
    corpora = set(HEAD_SET_CORPORA.values())
    return dict(
        weights=get_final_checkpoint_weights(wildcards),
        corpora=[f for c in sorted(corpora) for f in corpus_files(c)],
        tokenizer=tokenizer_inputs(MODELS[wildcards.model].tokenizer),
        sample=(get_sample(wildcards) if CONFIG["sample"]["corpus"] in corpora else []),
    )


def head_runs(model):
    """The records of `model`'s heads, one per (rank, peak lr) (rule train_rank_head)."""
    ranks = head_ranks(BOTTLENECK, MODELS[model].hidden_size)
    return [
        f"results/{RUN}/bottleneck/runs/{model}/r{rank}/lr{lr}.json"
        for rank in ranks
        for lr in HEAD_LRS
    ]


def final_spectrum(model):
    """The LM-head spectrum of `model`'s final checkpoint (analyse_checkpoint): Fig. 8."""
    return f"results/{RUN}/spectra/{model}/{MODELS[model].final_revision}.h5"
