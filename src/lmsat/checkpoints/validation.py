"""Refuse a checkpoint whose files do not hold exactly what its config.json describes.

transformers loads a checkpoint whatever it holds: a tensor missing from the file is
initialised at random, a `num_hidden_layers` lower than the file's depth drops the extra
blocks, an int8 or float16 tensor in a float32 checkpoint is cast, and only a warning on
stderr (its load report) says so. lmsat.checkpoints.loading.load_causal_lm calls, in this order:

    check_weight_files(model, revision)          # before from_pretrained: the files themselves
    with transformers_log_to_job_log(): ...      # the load report into the job's log
    check_load_report(loading_info, model, revision)
    check_stored_dtypes(lm, stored, model, revision)
    check_weight_values(lm, stored, model, revision)  # NaN/Inf anywhere; all-zero or constant matrices

Each raises a ModelLoadError naming model, revision, the file or tensors, and the fix.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from pathlib import Path

from lmsat.core.plan import ModelEntry
from lmsat.errors import ModelLoadError

log = logging.getLogger(__name__)

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
FLOATING = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
            "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_SHOWN = 8  # keys quoted in a message; the rest are counted


def checkpoint_dir(model: ModelEntry, revision: str, cache_dir: str | None = None) -> Path | None:
    """The directory holding `revision`'s files (a local revision, or its snapshot in the hub
    cache, `cache_dir` if given); None when it cannot be found (from_pretrained reports it)."""
    from lmsat.checkpoints import local_hub

    if model.source == "local":
        from lmsat.core.names import checkpoint_path

        return checkpoint_path(model.id, revision)
    cache_dir = cache_dir or model.cache_dir(revision)
    revision = model.hub_revision(revision)  # a pinned revision is its commit there (lmsat.checkpoints.pins)
    try:
        return local_hub.snapshot_path(cache_dir, model.id, revision)
    except local_hub.RevisionNotFoundError:
        by_commit = local_hub.repo_dir(cache_dir, model.id) / "snapshots" / revision  # a commit hash as revision
        return by_commit if by_commit.is_dir() else None
    except ValueError:  # not an org/name id: from_pretrained says what is wrong with it
        return None


def refetch_fix(model: ModelEntry, revision: str, cache_dir: str | None = None) -> str:
    """How to replace a broken checkpoint, by source."""
    if model.source == "hub":
        return f"delete {cache_dir or model.cache_dir(revision)} and rerun: the workflow fetches it again"
    if model.source == "toy":
        return f"delete the toy model's hub cache {model.cache_dir(revision)} and rerun: rule train_toy_model rebuilds it"
    return f"replace {Path(model.id) / revision} with a complete save_pretrained() copy of the checkpoint"


def _where(model: ModelEntry, revision: str) -> str:
    return f"model {model.name} ({model.id}) at revision {revision}"


def _quote(keys) -> str:
    keys = sorted(map(str, keys))
    more = f" and {len(keys) - _SHOWN} more" if len(keys) > _SHOWN else ""
    return ", ".join(keys[:_SHOWN]) + more


def _header(path: Path, model: ModelEntry, revision: str, fix: str) -> dict[str, tuple[str, tuple[int, ...]]]:
    """{tensor: (safetensors dtype, shape)} from the file's header; ModelLoadError if the file
    is truncated or no safetensors file (safetensors checks that the header covers it all)."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt") as handle:
            return {key: (handle.get_slice(key).get_dtype(), tuple(handle.get_slice(key).get_shape())) for key in handle.keys()}
    except (SafetensorError, OSError) as error:
        raise ModelLoadError(
            f"{_where(model, revision)}: weight file {path} is truncated or not a safetensors file ({error}). "
            f"Fix: {fix}"
        ) from None


