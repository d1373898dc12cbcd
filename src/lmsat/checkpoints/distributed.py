"""PyTorch distributed checkpoints, read in one process: the model's tensors only.

OLMo-core (`stepN/model_and_optim/`), torchtitan (`step-N/`) and Megatron's `torch_dist`
(`iter_NNNNNNN/`) write torch.distributed.checkpoint's format:

    <folder>/.metadata       the index: each entry's global shape and dtype, the chunks it
                             was saved in (one per rank's shard), and where each chunk's
                             bytes are (file, offset, length); a pickle (lmsat.checkpoints.pickles)
    <folder>/__R_S.distcp    rank R's files: chunks, each one torch.save blob

The model's entries and the optimizer's sit side by side in the same files; a reader asks
for the model's keys only, and only their byte ranges are read (the optimizer's moments,
twice the model's size for Adam, are never read). A chunk is read with
torch.load(weights_only=True) straight from its byte range and put in place in the full
tensor (a tensor saved in one chunk is that chunk itself: no copy).

    checkpoint = open_distributed(folder)              # the index, read safely
    checkpoint.tensors                                 # {key: (dtype, shape)}, no bytes read
    checkpoint.check_files(keys)                       # files there and long enough, before compute
    tensors = checkpoint.read(keys)                    # {key: tensor}, on the CPU

Why not torch's FileSystemReader: it unpickles `.metadata` with a plain `pickle.load` (a
crafted index would run code) and needs the writer's classes importable (OLMo-core's).
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path

from lmsat.checkpoints.pickles import METADATA, CorruptCheckpointFile, UnsafePickle, read_dcp_metadata

DTYPE_NAMES = {"float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16",
               "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2", "int64": "I64", "int32": "I32",
               "int16": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL"}  # safetensors' names (validation.FLOATING)


ZIP_MAGIC = b"PK\x03\x04"  # the first bytes of a torch.save blob


def dtype_name(dtype) -> str:
    """A torch dtype as safetensors names it ("F32"), as lmsat.checkpoints.validation compares them."""
    return DTYPE_NAMES.get(str(dtype).removeprefix("torch."), str(dtype).removeprefix("torch."))


class _Window(io.RawIOBase):
    """A read-only, seekable view of bytes [offset, offset + length) of an open file: one
    chunk's torch.save blob, read by torch.load without a copy of the whole chunk first."""

    def __init__(self, handle, offset: int, length: int):
        super().__init__()
        self.handle, self.start, self.length, self.position = handle, offset, length, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, position: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.length}[whence]
        self.position = min(max(base + position, 0), self.length)
        return self.position

    def readinto(self, buffer) -> int:
        wanted = min(len(buffer), self.length - self.position)
        if wanted <= 0:
            return 0
        self.handle.seek(self.start + self.position)
        got = self.handle.readinto(memoryview(buffer)[:wanted])
        self.position += got or 0
        return got or 0


@dataclass
class DistributedCheckpoint:
    """A distributed checkpoint's index, read (lmsat.checkpoints.pickles), and how to read its tensors."""

    folder: Path
    metadata: object  # torch.distributed.checkpoint.metadata.Metadata
    tensors: dict[str, tuple[object, tuple[int, ...]]] = field(default_factory=dict)  # key -> (torch dtype, global shape)
    chunks: dict[str, list[tuple[tuple[int, ...], tuple[int, ...], object]]] = field(default_factory=dict)
    # key -> [(offsets, sizes, _StorageInfo)] (where each saved chunk's bytes are)

    def files_of(self, keys) -> dict[str, int]:
        """{file name: bytes it must hold at least} for the chunks of `keys`."""
        needed: dict[str, int] = {}
        for key in keys:
            for _, _, info in self.chunks[key]:
                needed[info.relative_path] = max(needed.get(info.relative_path, 0), info.offset + info.length)
        return needed

    def check_files(self, keys, fix: str = "") -> list[Path]:
        """The files holding `keys`, each checked to be there and as long as the index says:
        CorruptCheckpointFile naming a missing or truncated shard, before any byte is read."""
        found = []
        for name, needed in sorted(self.files_of(keys).items()):
            path = self.folder / name
            if Path(name).is_absolute() or ".." in Path(name).parts:
                raise CorruptCheckpointFile(f"{self.folder / METADATA} places tensors in {name!r}, outside the checkpoint")
            if not path.is_file():
                raise CorruptCheckpointFile(f"{path} is missing: {self.folder / METADATA} places model tensors in it. "
                                            f"Fix: {fix or 'copy the whole checkpoint folder again'}")
            size = path.stat().st_size
            if size < needed:
                raise CorruptCheckpointFile(f"{path} is truncated: {size} bytes, but {self.folder / METADATA} places "
                                            f"tensors up to byte {needed}. Fix: {fix or 'copy the whole checkpoint folder again'}")
            found.append(path)
        return found

    def read(self, keys, fix: str = "") -> dict:
        """{key: tensor} of `keys` (their global tensors, on the CPU), reading only their chunks."""
        import torch

        self.check_files(keys, fix)
        by_file: dict[str, list[tuple[str, tuple, tuple, object]]] = {}
        for key in keys:
            for offsets, sizes, info in self.chunks[key]:
                by_file.setdefault(info.relative_path, []).append((key, offsets, sizes, info))
        out: dict = {}
        for name, items in by_file.items():
            path = self.folder / name
            # the file mapped (copy-on-write, as torch.load(mmap=True) maps one): a chunk's tensor is its bytes there
            mapped = torch.UntypedStorage.from_file(str(path), False, path.stat().st_size)
            with open(path, "rb", buffering=0) as handle:
                for key, offsets, sizes, info in sorted(items, key=lambda item: item[3].offset):
                    dtype, shape = self.tensors[key]
                    chunk = _load_chunk(handle, path, info, key, fix, mapped)
                    if tuple(chunk.shape) != tuple(sizes) or chunk.dtype != dtype:
                        raise CorruptCheckpointFile(
                            f"{path}: the chunk of {key} at offset {tuple(offsets)} holds a {tuple(chunk.shape)} "
                            f"{chunk.dtype} tensor, but {self.folder / METADATA} says {tuple(sizes)} {dtype}")
                    if tuple(sizes) == tuple(shape):
                        out[key] = chunk  # saved whole: the chunk is the tensor
                        continue
                    if key not in out:
                        out[key] = torch.empty(shape, dtype=dtype)
                    out[key][tuple(slice(o, o + s) for o, s in zip(offsets, sizes))].copy_(chunk)
        return out


