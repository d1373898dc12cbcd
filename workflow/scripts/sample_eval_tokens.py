"""Rule sample_eval_tokens: the eval token sample of one corpus x tokenizer."""

import _lmsat_src  # noqa: F401 (first: this workflow's src/ on sys.path)
import lmsat.runtime.offline  # noqa: F401 (first: compute jobs never reach the network)
import lmsat.runtime.warm_start  # noqa: F401 (then: a local run's warm interpreter takes the job, if it serves it)

from lmsat.checkpoints.loading import load_tokenizer
from lmsat.core.io import setup_logging
from lmsat.core.job_inputs import corpus_at, tokenizer_at
from lmsat.data.corpus import build_sample


def main(snakemake):
    setup_logging(snakemake.log[0])
    params, wildcards = snakemake.params, snakemake.wildcards
    # the specs' planned paths read as this job's inputs (lmsat.core.job_inputs)
    tokenizer = load_tokenizer(tokenizer_at(params.tokenizer, snakemake.input), wildcards.tokenizer)
    build_sample(
        corpus_at(params.corpus, snakemake.input),
        wildcards.corpus,
        tokenizer,
        wildcards.tokenizer,
        params.sample,
        params.seed,
        snakemake.output[0],
    )


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
