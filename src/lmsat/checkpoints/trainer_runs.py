"""A training run's output folder: its checkpoints, their steps and architecture, the
tokenizer saved beside them, and the tokens per step the run records in plain text.

Trainers write one sub-directory per checkpoint (transformers' Trainer `checkpoint-500/`,
Accelerate `checkpoint_5/`, `step500/`, `step-500/`, Megatron-style `iter_0000500/`), each a
`save_pretrained` directory (config.json + safetensors), or their own layouts, one folder or
file per saved step (OLMo-core `step500/`, torchtitan `step-500/`, Megatron `iter_0000500/`,
litgpt `step-00000500/`, nanochat `model_000500.pt`, nanoGPT `ckpt_0000500.pt`, Lightning
`epoch=0-step=500.ckpt`: lmsat.checkpoints.trainer_layouts), whose architecture is the
config of the transformers model it loads as. A file's revision is its name made a path
component (lmsat.core.names.revision_name). Nothing here unpickles anything but through
trainer_layouts' safe readers (training_args.bin is never read), and only `tokens_per_step`
and pickled trainer layouts import torch: planning uses the rest.

    found = discover(Path("out"), "checkpoint-*", DEFAULT_STEP_REGEX)  # [(name, step)], by step
    architecture(json.loads((Path("out") / found[-1][0] / "config.json").read_text()))
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

# The training step of a checkpoint directory's name, for the common trainers' names.
DEFAULT_STEP_REGEX = r"(?:checkpoint|step|iter)[-_]?(\d+)"
# Globs of the common trainers' saved steps (folders, and files: Lightning, nanochat, nanoGPT's
# per-eval files of docs/trainers.md), tried in this order by `lmsat init`.
TRAINER_GLOBS = ("checkpoint-*", "checkpoint_*", "step-*", "step_*", "step*", "iter_*", "global_step*", "*step*.ckpt",
                 "model_*.pt", "ckpt_*.pt")
# The step regex of a glob whose names DEFAULT_STEP_REGEX does not read.
GLOB_STEP_REGEX = {"model_*.pt": r"model_(\d+)\.pt$", "ckpt_*.pt": r"ckpt_(\d+)\.pt$"}
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")

# config.json field names of each architecture value, across families (text config first).
ARCHITECTURE_FIELDS = {
    "hidden_size": ("hidden_size", "n_embd", "d_model", "dim"),
    "num_layers": ("num_hidden_layers", "n_layer", "num_layers", "n_layers"),
    "vocab_size": ("vocab_size",),
    "tied_head": ("tie_word_embeddings",),
}


def suggest_step_regex(name: str) -> str:
    """A step_regex that reads the last run of digits of `name` (`ckpt_010` -> 'ckpt_(\\d+)')."""
    match = re.search(r"(\d+)(?!.*\d)", name)
    if not match:
        return ""
    prefix = re.sub(r"\d+$", "", name[: match.start()])[-12:] or name[: match.start()]
    return re.escape(prefix) + r"(\d+)"


def step_regex_for(glob: str) -> str:
    """The step regex that reads the names `glob` finds (DEFAULT_STEP_REGEX unless GLOB_STEP_REGEX says)."""
    return GLOB_STEP_REGEX.get(glob, DEFAULT_STEP_REGEX)


def layout(path: Path, allow_pickle: bool = False) -> str | None:
    """What `path` is: "transformers" (a complete save_pretrained folder), another trainer's
    saved step (lmsat.checkpoints.trainer_layouts: "olmo-core", "nanogpt", ...), or None."""
    from lmsat.checkpoints.trainer_layouts import layout_of

    names = WEIGHT_FILES + (("pytorch_model.bin", "pytorch_model.bin.index.json") if allow_pickle else ())
    if path.is_dir() and (path / "config.json").is_file() and any((path / n).is_file() for n in names):
        return "transformers"
    return layout_of(path)


def is_checkpoint(directory: Path, allow_pickle: bool = False) -> bool:
    """Whether `directory` is a complete save_pretrained checkpoint (config.json and weights)
    or another trainer's saved step (a folder or a file)."""
    return layout(Path(directory), allow_pickle) is not None