def stored_tensors(model: ModelEntry, revision: str, cache_dir: str | None = None) -> dict | None:
    """{tensor: (dtype, shape)} of the checkpoint's safetensors files, after checking that
    each file is whole and, for a sharded checkpoint, that every shard its index lists is
    there and holds exactly the tensors the index assigns to it. None: no safetensors
    files to read (pickle weights, allowed by allow_pickle, or no directory)."""
    directory = checkpoint_dir(model, revision, cache_dir)
    if directory is None or not directory.is_dir():
        return None
    fix = refetch_fix(model, revision, cache_dir)
    if (directory / INDEX).is_file():
        index_path = directory / INDEX
        try:
            weight_map = json.loads(index_path.read_text())["weight_map"]
            if not isinstance(weight_map, dict):
                raise TypeError("weight_map is not a mapping")
        except (ValueError, KeyError, TypeError) as error:
            raise ModelLoadError(f"{_where(model, revision)}: {index_path} is unreadable ({error}). Fix: {fix}") from None
        shards: dict[str, set[str]] = {}
        for key, shard in weight_map.items():
            shards.setdefault(shard, set()).add(key)
        missing = [shard for shard in shards if not (directory / shard).is_file()]
        if missing:
            raise ModelLoadError(
                f"{_where(model, revision)}: {index_path} lists shard(s) {_quote(missing)}, not in {directory}. Fix: {fix}"
            )
        stored = {}
        for shard, listed in shards.items():
            header = _header(directory / shard, model, revision, fix)
            if set(header) != listed:
                raise ModelLoadError(
                    f"{_where(model, revision)}: shard {directory / shard} does not hold the tensors {index_path} "
                    f"assigns to it (only in the index: {_quote(listed - set(header)) or 'none'}; only in the shard: "
                    f"{_quote(set(header) - listed) or 'none'}). Fix: {fix}"
                )
            stored.update(header)
        return stored
    if (directory / SINGLE).is_file():
        return _header(directory / SINGLE, model, revision, fix)
    shards = sorted(p.name for p in directory.glob("*.safetensors"))
    if shards:  # from_pretrained would look for model.safetensors only and say "no file named"
        raise ModelLoadError(
            f"{_where(model, revision)}: {directory} holds safetensors shard(s) {_quote(shards)} but neither "
            f"{SINGLE} nor the {INDEX} that says which tensor is where. Fix: {fix}"
        )
    return None


def check_weight_files(model: ModelEntry, revision: str, cache_dir: str | None = None) -> dict | None:
    """stored_tensors ({tensor: (dtype, shape)}, or None), logged; the ModelLoadErrors come from there."""
    stored = stored_tensors(model, revision, cache_dir)
    if stored is not None:
        log.info("%s: %d tensors in its safetensors files", _where(model, revision), len(stored))
    return stored


class _StripAnsi(logging.Filter):
    """The load report's colour codes, removed (the job's log is a text file)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "\x1b[" in message:
            record.msg, record.args = _ANSI.sub("", message), None
        return True


@contextlib.contextmanager
def transformers_log_to_job_log():
    """transformers' own messages (its load report above all) go through the root logger's
    handlers, i.e. into the job's log file as well as stderr (lmsat.core.io.setup_logging),
    instead of only to transformers' private stderr handler."""
    library = logging.getLogger("transformers")
    from transformers.utils import logging as hf_logging

    hf_logging.get_logger("transformers")  # let transformers configure it first, then override
    handlers, propagate = list(library.handlers), library.propagate
    strip, root = _StripAnsi(), logging.getLogger().handlers
    for handler in handlers:
        library.removeHandler(handler)
    library.propagate = True
    for handler in root:
        handler.addFilter(strip)
    try:
        yield
    finally:
        for handler in root:
            handler.removeFilter(strip)
        library.propagate = propagate
        for handler in handlers:
            library.addHandler(handler)


def load_report_problems(loading_info: dict) -> str:
    """What transformers' load report (output_loading_info=True) found, as one sentence;
    "" when clean: no key missing from the checkpoint (it would be initialised at random),
    none unexpected (a config.json shallower or narrower than its weights), none of another
    shape, no error. Keys the architecture declares ignorable (old attention-mask buffers,
    a tied head) are not reported by transformers."""
    mismatched = loading_info.get("mismatched_keys") or ()
    problems = {
        "missing from the checkpoint (transformers would initialise them at random)": loading_info.get("missing_keys"),
        "in the checkpoint but not in the model its config.json describes": loading_info.get("unexpected_keys"),
        "of another shape than config.json implies": [
            f"{key} (stored {tuple(stored)}, config {tuple(wanted)})" for key, stored, wanted in mismatched
        ],
        "not loadable": loading_info.get("error_msgs"),
    }
    return "; ".join(f"{len(keys)} tensor(s) {what}: {_quote(keys)}" for what, keys in problems.items() if keys)


CONFIG_FIX = "its config.json (num_hidden_layers, hidden_size, vocab_size, ...) must describe its weights"


