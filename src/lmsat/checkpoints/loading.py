"""Load checkpoints and tokenizers through the real `from_pretrained(name, revision=...)` path.

Hub models (Pythia, OLMo, ...), local directories and the embedded toy suite all go
through the same call, and never download: a hub checkpoint is read from the hub cache
that rule fetch_checkpoint filled for it (results/weights/{model}/{revision},
lmsat.checkpoints.fetch), the toy suite from its own (results/toy/hub): the one the entry's
`hub_cache` names (the workflow sets it), so
`from_pretrained("lmsat-toy/toy-d16", revision="step64", local_files_only=True)`
resolves its revision exactly as it would for Pythia.
"""

from __future__ import annotations

import logging
import os

from lmsat.core.plan import ModelEntry
from lmsat.errors import ConfigError, FetchError, ModelLoadError, StagingMissing

log = logging.getLogger(__name__)

DTYPES = ("float32", "bfloat16", "float16")


def job_device(snakemake) -> str:
    """The device of a Snakemake job. Config key `device` is operational: read from the
    config, never passed as a param, so moving a run to a GPU reruns nothing."""
    return resolve_device(snakemake.config["device"])


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("config key 'device' is 'cuda' but no GPU is visible; use 'auto' or 'cpu'")
    return device


def _load_hint(model: ModelEntry, error: Exception) -> str:
    text = str(error)
    if "safetensors" in text:
        return " (only safetensors weights are accepted unless allow_pickle: true)"
    if "trust_remote_code" in text or "custom code" in text:
        return f" (its repository runs its own code: set trust_remote_code: true on {model.key} only if you trust it)"
    if "model type" in text or "model_type" in text:
        return " (an architecture this transformers version does not know: upgrade transformers)"
    return ""


def load_causal_lm(model: ModelEntry, revision: str, *, dtype: str = "float32", device: str = "cpu",
                   trainer_options: dict | None = None, report: dict | None = None):
    """The checkpoint `revision` of `model`, in eval mode on `device`.

    dtype "auto" keeps the checkpoint's own dtype (its config's `dtype`: float16 for
    Pythia), so the weights are exactly the stored ones. A non-CPU device gets the weights
    straight from the (memory-mapped) files, with no full copy in host RAM.

    A checkpoint of a format transformers has no class for (hf_olmo: OLMo 1, DataDecide;
    pico_decoder: Pico) is converted at load time to the transformers class of the same maths
    (lmsat.checkpoints.formats), or refused, naming the config.json fields it does not convert.

    Another trainer's saved step (OLMo-core, torchtitan, Megatron, nanoGPT, nanochat, litgpt,
    Lightning: lmsat.checkpoints.trainer_layouts) is converted the same way, its architecture
    read from its run's own file (`trainer_options`: config=, prefix= when the run did not
    record it), its files checked (index, shard lengths) before a weight is read. `report`: a
    dict to receive transformers' load report (lmsat.checkpoints.formats.from_pretrained's).

    Loaded only if its tensors match its config.json exactly (lmsat.checkpoints.validation: readable
    safetensors files, every shard of the index present, one floating dtype, then no
    missing, unexpected or mismatched key in transformers' load report, which goes to the
    job's log), all of them finite, no weight matrix all zero or constant, and its widths and depth equal the suite config's;
    otherwise a ModelLoadError naming model, revision, file or keys, and the fix.
    """
    import torch

    from lmsat.checkpoints import formats
    from lmsat.checkpoints.validation import (
        check_load_report,
        check_stored_dtypes,
        check_weight_files,
        check_weight_values,
        refetch_fix,
        transformers_log_to_job_log,
    )

    if revision not in model.revisions:
        raise ModelLoadError(f"revision {revision!r} is not in the suite of model {model.name} ({model.key})")
    stored = check_weight_files(model, revision)  # before from_pretrained: a truncated file names itself
    kwargs = dict(
        dtype="auto" if dtype == "auto" else getattr(torch, dtype),
        device_map=None if str(device) == "cpu" else str(device),
        use_safetensors=None if model.allow_pickle else True,
        trust_remote_code=model.trust_remote_code,
        output_loading_info=True,
        ignore_mismatched_sizes=True,  # reported by name below, not as a bare RuntimeError
    )
    target, source = model.pretrained_source(revision)
    kwargs.update(source)
    try:
        with transformers_log_to_job_log():  # a format transformers has no class for is converted (lmsat.checkpoints.formats)
            lm, loading_info = formats.from_pretrained(
                target, where=f"model {model.name} ({model.id}) at revision {revision}", fix=refetch_fix(model, revision),
                trainer_options=trainer_options, **kwargs
            )
    except (OSError, ValueError, EnvironmentError) as error:
        raise ModelLoadError(
            f"cannot load model {model.name} ({model.id}) at revision {revision}{_load_hint(model, error)}: {error}"
        ) from error
    if report is not None:  # the caller's copy of the load report
        report.update(loading_info)
    check_load_report(loading_info, model, revision)
    stored = loading_info.get("stored_index", stored)  # another trainer's saved step: its files' index
    check_stored_dtypes(lm, stored, model, revision)
    check_weight_values(lm, stored, model, revision, names=loading_info.get("stored_names"))
    text_config = lm.config.get_text_config()
    for field, actual, stated in (
        ("hidden_size", text_config.hidden_size, model.hidden_size),
        ("num_layers", text_config.num_hidden_layers, model.num_layers or text_config.num_hidden_layers),
    ):
        if actual != stated:
            raise ModelLoadError(
                f"model {model.name} at {revision} has {field} {actual}, "
                f"but config key '{model.key}.{field}' says {stated}; fix the config"
            )
    head, embedding = lm.get_output_embeddings(), lm.get_input_embeddings()
    if model.vocab_size and head is not None and head.weight.shape[0] != model.vocab_size:
        raise ModelLoadError(
            f"model {model.name} at {revision} has an LM head of {head.weight.shape[0]} rows, "
            f"but config key '{model.key}.vocab_size' says {model.vocab_size}; fix the config"
        )
    if model.tied_head is not None and head is not None:
        tied = head.weight.data_ptr() == embedding.weight.data_ptr()
        if tied != model.tied_head:
            raise ModelLoadError(
                f"model {model.name} at {revision} has {'a tied' if tied else 'an untied'} LM head, "
                f"but config key '{model.key}.tied_head' says {model.tied_head}; fix the config"
            )
    return lm.to(device).eval()


