# The input functions and helpers of the rules in scaling.smk, used by them only; it
# includes this file above its rules (`snakemake --lint` flags a file that mixes rules
# and functions). What several stages share: common.smk.


# the models of the fit: every model unless scaling.models names some
SCALED_MODELS = SCALING["models"] or list(MODELS)


def parameter_counts():
    """Counts of the Fig. 1b models whose n_params the config leaves at 0 (read from their
    config)."""
    return [
        f"results/{RUN}/params/{name}.json"
        for name in SCALED_MODELS
        if MODELS[name].n_params == 0
    ]
