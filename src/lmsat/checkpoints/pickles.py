"""Pickled checkpoint files, read without running any of their code.

A pickle names Python callables and calls them while it is read: a crafted `ckpt.pt` can
run a shell command the moment it is unpickled. Trainers other than transformers' save
pickles (nanoGPT's `ckpt.pt`, nanochat's `model_*.pt`, litgpt's `lit_model.pth`, Lightning's
`.ckpt`, Megatron's `common.pt`, the `.metadata` of every distributed checkpoint), so lmsat
reads each of them one of two ways, never with a plain unpickler:

    load_torch_file(path, what=...)      # torch.save files: torch.load(weights_only=True)
    read_dcp_metadata(folder)            # a distributed checkpoint's `.metadata`

torch.load(weights_only=True) admits tensors, containers and primitives, and the globals
`allow` names (a plain record such as argparse.Namespace, or an inert stand-in for an enum
of a framework lmsat does not import); `.metadata`, a bare pickle torch writes with
`pickle.dump`, is read through an allow-list of torch's own metadata records. Anything else
is refused before it is called: UnsafePickle names the file and the global it asked for.
(torch's own FileSystemReader unpickles `.metadata` with `pickle.load`, and needs the
writer's classes importable: OLMo-core stores its own `_StorageInfo`.)
"""

from __future__ import annotations

import pickle
import re
import zipfile
from collections.abc import Iterable
from pathlib import Path

from lmsat.errors import ModelLoadError

METADATA = ".metadata"  # a distributed checkpoint's index of tensors and where their bytes are


class UnsafePickle(ModelLoadError):
    """A pickled file that would need a class or function lmsat does not allow to be read:
    refused before anything of it runs, naming the file and that global."""


class CorruptCheckpointFile(ModelLoadError):
    """A checkpoint file that cannot be read: truncated, zero-filled or not what it claims."""


_GLOBAL = re.compile(r"GLOBAL ([\w.]+)")


def _refusal(path, what: str, wanted: str, fix: str) -> UnsafePickle:
    return UnsafePickle(
        f"{path} ({what}) is a pickle that asks for {wanted}, which lmsat does not allow: reading it would run "
        f"code the file chooses, so it was not read (torch.load(weights_only=True) admits tensors, containers and "
        f"plain values). Fix: {fix}"
    )


def load_torch_file(path, *, what: str, allow: Iterable = (), fix: str = "", mmap: bool = True):
    """The object a torch.save file holds, read with torch.load(weights_only=True) onto the CPU.

    mmap: tensors stay in the file until touched, so a checkpoint that also holds the
    optimizer's state costs the memory of the tensors used, not of the file. `allow`: extra
    globals for torch.serialization.safe_globals (a class, or (stand-in, "module.Name")).
    UnsafePickle when the file needs another global; CorruptCheckpointFile when it is
    truncated or not a torch.save file."""
    import torch

    fix = fix or "save the checkpoint with plain values only (tensors, dicts, lists, numbers, strings)"
    try:
        with torch.serialization.safe_globals(list(allow)):
            try:
                return torch.load(str(path), map_location="cpu", weights_only=True, mmap=mmap)
            except RuntimeError as error:
                if mmap and "mmap" in str(error):  # a legacy (pre-zip) torch.save file
                    return torch.load(str(path), map_location="cpu", weights_only=True)
                raise
    except pickle.UnpicklingError as error:
        found = _GLOBAL.search(str(error))
        if found:
            raise _refusal(path, what, found.group(1), fix) from None
        raise CorruptCheckpointFile(f"{path} ({what}) is truncated or not a torch.save file ({_first_line(error)})") from None
    except (RuntimeError, EOFError, OSError, ValueError, zipfile.BadZipFile, KeyError) as error:
        raise CorruptCheckpointFile(f"{path} ({what}) is truncated or not a torch.save file ({_first_line(error)})") from None


def _first_line(error: Exception) -> str:
    text = str(error).strip().splitlines()
    return text[0][:300] if text else type(error).__name__


# ---------------------------------------------------------------- a distributed checkpoint's .metadata


