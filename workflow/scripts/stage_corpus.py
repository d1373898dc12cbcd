"""Rule stage_corpus: the prefix of a hub dataset corpus that its jobs read, as JSON lines
(staging: reaches the dataset server). Consumers read it back offline, the same documents
in the same order (lmsat.planning.staging)."""

import _lmsat_src  # noqa: F401 (first: this workflow's src/ on sys.path)

from lmsat.checkpoints.fetch import job_retry_policy
from lmsat.checkpoints.loading import load_tokenizer
from lmsat.core.io import setup_logging
from lmsat.planning.staging import stage_corpus


def main(snakemake):
    setup_logging(snakemake.log[0])
    params = snakemake.params
    tokenizers = {name: load_tokenizer(spec, name) for name, spec in params.tokenizers.items()}
    stage_corpus(params.spec, snakemake.wildcards.corpus, params.consumers, tokenizers, snakemake.output[0],
                 policy=job_retry_policy(snakemake))


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
