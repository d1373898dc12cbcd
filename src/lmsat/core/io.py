"""Atomic file writes and job logging shared by every step.

An output appears under its final name only once complete (temp name, then os.replace),
so a killed job never leaves a file that looks finished.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import json
import logging
import os
import sys
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # src/lmsat: every file of the package, subpackages too


class DiskFullError(OSError):
    """The disk filled up while an output was written; the message names the output."""


def is_disk_full(error: BaseException) -> bool:
    """ENOSPC or EDQUOT, also as h5py reports it (in the message, without an errno)."""
    text = str(error)
    return (
        getattr(error, "errno", None) in (errno.ENOSPC, errno.EDQUOT)
        or "No space left on device" in text
        or "Disk quota exceeded" in text
    )


@contextlib.contextmanager
def atomic_path(path: str | Path):
    """Yield a temp path beside `path`; rename it to `path` only if the block succeeds.

    A full disk while the block writes raises DiskFullError naming `path` (a bare
    `[Errno 28]` names no file); the temp file is removed either way.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        yield tmp
        os.replace(tmp, path)
    except OSError as error:
        if not is_disk_full(error) or isinstance(error, DiskFullError):
            raise
        raise DiskFullError(
            errno.ENOSPC,
            f"no space left on the disk of {path} while writing it ({error}); nothing was left under its name. "
            f"Fix: free space on that disk (or point results/ at a larger one) and rerun",
        ) from error
    finally:
        if tmp.exists():
            tmp.unlink()


def fsync_path(path: str | Path) -> None:
    """Flush a file's (or a directory's) data to the disk: what a marker or rename says is
    written survives a power cut."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json(path: str | Path, payload) -> None:
    """An object gets its checksum field (lmsat.core.integrity.RECORD_FIELD), checked on reading."""
    from lmsat.core.integrity import with_record_checksum  # here: lmsat.core.io itself needs only the stdlib

    if isinstance(payload, dict):
        payload = with_record_checksum(payload)
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(payload, indent=2, sort_keys=True, default=float) + "\n")


def read_json(path: str | Path, require_checksum: bool = False):
    """A JSON file; an object with a checksum field must match it (and must have one with
    require_checksum): lmsat.core.integrity.IntegrityError otherwise."""
    from lmsat.core.integrity import RECORD_FIELD, verify_record

    try:
        payload = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path} is unreadable or not JSON ({error}); delete it and rerun") from error
    if require_checksum or (isinstance(payload, dict) and RECORD_FIELD in payload):
        verify_record(payload, path)
    return payload


class IdentityError(ValueError):
    """An input made for another checkpoint (model, revision, metric, ...) than its path
    promises: a file copied or moved by hand would otherwise be tabulated as the right one."""


def promised_by_path(path: str | Path, *names: str) -> dict[str, str]:
    """What a results path promises, from its last components: the directories, then the
    file's stem, one per name (the rule's output pattern ends in `.../{model}/{revision}.h5`).

    >>> promised_by_path("results/metrics/loss/m/step8.json", "metric", "model", "revision")
    {'metric': 'loss', 'model': 'm', 'revision': 'step8'}
    """
    path = Path(path)
    parts = [*path.parent.parts, path.stem][-len(names) :]
    return dict(zip(names, parts))


def check_identity(path: str | Path, found: dict, promised: dict) -> None:
    """IdentityError unless `found` (a file's own record) agrees with `promised` (its path)."""
    if all(str(found.get(key)) == str(value) for key, value in promised.items()):
        return
    made = ", ".join(f"{key}={found.get(key)!r}" for key in promised)
    want = ", ".join(f"{key}={value!r}" for key, value in promised.items())
    raise IdentityError(
        f"{path} was made for {made}, but its path promises {want} (copied or moved from another "
        f"checkpoint?). Fix: delete {path} and rerun, so that Snakemake makes it again"
    )


def read_record(path: str | Path, *names: str):
    """A per-checkpoint JSON record whose fields `names` must match the last path components,
    e.g. read_record("results/metrics/loss/m/step8.json", "metric", "model", "revision")."""
    record = read_json(path, require_checksum=True)
    check_identity(path, record, promised_by_path(path, *names))
    return record


SECRET_VARIABLES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")  # hub tokens, read by huggingface_hub


class RedactingFormatter(logging.Formatter):
    """Writes `<HF_TOKEN>` wherever a token from the environment would appear in a log line
    (an error message quoting a header or URL, say), tracebacks included."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        for name in SECRET_VARIABLES:
            secret = os.environ.get(name, "")
            if len(secret) >= 8:  # a real token; never mask short strings everywhere
                text = text.replace(secret, f"<{name}>")
        return text


def setup_logging(log_path: str | None = None, level=logging.INFO) -> None:
    """Send logging (and warnings) to the job's log file, and to stderr, tokens masked."""
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if log_path:
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(log_path, mode="w"))
    formatter = RedactingFormatter("%(asctime)s %(name)s %(levelname)s %(message)s")
    for handler in handlers:
        handler.setFormatter(formatter)
    logging.basicConfig(level=level, handlers=handlers, force=True)
    logging.captureWarnings(True)

    def log_uncaught(kind, value, tb):  # the job's log must hold the error Snakemake shows
        logging.getLogger("lmsat").critical("uncaught exception", exc_info=(kind, value, tb))

    sys.excepthook = log_uncaught


@functools.lru_cache(maxsize=1)
def source_sha256() -> str:
    """SHA-256 of the lmsat package's own files (code and package data). Editing the library
    reruns no job (a comment would otherwise rerun 1,540 GPU jobs); instead every output
    records this hash, and each table marks the rows computed by other code."""
    root = PACKAGE_ROOT
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def library_versions() -> dict[str, str]:
    """Versions of the libraries that shape a result, and the hash of lmsat's own source
    (`lmsat_source`), recorded in every output."""
    from importlib import metadata

    versions = {"lmsat_source": source_sha256()}
    for name in ("lmsat", "torch", "transformers", "numpy", "h5py", "tokenizers"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "absent"
    return versions
