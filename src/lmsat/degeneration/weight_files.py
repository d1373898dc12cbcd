"""Representation degeneration along training: per-checkpoint weight files and tidy tables.

One job per checkpoint loads the model once and writes two HDF5 files (Godey et al. 4.2,
and Kobayashi et al. for the attention products):

    results/spectra/{model}/{revision}.h5
        singular_values  (min(n_valid_rows, d),) float64, descending (the LM head's)
        attrs            suite, model, revision, step, tokens, n_rows (head rows, padding
                         included), n_valid_rows (rows kept for the SVD), tokenizer_size,
                         hidden_size, head_sha256 (raw bytes of the whole head), head_dtype,
                         embedding_sha256 (raw bytes of the input embedding),
                         versions (JSON), format_version
    results/attention/{model}/{revision}.h5
        {qk,vo}/singular_values  (n_layers, n_heads, d_head) float64, descending per head
        {qk,vo}/{effective_rank,stable_rank,nuclear_norm,nuclear_ratio,balance_gap}
                                 (n_layers, n_heads) float64
        attrs            suite, model, revision, step, tokens, n_layers, n_heads,
                         n_kv_heads, d_head, hidden_size, versions, format_version

Both files carry `checksums` (SHA-256 of every dataset, lmsat.core.integrity), verified by
read_spectrum / read_attention with their values (finite; singular values >= 0).

lmsat.products.degeneration_tables turns these files and the anisotropy metric records into the tidy tables
behind Figs. 2-5 and the attention figure (lmsat.products.metrics registers which).

Checkpoint sanity: revisions of one model whose LM heads, or whose input embeddings, hash
to the same sha256 are bit-identical there: EleutherAI/pythia#205 (86 of 154 pythia-2.8b
branches serve final-era weights, heads included) and #206 (pythia-12b step50000 and
step58000 serve the final checkpoint's first shard: its input embedding and early layers,
with a head of their own). Every member of such a group is flagged `identical_weights` in
the tables and listed in the identical-weights table, so figures can draw them apart.
"""

from __future__ import annotations

import logging
import math
from concurrent.futures import Future

import numpy as np

from lmsat.core.checked_hdf5 import check_bounds, read_checked_hdf5, write_checked_hdf5
from lmsat.core.integrity import BOUNDS, check_values
from lmsat.core.io import check_identity, promised_by_path

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
ATTENTION_KINDS = ("qk", "vo")
ATTENTION_SCALARS = ("effective_rank", "stable_rank", "nuclear_norm", "nuclear_ratio", "balance_gap")
RECORD_KEYS = ("suite", "model", "revision", "step", "tokens")  # identify a checkpoint in every table


class WeightsFileError(ValueError):
    """A spectra/attention file that is unreadable, incomplete or of another format."""


# --- per-checkpoint analysis (torch is imported only here) -------------------------------


def valid_head_rows(n_rows: int, tokenizer_size: int | None, drop_padding_rows: bool, tokenizer: str = "") -> int:
    """Rows of the head that enter the SVD: the first `tokenizer_size` ones, or all of them.

    Rows past the tokenizer's size are vocabulary padding (Pythia: 50304 rows for 50277
    tokens; the toy suite pads V + 2 to a multiple of 8): never a target, so not part of the
    vocabulary's geometry. A tokenizer larger than the head is a config mismatch.
    """
    if not drop_padding_rows or tokenizer_size is None:
        return n_rows
    if tokenizer_size > n_rows:
        raise ValueError(
            f"tokenizer {tokenizer!r} has {tokenizer_size} entries but the LM head only {n_rows} rows: "
            "the model's `tokenizer` in the config is not its own; fix it, or set "
            "spectra.drop_padding_rows: false to keep every head row"
        )
    return tokenizer_size


def head_spectrum(
    model, tokenizer_size: int | None = None, drop_padding_rows: bool = True, tokenizer: str = "", pool=None,
    gram=None,
) -> dict:
    """Singular values of the LM head (padding rows dropped, see valid_head_rows) and its identity.

    Computed on the device the model is on (float64 Gram there; only d values come back).
    head_sha256 hashes the whole head (padding included) as loaded: the checkpoint's own
    dtype in the checkpoint job, which loads with dtype "auto" (float16 for Pythia); before
    that job loaded float32 and hashed float32 bytes, so hashes of files from those runs
    differ from new ones for the same weights (compare within one run's files; rerun
    analyse_checkpoint to mix). embedding_sha256 hashes the input embedding (the same matrix
    when they are tied). With `pool` (an executor) the two hashes are Futures computed in
    its threads, resolved by write_spectrum. `gram`: the kept rows' Gram if already made
    (spectra.singular_values; the job shares it with the gradient bottleneck).
    """
    from lmsat.checkpoints.adapters import lm_head_matrix
    from lmsat.degeneration.spectra import matrix_sha256, matrix_sha256_later, singular_values

    head = lm_head_matrix(model)  # (V, d), padding rows included
    embedding = model.get_input_embeddings().weight
    if pool is None:
        hashes = dict(head_sha256=matrix_sha256(head), embedding_sha256=matrix_sha256(embedding))
    else:
        hashes = dict(
            head_sha256=matrix_sha256_later(head, pool), embedding_sha256=matrix_sha256_later(embedding, pool)
        )
    n_valid_rows = valid_head_rows(head.shape[0], tokenizer_size, drop_padding_rows, tokenizer)
    return dict(
        singular_values=singular_values(head, n_valid_rows=n_valid_rows, gram=gram),
        **hashes,
        n_rows=int(head.shape[0]),
        n_valid_rows=int(n_valid_rows),
        hidden_size=int(head.shape[1]),
        head_dtype=str(head.dtype).replace("torch.", ""),
    )


