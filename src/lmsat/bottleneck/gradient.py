"""The gradient bottleneck (Godey & Artzi 2026): how much of the loss's gradient the LM head
lets through to the network below it, per checkpoint.

Per predicted position of the eval sample, with h the cached last hidden state (the head's
input), W (V, d) the head, z = W h (+ b) the model's own logits and y the target token:

    g = softmax(z) - onehot(y)                    # (V,) dL/dz of the cross-entropy
    energy kept = ||P g||^2 / ||g||^2             # P: orthogonal projector on col(W), rank r
    norm kept   = ||P g|| / ||g||

The backward pass sends W^T g = W^T P g below the head: the part of g outside the head's
column space reaches no parameter of the network (only the head's own gradient g h^T sees
it). A direction drawn uniformly at random keeps r / V of its energy in expectation (and
E ||P u|| / ||u|| = random_norm(r, V) of its norm): the reference each value stands beside.

Never a V x V projector: with W^T W = E diag(lam) E^T (the d x d Gram, float64, its
eigenvalues above a rank tolerance kept), Q = W E_r lam_r^(-1/2) is an orthonormal basis of
col(W), so ||P g|| = ||Q^T g|| = ||F^T (W^T g)|| with F = E_r lam_r^(-1/2) (d, r). Per token
that is two GEMMs with the head, z = W h and a = W^T g (4 V d flops), and a (d x r) product.

    projector = head_projector(weight, bias, gram=None, where="toy-d16@step800")
    result = measure(projector, cache, tokens, where="toy-d16@step800")  # per-sequence sums
    summarize(result)                                                    # the table's scalars

Rank: the Gram squares the singular values, so it resolves them only down to about
sqrt(eps) s_1; numpy's matrix_rank rule (s_i > s_1 max(V, d) eps) is applied to the Gram's
eigenvalues (lam_i > lam_1 max(V, d) eps): a head with repeated or zero columns gets the
rank of its distinct columns, not d.

Statistics: sequences are the independent units. Each mean over tokens is sum / count over
sequences, its standard error the ratio estimator's over sequences (cluster-robust); the
quantiles are over tokens. Target tokens split in two by frequency: `frequent` are the most
frequent target ids of the eval sample that together make at least half of its targets,
`rare` the rest (the counts of the sample itself: the same split at every checkpoint of
every model of one tokenizer).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from lmsat.core.checked_hdf5 import check_bounds, read_checked_hdf5, write_checked_hdf5
from lmsat.core.integrity import check_values, corrupt, require_keys
from lmsat.core.io import check_identity, promised_by_path

FORMAT_VERSION = 1
LOGITS_BUDGET = 2**27  # floats of logits held at once (512 MiB in float32), as the cache's loss
QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)
CLASSES = ("all", "frequent", "rare")  # the columns of the per-sequence arrays
RECORD_KEYS = ("suite", "model", "revision", "step", "tokens")  # as lmsat.degeneration.weight_files's


class GradientBottleneckError(ValueError):
    """Input the gradient bottleneck cannot measure (a broken head, a vocabulary or cache
    that does not match); names the checkpoint, the file and the fix."""


@dataclass(frozen=True)
class HeadProjector:
    """What the measure needs of a head, made once per checkpoint (before the forward)."""

    weight: object  # (V, d) float32 torch tensor on the head's device
    bias: object  # (V,) float32 or None
    factor: object  # (d, r) float64: Q = W @ factor is an orthonormal basis of col(W)
    rank: int  # r
    head_dtype: str  # the head's dtype as loaded (the checkpoint's)

    @property
    def rows(self) -> int:
        return int(self.weight.shape[0])

    @property
    def hidden_size(self) -> int:
        return int(self.weight.shape[1])


def check_head_finite(weight, where: str) -> None:
    """GradientBottleneckError naming the first head row (token id) with NaN/Inf."""
    import torch

    finite = torch.isfinite(weight).all(dim=1)  # (V,)
    if not bool(finite.all()):
        row = int((~finite).nonzero()[0, 0])
        raise GradientBottleneckError(
            f"{where}: the LM head has NaN/Inf values (first in row {row}, token id {row}): the checkpoint is broken. "
            "Fix: fetch or save the checkpoint again (or leave this revision out of the config)"
        )


def check_vocabulary(rows: int, tokenizer_size: int | None, where: str, tokenizer: str = "") -> None:
    """GradientBottleneckError when the tokenizer has more entries than the head has rows:
    ids the head cannot score, so the config gives the model another tokenizer than its own."""
    if tokenizer_size is not None and tokenizer_size > rows:
        raise GradientBottleneckError(
            f"{where}: tokenizer {tokenizer!r} has {tokenizer_size} entries but the LM head only {rows} rows, so its "
            "vocabulary is not this model's. Fix: give the model its own tokenizer in the config (models' `tokenizer`)"
        )


def head_basis(gram, rows: int):
    """(factor (d, r) float64, r) from the head's Gram W^T W (d, d) float64: F = E_r lam_r^-1/2
    over the eigenvalues above lam_1 max(V, d) eps (numpy's matrix_rank rule on the Gram)."""
    import torch

    eigenvalues, vectors = torch.linalg.eigh(gram)  # ascending (d,), (d, d)
    d = gram.shape[0]
    top = float(eigenvalues[-1]) if d else 0.0
    keep = eigenvalues > top * max(rows, d) * np.finfo(np.float64).eps
    factor = vectors[:, keep] / torch.sqrt(eigenvalues[keep])  # (d, r)
    return factor, int(keep.sum())


def head_projector(weight, bias=None, gram=None, where: str = "the head") -> HeadProjector:
    """The head's projector factor and a float32 copy of it (the model may be cast after).

    weight: (V, d) torch tensor (any dtype, any device), checked finite first; bias: (V,) or
    None; gram: W^T W (d, d) float64 on the same device if already computed (the job shares
    the spectra's), else computed here (lmsat.degeneration.spectra.gram_matrix).
    """
    import torch

    from lmsat.degeneration.spectra import gram_matrix

    check_head_finite(weight, where)
    if gram is None:
        gram = gram_matrix(weight)
    factor, rank = head_basis(gram, int(weight.shape[0]))
    # a copy: a later cast of the model (to the forward dtype) must not change it
    weight32 = weight.detach().to(torch.float32, copy=True)
    bias32 = None if bias is None else bias.detach().to(torch.float32, copy=True)
    return HeadProjector(weight32, bias32, factor, rank, str(weight.dtype).replace("torch.", ""))


def frequent_ids(targets: np.ndarray, rows: int) -> tuple[np.ndarray, int, float]:
    """(frequent (V,) bool, how many ids, their share of the targets): the most frequent target
    ids (ties: the lower id first) that together make at least half of `targets`."""
    counts = np.bincount(np.asarray(targets).ravel(), minlength=rows)  # (V,)
    order = np.argsort(-counts, kind="stable")
    covered = np.cumsum(counts[order])  # (V,)
    n = int(np.searchsorted(covered, 0.5 * covered[-1])) + 1  # first prefix with >= half
    frequent = np.zeros(rows, dtype=bool)
    frequent[order[:n]] = True
    return frequent, n, float(covered[n - 1] / covered[-1])


def kept_energy(gradients, projector: HeadProjector):
    """(||P g||^2, ||g||^2) of each row of `gradients` (n, V) float32, float64 (n,) each:
    ||P g|| = ||F^T (W^T g)||, never a V x V matrix."""
    import torch

    total = torch.linalg.vector_norm(gradients, dim=1).double() ** 2  # (n,)
    back = torch.mm(gradients, projector.weight)  # (n, d) = g W: what the head sends back
    coordinates = back.double() @ projector.factor  # (n, r) = Q^T g
    return coordinates.square().sum(dim=1), total


def logit_gradients(hidden, targets, projector: HeadProjector, out=None):
    """g = softmax(W h + b) - onehot(y) of each row of `hidden` (n, d), in `out` (n, V) float32
    if given (softmax in place: no second (n, V) tensor)."""
    import torch

    logits = torch.mm(hidden, projector.weight.t(), out=out)  # (n, V)
    if projector.bias is not None:
        logits += projector.bias
    logits -= logits.amax(dim=1, keepdim=True)
    logits.exp_()
    logits /= logits.sum(dim=1, keepdim=True)
    logits[torch.arange(logits.shape[0], device=logits.device), targets] -= 1.0  # exact for p_y >= 1/2
    return logits


def _check_cache(cache, tokens: np.ndarray, projector: HeadProjector, where: str):
    """The cache's `hidden` dataset, after every check (before any work)."""
    name = getattr(cache, "filename", "the cache")
    if "hidden" not in cache:
        raise GradientBottleneckError(
            f"{where}: {name} holds no hidden states (no `hidden` dataset), and the gradient bottleneck is computed "
            "from the cached last hidden states. Fix: delete the cache and rerun rule analyse_checkpoint, which writes them"
        )
    hidden = cache["hidden"]
    n_seq, seq_len = tokens.shape
    if hidden.ndim != 2 or hidden.shape != (n_seq * seq_len, projector.hidden_size):
        raise GradientBottleneckError(
            f"{where}: {name}'s hidden states are {tuple(hidden.shape)}, but the sample ({n_seq} x {seq_len} tokens) "
            f"and the head (width {projector.hidden_size}) need ({n_seq * seq_len}, {projector.hidden_size}): the cache "
            "is another model's or another sample's. Fix: delete the cache and rerun rule analyse_checkpoint"
        )
    sha = getattr(cache, "attrs", {}).get("sample_sha256")
    if sha is not None:
        from lmsat.data.corpus import tokens_sha256

        if sha != tokens_sha256(tokens):
            raise GradientBottleneckError(
                f"{where}: {name} was made from another token sample (sha256 {str(sha)[:12]}) than the one given "
                f"({tokens_sha256(tokens)[:12]}). Fix: pass the sample the cache was made from, or rebuild the cache"
            )
    if seq_len < 2:
        raise GradientBottleneckError(f"{where}: sequences of {seq_len} token predict nothing. Fix: sample.seq_len >= 2")
    top = int(tokens.max())
    if top >= projector.rows or int(tokens.min()) < 0:
        raise GradientBottleneckError(
            f"{where}: the sample holds token id {top}, but the LM head has {projector.rows} rows: the sample was "
            "tokenized with another vocabulary than the model's. Fix: build the sample with the model's tokenizer"
        )
    return hidden


def measure(projector: HeadProjector, cache, tokens: np.ndarray, where: str = "the checkpoint") -> dict:
    """The gradient bottleneck of every predicted position of the sample. -> the per-sequence
    sums of a gradient file (write_gradient_file; summarize reads them) and the quantiles.

    cache: an open hidden-state cache (lmsat.data.hidden_states.open_cache; `hidden` (n_seq * seq_len, d),
    the last layer post final norm); tokens: the sample (n_seq, seq_len) it was made from.
    Logits are recomputed in float32 from the cached states (storage dtype) and the head as
    loaded (projector.weight): no forward pass.
    """
    import torch

    tokens = np.asarray(tokens)
    hidden = _check_cache(cache, tokens, projector, where)
    n_seq, seq_len = tokens.shape
    per_seq = seq_len - 1
    frequent, n_frequent, frequent_share = frequent_ids(tokens[:, 1:], projector.rows)
    device = projector.weight.device
    rows = max(1, LOGITS_BUDGET // projector.rows)  # logits rows per GEMM
    sequences = max(1, rows // per_seq)  # sequences read at once
    energy = np.empty((n_seq, per_seq))  # per token, float64
    has_gradient = np.empty((n_seq, per_seq), dtype=bool)
    kept_sum, total_sum = np.zeros(n_seq), np.zeros(n_seq)  # sum of ||P g||^2 and of ||g||^2
    buffer = None
    with torch.no_grad():
        for first in range(0, n_seq, sequences):
            last = min(n_seq, first + sequences)
            block = torch.as_tensor(np.asarray(hidden[first * seq_len : last * seq_len]))  # ((last - first) L, d)
            if not bool(torch.isfinite(block).all()):
                raise GradientBottleneckError(
                    f"{where}: {getattr(cache, 'filename', 'the cache')} has NaN/Inf hidden states in sequences "
                    f"{first}..{last - 1}. Fix: delete the cache and rerun rule analyse_checkpoint"
                )
            block = block.to(device=device, dtype=torch.float32).view(last - first, seq_len, -1)[:, :-1]
            block = block.reshape(-1, projector.hidden_size)  # ((last - first) (L - 1), d)
            targets = torch.as_tensor(tokens[first:last, 1:].reshape(-1), dtype=torch.long, device=device)
            kept_parts, total_parts = [], []
            for start in range(0, block.shape[0], rows):
                h = block[start : start + rows]  # (s, d)
                if buffer is None or buffer.shape[0] < h.shape[0]:
                    buffer = torch.empty(min(rows, block.shape[0]), projector.rows, dtype=torch.float32, device=device)
                g = logit_gradients(h, targets[start : start + rows], projector, out=buffer[: h.shape[0]])  # (s, V)
                kept, total = kept_energy(g, projector)
                kept_parts.append(kept)
                total_parts.append(total)
            kept = torch.cat(kept_parts).cpu().numpy().reshape(last - first, per_seq)
            total = torch.cat(total_parts).cpu().numpy().reshape(last - first, per_seq)
            # a kept share cannot exceed 1: rounding may put it a few ulps above; a zero
            # gradient (p_y rounded to 1, every other p to 0) has no share: left out below
            energy[first:last] = np.minimum(kept / np.where(total > 0, total, 1.0), 1.0)
            has_gradient[first:last] = total > 0
            kept_sum[first:last] = kept.sum(axis=1)
            total_sum[first:last] = total.sum(axis=1)
    norm = np.sqrt(energy)
    is_frequent = frequent[tokens[:, 1:]]  # (n_seq, L - 1)
    masks = (has_gradient, has_gradient & is_frequent, has_gradient & ~is_frequent)  # CLASSES
    return dict(
        energy_sum=np.stack([(energy * m).sum(axis=1) for m in masks], axis=1),  # (n_seq, 3)
        norm_sum=np.stack([(norm * m).sum(axis=1) for m in masks], axis=1),  # (n_seq, 3)
        count=np.stack([m.sum(axis=1) for m in masks], axis=1).astype(np.int64),  # (n_seq, 3)
        kept_energy_sum=kept_sum,  # (n_seq,) sum of ||P g||^2
        total_energy_sum=total_sum,  # (n_seq,) sum of ||g||^2
        energy_quantiles=np.quantile(energy[has_gradient], QUANTILES),  # (5,) over tokens
        norm_quantiles=np.quantile(norm[has_gradient], QUANTILES),
        rank=projector.rank, rows=projector.rows, hidden_size=projector.hidden_size, head_dtype=projector.head_dtype,
        frequent_types=n_frequent, frequent_share=frequent_share, seq_len=seq_len,
        zero_gradients=int((~has_gradient).sum()),
    )


# ---------------------------------------------------------------- statistics


def random_energy(rank: int, rows: int) -> float:
    """E ||P u||^2 / ||u||^2 = r / V for u uniform on the sphere of R^V."""
    return rank / rows


def random_norm(rank: int, rows: int) -> float:
    """E ||P u|| / ||u|| for u uniform on the sphere of R^V, P of rank r: the mean of the square
    root of a Beta(r/2, (V - r)/2) variable, exp(lgamma((r+1)/2) + lgamma(V/2) - lgamma(r/2) -
    lgamma((V+1)/2)) (a little below sqrt(r / V))."""
    if rank == 0:
        return 0.0
    if rank == rows:
        return 1.0
    return math.exp(math.lgamma((rank + 1) / 2) + math.lgamma(rows / 2) - math.lgamma(rank / 2) - math.lgamma((rows + 1) / 2))


def ratio_mean(sums: np.ndarray, counts: np.ndarray) -> tuple[float, float]:
    """(sum / count, its standard error over sequences) of per-sequence sums and counts (n_seq,):
    the ratio estimator with sequences as clusters, SE^2 = n / (n - 1) sum (s_i - m c_i)^2 /
    (sum c)^2 (the usual SE of a mean of per-sequence means when every count is equal).
    nan where no sequence has a count, SE nan with one sequence."""
    sums, counts = np.asarray(sums, dtype=np.float64), np.asarray(counts, dtype=np.float64)
    n, total = counts.size, counts.sum()
    if total == 0:
        return math.nan, math.nan
    mean = sums.sum() / total
    if n < 2:
        return float(mean), math.nan
    residual = sums - mean * counts
    return float(mean), float(math.sqrt(n / (n - 1) * (residual**2).sum()) / total)


def summarize(result: dict) -> dict:
    """The scalars of one checkpoint (the table's columns, the callback's log) from measure's
    result or a gradient file's arrays and attributes."""
    energy_sum, norm_sum, count = (np.asarray(result[k]) for k in ("energy_sum", "norm_sum", "count"))
    rank, rows = int(result["rank"]), int(result["rows"])
    out = {}
    for j, name in enumerate(CLASSES):
        suffix = "" if name == "all" else f"_{name}"
        for kind, sums in (("energy", energy_sum), ("norm", norm_sum)):
            mean, sem = ratio_mean(sums[:, j], count[:, j])
            out[f"{kind}_kept{suffix}"], out[f"{kind}_kept{suffix}_sem"] = mean, sem
    pooled, pooled_sem = ratio_mean(result["kept_energy_sum"], result["total_energy_sum"])
    out.update(energy_kept_pooled=pooled, energy_kept_pooled_sem=pooled_sem)
    for kind in ("energy", "norm"):
        for q, value in zip(QUANTILES, np.asarray(result[f"{kind}_quantiles"])):
            out[f"{kind}_kept_q{round(100 * q):02d}"] = float(value)
    out.update(
        rank=rank, vocab_rows=rows, hidden_size=int(result["hidden_size"]), d_over_v=int(result["hidden_size"]) / rows,
        random_energy=random_energy(rank, rows), random_norm=random_norm(rank, rows),
        n_tokens=int(count[:, 0].sum()), n_seq=int(count.shape[0]), frequent_types=int(result["frequent_types"]),
        frequent_share=float(result["frequent_share"]),
    )
    return out


# ---------------------------------------------------------------- the per-checkpoint file

ARRAYS = ("energy_sum", "norm_sum", "count", "kept_energy_sum", "total_energy_sum", "energy_quantiles", "norm_quantiles")
ATTRS = ("rank", "rows", "hidden_size", "head_dtype", "frequent_types", "frequent_share", "seq_len", "zero_gradients")
BOUNDS = {  # what the truth bounds (a file outside them is corrupt)
    "energy_sum": (0.0, math.inf), "norm_sum": (0.0, math.inf), "count": (0, math.inf),
    "kept_energy_sum": (0.0, math.inf), "total_energy_sum": (0.0, math.inf),
    "energy_quantiles": (0.0, 1.0), "norm_quantiles": (0.0, 1.0),
}


class GradientFileError(ValueError):
    """A gradient bottleneck file that is unreadable, incomplete or of another format."""


def write_gradient_file(path, result: dict, record: dict) -> None:
    """results/{run}/gradient_bottleneck/{model}/{revision}.h5 of one checkpoint:

        energy_sum, norm_sum (n_seq, 3) float64   per sequence, sums of the per-token kept
                                                  energy / norm shares over its targets of
                                                  each class (all, frequent, rare)
        count            (n_seq, 3) int64         those targets
        kept_energy_sum, total_energy_sum (n_seq,) sums of ||P g||^2 and ||g||^2
        energy_quantiles, norm_quantiles (5,)     over every token, at QUANTILES
        attrs            RECORD_KEYS, rank, rows (V), hidden_size, head_dtype,
                         frequent_types, frequent_share, seq_len, zero_gradients
                         (targets left out: p_y rounded to 1), versions,
                         format_version, checksums (lmsat.core.integrity)
    """
    arrays = {k: np.asarray(result[k]) for k in ARRAYS}
    attrs = {**{k: record[k] for k in RECORD_KEYS}, **{k: result[k] for k in ATTRS}}
    write_checked_hdf5(path, arrays, attrs, FORMAT_VERSION)


def read_gradient_file(path, check_path: bool = True) -> dict:
    """A gradient file's arrays and attributes as one dict (checksums verified, values within
    BOUNDS; with check_path, made for the model and revision its path names)."""
    arrays, attrs = read_checked_hdf5(path, ARRAYS, FORMAT_VERSION, GradientFileError)
    where = f"{attrs.get('model')}@{attrs.get('revision')}"
    check_values(path, where, arrays, bounds=BOUNDS)
    _check_consistent(path, where, arrays, attrs)
    if check_path:
        check_identity(path, attrs, promised_by_path(path, "model", "revision"))
    return {**attrs, **arrays}


def _check_consistent(path, where: str, arrays: dict, attrs: dict) -> None:
    """What the truth bounds beyond each array's own range (IntegrityError naming the file,
    the dataset, the value and the rule that makes it again): the shapes; a share is at most
    1, so per sequence energy_sum <= norm_sum <= count and kept <= total energy (float32
    sums: a relative 1e-4 of slack); the classes split the targets (frequent + rare = all),
    which number seq_len - 1 per sequence, zero gradients left out, and at least one (no
    mean of nothing); the quantiles ascend; the head's rank is at most min(V, d)."""
    require_keys(path, where, attrs, ATTRS)
    count = arrays["count"]
    n_seq = count.shape[0] if count.ndim == 2 else -1
    shapes = {"energy_sum": (n_seq, len(CLASSES)), "norm_sum": (n_seq, len(CLASSES)), "count": (n_seq, len(CLASSES)),
              "kept_energy_sum": (n_seq,), "total_energy_sum": (n_seq,), "energy_quantiles": (len(QUANTILES),),
              "norm_quantiles": (len(QUANTILES),)}
    for key, shape in shapes.items():
        if arrays[key].shape != shape:
            raise corrupt(path, f"{where}: dataset `{key}` has shape {arrays[key].shape}, not {shape}")
    rows, width = attrs["rows"], attrs["hidden_size"]
    for key, low, high, why in (
        ("rows", 1, math.inf, "the head's rows, V"), ("hidden_size", 1, math.inf, "the head's width, d"),
        ("rank", 0, min(rows, width), "the head's rank is at most min(V, d)"),
        ("seq_len", 2, math.inf, "a sequence predicts seq_len - 1 tokens"),
        ("frequent_types", 0, rows, "token ids of the head"), ("frequent_share", 0, 1, "a share"),
        ("zero_gradients", 0, n_seq * (attrs["seq_len"] - 1), "targets of the sample"),
    ):
        check_bounds(path, where, key, attrs[key], low, high, why, kind="attribute")
    per_seq = attrs["seq_len"] - 1
    check_bounds(path, where, "count", count[:, 0], 0, per_seq, f"targets of a sequence of {attrs['seq_len']} tokens")
    check_bounds(path, where, "count", count[:, 1] + count[:, 2], count[:, 0], count[:, 0],
                 "the frequent and rare targets of a sequence are all its targets", tolerance=0)
    if count[:, 0].sum() + attrs["zero_gradients"] != n_seq * per_seq:
        raise corrupt(path, f"{where}: dataset `count` holds {int(count[:, 0].sum())} targets and {attrs['zero_gradients']} "
                            f"zero gradients, not the sample's {n_seq} x {per_seq}")
    check_bounds(path, where, "count", count[:, 0].sum(), 1, math.inf, "targets measured: a mean of none is NaN")
    check_bounds(path, where, "energy_sum", arrays["energy_sum"], 0, arrays["norm_sum"],
                 "per token the energy share is at most the norm share, its square root")
    check_bounds(path, where, "norm_sum", arrays["norm_sum"], 0, count, "per token a share is at most 1")
    check_bounds(path, where, "kept_energy_sum", arrays["kept_energy_sum"], 0, arrays["total_energy_sum"],
                 "the kept energy is part of the total", tolerance=1e-4)
    for key in ("energy_quantiles", "norm_quantiles"):
        check_bounds(path, where, key, np.diff(arrays[key]), 0, math.inf, "quantiles ascend")
