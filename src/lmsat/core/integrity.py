"""Checksums and plausibility checks of the files the pipeline writes and reads back.

Every file one job writes and a later job reads carries a SHA-256 of its data, checked
when it is read, so corruption that keeps a file's shape (zeroed bytes, a hand edit) is a
named error instead of a number in a table:

    HDF5 files    attribute `checksums`: JSON {dataset: {"axis": a, "bounds": [b0, b1, ...],
                  "sha256": [h0, ...]}}, the dataset's C-order bytes hashed in blocks
                  [b_i, b_i+1) along `axis`: one block for a file written at once, one per
                  chunk for the resumable cache (hashed from memory as each chunk is
                  computed, so a chunk lost to a power cut after its marker shows up)
    JSON records  field `record_sha256`: of the canonical JSON text of the other fields
    CSV tables    last column `table_sha256`: of the CSV text without that column

A missing checksum is an error too (an attribute deleted by hand must not switch the check
off). Plausibility checks (`check_values`) refuse values the truth bounds: a loss is
finite and >= 0, an accuracy in [0, 1], a cosine in [-1, 1], a singular value finite and
>= 0. Every error names the file, says to delete it and which rule makes it again.

    checksums = {"loss": block_digests(loss)}; f.attrs["checksums"] = json.dumps(checksums)
    verify_hdf5(f, path)                      # IntegrityError on any mismatch
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path

import numpy as np

CHECKSUM_ATTR = "checksums"
RECORD_FIELD = "record_sha256"
TABLE_COLUMN = "table_sha256"
EMPTY_TABLE_COLUMN = "table_sha256_no_rows"  # the header's last column of a table of no rows
VERIFY_BLOCK_BYTES = 2**26  # bytes read at once when a one-block dataset is verified

# Which rule makes a results path again (for the fix in an error message), first match wins.
REMADE_BY = (
    (r"/bottleneck/cache/", "build_head_cache"),
    (r"/bottleneck/runs/", "train_rank_head"),
    (r"/cache/", "analyse_checkpoint"),
    (r"/(spectra|attention)/", "analyse_checkpoint"),
    (r"/gradient_bottleneck/", "analyse_checkpoint"),
    (r"/weight_diagnostics/", "analyse_checkpoint"),
    (r"/metrics/representation_similarity/", "compare_checkpoint_caches"),
    (r"/metrics/", "compute_checkpoint_metric"),
    (r"/evaluation/", "evaluate_checkpoint"),
    (r"/params/", "count_model_parameters"),
    (r"/ngrams/", "count_corpus_ngrams"),
    (r"/tables/ngram_werror\.csv$", "tabulate_ngrams"),
    (r"/tables/ngram_ground_truth\.csv$", "ngram_ground_truth"),
    (r"/tables/best_final\.csv$", "select_checkpoints"),
    (r"/tables/scaling_", "fit_scaling_law"),
    (r"/tables/bottleneck_", "tabulate_bottleneck"),
    (r"/tables/table1\.", "make_table1"),
    (r"/tables/", "tabulate_metric"),
)


class IntegrityError(ValueError):
    """A file whose data does not match its checksum, lacks one, or holds impossible values."""


def remade_by(path) -> str:
    text = Path(path).as_posix()
    for pattern, rule in REMADE_BY:
        if re.search(pattern, text):
            return f"rule {rule} makes it again"
    return "the rule that made it makes it again"


def corrupt(path, what: str) -> IntegrityError:
    return IntegrityError(
        f"{path} is corrupt: {what}. Fix: delete {path} and rerun snakemake ({remade_by(path)})"
    )


# ---------------------------------------------------------------- digests


def array_sha256(array: np.ndarray) -> str:
    """SHA-256 of an array's C-order bytes (hashed in place when contiguous)."""
    array = np.ascontiguousarray(array)
    return hashlib.sha256(memoryview(array).cast("B")).hexdigest()


def block_digests(array: np.ndarray, axis: int = 0, bounds=None) -> dict:
    """The checksum entry of one dataset: its blocks between `bounds` along `axis` (whole by default)."""
    bounds = [0, array.shape[axis]] if bounds is None else [int(b) for b in bounds]
    index = [slice(None)] * array.ndim
    digests = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        index[axis] = slice(lo, hi)
        digests.append(array_sha256(array[tuple(index)]))
    return dict(axis=axis, bounds=bounds, sha256=digests)


def merge_blocks(entries: list[dict]) -> dict:
    """One checksum entry from per-chunk entries of consecutive blocks (resumable writes),
    in any order; blocks are ordered by where they start."""
    blocks = sorted((b, e["sha256"][0]) for e in entries for b in [tuple(e["bounds"])])
    bounds = [blocks[0][0][0]] + [hi for (_, hi), _ in blocks]
    return dict(axis=entries[0]["axis"], bounds=bounds, sha256=[digest for _, digest in blocks])


