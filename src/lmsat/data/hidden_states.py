"""The hidden-state cache: one HDF5 file per checkpoint, written once, read by every metric.

Layout of `results/cache/{model}/{revision}.h5`:

    loss         (n_seq, seq_len - 1) float32  per-token cross-entropy (nats)
    hidden       (n_seq * seq_len, d)          last layer, post final norm (the head's input)
    layers       (n_layers + 1, k, w)          every hidden_states entry at k sampled tokens
                                               (w: the widest state, narrower ones zero-padded)
    layer_index  (k,) int64                    flat token positions of that subsample
    attrs        model, revision, model_id, dtype, storage_dtype, sample_sha256,
                 n_seq, seq_len, hidden_size, n_layers, head_rows (the LM head's V;
                 absent from caches of older lmsat), versions (JSON), complete,
                 checksums (JSON: SHA-256 of each dataset per chunk, lmsat.core.integrity)

Extraction is resumable and writes the data once: the file is created under
`<file>.parts/cache.h5` with its datasets allocated, each chunk of sequences is written in
place as soon as it is computed, fsynced, and marked done (`chunk_<first>.done`, holding
the chunk's checksums, hashed from memory), and a rerun after a kill skips the marked
chunks; open_cache verifies every dataset against them. Only when all chunks are there is
`complete` set and the file renamed, so a file under the final name is always complete.
Chunks are fixed by the config, so a resumed run gives the same bytes as an uninterrupted one.

`layers` holds every hidden state at its own width, zero-padded to the widest (OPT-350m:
1024-wide blocks, a 512-wide last state after `project_out`); padding changes no cosine.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import h5py
import numpy as np

from lmsat.core.integrity import CHECKSUM_ATTR, IntegrityError, block_digests, merge_blocks, verify_hdf5
from lmsat.core.io import atomic_path, fsync_path, library_versions

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
LOGITS_BUDGET = 2**27  # floats of logits materialised at once (512 MiB in float32; fewer, larger slices are faster)


class CacheError(ValueError):
    """A cache file that is incomplete, corrupt, non-finite, or made from other inputs."""


class CacheChecksumError(CacheError, IntegrityError):
    """A cache file whose data does not match the checksums recorded when it was written."""


@dataclass(frozen=True)
class ExtractionSettings:
    batch_size: int = 8  # sequences per forward
    chunk_sequences: int = 32  # sequences per resumable chunk
    dtype: str = "float32"  # forward dtype
    storage_dtype: str = "float32"  # dtype of stored hidden states
    layer_sample: int = 4096  # tokens per layer kept for anisotropy
    seed: int = 0  # picks the layer subsample


def layer_sample_index(n_tokens: int, k: int, seed: int) -> np.ndarray:
    """Sorted flat positions of the per-layer subsample. # (min(k, n_tokens),)"""
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(n_tokens, size=min(k, n_tokens), replace=False)).astype(np.int64)


def forward_hidden_states(model, input_ids, check_head: bool = False, atol: float = 1e-3):
    """hidden_states of every layer (embeddings first; the last one post final norm), without
    the full logits. -> tuple of (b, L, d)

    check_head: verify that the head applied to the last hidden states gives the model's own
    logits (at the last position), i.e. that hidden_states[-1] is the head's input.
    """
    import torch

    try:
        out = model(input_ids, output_hidden_states=True, use_cache=False, logits_to_keep=1)
    except TypeError:  # architectures without logits_to_keep
        out = model(input_ids, output_hidden_states=True, use_cache=False)
    if check_head:
        mine = model.get_output_embeddings()(out.hidden_states[-1][:, -1]).float()
        # equal_nan: a NaN head (a diverged run) gives NaN in both; the loss check names it, not this one
        if not torch.allclose(mine, out.logits[:, -1].float(), rtol=atol, atol=atol, equal_nan=True):
            raise RuntimeError(
                f"{type(model).__name__}: the head applied to hidden_states[-1] does not give the "
                "model's logits, so hidden_states[-1] is not the head's input; this architecture "
                "needs an adapter"
            )
    return out.hidden_states


