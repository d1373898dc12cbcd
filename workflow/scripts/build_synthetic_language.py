"""Rule build_synthetic_language: the synthetic language, its corpora and its tokenizer."""

import _lmsat_src  # noqa: F401 (first: this workflow's src/ on sys.path)
import lmsat.runtime.offline  # noqa: F401 (first: compute jobs never reach the network)
import lmsat.runtime.warm_start  # noqa: F401 (then: a local run's warm interpreter takes the job, if it serves it)

from lmsat.core.io import setup_logging, write_json
from lmsat.toy import language as synthetic
from lmsat.toy import suite as toy


def main(snakemake):
    setup_logging(snakemake.log[0])
    params, output = snakemake.params, snakemake.output
    language = synthetic.build_language(synthetic.LanguageSpec(**params.language))
    synthetic.save_language(language, output.language)
    for split, n_tokens, seed in (("train", params.train_tokens, params.seed), ("eval", params.eval_tokens, params.seed + 1)):
        stats = synthetic.write_corpus(language, output[split], n_tokens, params.doc_tokens, seed=seed)
        write_json(output[f"{split}_stats"], {**stats, "entropy_rate": language.entropy_rate})
    toy.build_tokenizer(language.words, output.tokenizer)


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