def hdf5_checksums(arrays: dict) -> str:
    """The `checksums` attribute of a file written at once from `arrays` (name -> array)."""
    return json.dumps({name: block_digests(np.asarray(values)) for name, values in arrays.items()}, sort_keys=True)


def _dataset_blocks(dataset, entry: dict):
    """Digests of a dataset's stored blocks. Blocks along axis 0 are read in slices of at
    most VERIFY_BLOCK_BYTES (a Pythia cache chunk is ~1 GB) and hashed incrementally, which
    gives the same digest as hashing the block at once."""
    axis, bounds = entry["axis"], entry["bounds"]
    if axis == 0:
        row_bytes = max(1, dataset.dtype.itemsize * int(np.prod(dataset.shape[1:])))
        step = max(1, VERIFY_BLOCK_BYTES // row_bytes)
        digests = []
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            digest = hashlib.sha256()
            for start in range(lo, hi, step):
                digest.update(memoryview(np.ascontiguousarray(dataset[start : min(start + step, hi)])).cast("B"))
            digests.append(digest.hexdigest())
        return digests
    index = [slice(None)] * dataset.ndim
    digests = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        index[axis] = slice(lo, hi)
        digests.append(array_sha256(dataset[tuple(index)]))
    return digests


def file_datasets(f) -> list[str]:
    """Names of every dataset of an open HDF5 file, groups included ("qk/effective_rank")."""
    names = []
    f.visititems(lambda name, item: names.append(name) if hasattr(item, "shape") else None)
    return names


def verify_hdf5(f, path, datasets=None) -> None:
    """IntegrityError unless every dataset of `datasets` (by default every dataset the file
    holds: an entry dropped from the attribute must not skip one) of the open HDF5 file `f`
    matches the checksums recorded in its attributes."""
    raw = f.attrs.get(CHECKSUM_ATTR)
    if raw is None:
        raise corrupt(path, f"it has no `{CHECKSUM_ATTR}` attribute (deleted, or written before checksums existed)")
    try:
        recorded = json.loads(raw)
    except (TypeError, json.JSONDecodeError) as error:
        raise corrupt(path, f"its `{CHECKSUM_ATTR}` attribute is not JSON ({error})") from None
    for name in file_datasets(f) if datasets is None else datasets:
        if name not in recorded:
            raise corrupt(path, f"dataset {name!r} has no recorded checksum")
        if name not in f:
            raise corrupt(path, f"dataset {name!r} is missing")
        entry, dataset = recorded[name], f[name]
        if dataset.ndim == 0 or entry["bounds"][-1] != dataset.shape[entry["axis"]]:
            raise corrupt(path, f"dataset {name!r} has shape {dataset.shape}, not the one it was written with")
        found = _dataset_blocks(dataset, entry)
        bad = [i for i, (a, b) in enumerate(zip(found, entry["sha256"])) if a != b]
        if bad:
            lo, hi = entry["bounds"][bad[0]], entry["bounds"][bad[0] + 1]
            raise corrupt(
                path,
                f"dataset {name!r} does not match its checksum in {len(bad)} of {len(found)} blocks "
                f"(first: [{lo}, {hi}) along axis {entry['axis']})",
            )


# ---------------------------------------------------------------- JSON records


def _canonical(payload: dict) -> bytes:
    body = {k: v for k, v in payload.items() if k != RECORD_FIELD}
    return json.dumps(body, sort_keys=True, allow_nan=True).encode()


def with_record_checksum(payload: dict) -> dict:
    """`payload` (JSON values only, as json.loads gives them) with its `record_sha256`."""
    plain = json.loads(json.dumps(payload, default=float))  # numpy scalars -> what a reader sees
    return {**plain, RECORD_FIELD: hashlib.sha256(_canonical(plain)).hexdigest()}


def verify_record(record, path) -> None:
    if not isinstance(record, dict):
        raise corrupt(path, f"it holds a JSON {type(record).__name__}, not an object")
    found = record.get(RECORD_FIELD)
    if found is None:
        raise corrupt(path, f"it has no `{RECORD_FIELD}` field (deleted, or written before checksums existed)")
    if found != hashlib.sha256(_canonical(record)).hexdigest():
        raise corrupt(path, f"its fields do not match their checksum `{RECORD_FIELD}` (edited by hand?)")


# ---------------------------------------------------------------- CSV tables


def csv_with_checksum(text: str) -> str:
    """CSV text (header first, "\\n" line ends) with a last column holding its SHA-256.

    A table of no rows has nowhere to hold it: its header ends in EMPTY_TABLE_COLUMN
    instead, so a table whose rows were all deleted (header left) is told from one written
    empty (identical_weights when no two checkpoints share weights).
    """
    digest = hashlib.sha256(text.encode()).hexdigest()
    lines = text.split("\n")
    ends = "\n" if text.endswith("\n") else ""
    body = lines[:-1] if ends else lines
    column = TABLE_COLUMN if len(body) > 1 else EMPTY_TABLE_COLUMN
    out = [body[0] + f",{column}"] + [line + f",{digest}" for line in body[1:]]
    return "\n".join(out) + ends


def verify_csv(path) -> str:
    """IntegrityError unless the CSV at `path` matches its `table_sha256` column.

    -> the name of its checksum column (TABLE_COLUMN, or EMPTY_TABLE_COLUMN: no rows).
    """
    text = Path(path).read_text()
    lines = text.split("\n")
    body = lines[:-1] if text.endswith("\n") else lines
    if body and len(body) == 1 and body[0].endswith(f",{EMPTY_TABLE_COLUMN}"):
        return EMPTY_TABLE_COLUMN  # written with no rows
    header = f",{TABLE_COLUMN}"
    if not body or not body[0].endswith(header):
        raise corrupt(path, f"it has no last column `{TABLE_COLUMN}` (removed, or written before checksums existed)")
    if len(body) == 1:
        raise corrupt(path, "it has a header and no rows, but was written with rows (emptied by hand?)")
    digests = {line[-64:] for line in body[1:]}
    stripped = [body[0][: -len(header)]] + [line[:-65] for line in body[1:]]
    plain = "\n".join(stripped) + ("\n" if text.endswith("\n") else "")
    expected = hashlib.sha256(plain.encode()).hexdigest()
    if digests != {expected} or any(line[-65:-64] != "," for line in body[1:]):
        raise corrupt(path, f"its rows do not match their checksum `{TABLE_COLUMN}` (edited by hand?)")
    return TABLE_COLUMN


# ---------------------------------------------------------------- plausibility

# What the truth bounds, by value name: (low, high), both inclusive; math.inf where unbounded.
BOUNDS = {
    "loss": (0.0, math.inf),
    "loss_sem": (0.0, math.inf),
    "sequence_loss": (0.0, math.inf),  # per-sequence mean losses (the loss metric)
    "eval_loss": (0.0, math.inf),
    "eval_acc": (0.0, 1.0),
    "accuracy": (0.0, 1.0),
    "anisotropy": (-1.0, 1.0),
    "anisotropy_layers": (-1.0, 1.0),  # mean pairwise cosines
    "anisotropy_last": (-1.0, 1.0),
    "cosine": (-1.0, 1.0),
    "singular_values": (0.0, math.inf),
}


def check_values(path, where: str, values: dict, bounds: dict | None = None) -> None:
    """IntegrityError naming `path`, `where` (model@revision) and the key unless every value
    of `values` (name -> number or array) is a finite real within its BOUNDS entry."""
    bounds = BOUNDS if bounds is None else bounds
    for key, value in values.items():
        if isinstance(value, bool) or value is None or isinstance(value, str):
            raise corrupt(path, f"{where}: `{key}` is {value!r} ({type(value).__name__}), not a number")
        array = np.asarray(value)
        if not (np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)):
            raise corrupt(path, f"{where}: `{key}` holds {array.dtype} values, not numbers")
        if not np.isfinite(array).all():
            raise corrupt(path, f"{where}: `{key}` holds NaN or Inf")
        low, high = bounds.get(key, (-math.inf, math.inf))
        if array.size and (array.min() < low or array.max() > high):
            raise corrupt(path, f"{where}: `{key}` is outside [{low}, {high}] (min {array.min():.6g}, max {array.max():.6g})")