def _head_logits(head, hidden, out):
    """head(hidden) written into `out` (a reused (s, V) buffer of the head's dtype) where the
    head is a plain Linear (the same GEMM as nn.Linear's, so the same values); any other
    head module returns a fresh tensor."""
    import torch

    if type(head) is torch.nn.Linear and out is not None:
        if head.bias is None:
            return torch.mm(hidden, head.weight.t(), out=out)
        return torch.addmm(head.bias, hidden, head.weight.t(), out=out)
    return head(hidden)


def _buffer(workspace: dict, rows: int, vocab: int, dtype, device):
    """A (>= rows, vocab) tensor of `workspace`, made once and reused. # (r, V)"""
    import torch

    key = ("logits", dtype, str(device))
    if key not in workspace or workspace[key].shape[0] < rows or workspace[key].shape[1] != vocab:
        workspace.pop(key, None)  # freed before a larger one is made
        workspace[key] = torch.empty(rows, vocab, dtype=dtype, device=device)
    return workspace[key]


def _token_losses(head, hidden, targets, workspace=None):
    """Cross-entropy of every position, computing logits a slice at a time. -> (n,) float32

    Every elementwise pass over the (s, V) logits costs about as much as the head's GEMM on a
    CPU at Pythia-14m's width (benchmarks/checkpoint_job.py), so the slice does only what a
    loss needs: the GEMM into a buffer reused across slices and chunks (`workspace`; a fresh
    half-GiB tensor per slice page-faults on a CPU), one copy to float32 where the head is
    in another dtype, then log-sum-exp in place (amax: max without indices, the values are
    the same; F.cross_entropy would allocate a second slice-sized tensor).
    """
    import torch

    workspace = {} if workspace is None else workspace
    n, vocab = hidden.shape[0], head.weight.shape[0]
    step = max(1, LOGITS_BUDGET // vocab)
    rows = min(step, n)
    linear = type(head) is torch.nn.Linear
    losses = torch.empty(n, dtype=torch.float32, device=hidden.device)
    for i in range(0, n, step):
        s = min(step, n - i)
        out = _buffer(workspace, rows, vocab, head.weight.dtype, hidden.device)[:s] if linear else None
        logits = _head_logits(head, hidden[i : i + s], out)  # (s, V)
        if logits.dtype != torch.float32:
            logits = _buffer(workspace, rows, vocab, torch.float32, hidden.device)[:s].copy_(logits)
        target = logits.gather(1, targets[i : i + s, None])[:, 0]  # (s,)
        top = logits.amax(dim=1, keepdim=True)  # (s, 1)
        log_sum = logits.sub_(top).exp_().sum(dim=1).log_()  # (s,)
        losses[i : i + s] = log_sum + top[:, 0] - target
    return losses


def _to_host(tensors: dict, pinned: dict) -> dict:
    """numpy copies of device tensors: one copy each into pinned host memory (reused across
    chunks of the same shape), a single sync. CPU tensors are viewed, not copied."""
    import torch

    if all(t.device.type == "cpu" for t in tensors.values()):
        return {k: t.numpy() for k, t in tensors.items()}
    host = {}
    for key, tensor in tensors.items():
        if key not in pinned or pinned[key].shape != tensor.shape or pinned[key].dtype != tensor.dtype:
            pinned[key] = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
        host[key] = pinned[key].copy_(tensor, non_blocking=True)
    torch.cuda.synchronize(next(iter(tensors.values())).device)
    return {k: t.numpy() for k, t in host.items()}


def _extract_chunk(model, tokens: np.ndarray, first_flat: int, index: np.ndarray, settings, device, check_head: bool, pinned=None,
                   workspace=None):
    """Forward one chunk of sequences. tokens: (c, L) -> dict of numpy arrays (and "finite").

    Everything up to the host copy runs on `device`: the cast to the storage dtype, the
    gather of the layer subsample (each hidden state reshaped with its own width, narrower
    ones zero-padded to the widest: cosines are unchanged), the finiteness check; then one
    copy per array to pinned host memory. `workspace`: the loss's logits buffers, reused
    across chunks.
    """
    import torch

    head = model.get_output_embeddings()
    c, seq_len = tokens.shape
    storage = getattr(torch, settings.storage_dtype)
    losses, hiddens, layers = [], [], []
    for b in range(0, c, settings.batch_size):
        ids = torch.as_tensor(tokens[b : b + settings.batch_size], dtype=torch.long, device=device)  # (b, L)
        with torch.no_grad():
            hidden_states = forward_hidden_states(model, ids, check_head=check_head and b == 0)
            last = hidden_states[-1]  # (b, L, d), post final norm
            d = last.shape[-1]
            loss = _token_losses(head, last[:, :-1].reshape(-1, d), ids[:, 1:].reshape(-1), workspace)
            losses.append(loss.reshape(ids.shape[0], seq_len - 1))
            hiddens.append(last.reshape(-1, d).to(storage))
            lo = first_flat + b * seq_len
            local = index[(index >= lo) & (index < lo + ids.numel())] - lo
            pos = torch.as_tensor(local, device=device)
            width = max(h.shape[-1] for h in hidden_states)
            rows = torch.zeros(len(hidden_states), len(local), width, dtype=storage, device=device)  # (n_layers + 1, k_b, w)
            for i, h in enumerate(hidden_states):
                rows[i, :, : h.shape[-1]] = h.reshape(-1, h.shape[-1])[pos].to(storage)  # own width: (b L, w_i)
            layers.append(rows)
    arrays = dict(loss=torch.cat(losses).float(), hidden=torch.cat(hiddens), layers=torch.cat(layers, dim=1))
    finite = bool(torch.isfinite(arrays["loss"]).all() & torch.isfinite(arrays["hidden"]).all())
    return {**_to_host(arrays, {} if pinned is None else pinned), "finite": finite}


def _early_allocated():
    """Dataset creation property list: contiguous storage allocated at creation, never
    filled, so each chunk's write only touches its own bytes (no metadata changes)."""
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
    dcpl.set_fill_time(h5py.h5d.FILL_TIME_NEVER)
    return dcpl


def _create_partial(path: Path, first: dict, n_seq: int, seq_len: int, index: np.ndarray, identity: dict, settings) -> None:
    """The cache file with every dataset allocated and every attribute set (complete=False),
    from the shapes of the first computed chunk; chunks are then written in place."""
    d = first["hidden"].shape[1]
    n_states, _, width = first["layers"].shape
    with atomic_path(path) as tmp, h5py.File(tmp, "w") as f:
        f.create_dataset("loss", shape=(n_seq, seq_len - 1), dtype=np.float32, dcpl=_early_allocated())
        f.create_dataset("hidden", shape=(n_seq * seq_len, d), dtype=first["hidden"].dtype, dcpl=_early_allocated())
        f.create_dataset("layers", shape=(n_states, len(index), width), dtype=first["layers"].dtype, dcpl=_early_allocated())
        f.create_dataset("layer_index", data=index)
        f.attrs.update({k: v for k, v in identity.items() if v is not None})
        f.attrs.update(
            dtype=settings.dtype,
            storage_dtype=settings.storage_dtype,
            n_seq=n_seq,
            seq_len=seq_len,
            hidden_size=d,
            n_layers=n_states - 1,
            versions=json.dumps(library_versions(), sort_keys=True),
            format_version=FORMAT_VERSION,
            complete=False,  # set True in place once every chunk is written
        )


def _open_partial(path: Path):
    try:
        return h5py.File(path, "r+")
    except OSError as error:  # torn while being created: start over
        log.warning("partial cache %s is unreadable (%s); recomputing it", path, error)
        return None


def _chunk_checksums(arrays: dict, start: int, rows: slice, index: np.ndarray, in_chunk: np.ndarray) -> dict:
    """Checksum entries of one chunk's blocks, hashed from the arrays in memory (what was
    meant to be written, not what a torn write left on disk)."""
    n = arrays["loss"].shape[0]
    entries = dict(
        loss=block_digests(arrays["loss"], 0, [0, n]),
        hidden=block_digests(arrays["hidden"], 0, [0, rows.stop - rows.start]),
    )
    entries["loss"]["bounds"] = [start, start + n]
    entries["hidden"]["bounds"] = [rows.start, rows.stop]
    if in_chunk.any():
        first, k = int(np.argmax(in_chunk)), int(in_chunk.sum())
        entries["layers"] = dict(block_digests(arrays["layers"], 1, [0, k]), bounds=[first, first + k])
    return entries


def _write_marker(path: Path, checksums: dict) -> None:
    """A chunk's done marker: its checksums, written atomically. Not fsynced: a marker lost
    or emptied by a power cut only makes its chunk be computed again (_read_marker)."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(checksums))


def _read_marker(path: Path) -> dict | None:
    """A chunk's checksums, or None when it is not done (an empty marker of an earlier
    version, or a torn one: the chunk is computed again)."""
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def _file_checksums(markers: list[Path], index: np.ndarray) -> str:
    """The `checksums` attribute of a complete cache, from its chunks' markers."""
    chunks = [_read_marker(path) for path in markers]
    if None in chunks:  # a marker removed or emptied while the chunks after it were computed
        lost = markers[chunks.index(None)]
        raise CacheError(f"the done marker {lost} vanished during the extraction; rerun it (that chunk is computed again)")
    merged = {name: merge_blocks([c[name] for c in chunks if name in c]) for name in ("loss", "hidden", "layers")}
    merged["layer_index"] = block_digests(index)
    return json.dumps(merged, sort_keys=True)


