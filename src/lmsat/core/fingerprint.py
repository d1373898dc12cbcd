"""Fingerprints of weights the pipeline did not make, or that it made but cannot stop
anyone from replacing: local checkpoints (`source: local`), hub caches staged by hand, the
toy suite's hub cache after its training job. The workflow records them and compares, so
that changed files rerun their jobs (or stop the plan, naming them) instead of leaving
tables that describe weights no longer on disk.

Cheap at Pythia scale (a 12b checkpoint is 24 GB): files up to FULL_HASH_BYTES are hashed
whole (configs, tokenizers, the toy models' weights); larger ones are fingerprinted by size,
modification time and the SHA-256 of their safetensors header (names, dtypes, shapes and
offsets of every tensor), which reads a few kB of a multi-GB file.

    from lmsat.core.fingerprint import weights_fingerprint
    weights_fingerprint("results/default/toy/hub/models--lmsat-toy--toy-d16")
"""

from __future__ import annotations

import hashlib
import os
import struct
from pathlib import Path

FULL_HASH_BYTES = 16 * 2**20  # below this a file is hashed whole
HEADER_MAX_BYTES = 100 * 2**20  # safetensors' own limit on its JSON header
# huggingface_hub's bookkeeping, not weights (lock files, "this file does not exist" markers)
IGNORED_DIRS = {".locks", ".no_exist"}
# written by lmsat.checkpoints.fetch.fetch_checkpoint into the hub caches it downloads: a cache without
# it was staged by hand, is tracked like a local checkpoint and is never deleted
FETCHED_MARKER = ".lmsat-fetched.json"
# bookkeeping, not weights: our marker, and the one Snakemake puts in directory outputs
IGNORED_FILES = {FETCHED_MARKER, ".snakemake_timestamp"}


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(2**20), b""):
            digest.update(block)
    return digest.hexdigest()


def _safetensors_header(path: Path) -> str:
    """SHA-256 of a safetensors file's length prefix and JSON header ("" if it has none)."""
    with open(path, "rb") as handle:
        prefix = handle.read(8)
        if len(prefix) < 8:
            return ""
        (length,) = struct.unpack("<Q", prefix)
        header = handle.read(min(length, HEADER_MAX_BYTES))
    return hashlib.sha256(prefix + header).hexdigest()


def file_fingerprint(path: Path) -> str:
    """`sha256:<hex>` of a small file; `size:mtime_ns:header-sha256` of a large one."""
    stat = path.stat()
    if stat.st_size <= FULL_HASH_BYTES:
        return f"sha256:{_sha256(path)}"
    header = _safetensors_header(path) if path.suffix == ".safetensors" else ""
    return f"{stat.st_size}:{stat.st_mtime_ns}:{header}"


def weights_fingerprint(directory) -> dict[str, str]:
    """{path relative to `directory`: file_fingerprint} of every file below it (symlinks
    followed, bookkeeping left out: IGNORED_DIRS, IGNORED_FILES); {} if absent. A file (a
    trainer's one-file checkpoint: nanoGPT, nanochat, Lightning): {its name: its fingerprint}."""
    root = Path(directory)
    if root.is_file():
        return {root.name: file_fingerprint(root)}
    found = {}
    for folder, dirs, files in os.walk(root, followlinks=True):
        dirs[:] = sorted(d for d in dirs if d not in IGNORED_DIRS)
        for name in sorted(files):
            path = Path(folder) / name
            if name in IGNORED_FILES or not path.is_file():
                continue
            found[path.relative_to(root).as_posix()] = file_fingerprint(path)
    return found


def changed_files(recorded: dict[str, str], current: dict[str, str]) -> list[str]:
    """Files added, removed or changed between two fingerprints, sorted."""
    return sorted(name for name in recorded.keys() | current.keys() if recorded.get(name) != current.get(name))