@dataclass(frozen=True)
class Discovered:
    """The checkpoints a glob found in a run folder, and what it matched but could not use."""

    revisions: tuple[tuple[str, int], ...]  # (revision: the folder's or file's name, training step), by step
    incomplete: tuple[str, ...]  # matched directories without config.json or weights (yet)
    unparsed: tuple[str, ...]  # matched checkpoints whose name step_regex does not read
    layouts: tuple[tuple[str, str], ...] = ()  # (layout, revision) of every checkpoint found


def discover(directory: Path, pattern: str, step_regex: str, allow_pickle: bool = False) -> Discovered:
    """The sub-directories (and saved-step files) of `directory` whose names match the glob
    `pattern`, with the step `step_regex` (first group) reads from each revision name. A
    matched directory that is no checkpoint (no config.json and weights, no trainer's saved
    step) is one still being written (or not one): listed apart, not used; a matched file
    that is no saved step is left out."""
    from lmsat.core.names import revision_name

    regex = re.compile(step_regex)
    found, incomplete, unparsed, layouts = [], [], [], []
    for path in sorted(Path(directory).glob(pattern)):
        kind = layout(path, allow_pickle)
        if kind is None:
            if path.is_dir():
                incomplete.append(path.name)
            continue
        name = revision_name(path.name)
        match = regex.search(name)
        if not match or not (match.group(1) or "").isdigit():
            unparsed.append(name)
            continue
        found.append((name, int(match.group(1))))
        layouts.append((kind, name))
    found.sort(key=lambda pair: pair[1])
    return Discovered(tuple(found), tuple(incomplete), tuple(unparsed), tuple(layouts))


def mixed_layouts(found: Discovered) -> dict[str, list[str]]:
    """{layout: revisions} when `found` holds checkpoints of two layouts or more (two
    trainers' formats in one run folder: which is the run is the user's to say); else {}."""
    by_layout: dict[str, list[str]] = {}
    for kind, name in found.layouts:
        by_layout.setdefault(kind, []).append(name)
    return by_layout if len(by_layout) > 1 else {}


def state_step(checkpoint: Path) -> int | None:
    """The `global_step` the checkpoint's trainer_state.json records (None: no such file or field)."""
    path = Path(checkpoint) / "trainer_state.json"
    try:
        step = json.loads(path.read_text()).get("global_step")
    except (OSError, ValueError, AttributeError):
        return None
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def steps_per_epoch(checkpoint: Path) -> float | None:
    """Optimizer steps per epoch of the training data, from the checkpoint's trainer_state.json:
    its global_step over its `epoch` (the Trainer's, fractional within an epoch), to 3 decimals
    (the float epoch's last bits would otherwise differ between checkpoints of one run). None:
    no such file, or no step or epoch past 0 in it."""
    path = Path(checkpoint) / "trainer_state.json"
    try:
        state = json.loads(path.read_text())
        step, epoch = state.get("global_step"), state.get("epoch")
    except (OSError, ValueError, AttributeError):
        return None
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in (step, epoch)):
        return None
    return round(step / epoch, 3)


def step_conflicts(directory: Path, revisions) -> list[tuple[str, int, int]]:
    """[(checkpoint, step its name says, global_step its trainer_state.json says)] of every
    checkpoint of `revisions` ((name, step) pairs, as `discover` finds them) whose two steps
    differ: a renamed or copied folder, whose losses would be drawn at the wrong step."""
    found = []
    for name, step in revisions:
        recorded = state_step(Path(directory) / name)
        if recorded is not None and recorded != step:
            found.append((name, step, recorded))
    return found


