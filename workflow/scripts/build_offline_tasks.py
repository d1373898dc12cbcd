"""Rule build_offline_tasks: lm-eval tasks over the synthetic eval corpus (no network).

Writes synthetic_ppl (rolling perplexity of whole documents) and synthetic_mc (last word
among frequency-drawn distractors, after as many words as the evaluated toy models' context
holds) as task YAMLs + JSONL data into one directory, which the evaluation jobs pass to
lm-eval as include_path.
"""

import _lmsat_src  # noqa: F401 (first: this workflow's src/ on sys.path)
import lmsat.runtime.offline  # noqa: F401 (first: compute jobs never reach the network)
import lmsat.runtime.warm_start  # noqa: F401 (then: a local run's warm interpreter takes the job, if it serves it)

import logging
from pathlib import Path

from lmsat.core.io import setup_logging
from lmsat.saturation.downstream import write_offline_tasks

log = logging.getLogger(__name__)


def main(snakemake):
    setup_logging(snakemake.log[0])
    params = snakemake.params
    docs = Path(snakemake.input[0]).read_text(encoding="utf-8").splitlines()
    out_dir = Path(snakemake.output[0]).parent
    names = write_offline_tasks(out_dir, docs, n_docs=params.n_docs, n_choices=params.n_choices, seed=params.seed,
                                context_words=params.context_words)
    log.info("wrote tasks %s (%d documents each; synthetic_mc's contexts: %s) into %s", names, params.n_docs,
             f"the last {params.context_words} words, the models' context" if params.context_words else "whole",
             out_dir)


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
