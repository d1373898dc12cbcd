"""Publish local checkpoints into the Hugging Face hub cache layout.

The toy suite's checkpoints then load through exactly the same call as Pythia's:

    AutoModelForCausalLM.from_pretrained("lmsat/toy-d16", revision="step64",
                                         cache_dir=cache, local_files_only=True)

Layout written (the one huggingface_hub reads offline):

    <cache>/models--<org>--<name>/snapshots/<commit>/{config.json, model.safetensors, ...}
    <cache>/models--<org>--<name>/refs/<revision>      # contains <commit>

Files are real files, not symlinks into blobs/ (the hub reads either). The commit is a
sha1 over the file names and contents, so publishing the same weights twice is a no-op.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from pathlib import Path

REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")
REVISION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class RevisionNotFoundError(ValueError):
    """A repo or revision is not in the local hub cache."""


def repo_dir(cache_dir, repo_id: str) -> Path:
    """<cache>/models--<org>--<name> (validates repo_id)."""
    if not REPO_ID.fullmatch(repo_id):
        raise ValueError(f"repo_id={repo_id!r}: expected 'org/name' (letters, digits, ._-)")
    return Path(cache_dir) / ("models--" + repo_id.replace("/", "--"))


def _commit_of(folder: Path) -> str:
    """sha1 over (relative name, size, contents) of every file, in sorted name order."""
    digest = hashlib.sha1()
    for file in sorted(p for p in folder.rglob("*") if p.is_file()):
        name = file.relative_to(folder).as_posix().encode()
        digest.update(len(name).to_bytes(8, "little") + name)
        digest.update(file.stat().st_size.to_bytes(8, "little"))
        with open(file, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def publish_revision(model, tokenizer, cache_dir, repo_id: str, revision: str) -> str:
    """Save model (safetensors) + tokenizer as revision `revision` of `repo_id`; returns the commit.

    Idempotent: the same files give the same commit, and re-publishing only rewrites the
    ref. Safe against concurrent publishers (the snapshot appears by one atomic rename).
    """
    if not REVISION.fullmatch(revision):
        raise ValueError(f"revision={revision!r}: expected a simple name like 'step64'")
    root = repo_dir(cache_dir, repo_id)
    (root / "snapshots").mkdir(parents=True, exist_ok=True)
    (root / "refs").mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=root, prefix=".publish-"))
    try:
        model.save_pretrained(staging)
        if tokenizer is not None:
            tokenizer.save_pretrained(staging)
        commit = _commit_of(staging)
        target = root / "snapshots" / commit
        try:
            os.rename(staging, target)
        except OSError:
            if not target.is_dir():  # not "already published": a real failure
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    _write_atomic(root / "refs" / revision, commit)
    return commit


def _natural_key(name: str):
    return [
        (0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", name)
    ]


def list_revisions(cache_dir, repo_id: str) -> list[str]:
    """Revisions (refs) of `repo_id` in the cache, in natural order (step2 before step10)."""
    refs = repo_dir(cache_dir, repo_id) / "refs"
    if not refs.is_dir():
        return []
    names = [p.name for p in refs.iterdir() if p.is_file() and REVISION.fullmatch(p.name)]
    return sorted(names, key=_natural_key)


def snapshot_path(cache_dir, repo_id: str, revision: str) -> Path:
    """Folder holding the files of `revision` of `repo_id`."""
    root = repo_dir(cache_dir, repo_id)
    ref = root / "refs" / revision
    if not REVISION.fullmatch(revision) or not ref.is_file():
        known = ", ".join(list_revisions(cache_dir, repo_id)) or "none"
        raise RevisionNotFoundError(
            f"{repo_id}: revision {revision!r} not in the hub cache {cache_dir} "
            f"(revisions there: {known}); publish it with publish_revision first"
        )
    snapshot = root / "snapshots" / ref.read_text().strip()
    if not snapshot.is_dir():
        raise RevisionNotFoundError(
            f"{repo_id}: revision {revision!r} points to missing snapshot {snapshot}; "
            "publish it again"
        )
    return snapshot
