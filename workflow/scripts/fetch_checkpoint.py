"""Rule fetch_checkpoint: one revision of a hub model into a hub cache of its own.

Transient hub faults are retried with backoff inside the job (lmsat.checkpoints.fetch); permanent ones
fail the job at once with a message naming model and revision. A fetch that would leave
less than fetch.min_free_mb free first waits for other jobs to free space. The token, if
any, is read from HF_TOKEN by huggingface_hub and never logged.
"""

import _lmsat_src  # noqa: F401 (first: this workflow's src/ on sys.path)

from lmsat.checkpoints.fetch import fetch_checkpoint, job_retry_policy
from lmsat.core.io import setup_logging
from lmsat.core.plan import ModelEntry


def main(snakemake):
    setup_logging(snakemake.log[0])
    # Operational settings: read from the config, not params, so that retuning them after a
    # hub outage reruns nothing.
    fetch = snakemake.config["fetch"]
    fetch_checkpoint(
        ModelEntry(**snakemake.params.model), snakemake.wildcards.revision, snakemake.output[0],
        policy=job_retry_policy(snakemake), min_free_mb=fetch["min_free_mb"], disk_wait_s=fetch["disk_wait_minutes"] * 60,
    )


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