def load_saved_step(path, *, config: dict | None = None, prefix: str | None = None, dtype: str = "float32",
                    device: str = "cpu", output_loading_info: bool = False):
    """One saved training step as the transformers model of the same maths, in eval mode on
    `device`: a folder or file of OLMo-core, torchtitan, Megatron (torch_dist), nanoGPT,
    nanochat, litgpt or Lightning (lmsat.checkpoints.trainer_layouts; docs/trainers.md), or a
    save_pretrained folder. Offline; nothing is written; no pickled code runs.

        lm = load_saved_step("out/step-1000")                        # e.g. a LlamaForCausalLM
        lm = load_saved_step("ckpts/epoch=0-step=500.ckpt", prefix="model.")

    The checks of the workflow's jobs (load_causal_lm) hold: its architecture is read from the
    run's own file (`config`: that architecture, in the form its trainer writes, when the run
    did not record it), its files must hold exactly the tensors it implies, whole (a truncated
    or zero-filled shard is refused by name), finite, no weight matrix constant. `dtype`:
    "float32" (default), "bfloat16", "float16" or "auto" (as stored). With
    output_loading_info, (model, load report) (the report's "converted" says "<trainer> as
    <class>")."""
    from pathlib import Path

    from lmsat.checkpoints import formats, trainer_layouts

    path = Path(path)
    options = {k: v for k, v in (("config", config), ("prefix", prefix)) if v is not None}
    if not path.exists():
        raise ModelLoadError(f"{path}: no such file or folder. Fix: give a saved step (docs/trainers.md) or a "
                             "save_pretrained folder")
    if trainer_layouts.is_save_pretrained(path):
        native, steps = formats.load_config(str(path), local_files_only=True), (0,)
    else:  # another trainer's saved step, or a refusal naming the layouts lmsat reads
        step = trainer_layouts.plan_saved_step(path, **options)
        native, steps = step.native, (step.step or 0,)
    text = native.get_text_config()
    entry = ModelEntry(name=path.stem or "checkpoint", suite="own", source="local", id=str(path.parent),
                       hidden_size=text.hidden_size, vocab_size=0, n_params=0, tokenizer="", tokens_per_step=0,
                       revisions=(path.name,), steps=steps, allow_pickle=False, trust_remote_code=False, key=str(path),
                       num_layers=text.num_hidden_layers)
    captured: dict = {}
    lm = load_causal_lm(entry, path.name, dtype=dtype, device=device, trainer_options=options, report=captured)
    return (lm, captured) if output_loading_info else lm