def check_load_report(loading_info: dict, model: ModelEntry, revision: str) -> None:
    """ModelLoadError unless the load report is clean (load_report_problems); logged either way."""
    summary = load_report_problems(loading_info)
    log.info("%s: load report %s", _where(model, revision), summary or "clean (no missing, unexpected or mismatched keys)")
    if summary:
        raise ModelLoadError(
            f"{_where(model, revision)} does not match its config.json: {summary}. Fix: {CONFIG_FIX}; "
            f"if the weights are the broken part, {refetch_fix(model, revision)}"
        )


# Buffers of old checkpoints that transformers drops on load for every architecture
# (modeling_utils' _adjust_missing_and_unexpected_keys): per-layer rotary frequencies, and
# position ids (int64), now recomputed.
DROPPED_ON_LOAD = (r"rotary_emb\.inv_freq", r"(^|\.)position_ids$")


def _ignored_on_load(lm) -> list[re.Pattern]:
    """Patterns of stored keys that are not loaded, so not checked: those above, and those the
    architecture declares (GPT-NeoX: the old `attention.bias` / `attention.masked_bias` masks)."""
    declared = getattr(lm, "_keys_to_ignore_on_load_unexpected", None) or []
    return [re.compile(p) for p in (*DROPPED_ON_LOAD, *declared)]


def check_stored_dtypes(lm, stored: dict | None, model: ModelEntry, revision: str) -> None:
    """ModelLoadError unless every loaded tensor is stored as floating point: transformers
    casts silently, so an int8 tensor would be analysed as if it were a weight."""
    if not stored:
        return
    ignored = _ignored_on_load(lm)
    loaded = {key: dtype for key, (dtype, _) in stored.items() if not any(p.search(key) for p in ignored)}
    not_floating = sorted(key for key, dtype in loaded.items() if dtype not in FLOATING)
    if not_floating:
        fix = refetch_fix(model, revision)
        raise ModelLoadError(
            f"{_where(model, revision)}: tensor(s) {_quote(f'{k} ({loaded[k]})' for k in not_floating)} are not "
            f"stored as floating point; transformers would cast them to weights. Fix: {fix}"
        )
    # Mixed floating dtypes, or a config.json dtype the tensors are not stored in, happen in
    # real releases (norms kept in float32; configs stating the training dtype): the loaded
    # values are the stored ones up to the requested dtype's rounding, so this is logged in
    # the job's load report, not refused.
    by_dtype: dict[str, list[str]] = {}
    for key, dtype in loaded.items():
        by_dtype.setdefault(FLOATING[dtype], []).append(key)
    stated = _stated_dtype(model, revision)
    majority = max(by_dtype, key=lambda d: len(by_dtype[d]))
    if len(by_dtype) > 1:
        odd = [f"{key} ({dtype})" for dtype, keys in by_dtype.items() if dtype != majority for key in keys]
        log.warning(
            "%s: its tensors are stored in %d dtypes (%s); the odd one(s) out, against %d in %s: %s",
            _where(model, revision), len(by_dtype), ", ".join(sorted(by_dtype)), len(by_dtype[majority]), majority, _quote(odd),
        )
    if stated and stated != majority:
        log.warning(
            "%s: its tensors are stored in %s, but its config.json states dtype %s", _where(model, revision), majority, stated
        )


def _stated_dtype(model: ModelEntry, revision: str) -> str | None:
    """The dtype config.json states (`dtype`, or `torch_dtype` in older files), or None."""
    directory = checkpoint_dir(model, revision)
    try:
        config = json.loads((directory / "config.json").read_text()) if directory else {}
    except (OSError, ValueError):
        return None
    for source in (config.get("text_config") or {}, config):
        value = source.get("dtype") or source.get("torch_dtype")
        if isinstance(value, str):
            return value.removeprefix("torch.")
    return None


def weight_files(model: ModelEntry, revision: str, names) -> list[str]:
    """The checkpoint's file(s) holding the tensors `names` (state-dict names): the shard its
    index assigns each to, else model.safetensors, else the checkpoint's directory."""
    directory = checkpoint_dir(model, revision)
    if directory is None:
        return [f"the files of {_where(model, revision)}"]
    if (directory / INDEX).is_file():
        try:
            weight_map = json.loads((directory / INDEX).read_text())["weight_map"]
        except (OSError, ValueError, KeyError, TypeError):
            weight_map = {}
        return sorted({str(directory / weight_map[n]) if n in weight_map else str(directory / INDEX) for n in names})
    return [str(directory / SINGLE) if (directory / SINGLE).is_file() else str(directory)]