def architecture(model_config: dict) -> dict:
    """{hidden_size, num_layers, vocab_size, tied_head} a config.json (as a dict) states; a
    value it does not state is left out (tie_word_embeddings is not written when it is the
    library default, so an unstated tied head stays unknown)."""
    found = {}
    for config in (model_config, model_config.get("text_config") or {}):  # nested text config wins
        for key, fields in ARCHITECTURE_FIELDS.items():
            for field in fields:
                value = config.get(field)
                if key == "tied_head" and isinstance(value, bool):
                    found[key] = value
                    break
                if key != "tied_head" and isinstance(value, int) and not isinstance(value, bool) and value > 0:
                    found[key] = value
                    break
    return found


def read_config(directory: Path) -> dict:
    """config.json of a save_pretrained checkpoint; for another trainer's saved step, the
    config of the transformers model it loads as (its architecture read from the run's own
    file: lmsat.checkpoints.trainer_layouts)."""
    from lmsat.checkpoints.trainer_layouts import layout_of, saved_step_config

    if layout_of(directory):
        return saved_step_config(directory)
    return json.loads((Path(directory) / "config.json").read_text())


def find_tokenizer(run_dir: Path, checkpoints: list[str]) -> Path | None:
    """The tokenizer saved beside the checkpoints: in the run folder itself (trainer.save_model,
    tokenizer.save_pretrained(output_dir)) or a sub-folder that is no checkpoint, else in the
    latest checkpoint (Trainer saves its processing_class into each one); None if none."""
    run_dir = Path(run_dir)
    others = sorted(p for p in run_dir.iterdir() if p.is_dir() and p.name not in checkpoints)
    for candidate in [run_dir, *others] + [run_dir / name for name in reversed(checkpoints)]:
        if any((candidate / name).is_file() for name in TOKENIZER_FILES):
            return candidate
    return None


def tokens_per_step(checkpoint: Path) -> tuple[int, str] | None:
    """(tokens per optimizer step, how it was found) from the checkpoint's trainer_state.json
    (plain JSON; training_args.bin is a pickle and is never read): num_input_tokens_seen when
    the run counted it (Trainer's include_num_input_tokens_seen), else total_flos, which
    Trainer accumulates as 6 x tokens x non-embedding parameters (transformers'
    `floating_point_ops`), divided by the count transformers uses. None: neither is there."""
    state_path = Path(checkpoint) / "trainer_state.json"
    if not state_path.is_file():
        return None
    state = json.loads(state_path.read_text())
    step = state.get("global_step") or 0
    if step <= 0:
        return None
    seen = state.get("num_input_tokens_seen") or 0
    if seen > 0:
        return _per_step(seen, step, f"{state_path}: num_input_tokens_seen={seen} / global_step={step}")
    flos = state.get("total_flos") or 0
    if flos > 0:
        n = transformers_non_embedding_parameters(Path(checkpoint))
        if n:
            return _per_step(flos / (6 * n), step, f"{state_path}: total_flos={flos:.6g} / (6 x {n} parameters) / global_step={step}")
    return None


def _per_step(tokens: float, step: int, how: str) -> tuple[int, str] | None:
    per_step = tokens / step
    if per_step < 1 or abs(per_step - round(per_step)) > 1e-3 * per_step:
        return None  # not a whole number of tokens per step: not a count to trust
    return int(round(per_step)), how


def transformers_non_embedding_parameters(checkpoint: Path) -> int:
    """Parameters of a checkpoint as Trainer counts them for its flos,
    `model.num_parameters(exclude_embeddings=True)` (every parameter but those of
    nn.Embedding modules), with the model built from its config.json on the meta device
    (shapes only: no weights read, no memory). 0 when transformers cannot build it."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        config = AutoConfig.from_pretrained(str(checkpoint), local_files_only=True)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
    except (OSError, ValueError, KeyError):
        return 0
    return int(model.num_parameters(exclude_embeddings=True))