class Record:
    """An inert stand-in for one of torch.distributed.checkpoint's metadata records (plain
    dataclasses): its fields as attributes, whatever the pickle stores (a dict or, for
    TensorProperties, a tuple whose first item is the dtype). Nothing of the record's own
    class runs, and torch.distributed (a 3 s import) is not imported."""

    def __init__(self, *args):
        self.args = args  # an enum member pickled by value (_MEM_FORMAT_ENCODING(1))

    def __setstate__(self, state):
        if isinstance(state, tuple) and len(state) == 2 and isinstance(state[1], dict):  # (dict, slots)
            state = {**(state[0] or {}), **state[1]}
        if isinstance(state, dict):
            self.__dict__.update(state)
        else:
            self.state = state
            if isinstance(state, tuple) and state:
                self.dtype = state[0]  # TensorProperties: (dtype, layout, requires_grad, memory format, pin_memory)

    def __reduce__(self):
        raise TypeError("a Record of a checkpoint's index is read, never written")


# torch.distributed.checkpoint's records (metadata.py, planner.py, filesystem.py of torch 2.4-2.13);
# the storage record also under OLMo-core's name (its writer stores its own, of the same fields)
METADATA_RECORDS = {
    ("torch.distributed.checkpoint.metadata", name) for name in (
        "Metadata", "TensorStorageMetadata", "BytesStorageMetadata", "ChunkStorageMetadata", "TensorProperties",
        "MetadataIndex", "StorageMeta", "_MEM_FORMAT_ENCODING")
} | {("torch.distributed.checkpoint.planner", name) for name in ("SavePlan", "WriteItem", "WriteItemType", "TensorWriteData")} \
  | {("torch.distributed.checkpoint.filesystem", "_StorageInfo"), ("olmo_core.distributed.checkpoint.filesystem", "_StorageInfo")}


def _metadata_globals() -> dict[tuple[str, str], object]:
    """{(module, name): object} a `.metadata` pickle may ask for: an inert Record class for each
    of torch.distributed.checkpoint's records, torch.Size, a layout's lookup by name, and
    pathlib's paths (StorageMeta's checkpoint_id); dtypes, layouts and memory formats are
    allowed by find_class."""
    import pathlib

    import torch

    allowed: dict[tuple[str, str], object] = {key: type(key[1], (Record,), {}) for key in METADATA_RECORDS}
    allowed[("torch", "Size")] = torch.Size
    allowed[("torch.serialization", "_get_layout")] = torch.serialization._get_layout
    allowed[("collections", "OrderedDict")] = __import__("collections").OrderedDict
    for name in ("PosixPath", "WindowsPath", "PurePosixPath", "PureWindowsPath", "Path"):
        allowed[("pathlib", name)] = getattr(pathlib, name)
    return allowed


class _MetadataUnpickler(pickle.Unpickler):
    """pickle's own "restricting globals" recipe: every global looked up in an allow-list."""

    def __init__(self, file, path: Path):
        super().__init__(file)
        self.path, self.allowed = path, _metadata_globals()

    def find_class(self, module: str, name: str):
        found = self.allowed.get((module, name))
        if found is None and module == "torch" and name.isidentifier():  # a dtype, layout or memory format: a value
            import torch

            value = getattr(torch, name, None)
            found = value if isinstance(value, (torch.dtype, torch.layout, torch.memory_format)) else None
        if found is None:
            raise _refusal(self.path, "a distributed checkpoint's index", f"{module}.{name}",
                           "it was not written by torch.distributed.checkpoint (or by a writer lmsat knows)")
        return found

    def persistent_load(self, pid):
        raise _refusal(self.path, "a distributed checkpoint's index", f"a persistent id {pid!r}",
                       "it was not written by torch.distributed.checkpoint")


def read_dcp_metadata(folder):
    """The Metadata of the distributed checkpoint in `folder` (its `.metadata`), read through
    the allow-list as inert Records (state_dict_metadata: {key: a record with size, chunks
    (offsets, sizes) and properties.dtype, or a bytes entry without chunks}; storage_data:
    {a record with fqn and offset: a record with relative_path, offset, length}); UnsafePickle
    or CorruptCheckpointFile naming the file."""
    path = Path(folder) / METADATA
    try:
        with open(path, "rb") as handle:
            found = _MetadataUnpickler(handle, path).load()
    except UnsafePickle:
        raise
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError) as error:
        raise CorruptCheckpointFile(f"{path} (a distributed checkpoint's index) is truncated or not one "
                                    f"({_first_line(error)})") from None
    if not hasattr(found, "state_dict_metadata") or not isinstance(getattr(found, "storage_data", None), dict):
        raise CorruptCheckpointFile(f"{path} is no torch.distributed.checkpoint index (it holds a {type(found).__name__})")
    return found
