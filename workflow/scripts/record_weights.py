"""Rule record_weights: the fingerprint of a checkpoint the pipeline did not download (a
local one, or a hub cache staged by hand), which every job that reads it depends on."""

import _lmsat_src  # noqa: F401 (first: this workflow's src/ on sys.path)
import lmsat.runtime.offline  # noqa: F401 (first: compute jobs never reach the network)
import lmsat.runtime.warm_start  # noqa: F401 (then: a local run's warm interpreter takes the job, if it serves it)

import logging
from pathlib import Path

from lmsat.core.fingerprint import changed_files, weights_fingerprint
from lmsat.core.io import setup_logging, write_json

log = logging.getLogger(__name__)


def main(snakemake):
    setup_logging(snakemake.log[0])
    params, wildcards = snakemake.params, snakemake.wildcards
    planned = dict(params.fingerprint)
    if Path(params.directory).exists():  # else removed by hand after use: its record stands
        changed = changed_files(planned, weights_fingerprint(params.directory))
        if changed:
            raise ValueError(
                f"{params.directory} (model {wildcards.model}, revision {wildcards.revision}) changed while "
                f"snakemake was planning ({', '.join(changed[:3])}). Fix: rerun once it is no longer written to"
            )
    write_json(
        snakemake.output[0],
        dict(model=wildcards.model, revision=wildcards.revision, directory=params.directory, fingerprint=planned),
    )
    log.info("%s at %s: %d files recorded from %s", wildcards.model, wildcards.revision, len(planned), params.directory)


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