def attention_arrays(model) -> tuple[dict[str, np.ndarray], dict]:
    """Low-rank metrics of every head's qk and vo product as arrays, and the shape attrs.

    Keys "{kind}/{name}" as in the attention file layout (module docstring).
    """
    from lmsat.checkpoints.adapters import attention_heads, num_layers
    from lmsat.degeneration.attention import attention_lowrank

    n_layers = num_layers(model)
    first = attention_heads(model, 0)
    n_heads, d_head = first.n_heads, first.d_head
    width = min(d_head, model.config.get_text_config().hidden_size)
    arrays = {}
    for kind in ATTENTION_KINDS:
        arrays[f"{kind}/singular_values"] = np.full((n_layers, n_heads, width), np.nan)
        for name in ATTENTION_SCALARS:
            arrays[f"{kind}/{name}"] = np.full((n_layers, n_heads), np.nan)
    for record in attention_lowrank(model):
        metrics, at = record.metrics, (record.layer, record.head)
        arrays[f"{record.kind}/singular_values"][at] = metrics.singular_values
        for name in ATTENTION_SCALARS:
            arrays[f"{record.kind}/{name}"][at] = getattr(metrics, name)
    missing = [key for key, values in arrays.items() if np.isnan(values).any()]
    if missing:
        raise ValueError(f"attention_lowrank left heads without values in {missing}: the adapter is inconsistent")
    attrs = dict(n_layers=n_layers, n_heads=n_heads, n_kv_heads=first.n_kv_heads, d_head=d_head)
    return arrays, attrs


def _write(path, arrays: dict[str, np.ndarray], attrs: dict) -> None:
    write_checked_hdf5(path, arrays, attrs, FORMAT_VERSION)


def write_spectrum(path, spectrum: dict, record: dict, tokenizer_size: int | None) -> None:
    """The spectra file of one checkpoint; `spectrum` from head_spectrum, `record` its RECORD_KEYS."""
    attrs = {**{k: record[k] for k in RECORD_KEYS}, **{k: v for k, v in spectrum.items() if k != "singular_values"}}
    attrs = {k: (v.result() if isinstance(v, Future) else v) for k, v in attrs.items()}  # hashes from a pool
    attrs["tokenizer_size"] = -1 if tokenizer_size is None else int(tokenizer_size)  # -1: unknown
    _write(path, {"singular_values": spectrum["singular_values"]}, attrs)


def write_attention(path, arrays: dict[str, np.ndarray], shape_attrs: dict, record: dict, hidden_size: int) -> None:
    """The attention file of one checkpoint; `arrays`, `shape_attrs` from attention_arrays."""
    _write(path, arrays, {**{k: record[k] for k in RECORD_KEYS}, **shape_attrs, "hidden_size": hidden_size})


def _read(path, datasets: tuple[str, ...]) -> tuple[dict[str, np.ndarray], dict]:
    arrays, attrs = read_checked_hdf5(path, datasets, FORMAT_VERSION, WeightsFileError)
    where = f"{attrs.get('model')}@{attrs.get('revision')}"
    # Singular values are >= 0; every other value finite (cosine-free metrics, unbounded above).
    check_values(path, where, arrays, bounds={key: BOUNDS["singular_values"] for key in arrays if key.endswith("singular_values")})
    return arrays, attrs


def _check_checkpoint(path, attrs: dict, check_path: bool) -> None:
    """With check_path, the file's model and revision must be those of its path
    `.../{model}/{revision}.h5` (lmsat.core.io.IdentityError otherwise)."""
    if check_path:
        check_identity(path, attrs, promised_by_path(path, "model", "revision"))


def read_spectrum(path, check_path: bool = True) -> tuple[np.ndarray, dict]:
    """Singular values (descending, float64) and attributes of a spectra file, made for the
    model and revision its path names (check_path)."""
    arrays, attrs = _read(path, ("singular_values",))
    _check_checkpoint(path, attrs, check_path)
    return arrays["singular_values"], attrs


def read_attention(path, check_path: bool = True) -> tuple[dict[str, np.ndarray], dict]:
    """Arrays ("{kind}/{name}") and attributes of an attention file, made for the model and
    revision its path names (check_path), each scalar within what it can be (lmsat.degeneration.attention)."""
    keys = tuple(f"{kind}/{name}" for kind in ATTENTION_KINDS for name in ("singular_values", *ATTENTION_SCALARS))
    arrays, attrs = _read(path, keys)
    where = f"{attrs.get('model')}@{attrs.get('revision')}"
    for kind in ATTENTION_KINDS:
        width = arrays[f"{kind}/singular_values"].shape[-1]  # min(d, d_head): the product's rank at most
        for name, (low, high, why) in {
            "effective_rank": (1, width, f"exp(entropy) of {width} singular values is in [1, {width}]"),
            "stable_rank": (1, width, f"a stable rank of {width} singular values is in [1, {width}]"),
            "nuclear_norm": (0, math.inf, "a norm"), "nuclear_ratio": (0, 1, "||A B^T||_* <= (||A||_F^2 + ||B||_F^2) / 2"),
            "balance_gap": (0, math.inf, "a norm ratio"),
        }.items():
            check_bounds(path, where, f"{kind}/{name}", arrays[f"{kind}/{name}"], low, high, why, tolerance=1e-6)
    _check_checkpoint(path, attrs, check_path)
    return arrays, attrs


# --- tidy tables (no torch) ---------------------------------------------------------------
