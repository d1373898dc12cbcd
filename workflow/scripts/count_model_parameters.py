"""Rule count_model_parameters: a model's parameter counts (non-embedding and total), as JSON.

Read from the config of the model's final revision, never from its weights: GPT-NeoX configs
are counted from their shapes (lmsat.scaling.count_parameters), other families by building
the model on the meta device (no memory). Needs only config.json, on disk: the toy hub, a
local directory, or the final checkpoint fetched by rule fetch_checkpoint.
"""

import _lmsat_src  # noqa: F401 (first: this workflow's src/ on sys.path)
import lmsat.offline  # noqa: F401 (first: compute jobs never reach the network)
import logging
import os

from lmsat.io import setup_logging, write_json

KINDS = ("non_embedding", "total")
log = logging.getLogger(__name__)


def count_model_parameters(model) -> dict:
    """{kind: count} of a ModelEntry's final revision, plus where the config came from."""
    from transformers import AutoConfig

    from lmsat.scaling import count_parameters

    revision = model.final_revision
    target, kwargs = model.pretrained_source(revision)
    try:
        config = AutoConfig.from_pretrained(target, trust_remote_code=model.trust_remote_code, **kwargs)
    except (OSError, ValueError) as error:
        raise ValueError(
            f"cannot read the config of model {model.name} ({model.id}) at {revision}: {error}; "
            f"or set {model.key}.n_params in the config"
        ) from error
    if config.model_type == "gpt_neox":
        counts = {kind: count_parameters(config, kind) for kind in KINDS}
    else:
        import torch
        from transformers import AutoModelForCausalLM

        with torch.device("meta"):  # shapes only, no memory
            lm = AutoModelForCausalLM.from_config(config, trust_remote_code=model.trust_remote_code)
        counts = {kind: count_parameters(lm, kind) for kind in KINDS}
    return dict(model=model.name, id=model.id, revision=revision, model_type=config.model_type, **counts)


def main(snakemake):
    setup_logging(snakemake.log[0])
    from lmsat.config import ModelEntry

    model = ModelEntry(**snakemake.params.model)
    os.environ["HF_HUB_OFFLINE"] = "1"  # on disk: never ask the hub
    counts = count_model_parameters(model)
    log.info("%s", counts)
    write_json(snakemake.output[0], counts)


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
