# The input functions and helpers of the rules in toy.smk, used by them only; it
# includes this file above its rules (`snakemake --lint` flags a file that mixes rules
# and functions). What several stages share: common.smk.


def get_trained_model_params(wildcards):
    """The toy model's entry as it is trained (PLAN.trained): every revision of its
    schedule, whichever ones a slice selects, so a selection never retrains it."""
    return entry_param(PLAN.trained[wildcards.model])
