"""Rule extract_hidden_states: forward the eval sample through one checkpoint, cache it."""

import torch

from lmsat.cache import ExtractionSettings, extract_to_cache
from lmsat.config import ModelEntry
from lmsat.corpus import read_sample
from lmsat.io import setup_logging
from lmsat.models import load_causal_lm, resolve_device


def main(snakemake):
    setup_logging(snakemake.log[0])
    params, revision = snakemake.params, snakemake.wildcards.revision
    torch.set_num_threads(params.threads)
    model = ModelEntry(**params.model)
    tokens, sample = read_sample(snakemake.input.sample)
    settings = ExtractionSettings(**{k: params.extraction[k] for k in ("batch_size", "chunk_sequences", "dtype", "storage_dtype", "layer_sample")}, seed=params.seed)
    device = resolve_device(params.device)
    lm = load_causal_lm(model, revision, dtype=settings.dtype, device=device)
    identity = dict(model=model.name, revision=revision, model_id=model.id, sample_sha256=sample["sha256"])
    extract_to_cache(lm, tokens, snakemake.output[0], identity=identity, settings=settings, device=device)


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
