"""Rule stage_tokenizer: a hub tokenizer into a local directory (staging: reaches the hub).

The only job that downloads it; every other job loads the saved copy offline
(lmsat.checkpoints.loading.load_tokenizer with the spec's `staged` directory).
"""

import _lmsat_src  # noqa: F401 (first: this workflow's src/ on sys.path)

from lmsat.checkpoints.fetch import job_retry_policy
from lmsat.core.io import setup_logging
from lmsat.planning.staging import stage_tokenizer


def main(snakemake):
    setup_logging(snakemake.log[0])
    params = snakemake.params
    stage_tokenizer(params.spec, snakemake.wildcards.tokenizer, snakemake.output[0], policy=job_retry_policy(snakemake))


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