# hf_olmo's is max_sequence_length, Pico's max_seq_len (lmsat.checkpoints.formats converts both)
CONTEXT_FIELDS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length", "max_seq_len")


def context_length(model_config: dict) -> tuple[str, int] | None:
    """(field, positions) of the longest context a model's config.json (as a dict) states,
    looked for in its text config first (multimodal configs nest it); None if it states none
    (e.g. rotary-only models that set no limit)."""
    for config in (model_config.get("text_config") or {}, model_config):
        for field in CONTEXT_FIELDS:
            value = config.get(field)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return field, value
    return None


def check_context(seq_len: int, model_config: dict, where: str, key: str = "sample.seq_len") -> None:
    """ConfigError at `key` when sequences of `seq_len` tokens exceed the context the model's
    config states: positions past it are extrapolated (rotary) or wrapped, so the losses
    would be wrong without any error (`where` names the model and its config file)."""
    found = context_length(model_config)
    if found and seq_len > found[1]:
        field, positions = found
        raise ConfigError(
            key,
            f"{seq_len} tokens per sequence exceed the context of {where} ({field}={positions}); "
            "positions past it would give wrong losses, without an error",
            f"set {key} to at most {positions}",
        )


def check_sequence_length(lm, model: ModelEntry, revision: str, seq_len: int, key: str = "sample.seq_len") -> None:
    """ConfigError at `key` before any forward when sequences of `seq_len` tokens exceed the
    context the loaded checkpoint's config states (max_position_embeddings or the like)."""
    check_context(seq_len, lm.config.to_dict(), f"model {model.name} ({model.id}) at {revision}", key)


def check_token_ids(lm, model: ModelEntry, revision: str, tokens, where: str, fix: str = "") -> None:
    """ModelLoadError before any forward when `tokens` (the ids `where` holds, e.g. the eval
    sample) reach past the model's vocabulary: its input embedding's or its LM head's rows
    (a raw `IndexError: index out of range in self` in the forward otherwise). `fix`: the
    fix to name (default: the config key of the model's tokenizer)."""
    embedding, head = lm.get_input_embeddings(), lm.get_output_embeddings()
    rows = min(embedding.weight.shape[0], head.weight.shape[0] if head is not None else embedding.weight.shape[0])
    top = int(tokens.max()) if tokens.size else -1
    if top >= rows:
        raise ModelLoadError(
            f"model {model.name} ({model.id}) at revision {revision} has a vocabulary of {rows} rows, but {where} "
            f"holds token id {top}: the model's vocabulary is smaller than its tokenizer {model.tokenizer!r}. "
            "Fix: " + (fix or f"set '{model.key}.tokenizer' to the tokenizer the model was trained with (or fix its checkpoint)")
        )


def load_tokenizer(spec: dict, name: str, policy=None):
    """The tokenizer `name` of config['tokenizers'] (`spec` is that entry). A spec with `staged`
    (set by the workflow for hub tokenizers) loads the directory rule stage_tokenizer wrote
    (lmsat.planning.staging); otherwise a hub tokenizer is downloaded here, transient hub faults
    retried with backoff (`policy`, a lmsat.core.retry.RetryPolicy; default: its defaults)."""
    from transformers import AutoTokenizer

    from lmsat.checkpoints.fetch import gated_fix, require_token
    from lmsat.core.retry import RetryPolicy, with_backoff

    if spec["source"] == "hub" and spec.get("gated"):
        try:
            require_token(f"tokenizer {name} ({spec['id']})", spec["gated"], spec["id"])
        except FetchError as error:
            raise ModelLoadError(str(error)) from None
    if spec.get("staged"):
        if not os.path.isdir(spec["staged"]):
            raise StagingMissing(f"tokenizer {name} ({spec['id']})", spec["staged"], "stage_tokenizer")
        target, kwargs = spec["staged"], dict(local_files_only=True)
    elif spec["source"] in ("toy", "local"):  # a toy tokenizer's id is its run's directory (common.smk)
        target, kwargs = spec["id"], dict(local_files_only=True)
    else:
        target, kwargs = spec["id"], dict(revision=spec["revision"])
    try:
        return with_backoff(
            lambda: AutoTokenizer.from_pretrained(target, **kwargs), policy or RetryPolicy(), what=f"tokenizer {name} ({target})"
        )
    except (OSError, ValueError) as error:
        fix = f". Fix: {gated_fix(spec['gated'], spec['id'])}" if spec.get("gated") else ""
        raise ModelLoadError(f"cannot load tokenizer {name} ({target}): {error}{fix}") from error