def require_keys(path, where: str, record: dict, keys) -> None:
    """IntegrityError naming the first of `keys` that `record` lacks."""
    for key in keys:
        if key not in record:
            raise corrupt(path, f"{where}: the record has no `{key}`")


def verified_rows(path) -> list[dict]:
    """The rows (column -> text) of a CSV table written by lmsat.products.table_files.write_csv, after
    checking its checksum (no pandas: the workflow reads best_final.csv at DAG time)."""
    import csv

    verify_csv(path)
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def selected_revision(selection_path, loss_path, model: str, kind: str, revisions) -> str:
    """The `kind` ("best", "final") revision of `model` in best_final.csv, checked: the
    table matches its checksum, names a revision of the model's plan, and (best) is the
    loss-minimising revision of the loss table it was selected from."""
    rows = [r for r in verified_rows(selection_path) if r["model"] == model and r["kind"] == kind]
    if len(rows) != 1:
        raise corrupt(selection_path, f"it has {len(rows)} {kind} rows for model {model}, not one")
    revision = rows[0]["revision"]
    if revision not in revisions:
        raise corrupt(
            selection_path,
            f"its {kind} revision of model {model} is {revision!r}, not one of the model's revisions "
            f"({', '.join(revisions)})",
        )
    if kind == "best":
        flagged = [r["revision"] for r in verified_rows(loss_path) if r["model"] == model and r["is_best"] == "True"]
        if flagged != [revision]:
            raise corrupt(
                selection_path,
                f"its best revision of model {model} is {revision!r}, but the loss table {loss_path} "
                f"flags {flagged or 'none'} as best",
            )
    return revision
