# lmsat: language-model saturation and the softmax bottleneck across training checkpoints.
# This file only wires the stages together; workflow/rules/common.smk holds the Python.
from snakemake.utils import min_version

min_version("9.0")


configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/toy.smk"
include: "workflow/rules/fetch.smk"
include: "workflow/rules/staging.smk"
include: "workflow/rules/samples.smk"
include: "workflow/rules/cache.smk"
include: "workflow/rules/metrics.smk"
include: "workflow/rules/evaluation.smk"
include: "workflow/rules/scaling.smk"
include: "workflow/rules/ngrams.smk"
include: "workflow/rules/bottleneck.smk"
include: "workflow/rules/report.smk"


rule all:
    input:
        final_outputs(),
