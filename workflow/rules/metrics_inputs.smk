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
    keyword -> dotted config key, lmsat.metrics.Table), e.g. the verdict's alpha."""
    table = METRICS[METRIC_TABLES[wildcards.table]].tables[wildcards.table]
    options = {}
    for keyword, dotted in table.options.items():
        value = CONFIG
        for key in dotted.split("."):
            value = value[key]
        options[keyword] = value
    return options
