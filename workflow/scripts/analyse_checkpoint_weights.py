"""Rule analyse_checkpoint_weights: LM-head spectrum and low-rank attention of one checkpoint.

Both files come from one model load: loading (torch/transformers import and weights)
dominates the cost of these CPU analyses, so one job per checkpoint writes both.
"""

import logging

from lmsat.io import setup_logging

log = logging.getLogger(__name__)


def main(snakemake):
    setup_logging(snakemake.log[0])
    import torch

    from lmsat.config import ModelEntry
    from lmsat.degeneration import attention_arrays, head_spectrum, write_attention, write_spectrum
    from lmsat.models import load_causal_lm, load_tokenizer

    params, wildcards = snakemake.params, snakemake.wildcards
    torch.set_num_threads(params.threads)
    entry = ModelEntry(**params.model)
    model = load_causal_lm(entry, wildcards.revision, dtype=params.dtype, device="cpu")
    tokenizer_size = None
    if params.drop_padding_rows:
        tokenizer_size = len(load_tokenizer(params.tokenizer, entry.tokenizer))
    spectrum = head_spectrum(model, tokenizer_size, params.drop_padding_rows, entry.tokenizer)
    log.info(
        "%s@%s: head %d x %d, %d rows in the SVD, sha256 %s",
        entry.name, wildcards.revision, spectrum["n_rows"], spectrum["hidden_size"],
        spectrum["n_valid_rows"], spectrum["head_sha256"][:12],
    )
    write_spectrum(snakemake.output.spectra, spectrum, params.record, tokenizer_size)
    arrays, shape = attention_arrays(model)
    write_attention(snakemake.output.attention, arrays, shape, params.record, spectrum["hidden_size"])
    log.info("%s@%s: attention of %d layers x %d heads", entry.name, wildcards.revision, shape["n_layers"], shape["n_heads"])


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