def _load_chunk(handle, path: Path, info, key: str, fix: str, mapped=None):
    """One chunk's tensor from its byte range, read as torch.load(weights_only=True, mmap=True)
    reads a file (its weights-only unpickler; the tensor's storage the chunk's bytes in
    `mapped`, the file's copy-on-write mapping); plain torch.load(weights_only=True) of the
    range where that private path of torch is not there."""
    import torch

    if getattr(info, "transform_descriptors", None):
        raise CorruptCheckpointFile(f"{path}: the chunk of {key} is stored through {info.transform_descriptors} "
                                    "(a torch.distributed.checkpoint extension lmsat does not read)")
    window = _Window(handle, info.offset, info.length)
    magic = window.read(4)
    window.seek(0)
    try:
        if magic != ZIP_MAGIC:  # every torch.save of torch >= 1.6 is a zip archive
            raise ValueError(f"it starts with {magic!r}, not a zip archive's {ZIP_MAGIC!r}")
        chunk = None
        if mapped is not None:
            chunk = _mapped_load(torch, window, mapped[info.offset : info.offset + info.length])
        if chunk is None:
            window.seek(0)
            chunk = torch.load(window, map_location="cpu", weights_only=True)
    except Exception as error:  # torch.load's errors on a broken blob vary (RuntimeError, UnpicklingError, ...)
        if "GLOBAL " in str(error):
            raise UnsafePickle(f"{path}: the chunk of {key} at byte {info.offset} asks for code to run when read "
                               f"({str(error).splitlines()[-1][:200]}); it was not read") from None
        raise CorruptCheckpointFile(
            f"{path}: the chunk of {key} (bytes {info.offset}..{info.offset + info.length}) is no torch.save blob: the "
            f"file is zero-filled or overwritten ({str(error).strip().splitlines()[0][:200]}). "
            f"Fix: {fix or 'copy the whole checkpoint folder again'}") from None
    if not isinstance(chunk, torch.Tensor):
        raise CorruptCheckpointFile(f"{path}: the chunk of {key} holds a {type(chunk).__name__}, not a tensor")
    return chunk


def _mapped_load(torch, window, storage):
    """torch.load(weights_only=True, mmap=True)'s own reading (torch.serialization._load with
    the weights-only unpickler and the mapped bytes as overall_storage) of one blob; None when
    this torch has no such private path (then the blob is read into memory instead)."""
    try:
        from torch import _weights_only_unpickler
        from torch.serialization import _load
    except ImportError:
        return None
    try:
        return _load(torch._C.PyTorchFileReader(window), "cpu", _weights_only_unpickler, overall_storage=storage,
                     encoding="utf-8")
    except TypeError:  # another signature of the private _load
        return None


def open_distributed(folder) -> DistributedCheckpoint:
    """The index of the distributed checkpoint in `folder` (tensor entries only; bytes
    entries, such as Megatron's per-layer `_extra_state`, are left out)."""
    folder = Path(folder)
    metadata = read_dcp_metadata(folder)
    checkpoint = DistributedCheckpoint(folder, metadata)
    located: dict[tuple[str, tuple[int, ...]], object] = {}
    for index, info in metadata.storage_data.items():
        offset = getattr(index, "offset", None)
        located[(index.fqn, tuple(offset) if offset is not None else ())] = info
    for key, entry in metadata.state_dict_metadata.items():
        chunks = getattr(entry, "chunks", None)
        if chunks is None:  # BytesStorageMetadata: pickled objects, never tensors of the model
            continue
        shape = tuple(int(n) for n in entry.size)
        checkpoint.tensors[key] = (entry.properties.dtype, shape)
        placed = []
        for chunk in chunks:
            offsets, sizes = tuple(int(n) for n in chunk.offsets), tuple(int(n) for n in chunk.sizes)
            info = located.get((key, offsets))
            if info is None:
                raise CorruptCheckpointFile(f"{folder / METADATA} lists a chunk of {key} at {offsets} but not where its "
                                            "bytes are: the index is damaged")
            placed.append((offsets, sizes, info))
        checkpoint.chunks[key] = placed
    return checkpoint