def stored_names(loaded: dict[str, tuple[int, ...]], stored: dict | None) -> dict[str, str]:
    """{loaded tensor name: its name in the weight files}: its own where the files hold it,
    else the one stored tensor of its shape that no loaded name claims (transformers renames
    some on load: Pythia's `embed_out.weight` is its `lm_head.weight`), else its own."""
    if not stored:
        return {name: name for name in loaded}
    unclaimed = [(key, tuple(shape)) for key, (_, shape) in stored.items() if key not in loaded]
    names = {}
    for name, shape in loaded.items():
        same = [key for key, stored_shape in unclaimed if stored_shape == shape]
        names[name] = name if name in stored or len(same) != 1 else same[0]
    return names


def check_weight_values(lm, stored: dict | None, model: ModelEntry, revision: str,
                        names: dict[str, str] | None = None) -> None:
    """ModelLoadError naming the first tensor of the checkpoint holding NaN/Inf, else the file
    and every matrix (a tensor of 2 or more dimensions: embeddings, projections, the head)
    that is all zero or constant, as a crash that zero-fills a file leaves it, each by its
    name in the files (`stored`, from check_weight_files). No architecture lmsat loads starts
    a matrix constant (GPT-NeoX, Llama, GPT-2, OPT draw them at random), and training does
    not make one constant; vectors are left alone, since norm weights start at 1 and biases
    at 0 (a step-0 checkpoint holds them so).

    One pass over the weights on their device, one host sync. aminmax, not isfinite(t).all():
    NaN propagates into it and +-Inf lands in it, and it allocates nothing (30x faster on
    a CPU: 0.03 s instead of 0.9 s for a 50304 x 768 head); min == max is a constant tensor.

    `names`: {loaded name: its name in the files} of a checkpoint converted at load
    (lmsat.checkpoints.formats: q_proj is a block of rows of hf_olmo's att_proj), else stored_names' guess."""
    import torch

    # The state dict: parameters and persistent buffers, i.e. what a checkpoint holds; not
    # buffers the code computes (a -1e9 mask value is -inf in float16 and no fault)
    named, seen = [], set()
    for name, tensor in lm.state_dict(keep_vars=True).items():
        if tensor.is_floating_point() and tensor.numel() and tensor.data_ptr() not in seen:  # a tied head once
            named.append((name, tensor))
            seen.add(tensor.data_ptr())
    if not named:
        return
    # float64 holds every half, bfloat16 and float32 value exactly: min == max only if they are equal
    bounds = torch.stack([torch.stack(torch.aminmax(t.detach())).double() for _, t in named]).cpu()  # (n, 2): min, max
    finite = torch.isfinite(bounds).all(dim=1)
    if not bool(finite.all()):
        name, tensor = named[int((~finite).nonzero()[0, 0])]
        count = int((~torch.isfinite(tensor)).sum())
        first = tuple(int(i) for i in (~torch.isfinite(tensor)).nonzero()[0])
        if names and names.get(name, name) != name:
            name = f"{name} (read from {names[name]})"
        raise ModelLoadError(
            f"{_where(model, revision)}: tensor {name} {tuple(tensor.shape)} holds {count} NaN/Inf value(s) "
            f"(first at index {first}): the checkpoint is broken. Fix: {refetch_fix(model, revision)}"
        )
    constant = [(name, tuple(tensor.shape), float(low)) for (name, tensor), (low, high) in zip(named, bounds.tolist())
                if tensor.dim() >= 2 and tensor.numel() > 1 and low == high]
    if constant:
        in_files = ({name: names.get(name, name) for name, _ in named} if names else
                    stored_names({name: tuple(tensor.shape) for name, tensor in named}, stored))
        constant = [(in_files[name], shape, value) for name, shape, value in constant]
        zero = [f"{name} {shape}" for name, shape, value in constant if value == 0]
        other = [f"{name} {shape} (every value {value:g})" for name, shape, value in constant if value != 0]
        found = "; ".join(part for part in (
            f"{len(zero)} all-zero matri{'x' if len(zero) == 1 else 'ces'}: {_quote(zero)}" if zero else "",
            f"{len(other)} constant matri{'x' if len(other) == 1 else 'ces'}: {_quote(other)}" if other else "") if part)
        files = weight_files(model, revision, [name for name, _, _ in constant])
        raise ModelLoadError(
            f"{_where(model, revision)}: {', '.join(files)} holds {found} of {sum(t.dim() >= 2 for _, t in named)}. "
            "No architecture starts or trains a weight matrix constant: the file was zero-filled or overwritten "
            f"(a crash while saving?), and its losses would be an untrained model's. Fix: {refetch_fix(model, revision)}"
        )
