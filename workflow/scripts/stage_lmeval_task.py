"""Rule stage_lmeval_task: an lm-eval task's datasets into the staged datasets cache
(staging: reaches the dataset hub). evaluate_checkpoint then loads them offline from there."""

import _lmsat_src  # noqa: F401 (first: this workflow's src/ on sys.path)

import os


def main(snakemake):
    # datasets reads HF_DATASETS_CACHE when imported: set it before anything imports it
    os.environ["HF_DATASETS_CACHE"] = os.path.abspath(snakemake.output.datasets)
    from lmsat.core.io import setup_logging
    from lmsat.planning.staging import stage_lmeval_task

    setup_logging(snakemake.log[0])
    stage_lmeval_task(snakemake.wildcards.task, snakemake.output.datasets, snakemake.output.manifest)


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