def extract_to_cache(model, tokens: np.ndarray, out_path, *, identity: dict, settings: ExtractionSettings, device="cpu"):
    """Forward `tokens` (n_seq, seq_len) through `model` and write the cache file at `out_path`.

    `identity` (model, revision, model_id, sample_sha256, ...) is stored as attributes and
    decides whether leftover chunks of an earlier, killed run can be reused.

    The file is written once: created under `<file>.parts/cache.h5` with its datasets
    allocated, each chunk written in place and flushed, then marked done by an empty
    `chunk_<first sequence>.done` file; a rerun after a kill reopens it and skips the marked
    chunks. When all are there, `complete` is set and the file is renamed into place. The
    same creation and the same in-place writes give the same bytes, resumed or not.
    Returns the seconds spent in the forward (up to the host copy) and in the writes.
    """
    out_path = Path(out_path)
    head = getattr(model, "get_output_embeddings", lambda: None)()
    if head is not None:  # its rows: ln(head_rows) is the loss of a uniform guess (an untrained model's)
        identity = {**identity, "head_rows": int(head.weight.shape[0])}
    parts = out_path.with_name(out_path.name + ".parts")
    partial = parts / "cache.h5"
    n_seq, seq_len = tokens.shape
    index = layer_sample_index(n_seq * seq_len, settings.layer_sample, settings.seed)
    meta = {**identity, **asdict(settings), "format_version": FORMAT_VERSION, "shape": [n_seq, seq_len]}
    meta_path = parts / "meta.json"
    if parts.exists() and (not meta_path.exists() or json.loads(meta_path.read_text()) != meta):
        log.warning("discarding partial chunks in %s: they were made from other inputs or settings", parts)
        shutil.rmtree(parts)
    starts = list(range(0, n_seq, settings.chunk_sequences))
    marker = lambda start: parts / f"chunk_{start:07d}.done"  # noqa: E731
    f = _open_partial(partial) if partial.exists() else None
    if parts.exists() and f is None:  # markers without their file, or a torn file: start over
        shutil.rmtree(parts)
    parts.mkdir(parents=True, exist_ok=True)
    if not meta_path.exists():
        with atomic_path(meta_path) as tmp:
            tmp.write_text(json.dumps(meta))

    done = [s for s in starts if _read_marker(marker(s)) is not None] if f is not None else []
    if done:
        log.info("resuming %s: %d of %d chunks already done", out_path, len(done), len(starts))
    clock, computed, pinned, workspace = time.perf_counter(), 0, {}, {}
    seconds = dict(forward=0.0, write=0.0)  # returned: the two phases of the job's extraction
    try:
        for i, start in enumerate(starts):
            if start in done:
                continue
            block = tokens[start : start + settings.chunk_sequences]
            tick = time.perf_counter()
            arrays = _extract_chunk(model, block, start * seq_len, index, settings, device, check_head=(start == 0), pinned=pinned,
                                    workspace=workspace)
            if not arrays["finite"]:
                raise CacheError(
                    f"the forward of {identity.get('model')}@{identity.get('revision')} gave non-finite loss or hidden"
                )
            tock = time.perf_counter()
            if f is None:
                _create_partial(partial, arrays, n_seq, seq_len, index, identity, settings)
                f = h5py.File(partial, "r+")
            rows = slice(start * seq_len, start * seq_len + block.size)
            in_chunk = (index >= rows.start) & (index < rows.stop)
            f["loss"][start : start + block.shape[0]] = arrays["loss"]
            f["hidden"][rows] = arrays["hidden"]
            if in_chunk.any():
                first = int(np.argmax(in_chunk))
                f["layers"][:, first : first + int(in_chunk.sum())] = arrays["layers"]
            f.flush()
            fsync_path(partial)  # the data is on disk before its marker says so
            _write_marker(marker(start), _chunk_checksums(arrays, start, rows, index, in_chunk))
            seconds["forward"] += tock - tick  # forward, losses, gathers, host copy (synced)
            seconds["write"] += time.perf_counter() - tock
            computed += block.size
            rate = computed / (time.perf_counter() - clock)
            remaining = (n_seq - start - block.shape[0]) * seq_len / rate
            log.info("chunk %d/%d: %.0f tokens/s, about %.0f s left", i + 1, len(starts), rate, remaining)
        f.attrs[CHECKSUM_ATTR] = _file_checksums([marker(s) for s in starts], index)
        f.attrs["complete"] = True
    finally:
        if f is not None:
            f.close()
    partial.replace(out_path)
    shutil.rmtree(parts)
    log.info("wrote %s (%d tokens): forward %.2f s, writes %.2f s", out_path, n_seq * seq_len, seconds["forward"], seconds["write"])
    return seconds


