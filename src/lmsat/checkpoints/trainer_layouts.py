"""Saved steps of trainers other than transformers': recognised by their layout, planned
by their family's reader, checked before a byte of weights is read.

    layout                                   trainer      reader
    stepN/model_and_optim/.metadata          OLMo-core    distributed_families.olmo_core
    step-N/.metadata (+ __R_S.distcp)        torchtitan   distributed_families.torchtitan
    iter_NNNNNNN/.metadata + common.pt       Megatron     distributed_families.megatron
    step-NNNNNNNN/lit_model.pth              litgpt       single_file.litgpt
    model_NNNNNN.pt (+ meta_NNNNNN.json)     nanochat     single_file.nanochat
    ckpt*.pt, or any other .pt/.pth file     nanoGPT      single_file.nanogpt
    *.ckpt                                   Lightning    single_file.lightning

A save_pretrained folder (config.json and safetensors) is transformers' own and no layout
here. `plan_saved_step(path)` returns the SavedStep (lmsat.checkpoints.native_models);
`check_saved_step` refuses, naming them, missing or unknown tensors, shapes the run's
architecture does not imply and missing or truncated files, all before any weight is read;
lmsat.checkpoints.formats.from_pretrained loads it like any converted checkpoint, and
lmsat.checkpoints.loading.load_saved_step is the public call:

    lm = lmsat.load_saved_step("out/step-1000")     # a transformers model of the same maths
"""

from __future__ import annotations

import re
from pathlib import Path

from lmsat.checkpoints.native_models import SavedStep, UnsupportedArchitecture, tensor_mismatches
from lmsat.errors import ModelLoadError

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json")
TRAINERS = ("olmo-core", "torchtitan", "megatron", "litgpt", "nanochat", "nanogpt", "lightning")
# The names each trainer gives its saved steps, for `lmsat init` (glob, step regex: its
# first group is the step); nanoGPT's per-eval files are the ones docs/trainers.md's patch writes.
TRAINER_NAMES = {
    "olmo-core": ("step*", r"step(\d+)"),
    "torchtitan": ("step-*", r"step-(\d+)"),
    "megatron": ("iter_*", r"iter_(\d+)"),
    "litgpt": ("step-*", r"step-(\d+)"),
    "nanochat": ("model_*.pt", r"model_(\d+)\.pt"),
    "nanogpt": ("ckpt_*.pt", r"ckpt_(\d+)\.pt"),
    "lightning": ("*.ckpt", r"step[-=_]?(\d+)"),
}


class CheckpointMismatch(ModelLoadError):
    """A saved step whose files do not hold exactly the tensors its run's architecture implies."""


def is_save_pretrained(path) -> bool:
    path = Path(path)
    return path.is_dir() and (path / "config.json").is_file() and any((path / n).is_file() for n in WEIGHT_FILES)


def layout_of(path) -> str | None:
    """The trainer whose layout `path` (a folder or a file) is, None for anything else
    (a save_pretrained folder included). Reads names only, never a file."""
    path = Path(path)
    if path.is_dir():
        if is_save_pretrained(path):
            return None
        if path.suffix == ".ckpt":
            return "lightning"  # a sharded Lightning checkpoint (refused by its reader, by name)
        if (path / "model_and_optim" / ".metadata").is_file():
            return "olmo-core"
        if (path / "lit_model.pth").is_file():
            return "litgpt"
        if (path / ".metadata").is_file():
            return "megatron" if (path / "common.pt").is_file() else "torchtitan"
        return None
    if not path.is_file():
        return None
    if path.suffix == ".ckpt":
        return "lightning"
    if path.suffix in (".pt", ".pth"):
        if re.fullmatch(r"model_\d+\.pt", path.name):  # beside its meta_NNNNNN.json
            return "nanochat"
        if path.name.startswith(("optim_", "meta_")) or path.name in ("common.pt", "rank0.pt"):
            return None
        return "nanogpt"
    return None


def plan_saved_step(path, *, config: dict | None = None, prefix: str | None = None) -> SavedStep:
    """The SavedStep of the saved step at `path` (its architecture read and checked; no
    weight read). `config`: the architecture, when the run did not record it where lmsat
    reads it (the form its trainer writes: OLMo-core's experiment config, torchtitan's job
    config, Megatron-LM's args, nanoGPT's model_args, nanochat's model_config, litgpt's
    model_config, a transformers config). `prefix`: a Lightning module's attribute prefix
    of its transformers model ("model."), when more than one would fit."""
    from lmsat.checkpoints import distributed_families, single_file

    path = Path(path)
    layout = layout_of(path)
    readers = {"olmo-core": distributed_families.olmo_core, "torchtitan": distributed_families.torchtitan,
               "megatron": distributed_families.megatron, "litgpt": single_file.litgpt,
               "nanochat": single_file.nanochat, "nanogpt": single_file.nanogpt}
    if layout == "lightning":
        return single_file.lightning(path, config, prefix)
    if layout is None:
        what = "a save_pretrained folder (load it with from_pretrained)" if is_save_pretrained(path) else "no saved step"
        raise UnsupportedArchitecture(f"{path} is {what} of a trainer lmsat reads ({', '.join(TRAINERS)}; layouts: "
                                      "docs/trainers.md)")
    return readers[layout](path, config)


def check_saved_step(step: SavedStep, where: str = "", fix: str = "") -> dict[str, tuple[str, tuple[int, ...]]]:
    """{stored name: (dtype, shape)} of the step's model tensors, after checking, from the
    files' index alone, that they are exactly the tensors, of the shapes, its architecture
    implies (CheckpointMismatch naming them). `step.read()` then checks that every file
    holding them is there and as long as the index says before it reads a byte
    (lmsat.checkpoints.pickles.CorruptCheckpointFile; a pickle is checked as it is opened)."""
    where = where or f"{step.fmt} checkpoint {step.path}"
    index = step.index()
    ignored = _ignored(step, index)
    shapes = {k: shape for k, (_, shape) in index.items() if k in step.stored or k not in ignored}
    problems = tensor_mismatches(step.stored, shapes, "its architecture", "architecture")
    if problems:
        raise CheckpointMismatch(f"{where}: its files do not match its architecture (read from {step.architecture_file}): "
                                 f"{'; '.join(problems)}. Fix: {fix or 'the architecture file must be the run that wrote these weights'}")
    return {k: index[k] for k in step.stored}


def _ignored(step: SavedStep, index: dict) -> set[str]:
    """Stored entries that are not the model's weights: nanoGPT's causal-mask buffers."""
    if step.fmt == "nanogpt":
        return {k for k in index if k.endswith(".attn.bias") and len(index[k][1]) == 4}
    return set()


def saved_step_config(path, **options) -> dict:
    """The transformers config (as a dict, as a config.json reads) a saved step loads as:
    what planning reads of a local checkpoint (widths, depth, vocabulary, context)."""
    step = plan_saved_step(path, **options)
    config = step.native.to_dict()
    config["architectures"] = list(step.native.architectures)
    return config
