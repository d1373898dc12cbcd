# The input functions and helpers of the rules in metrics.smk, used by them only; it
# includes this file above its rules (`snakemake --lint` flags a file that mixes rules
# and functions). What several stages share: common.smk.


def get_metric_table_inputs(wildcards):
    """Rule tabulate_metric: the metric's per-checkpoint files, the tables it needs, and the
    files of the other planned metrics it reads (its files_of, as input files_of_<metric>).
    """
    metric = METRICS[METRIC_TABLES[wildcards.table]]
    table = metric.tables[wildcards.table]
    return dict(
        files=metric_files(metric.name),
        **{name: f"results/{RUN}/tables/{name}.csv" for name in table.needs},
        **{
            f"files_of_{other}": metric_files(other)
            for other in table.files_of
            if other in PLANNED_METRICS
        },
    )


def get_table_options(wildcards):
    """Rule tabulate_metric: the config values the table's build takes (its `options`:
    keyword -> dotted config key, lmsat.products.metrics.Table), e.g. the verdict's alpha, and what
    the plan knows that it takes (its `facts`: each model's head rows, the checkpoints no
    longer on disk, the steps per epoch of a local run's training data)."""
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
        sizes={name: entry.size[0] for name, entry in MODELS.items()},
        steps_per_epoch=PLAN.steps_per_epoch,
    )
    return {**options, **{fact: facts[fact] for fact in table.facts}}


@functools.cache
def run_order(model):
    """([revision] of run_checkpoints(model), {revision: its index}, {planned revision}), once
    per model for the plan: ordering a model's checkpoints in every comparison job's input
    function was 4% of the Pythia plan's dry run."""
    ordered = [name for name, _ in run_checkpoints(model)]
    return (
        ordered,
        {name: at for at, name in enumerate(ordered)},
        set(MODELS[model].revisions),
    )


def comparison_revisions(metric, model, revision):
    """{"final": the run's final revision (run_final: the one the loss table and the verdict
    name, though it may have left the disk), "previous": the revision before `revision` in the
    run's training order, None for the first}: the checkpoints a cache_pairs metric compares
    with, each through its hidden-state cache. A reference that left the disk is read from
    its cache, kept under results/; once that is gone too, a record made against it is kept
    (its job has nothing left to do: an existing output with a missing input is not remade)
    and a new one is made without that reference (None), never against another checkpoint
    under its name."""
    ordered, position, planned = run_order(model)
    at = position[revision]
    wanted = dict(final=ordered[-1], previous=ordered[at - 1] if at else None)
    record = Path(f"results/{RUN}/metrics/{metric}/{model}/{revision}.json")
    for kind, reference in wanted.items():
        if reference is None or reference in planned:
            continue
        if Path(comparison_cache(model, reference)).is_file():
            continue
        made = read_json(record) if record.is_file() else {}
        if made.get(f"{kind}_revision") != reference:
            wanted[kind] = None
    return wanted


def comparison_cache(model, revision):
    return f"results/{RUN}/cache/{model}/{revision}.h5"


def get_comparison_caches(wildcards):
    """Rule compare_checkpoint_caches: this checkpoint's cache and its references'."""
    references = comparison_revisions(
        wildcards.metric, wildcards.model, wildcards.revision
    )
    return dict(
        cache=comparison_cache(wildcards.model, wildcards.revision),
        **{
            kind: comparison_cache(wildcards.model, revision)
            for kind, revision in references.items()
            if revision is not None
        },
    )


def get_comparison_references(wildcards):
    """Rule compare_checkpoint_caches: {kind: [revision, step] or None} of its references."""
    steps = dict(run_checkpoints(wildcards.model))
    return {
        kind: None if revision is None else [revision, steps[revision]]
        for kind, revision in comparison_revisions(
            wildcards.metric, wildcards.model, wildcards.revision
        ).items()
    }
