"""Rule count_model_parameters: a model's parameter counts (non-embedding and total), as JSON.

Read from the config of the model's final revision, never from its weights: GPT-NeoX configs
are counted from their shapes (lmsat.saturation.scaling.count_model_parameters), other families by building
the model on the meta device (no memory). Needs only config.json, on disk: the toy hub, a
local directory, or the final checkpoint fetched by rule fetch_checkpoint.
"""

import _lmsat_src  # noqa: F401 (first: this workflow's src/ on sys.path)
import lmsat.runtime.offline  # noqa: F401 (first: compute jobs never reach the network)
import lmsat.runtime.warm_start  # noqa: F401 (then: a local run's warm interpreter takes the job, if it serves it)

import logging
import os

from lmsat.core.io import setup_logging, write_json
from lmsat.saturation.scaling import count_model_parameters

log = logging.getLogger(__name__)


def main(snakemake):
    setup_logging(snakemake.log[0])
    from lmsat.core.job_inputs import model_at
    from lmsat.core.plan import ModelEntry

    planned = ModelEntry(**snakemake.params.model)
    model = model_at(planned, planned.final_revision, snakemake.input)  # its config.json as this job's input
    os.environ["HF_HUB_OFFLINE"] = "1"  # on disk: never ask the hub
    counts = count_model_parameters(model)
    log.info("%s", counts)
    write_json(snakemake.output[0], counts)


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
