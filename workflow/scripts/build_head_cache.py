"""Rule build_head_cache: train/eval (hidden, next token) pairs of a model's final checkpoint.

Draws the token sets (disjoint, away from the eval sample), forwards them once, writes the
shards and a manifest with the model's own head evaluated on the eval pairs (Fig. 6's
reference row).
"""

import _lmsat_src  # noqa: F401 (first: this workflow's src/ on sys.path)
import lmsat.runtime.offline  # noqa: F401 (first: compute jobs never reach the network)
import lmsat.runtime.warm_start  # noqa: F401 (then: a local run's warm interpreter takes the job, if it serves it)

import logging

import h5py
import numpy as np
import torch

from lmsat.bottleneck.representation_cache import (
    CacheSettings,
    build_head_cache,
    check_sample_alignment,
    draw_token_sets,
    full_head_reference,
)
from lmsat.checkpoints.loading import check_sequence_length, check_token_ids, job_device, load_causal_lm, load_tokenizer
from lmsat.core.io import library_versions, setup_logging, write_json
from lmsat.core.job_inputs import corpus_at, model_at, tokenizer_at
from lmsat.core.plan import ModelEntry
from lmsat.data.corpus import CorpusError, build_token_pool, iter_documents, read_sample

log = logging.getLogger(__name__)


def as_list(paths):
    return [paths] if isinstance(paths, str) else list(paths)


def draw_sets(params, tokenizer, sample_path, inputs):
    """The train and eval windows, from the pools of their corpora, away from the eval sample."""
    seq_len, corpora = params.seq_len, params.corpora
    sizes = {"train": params.train_tokens, "eval": params.eval_tokens}
    pools, excluded = {}, {}
    for corpus in dict.fromkeys(corpora.values()):
        wanted = sum(sizes[name] for name, c in corpora.items() if c == corpus)
        n_pool = params.pool_factor * wanted
        sample = None
        if corpus == params.sample_corpus and sample_path:
            tokens, _ = read_sample(sample_path)
            with h5py.File(sample_path, "r") as f:
                starts = f["starts"][...]
            sample = (tokens, starts)
            n_pool += tokens.size  # its windows are excluded, so read that much more
        spec = corpus_at(params.corpus_specs[corpus], inputs)  # its files as this job's inputs
        pool = build_token_pool(iter_documents(spec, corpus), tokenizer, n_pool, spec["max_documents"], corpus=corpus)
        if pool.max() >= len(tokenizer):
            raise CorpusError(f"tokenizer produced id {pool.max()} >= its size {len(tokenizer)}")
        if sample is not None:
            check_sample_alignment(pool, *sample, where=f"corpus {corpus}")
            excluded[corpus] = [(int(s), sample[0].shape[1]) for s in sample[1]]
        pools[corpus] = pool
        log.info("corpus %s: pool of %d tokens, %d eval-sample windows kept out", corpus, len(pool), len(excluded.get(corpus, [])))
    requests = [(name, corpora[name], sizes[name]) for name in ("eval", "train")]
    return draw_token_sets(requests, pools, seq_len, params.seed, excluded)


def main(snakemake):
    setup_logging(snakemake.log[0])
    params, output = snakemake.params, snakemake.output
    torch.set_num_threads(snakemake.threads)
    entry = ModelEntry(**params.model)
    revision = entry.final_revision
    # the specs' planned paths read as this job's inputs (lmsat.core.job_inputs)
    tokenizer = load_tokenizer(tokenizer_at(params.tokenizer, snakemake.input), entry.tokenizer)
    sets = draw_sets(params, tokenizer, snakemake.input.sample, snakemake.input)
    device = job_device(snakemake)
    lm = load_causal_lm(model_at(entry, revision, snakemake.input), revision, dtype=params.dtype, device=device)
    check_sequence_length(lm, entry, revision, params.seq_len)  # windows of sample.seq_len tokens
    last_id = np.array([len(tokenizer) - 1])  # the pools hold ids below len(tokenizer) (draw_sets)
    check_token_ids(lm, entry, revision, last_id, f"tokenizer {entry.tokenizer} ({len(tokenizer)} entries)")
    identity = dict(model=entry.name, revision=revision, model_id=entry.id, seed=params.seed)
    settings = CacheSettings(batch_size=params.batch_size, dtype=params.dtype, storage_dtype=params.storage_dtype)
    shards = {"train": as_list(output.train), "eval": as_list(output.eval)}
    summary = build_head_cache(lm, sets, shards, identity=identity, settings=settings, device=device)
    reference = full_head_reference(lm, shards["eval"], chunk=params.chunk_tokens)
    log.info("own head on the eval pairs: loss %.4f (sem %.4f), accuracy %.4f", reference["eval_loss"],
             reference["loss_sem"], reference["eval_acc"])
    head = lm.get_output_embeddings().weight
    write_json(output.manifest, dict(
        model=entry.name, revision=revision, model_id=entry.id, hidden_size=int(head.shape[1]),
        vocab_size=int(head.shape[0]), seq_len=params.seq_len, corpora=params.corpora, sets=summary,
        shards=shards, reference=reference, storage_dtype=params.storage_dtype, versions=library_versions(),
    ))


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