def open_cache(path, expect: dict | None = None, verify: bool = True) -> h5py.File:
    """Open a cache file for reading after checking it is complete, made from `expect` and
    (verify) that every dataset matches the checksums recorded when it was written.

    `expect` maps attribute names (e.g. sample_sha256, revision) to the values this reader
    needs; a foreign file (another token sample or revision) raises CacheError.
    """
    try:
        f = h5py.File(path, "r")
    except OSError as error:
        raise CacheError(f"cache {path} is unreadable or truncated ({error}); delete it and rerun") from error
    try:
        if not f.attrs.get("complete", False) or f.attrs.get("format_version") != FORMAT_VERSION:
            raise CacheError(f"cache {path} is incomplete or of another format version; delete it and rerun")
        missing = {"loss", "hidden", "layers", "layer_index"} - set(f)
        if missing:
            raise CacheError(f"cache {path} lacks datasets {sorted(missing)}; delete it and rerun")
        for key, value in (expect or {}).items():
            found = f.attrs.get(key)
            if found != value:
                raise CacheError(f"cache {path} was made with {key}={found!r}, expected {value!r}; delete it and rerun")
        if verify:
            try:
                verify_hdf5(f, path, ("loss", "hidden", "layers", "layer_index"))  # each must have a checksum
            except IntegrityError as error:
                raise CacheChecksumError(f"cache {error}") from None
    except Exception:
        f.close()
        raise
    return f


def iter_rows(dataset, rows: int = 65536):
    """Stream a 2-D dataset in blocks of rows, float64, refusing NaN/Inf. -> (m, d) blocks"""
    for start in range(0, dataset.shape[0], rows):
        block = np.asarray(dataset[start : start + rows], dtype=np.float64)
        if not np.isfinite(block).all():
            bad = start + int(np.argwhere(~np.isfinite(block))[0][0])
            raise CacheError(f"{dataset.file.filename}:{dataset.name} has NaN/Inf at row {bad}; delete it and rerun")
        yield block


def cache_sequences(cache) -> tuple[int, int]:
    """(n_seq, seq_len) of an open cache's `hidden` rows, sequence after sequence, from its
    `loss` dataset (n_seq, seq_len - 1): rows [j seq_len, (j + 1) seq_len) are sequence j's."""
    n_seq, rows = cache["loss"].shape[0], cache["hidden"].shape[0]
    if n_seq < 1 or rows % n_seq:
        raise CacheError(f"{cache.filename}: {rows} hidden rows are not {n_seq} whole sequences (its loss dataset's); "
                         "delete the cache and rerun")
    return n_seq, rows // n_seq
