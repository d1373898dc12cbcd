# The input functions and helpers of the rules in metrics.smk, used by them only; it
# includes this file above its rules (`snakemake --lint` flags a file that mixes rules
# and functions). What several stages share: common.smk.


def get_metric_table_inputs(wildcards):
    """Rule tabulate_metric: the metric's per-checkpoint files and the tables it needs."""
    metric = METRICS[METRIC_TABLES[wildcards.table]]
    needs = metric.tables[wildcards.table].needs
    return dict(
        files=metric_files(metric.name),
        **{name: f"results/{RUN}/tables/{name}.csv" for name in needs},
    )


def get_table_options(wildcards):
    """Rule tabulate_metric: the config values the table's build takes (its `options`:
    keyword -> dotted config key, lmsat.products.metrics.Table), e.g. the verdict's alpha, and what
    the plan knows that it takes (its `facts`: each model's head rows, the checkpoints no
    longer on disk)."""
    table = METRICS[METRIC_TABLES[wildcards.table]].tables[wildcards.table]
    options = {}
    for keyword, dotted in table.options.items():
        value = CONFIG
        for key in dotted.split("."):
            value = value[key]
        options[keyword] = value
    facts = dict(
        vocab_sizes={name: entry.vocab_size for name, entry in MODELS.items()},
        gone=GONE,
    )
    return {**options, **{fact: facts[fact] for fact in table.facts}}


def comparison_revisions(model, revision):
    """{"final": the model's final revision, "previous": the revision before `revision` in
    training order, None for the first}: the checkpoints a cache_pairs metric compares with.
    """
    entry = MODELS[model]
    ordered = sorted(entry.revisions, key=entry.step)
    at = ordered.index(revision)
    return dict(final=entry.final_revision, previous=ordered[at - 1] if at else None)


def get_comparison_caches(wildcards):
    """Rule compare_checkpoint_caches: this checkpoint's cache and its references'."""
    cache = "results/{run}/cache/{model}/{revision}.h5"
    references = comparison_revisions(wildcards.model, wildcards.revision)
    return dict(
        cache=cache.format(run=RUN, model=wildcards.model, revision=wildcards.revision),
        **{
            kind: cache.format(run=RUN, model=wildcards.model, revision=revision)
            for kind, revision in references.items()
            if revision is not None
        },
    )


def get_comparison_references(wildcards):
    """Rule compare_checkpoint_caches: {kind: [revision, step] or None} of its references."""
    entry = MODELS[wildcards.model]
    return {
        kind: None if revision is None else [revision, entry.step(revision)]
        for kind, revision in comparison_revisions(
            wildcards.model, wildcards.revision
        ).items()
    }
