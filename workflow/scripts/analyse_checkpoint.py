"""Rule analyse_checkpoint: everything that needs one checkpoint's weights, from one load.

The LM-head spectrum and the low-rank attention metrics come first (seconds), then the
forward of the eval sample into the hidden-state cache (resumable by chunks, so a killed
job loses at most one chunk of it). Importing torch + transformers and loading the model
cost more than either part on small models, so one job per checkpoint does both.
"""

import _lmsat_src  # noqa: F401 (first: this workflow's src/ on sys.path)
import lmsat.offline  # noqa: F401 (first: compute jobs never reach the network)
import logging

import torch

from lmsat.cache import ExtractionSettings, extract_to_cache
from lmsat.config import ModelEntry
from lmsat.corpus import read_sample
from lmsat.degeneration import attention_arrays, head_spectrum, write_attention, write_spectrum
from lmsat.io import setup_logging
from lmsat.models import check_sequence_length, job_device, load_causal_lm, load_tokenizer

log = logging.getLogger(__name__)


def analyse_weights(lm, entry: ModelEntry, revision: str, params, output) -> None:
    """Head spectrum and attention metrics of `lm` (float32 on the CPU), written to `output`."""
    tokenizer_size = None
    if params.drop_padding_rows:
        tokenizer_size = len(load_tokenizer(params.tokenizer, entry.tokenizer))
    spectrum = head_spectrum(lm, tokenizer_size, params.drop_padding_rows, entry.tokenizer)
    log.info(
        "%s@%s: head %d x %d, %d rows in the SVD, sha256 %s",
        entry.name, revision, spectrum["n_rows"], spectrum["hidden_size"],
        spectrum["n_valid_rows"], spectrum["head_sha256"][:12],
    )
    write_spectrum(output.spectra, spectrum, params.record, tokenizer_size)
    arrays, shape = attention_arrays(lm)
    write_attention(output.attention, arrays, shape, params.record, spectrum["hidden_size"])
    log.info("%s@%s: attention of %d layers x %d heads", entry.name, revision, shape["n_layers"], shape["n_heads"])


def main(snakemake):
    setup_logging(snakemake.log[0])
    params, revision = snakemake.params, snakemake.wildcards.revision
    torch.set_num_threads(snakemake.threads)
    entry = ModelEntry(**params.model)
    tokens, sample = read_sample(snakemake.input.sample)  # checked before the model loads
    settings = ExtractionSettings(
        **{k: params.extraction[k] for k in ("batch_size", "chunk_sequences", "dtype", "storage_dtype", "layer_sample")},
        seed=params.seed,
    )
    device = job_device(snakemake)
    # float32 represents any stored dtype exactly, so the weight analyses see the true
    # weights whatever dtype the forward runs in; the cast below equals loading in it.
    lm = load_causal_lm(entry, revision, dtype="float32", device="cpu")
    check_sequence_length(lm, entry, revision, tokens.shape[1])  # before any work on it
    analyse_weights(lm, entry, revision, params, snakemake.output)
    lm = lm.to(device=device, dtype=getattr(torch, settings.dtype))
    identity = dict(model=entry.name, revision=revision, model_id=entry.id, sample_sha256=sample["sha256"])
    extract_to_cache(lm, tokens, snakemake.output.cache, identity=identity, settings=settings, device=device)


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
