"""Rule fetch_checkpoint: one revision of a hub model into a hub cache of its own.

Transient hub faults are retried with backoff inside the job (lmsat.fetch); permanent ones
fail the job at once with a message naming model and revision. A fetch that would leave
less than fetch.min_free_mb free first waits for other jobs to free space. The token, if
any, is read from HF_TOKEN by huggingface_hub and never logged.
"""

import _lmsat_src  # noqa: F401 (first: this workflow's src/ on sys.path)

from lmsat.config import ModelEntry
from lmsat.fetch import RetryPolicy, fetch_checkpoint
from lmsat.io import setup_logging


def main(snakemake):
    setup_logging(snakemake.log[0])
    params = snakemake.params
    fetch_checkpoint(
        ModelEntry(**params.model), snakemake.wildcards.revision, snakemake.output[0],
        policy=RetryPolicy(**params.policy), min_free_mb=params.min_free_mb, disk_wait_s=params.disk_wait_s,
    )


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
