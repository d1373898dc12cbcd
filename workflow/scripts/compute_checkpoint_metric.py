"""Rule compute_checkpoint_metric: one registered cache metric of one checkpoint, as JSON."""

import _lmsat_src  # noqa: F401 (first: this workflow's src/ on sys.path)
import lmsat.runtime.offline  # noqa: F401 (first: compute jobs never reach the network)
import lmsat.runtime.warm_start  # noqa: F401 (then: a local run's warm interpreter takes the job, if it serves it)

from lmsat.core.io import setup_logging, source_sha256, write_json
from lmsat.data.corpus import read_sample
from lmsat.data.hidden_states import open_cache
from lmsat.products.metrics import METRICS


def main(snakemake):
    setup_logging(snakemake.log[0])
    wildcards = snakemake.wildcards
    metric = METRICS[wildcards.metric]  # reads="cache" (weights metrics: analyse_checkpoint)
    _, sample = read_sample(snakemake.input.sample)
    expect = dict(model=wildcards.model, revision=wildcards.revision, sample_sha256=sample["sha256"])
    with open_cache(snakemake.input.cache, expect=expect) as cache:
        values = metric.compute(cache)
    record = {**snakemake.params.record, "metric": metric.name, **values, "lmsat_source": source_sha256()}
    write_json(snakemake.output[0], record)


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
