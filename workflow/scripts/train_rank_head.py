"""Rule train_rank_head: one rank-r head W = A B of one model at one peak learning rate.

Trained on the cached pairs with Pythia's recipe (`lmsat.bottleneck.rank_heads.train_head`; params.settings
are HeadTrainConfig fields, `lmsat.bottleneck.rank_grid.head_train_fields`), resumable:
the state is saved under params.state_dir while it runs and resumed after a kill, then
removed once the result is written.
"""

import _lmsat_src  # noqa: F401 (first: this workflow's src/ on sys.path)
import lmsat.runtime.offline  # noqa: F401 (first: compute jobs never reach the network)
import lmsat.runtime.warm_start  # noqa: F401 (then: a local run's warm interpreter takes the job, if it serves it)

import logging
import time
from dataclasses import asdict

import numpy as np
import torch

from lmsat.bottleneck.rank_heads import HeadTrainConfig, stale_states, state_file, train_head
from lmsat.bottleneck.representation_cache import ShardedRepresentations
from lmsat.checkpoints.loading import job_device
from lmsat.core.io import check_identity, read_json, setup_logging, write_json

log = logging.getLogger(__name__)


def as_list(paths):
    return [paths] if isinstance(paths, str) else list(paths)


def main(snakemake):
    setup_logging(snakemake.log[0])
    params, wildcards = snakemake.params, snakemake.wildcards
    torch.set_num_threads(snakemake.threads)
    manifest = read_json(snakemake.input.manifest)
    check_identity(snakemake.input.manifest, manifest, dict(model=wildcards.model))  # not another model's cache
    d, vocab_size, rank = manifest["hidden_size"], manifest["vocab_size"], int(wildcards.rank)
    cfg = HeadTrainConfig(**params.settings, peak_lr=params.lr, seed=params.seed, device=job_device(snakemake))
    state = state_file(params.state_dir, d, vocab_size, rank, cfg)
    for stale in stale_states(state):
        log.warning("removing %s, the state of a run with another config", stale)
        stale.unlink()
    if state.exists():
        log.info("resuming from %s", state)
    clock = time.perf_counter()
    with (
        ShardedRepresentations(as_list(snakemake.input.train), seq_len=cfg.seq_len) as train,
        ShardedRepresentations(as_list(snakemake.input.eval)) as evaluation,
    ):
        result = train_head(train, evaluation, d, vocab_size, rank, cfg, state_path=state)
    history = result["history"]
    log.info("%s r=%d lr=%g: eval loss %.4f, accuracy %.4f after %d steps (%.0f s)", wildcards.model, rank,
             params.lr, result["eval_loss"], result["eval_acc"], result["step"], time.perf_counter() - clock)
    write_json(snakemake.output[0], dict(
        model=wildcards.model, revision=manifest["revision"], rank=rank, peak_lr=params.lr, hidden_size=d,
        vocab_size=vocab_size, eval_loss=result["eval_loss"], eval_acc=result["eval_acc"],
        train_loss=history[-1]["train_loss"] if history else float(np.nan), steps=result["step"],
        tokens_per_step=cfg.batch_size * cfg.seq_len, train_pairs=manifest["sets"]["train"]["pairs"], history=history,
        config={k: v for k, v in asdict(cfg).items() if k != "device"},
    ))
    state.unlink(missing_ok=True)


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
