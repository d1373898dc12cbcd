"""The per-checkpoint HDF5 files of the weights metrics (spectra, attention, gradient
bottleneck, weight diagnostics): written at once, read back checked.

    write_checked_hdf5(path, arrays, attrs, format_version)
        one dataset per array, `attrs` (None values left out), the library versions, the
        format version and the arrays' checksums (lmsat.core.integrity), atomically
    read_checked_hdf5(path, datasets, format_version, error) -> (arrays, attrs)
        `error` (the caller's exception class) for another format version, a missing
        dataset or an unreadable file; IntegrityError for an array off its checksum
    check_bounds(path, where, name, values, low, high, why)
        IntegrityError naming the file, the dataset, the first value its quantity cannot
        take and the rule that makes the file again (a checksum recomputed after an edit,
        or a bug that wrote it, must not reach a table)
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable

import h5py
import numpy as np

from lmsat.core.integrity import CHECKSUM_ATTR, corrupt, hdf5_checksums, verify_hdf5
from lmsat.core.io import atomic_path, library_versions


def write_checked_hdf5(path, arrays: dict[str, np.ndarray], attrs: dict, format_version: int,
                       digests: dict[str, np.ndarray] | None = None) -> None:
    """`digests`: what the checksums are of, when a dataset is stored otherwise than hashed
    (strings: hashed as the bytes written); by default the arrays themselves."""
    with atomic_path(path) as tmp, h5py.File(tmp, "w") as f:
        for key, values in arrays.items():
            f.create_dataset(key, data=values)
        f.attrs.update({k: v for k, v in attrs.items() if v is not None})
        f.attrs.update(versions=json.dumps(library_versions(), sort_keys=True), format_version=format_version)
        f.attrs[CHECKSUM_ATTR] = hdf5_checksums(arrays if digests is None else digests)


def read_checked_hdf5(path, datasets: tuple[str, ...], format_version: int, error: type[Exception],
                      text: tuple[str, ...] = (),
                      missing: Callable[[list[str]], Exception] | None = None) -> tuple[dict[str, np.ndarray], dict]:
    """The `datasets` (those in `text` decoded to str, object arrays, and left to the caller
    to check against their checksums) and the attributes (numpy scalars as Python ones).
    `missing`: the exception for the datasets the file lacks, where the caller's differs."""
    try:
        with h5py.File(path, "r") as f:
            if f.attrs.get("format_version") != format_version:
                raise error(f"{path} is of another format version; delete it and rerun")
            lacking = [key for key in datasets if key not in f]
            if lacking:
                raise missing(lacking) if missing else error(f"{path} lacks datasets {lacking}; delete it and rerun")
            numeric = tuple(key for key in datasets if key not in text)
            verify_hdf5(f, path, numeric)
            arrays = {key: f[key][...] for key in numeric}
            for key in text:
                arrays[key] = np.array([v.decode() if isinstance(v, bytes) else str(v) for v in f[key][...]], dtype=object)
            attrs = {k: (v.item() if isinstance(v, np.generic) else v) for k, v in f.attrs.items()}
    except OSError as err:
        raise error(f"{path} is unreadable or truncated ({err}); delete it and rerun") from err
    return arrays, attrs


ROUND_OFF = 1e-9  # relative slack at a bound a value reaches exactly (a share of 1, a stable rank of min(rows, cols))


def check_bounds(path, where: str, name: str, values, low=-math.inf, high=math.inf, why: str = "",
                 labels=None, nan=False, posinf=False, tolerance: float = ROUND_OFF, kind: str = "dataset") -> None:
    """IntegrityError (lmsat.core.integrity.corrupt: the file, the rule that makes it again)
    unless every value of dataset (or attribute: `kind`) `name` is within [low, high] (each a number or an array
    broadcast against `values`: a stable rank's bound is its matrix's min(rows, cols)), up
    to `tolerance` of max(1, |bound|) for round-off. `where`: the checkpoint; `why`: the
    quantity, in words ("a share", "condition >= 1"); `labels`: what each value is (a
    matrix's name), for the message. NaN only where `nan` (a bool or a mask) allows it, +inf
    only with `posinf` (a singular matrix's condition number)."""
    values = np.asarray(values, dtype=np.float64)
    low = np.broadcast_to(np.asarray(low, dtype=np.float64), values.shape)
    high = np.broadcast_to(np.asarray(high, dtype=np.float64), values.shape)
    slack = lambda bound: tolerance * np.maximum(1.0, np.abs(np.where(np.isfinite(bound), bound, 0.0)))  # noqa: E731
    with np.errstate(invalid="ignore"):
        inside = (values >= low - slack(low)) & (values <= high + slack(high))
    inside |= np.isnan(values) & np.broadcast_to(np.asarray(nan, dtype=bool), values.shape)
    inside |= np.isposinf(values) & bool(posinf)
    inside &= ~np.isneginf(values)
    if inside.all():
        return
    i = np.unravel_index(int(np.argmin(inside.reshape(-1))), values.shape)
    label = f" of {labels[i[0]]}" if labels is not None else (f" at {tuple(int(j) for j in i)}" if values.ndim else "")
    bounds = f"[{low[i]:.6g}, {high[i]:.6g}]"
    raise corrupt(path, f"{where}: {kind} `{name}`{label} is {float(values[i])!r}, outside {bounds}" + (f" ({why})" if why else ""))
