"""Rule compare_checkpoint_caches: one registered cache_pairs metric of one checkpoint (its
cache beside its final and previous checkpoints' caches), as JSON."""

import _lmsat_src  # noqa: F401 (first: this workflow's src/ on sys.path)
import lmsat.runtime.offline  # noqa: F401 (first: compute jobs never reach the network)
import lmsat.runtime.warm_start  # noqa: F401 (then: a local run's warm interpreter takes the job, if it serves it)

from contextlib import ExitStack

from lmsat.core.io import setup_logging, source_sha256, write_json
from lmsat.data.corpus import read_sample
from lmsat.data.hidden_states import open_cache
from lmsat.products.metrics import METRICS


def main(snakemake):
    setup_logging(snakemake.log[0])
    wildcards, params = snakemake.wildcards, snakemake.params
    metric = METRICS[wildcards.metric]  # reads="cache_pairs"
    _, sample = read_sample(snakemake.input.sample)

    def expect(revision):
        return dict(model=wildcards.model, revision=revision, sample_sha256=sample["sha256"])

    with ExitStack() as stack:
        cache = stack.enter_context(open_cache(snakemake.input.cache, expect=expect(wildcards.revision)))
        references = {}
        for kind, reference in params.references.items():
            if reference is None:
                references[kind] = None
                continue
            revision, step = reference
            path = snakemake.input[kind]
            other = cache if revision == wildcards.revision else stack.enter_context(open_cache(path, expect=expect(revision)))
            references[kind] = (revision, step, other)
        values = metric.compute(cache, references)
    record = {**params.record, "metric": metric.name, **values, "lmsat_source": source_sha256()}
    write_json(snakemake.output[0], record)


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
