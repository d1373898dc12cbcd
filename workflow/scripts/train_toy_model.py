"""Rule train_toy_model: train one toy GPT-NeoX and publish its checkpoints as revisions."""

import _lmsat_src  # noqa: F401 (first: this workflow's src/ on sys.path)
import lmsat.runtime.offline  # noqa: F401 (first: compute jobs never reach the network)
import lmsat.runtime.warm_start  # noqa: F401 (then: a local run's warm interpreter takes the job, if it serves it)

from pathlib import Path

import torch
from transformers import AutoTokenizer

from lmsat.checkpoints import local_hub
from lmsat.core.fingerprint import weights_fingerprint
from lmsat.core.io import setup_logging, write_json
from lmsat.core.job_inputs import UndeclaredInput, local_copy
from lmsat.core.plan import ModelEntry
from lmsat.toy import suite as toy


def main(snakemake):
    setup_logging(snakemake.log[0])
    params = snakemake.params
    torch.set_num_threads(snakemake.threads)
    model = ModelEntry(**params.model)
    cfg = params.toy
    tokenizer = AutoTokenizer.from_pretrained(snakemake.input.tokenizer)  # the toy tokenizer's directory
    train_tokens = toy.tokenize_corpus(tokenizer, snakemake.input.train)
    model_spec = toy.ToyModelSpec(
        hidden_size=model.hidden_size, num_layers=cfg["num_layers"], seq_len=cfg["seq_len"], vocab_size=len(tokenizer)
    )
    train_spec = toy.TrainSpec(
        max_steps=cfg["max_steps"], batch_size=cfg["batch_size"], lr=cfg["learning_rate"] or None, seed=params.seed
    )
    steps = dict(zip(model.steps, model.revisions))
    # the declared output is the model's repository inside the hub cache that readers load from
    # (where Snakemake wants it: itself, or its local copy in a storage run, lmsat.core.job_inputs)
    hub_cache = str(Path(snakemake.output.repository).parent)
    planned = str(local_hub.repo_dir(model.cache_dir(model.final_revision), model.id))
    try:
        local_copy(planned, [snakemake.output.repository])
    except UndeclaredInput:
        raise ValueError(f"output {snakemake.output.repository} is not the toy hub's repository {planned}") from None

    def publish(step, lm):
        local_hub.publish_revision(lm, tokenizer, hub_cache, model.id, steps[step])

    history = toy.train_toy_model(train_tokens, model_spec, train_spec, sorted(steps), publish)
    # what it published, checked at every plan (common.smk: check_toy_hub): files replaced
    # after training stop the plan instead of being tabulated as this model
    published = weights_fingerprint(snakemake.output.repository)
    write_json(
        snakemake.output.manifest,
        dict(model=model.name, id=model.id, revisions=list(model.revisions), steps=list(model.steps), history=history,
             published=published),
    )


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
