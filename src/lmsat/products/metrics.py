"""Per-checkpoint metrics, registered by name: what each reads, how it is computed per
checkpoint and how its records aggregate into tables (a figure names the tables it draws:
lmsat.figures.FIGURES).

The workflow plans from this registry alone (config `metrics:` names entries; the
`{metric}` and `{table}` wildcards resolve here):

    reads="cache"    compute(cache) -> flat dict of JSON values, one job per checkpoint x
                     metric (rule compute_checkpoint_metric, a JSON record per checkpoint)
    reads="weights"  compute(lm, job) -> result, then write(path, result, record): every
                     weight metric of a checkpoint runs in its one analyse_checkpoint job,
                     which loads the weights once (an HDF5 file per checkpoint x metric);
                     with finish, finish(result, cache, tokens) -> result runs once that job's
                     forward has written the hidden-state cache (a metric of the weights and
                     the cached states: the gradient bottleneck), before write
    reads="cache_pairs"  compute(cache, references) -> flat dict of JSON values: a checkpoint's
                     cache beside the caches of the model's final and previous checkpoints
                     (references: {"final": (revision, step, cache), "previous": the same or
                     None for the first}), one job per checkpoint x metric (rule
                     compare_checkpoint_caches, a JSON record per checkpoint)

    tables: name -> Table(build(files, needed_tables, model_order, **options, **facts) -> DataFrame,
            needs=..., options=..., facts=...) (rule tabulate_metric, one generic rule for every
            table; builders: functions of the lmsat.products.*_tables modules, their arguments bound with
            functools.partial; options: build keyword -> dotted config key, facts: what the
            plan knows (FACTS), both passed by the rule's params). Every table with a row per
            checkpoint gets column on_disk (lmsat.products.table_rows.mark_on_disk): a local run keeps the
            records of checkpoints that left the disk (a Trainer's save_total_limit).

This module imports no torch, and the lmsat.products.*_tables modules import scipy only where it fits, so the
workflow reads both at DAG time.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from lmsat.products.bottleneck_tables import gradient_from_files
from lmsat.products.degeneration_tables import (
    anisotropy_from_records,
    attention_from_files,
    similarity_from_records,
    spectra_from_files,
    weight_diagnostics_from_files,
)
from lmsat.products.event_tables import SERIES_METRICS, event_order_from_records, event_prediction_from_records
from lmsat.products.saturation_tables import loss_from_records, verdicts_from_records
from lmsat.products.table_rows import scalars_from_records

READS = ("cache", "weights", "cache_pairs")


@dataclass(frozen=True)
class Table:
    build: Callable  # (files, {needed table: DataFrame}, model_order) -> DataFrame
    needs: tuple[str, ...] = ()  # tables (of this or planned metrics) the build reads
    row_provenance: bool = True  # each row records the lmsat source that computed it
    options: dict[str, str] = field(default_factory=dict)  # build keyword -> dotted config key
    # build keywords taken from the plan, not the config (FACTS): "vocab_sizes" {model: head
    # rows V, 0 = unknown}, "gone" ["model@revision" measured but no longer on disk], "sizes"
    # {model: its size, n_params or 12 L d^2: lmsat.core.plan.ModelEntry.size},
    # "steps_per_epoch" {model: optimizer steps per epoch of its training data, where known}
    facts: tuple[str, ...] = ()
    # other metrics whose per-checkpoint files the build reads, those the plan makes (build
    # keyword files_of={metric: [paths]}); one not planned is left out, not an error
    files_of: tuple[str, ...] = ()
    # the training callback builds it too (lmsat.standalone.callback_files); False: a table of a
    # whole run or of several models, the workflow's only (the order of events)
    monitor: bool = True


FACTS = ("vocab_sizes", "gone", "sizes", "steps_per_epoch")


@dataclass(frozen=True)
class Metric:
    name: str
    reads: str  # "cache": the hidden-state cache; "weights": the loaded checkpoint; "cache_pairs": two caches
    higher_is_better: bool | None  # None: neither (a diagnostic)
    description: str
    compute: Callable
    tables: dict[str, Table] = field(default_factory=dict)
    write: Callable | None = None  # weights metrics: write(path, result, record)
    finish: Callable | None = None  # weights metrics that also read the cache: finish(result, cache, tokens)


METRICS: dict[str, Metric] = {}


def register(name: str, *, reads: str, higher_is_better: bool | None, description: str, tables=None, write=None,
             finish=None):
    if reads not in READS:
        raise ValueError(f"metric {name}: reads must be one of {READS}, not {reads!r}")
    if reads == "weights" and write is None:
        raise ValueError(f"metric {name}: a weights metric needs write(path, result, record)")
    if finish is not None and reads != "weights":
        raise ValueError(f"metric {name}: finish(result, cache, tokens) is for weights metrics (a cache metric reads the cache)")

    for table_name, table in (tables or {}).items():
        if set(table.facts) - set(FACTS):
            raise ValueError(f"metric {name}, table {table_name}: facts {sorted(set(table.facts) - set(FACTS))} are not "
                             f"among {FACTS}")

    def decorate(fn):
        if name in METRICS:
            raise ValueError(f"metric {name!r} is registered twice")
        METRICS[name] = Metric(
            name=name, reads=reads, higher_is_better=higher_is_better, description=description, compute=fn,
            tables=dict(tables or {}), write=write, finish=finish,
        )
        return fn

    return decorate


def table_metric() -> dict[str, str]:
    """Table name -> the metric whose records it aggregates (table names are unique)."""
    owner = {}
    for metric in METRICS.values():
        for table in metric.tables:
            if table in owner:
                raise ValueError(f"table {table!r} is registered by metrics {owner[table]} and {metric.name}")
            owner[table] = metric.name
    return owner


# ---------------------------------------------------------------- read the hidden-state cache


@register(
    "loss",
    reads="cache",
    higher_is_better=False,
    description="mean per-token cross-entropy (nats) on the eval sample",
    tables={
        "loss": Table(loss_from_records, facts=("vocab_sizes",)),
        "saturation_verdicts": Table(
            verdicts_from_records,
            options={"alpha": "saturation.alpha", "min_checkpoints": "saturation.min_checkpoints"},
            facts=("vocab_sizes", "gone", "steps_per_epoch"),
        ),
        # which comes first, each series' change of trend or the loss's rise (docs/event_order.md)
        "event_order": Table(
            event_order_from_records,
            options={"alpha": "saturation.alpha", "min_checkpoints": "saturation.min_checkpoints"},
            files_of=SERIES_METRICS,
            monitor=False,
        ),
        "event_prediction": Table(
            event_prediction_from_records,
            options={"alpha": "saturation.alpha", "min_checkpoints": "saturation.min_checkpoints"},
            facts=("sizes",),
            files_of=SERIES_METRICS,
            row_provenance=False,
            monitor=False,
        ),
    },
)
def loss(cache) -> dict:
    """Mean cross-entropy over every predicted position of the eval sample, and each
    sequence's mean (`sequence_loss`, (n_seq,)): the same sequences at every checkpoint, the
    paired units of the saturation verdict (lmsat.saturation.verdict). Reads the `loss` dataset only,
    and the head's rows V: `uniform_loss` = ln V, the loss of a uniform guess, which the
    loss table holds each checkpoint against (lmsat.products.saturation_tables.implausible_losses)."""
    from lmsat.data.hidden_states import CacheError

    values = cache["loss"][...].astype(np.float64)  # (n_seq, seq_len - 1)
    if not np.isfinite(values).all() or (values < 0).any():
        raise CacheError(f"{cache.filename}: per-token losses contain NaN/Inf or negative values; delete the cache and rerun")
    rows = cache.attrs.get("head_rows")  # None in a cache of an older lmsat
    return {"loss": float(values.mean()), "loss_sem": float(values.std() / np.sqrt(values.size)), "n_tokens": int(values.size),
            "sequence_loss": values.mean(axis=1).tolist(), "uniform_loss": math.log(int(rows)) if rows else None}


@register(
    "anisotropy",
    reads="cache",
    higher_is_better=None,
    description="mean pairwise cosine of the representations of every layer (sampled tokens) and of the last layer (all tokens)",
    tables={
        "anisotropy_layers": Table(partial(anisotropy_from_records, part=0), needs=("loss",)),
        "anisotropy_training": Table(partial(anisotropy_from_records, part=1), needs=("loss",)),
    },
)
def anisotropy(cache) -> dict:
    """A(H) per layer from `layers` (k sampled tokens) and exactly for the last layer.

    `anisotropy_layers[i]` is hidden_states[i] (0 = embeddings, n_layers = the last layer,
    post final norm) over the k tokens of the layer subsample; `anisotropy_last` streams
    every row of `hidden` (the same last layer, all n_seq x seq_len tokens) in float64, and
    `anisotropy_last_influence` (n_seq,) is its derivative by each eval sequence's weight
    (the linearised statistic a bootstrap of the sequences resamples: lmsat.saturation.event_order).

    A zero vector has no direction, so no cosine: it is left out and counted
    (`zero_rows_layers[i]`, `zero_rows_last`; `n_tokens` counts the vectors measured, and each
    sequence's influence counts its non-zero vectors), and the log says so. A Llama with
    pad_token_id = eos_token_id keeps that embedding row at zero (padding_idx), and the eval
    sample joins its documents with that token: its layer-0 states there are zero. Fewer than
    two non-zero vectors in a set is a ValueError.
    """
    from lmsat.data.hidden_states import CacheError, cache_sequences, iter_rows
    from lmsat.degeneration.anisotropy import MeanCosineAccumulator, mean_cosine_by_sequence, mean_cosine_influence

    layers = cache["layers"]  # (n_layers + 1, k, d)
    per_layer, zero_layers = [], []
    for i in range(layers.shape[0]):
        rows = np.asarray(layers[i], dtype=np.float64)  # (k, d)
        if not np.isfinite(rows).all():
            raise CacheError(f"{cache.filename}:layers[{i}] has NaN/Inf; delete the cache and rerun")
        per_layer.append(_measured(MeanCosineAccumulator(skip_zero_rows=True).update(rows), f"layer {i}", cache))
        zero_layers.append(per_layer[-1][1])
    hidden = cache["hidden"]  # (n_seq * seq_len, d), sequence after sequence
    n_seq, seq_len = cache_sequences(cache)
    blocks = iter_rows(hidden, rows=seq_len * max(1, 2**23 // (hidden.shape[1] * seq_len)))  # (m, d), whole sequences
    last, unit_sums, counts = mean_cosine_by_sequence(blocks, n_seq, seq_len, hidden.shape[1])
    value_last, _ = _measured(last, "the last layer", cache)
    if any(zero_layers) or last.n_skipped:
        import logging

        where = [f"layer {i}: {n} of {layers.shape[1]}" for i, n in enumerate(zero_layers) if n]
        where += [f"last layer (all tokens): {last.n_skipped} of {hidden.shape[0]}"] if last.n_skipped else []
        logging.getLogger(__name__).warning(
            "%s@%s: anisotropy left out zero vectors, which have no direction (%s); each value is over the others "
            "(columns zero_rows of the anisotropy tables). An embedding row kept at zero (padding_idx: e.g. "
            "pad_token_id = eos_token_id, the token that joins the sample's documents) gives them",
            cache.attrs.get("model", "?"), cache.attrs.get("revision", "?"), "; ".join(where))
    return {
        "anisotropy_layers": [value for value, _ in per_layer],
        "anisotropy_last": value_last,
        "anisotropy_last_influence": mean_cosine_influence(unit_sums, counts).tolist(),
        "n_layers": layers.shape[0] - 1,
        "layer_sample": layers.shape[1],
        "n_tokens": last.n,
        "zero_rows_layers": zero_layers,
        "zero_rows_last": last.n_skipped,
    }


def _measured(accumulator, where: str, cache) -> tuple[float, int]:
    """(A(H), zero rows left out) of a filled accumulator, or a ValueError naming the set."""
    if accumulator.n < 2:
        raise ValueError(f"{cache.filename}: anisotropy of {where} needs at least 2 non-zero vectors; "
                         f"{accumulator.n_skipped} of its {accumulator.n + accumulator.n_skipped} are zero")
    return accumulator.value, accumulator.n_skipped


@register(
    "effective_rank",
    reads="cache",
    higher_is_better=None,
    description="effective rank and singular entropy of the last-layer representations (all tokens of the eval sample)",
    tables={
        "effective_rank": Table(
            partial(scalars_from_records, columns=("effective_rank", "effective_rank_centered", "singular_entropy", "n_tokens"))
        )
    },
)
def effective_rank(cache) -> dict:
    """Roy & Vetterli's effective rank exp(H(p)), p = s / sum(s), of the last-layer
    representations H (n_tokens, d) and of H with its mean row removed (the spread that
    anisotropy's common direction hides), and the singular entropy KL(p || uniform) of H
    (as Fig. 5 for the head). Singular values from the float64 Gram H^T H, streamed.
    `effective_rank_influence` (n_seq,): the effective rank's derivative by each eval
    sequence's weight (a second pass projects every row on the Gram's eigenvectors), the
    linearised statistic a bootstrap of the sequences resamples (lmsat.saturation.event_order)."""
    from lmsat.data.hidden_states import cache_sequences, iter_rows
    from lmsat.degeneration.spectra import effective_rank as roy_vetterli
    from lmsat.degeneration.spectra import effective_rank_influence, singular_entropy

    hidden = cache["hidden"]  # (n_seq * seq_len, d), sequence after sequence
    d = hidden.shape[1]
    n_seq, seq_len = cache_sequences(cache)
    rows = seq_len * max(1, 2**23 // (d * seq_len))  # whole sequences, ~64 MiB of float64
    gram, total, n = np.zeros((d, d)), np.zeros(d), 0  # (d, d), (d,)
    for block in iter_rows(hidden, rows=rows):  # (m, d) float64
        gram += block.T @ block
        total += block.sum(axis=0)
        n += block.shape[0]
    mean = total / n
    centered = gram - n * np.outer(mean, mean)  # (H - mean)^T (H - mean)
    eigenvalues, vectors = np.linalg.eigh(gram)  # ascending, (d,), (d, d)
    s = np.sqrt(np.clip(eigenvalues[::-1], 0, None))  # (d,) descending
    s_centered = np.sqrt(np.clip(np.linalg.eigvalsh(centered)[::-1], 0, None))
    energies, first = np.zeros((n_seq, d)), 0  # (n_seq, d): ||H_j v_i||^2, d lambda_i / d w_j
    vectors32 = vectors.astype(np.float32)  # a derivative for resampling: float32's 1e-7 is plenty, at half the time
    for start in range(0, hidden.shape[0], rows):  # the first pass refused NaN/Inf
        block = np.asarray(hidden[start : start + rows], dtype=np.float32)  # (m, d)
        count = block.shape[0] // seq_len
        energies[first : first + count] = ((block @ vectors32).astype(np.float64) ** 2).reshape(count, seq_len, d).sum(axis=1)
        first += count
    return {
        "effective_rank": roy_vetterli(s),
        "effective_rank_influence": effective_rank_influence(eigenvalues, energies).tolist(),
        "effective_rank_centered": roy_vetterli(s_centered),
        "singular_entropy": singular_entropy(s),
        "hidden_size": d,
        "n_tokens": n,
    }


# ---------------------------------------------------------------- read the weights


@dataclass(frozen=True)
class WeightsJob:
    """What a weights metric may need besides the model (rule analyse_checkpoint)."""

    model: str  # the model's name in the plan
    tokenizer: str  # its tokenizer's name in the config
    tokenizer_spec: dict  # config['tokenizers'][tokenizer], as jobs see it
    drop_padding_rows: bool  # spectra.drop_padding_rows
    pool: object = None  # an executor for work beside the forward (the weight hashes)
    shared: dict = field(default_factory=dict, compare=False, repr=False)  # made once per job, read by several metrics


def _shared(job: WeightsJob, key: str, make: Callable):
    """job.shared[key], made on first use: what several weights metrics of one job read."""
    if key not in job.shared:
        job.shared[key] = make()
    return job.shared[key]


def _tokenizer_size(job: WeightsJob) -> int | None:
    """Entries of the model's tokenizer (None when the job names none), loaded once per job."""
    if not job.tokenizer_spec:
        return None

    def load():
        from lmsat.checkpoints.loading import load_tokenizer

        return len(load_tokenizer(job.tokenizer_spec, job.tokenizer))

    return _shared(job, "tokenizer_size", load)


def _head_gram(lm, job: WeightsJob):
    """(n_valid_rows, W^T W of the head's first n_valid_rows rows, float64 (d, d) on the head's
    device): the rows of the spectra's SVD (padding dropped with drop_padding_rows), their Gram
    computed once per job for the spectra and the gradient bottleneck. A head with NaN/Inf is
    refused first, naming the checkpoint."""

    def make():
        from lmsat.bottleneck.gradient import check_head_finite
        from lmsat.checkpoints.adapters import lm_head_matrix
        from lmsat.degeneration.spectra import gram_matrix
        from lmsat.degeneration.weight_files import valid_head_rows

        head = lm_head_matrix(lm)  # (V, d)
        check_head_finite(head, job.model)
        tokenizer_size = _tokenizer_size(job) if job.drop_padding_rows else None
        n_valid = valid_head_rows(head.shape[0], tokenizer_size, job.drop_padding_rows, job.tokenizer)
        return n_valid, gram_matrix(head[:n_valid])

    return _shared(job, "head_gram", make)


def _write_spectrum(path, result: dict, record: dict) -> None:
    from lmsat.degeneration.weight_files import write_spectrum

    result = dict(result)
    tokenizer_size = result.pop("tokenizer_size")
    write_spectrum(path, result, record, tokenizer_size)


@register(
    "spectra",
    reads="weights",
    higher_is_better=None,
    description="singular values of the LM head (float64, padding rows dropped) and hashes of the head and input embedding",
    tables={
        "spectra": Table(partial(spectra_from_files, part=0)),
        "singular_entropy": Table(partial(spectra_from_files, part=1)),
        "identical_weights": Table(partial(spectra_from_files, part=2), row_provenance=False),
    },
    write=_write_spectrum,
)
def spectra(lm, job: WeightsJob) -> dict:
    """The head spectrum of `lm` on its device (lmsat.degeneration.weight_files.head_spectrum), from the
    head's Gram this job shares with the gradient bottleneck (_head_gram)."""
    import logging

    from lmsat.degeneration.weight_files import head_spectrum

    tokenizer_size = _tokenizer_size(job) if job.drop_padding_rows else None
    n_valid, gram = _head_gram(lm, job)
    tall = n_valid >= gram.shape[0]  # a (d, d) Gram gives the spectrum of a tall head only
    spectrum = head_spectrum(lm, tokenizer_size, job.drop_padding_rows, job.tokenizer, pool=job.pool,
                             gram=gram if tall else None)
    logging.getLogger(__name__).info(
        "%s: head %d x %d (%s), %d rows in the SVD",
        job.model, spectrum["n_rows"], spectrum["hidden_size"], spectrum["head_dtype"], spectrum["n_valid_rows"],
    )
    return {**spectrum, "tokenizer_size": tokenizer_size}


def _write_attention(path, result: dict, record: dict) -> None:
    from lmsat.degeneration.weight_files import write_attention

    write_attention(path, result["arrays"], result["shape"], record, result["hidden_size"])


@register(
    "attention",
    reads="weights",
    higher_is_better=None,
    description="low-rank metrics of every head's W_Q^T W_K and W_O W_V (Kobayashi et al.)",
    tables={"attention_lowrank": Table(attention_from_files, needs=("identical_weights",))},
    write=_write_attention,
)
def attention(lm, job: WeightsJob) -> dict:
    """Per-head low-rank metrics of `lm` on its device (lmsat.degeneration.weight_files.attention_arrays)."""
    import logging

    from lmsat.checkpoints.adapters import lm_head_matrix
    from lmsat.degeneration.attention import ZeroWeightError
    from lmsat.degeneration.weight_files import attention_arrays

    try:
        arrays, shape = attention_arrays(lm)
    except ZeroWeightError as error:  # it names layer, head and tensor: add the checkpoint
        from lmsat.checkpoints.loading import ModelLoadError

        name, _, revision = job.model.partition("@")
        raise ModelLoadError(
            f"model {name} at revision {revision}: {error}. Fix: if the weights are broken, fetch or save the "
            "checkpoint again; if the architecture zero-initialises it at this revision, leave the revision "
            "out, or `attention` out of `metrics`"
        ) from error
    logging.getLogger(__name__).info("%s: attention of %d layers x %d heads", job.model, shape["n_layers"], shape["n_heads"])
    return dict(arrays=arrays, shape=shape, hidden_size=int(lm_head_matrix(lm).shape[1]))


# ---------------------------------------------------------------- the peers' per-layer measures
# WeightWatcher's and pico-analyze's per-layer diagnostics of the weights (lmsat.degeneration.weight_diagnostics)
# and representation similarity across checkpoints (lmsat.degeneration.similarity).


def _write_weight_diagnostics(path, result: dict, record: dict) -> None:
    from lmsat.degeneration.weight_diagnostics import write_diagnostics

    write_diagnostics(path, result, record)


@register(
    "weight_diagnostics",
    reads="weights",
    higher_is_better=None,
    description="per linear layer and the LM head: WeightWatcher's power-law alpha (with its fit), stable rank and MP soft "
    "rank; pico-analyze's PER, Gini, Hoyer, condition number and norms",
    tables={
        "weight_alpha": Table(partial(weight_diagnostics_from_files, part="alpha")),
        "weight_sparsity": Table(partial(weight_diagnostics_from_files, part="sparsity")),
    },
    write=_write_weight_diagnostics,
)
def weight_diagnostics(lm, job: WeightsJob) -> dict:
    """Every matrix's diagnostics of `lm` on its device (lmsat.degeneration.weight_diagnostics); the head's
    vocabulary padding rows dropped as for its spectrum (spectra.drop_padding_rows)."""
    import logging
    import time

    from lmsat.degeneration.weight_diagnostics import WeightDiagnosticsError, model_diagnostics

    n_valid = None
    if job.drop_padding_rows:
        from lmsat.degeneration.weight_files import valid_head_rows

        size = _tokenizer_size(job)
        n_valid = valid_head_rows(lm.get_output_embeddings().weight.shape[0], size, True, job.tokenizer)
    start = time.perf_counter()
    try:
        arrays = model_diagnostics(lm, job.model, n_valid)
    except WeightDiagnosticsError as error:  # it names the matrix: add the fix
        from lmsat.checkpoints.loading import ModelLoadError

        raise ModelLoadError(
            f"{error}. Fix: the weights are broken (NaN/Inf); fetch or save the checkpoint again, or leave the "
            "revision out"
        ) from error
    logging.getLogger(__name__).info(
        "%s: diagnostics of %d matrices in %.2f s (%d not ok: %s)", job.model, len(arrays["name"]),
        time.perf_counter() - start, int((arrays["status"] != "ok").sum()),
        sorted(set(arrays["status"]) - {"ok"}) or "none",
    )
    return arrays


def _reference_layers(cache, reference, kind: str):
    """The `layers` dataset of a reference cache, checked to hold the same tokens as `cache`'s."""
    from lmsat.data.hidden_states import CacheError

    revision, _, other = reference
    if other["layers"].shape[:2] != cache["layers"].shape[:2] or not np.array_equal(
        other["layer_index"][...], cache["layer_index"][...]
    ):
        raise CacheError(
            f"{cache.filename} and the {kind} checkpoint's {other.filename} ({revision}) hold other tokens in `layers` "
            f"(shapes {cache['layers'].shape}, {other['layers'].shape}, or another layer_index): they were made with other "
            "extraction settings. Fix: delete the older of the two and rerun"
        )
    return other["layers"]


@register(
    "representation_similarity",
    reads="cache_pairs",
    higher_is_better=None,
    description="linear CKA (and debiased), SVCCA and PWCCA of every layer's hidden states (the sampled tokens) with "
    "the final checkpoint's and with the previous checkpoint's",
    tables={"representation_similarity": Table(similarity_from_records)},
)
def representation_similarity(cache, references: dict) -> dict:
    """Per hidden state (0 = embeddings, n_layers = the last layer, post final norm), the
    similarities of lmsat.degeneration.similarity between this checkpoint's `layers` and each reference's:
    the same k sampled tokens (layer_index) at every checkpoint."""
    from lmsat.data.hidden_states import CacheError
    from lmsat.degeneration.similarity import SimilarityError, layer_similarities

    layers = cache["layers"]  # (n_states, k, w), read a hidden state at a time
    values = {"n_layers": int(layers.shape[0] - 1), "n_tokens": int(layers.shape[1])}
    compared = {}
    for kind in ("final", "previous"):
        reference = references.get(kind)
        values[f"{kind}_revision"] = "" if reference is None else reference[0]
        values[f"{kind}_step"] = -1 if reference is None else int(reference[1])
        if reference is not None:
            compared[kind] = _reference_layers(cache, reference, kind)
    try:
        measured = layer_similarities(layers, compared)
    except SimilarityError as error:
        raise CacheError(f"{cache.filename} against its {' and '.join(compared)} checkpoint(s): {error}") from None
    for kind, series in measured.items():
        values.update({f"{name}_{kind}": values_ for name, values_ in series.items()})
    return values


# ---------------------------------------------------------------- read the weights and the cache


def _write_gradient(path, result: dict, record: dict) -> None:
    from lmsat.bottleneck.gradient import write_gradient_file

    write_gradient_file(path, result, record)


def _finish_gradient(prepared: dict, cache, tokens) -> dict:
    """The measure on the cached last hidden states, once the job's forward wrote them."""
    from lmsat.bottleneck.gradient import measure

    return measure(prepared["projector"], cache, tokens, where=prepared["where"])


@register(
    "gradient_bottleneck",
    reads="weights",
    higher_is_better=None,
    description="share of each token's logit gradient softmax(z) - onehot(y) (energy and norm) inside the LM head's "
    "column space, the part backpropagation passes below the head (Godey & Artzi 2026), beside rank / V",
    tables={"gradient_bottleneck": Table(gradient_from_files)},
    write=_write_gradient,
    finish=_finish_gradient,
)
def gradient_bottleneck(lm, job: WeightsJob) -> dict:
    """Before the forward: the head's projector (lmsat.bottleneck.gradient.head_projector) from
    the Gram the spectra use (plus the padding rows': the gradient spans every row the
    softmax does), a float32 copy of the head kept for after the cast. A head with NaN/Inf, a
    head that is not one linear map, or a tokenizer larger than the head is refused here,
    before any work."""
    import torch

    from lmsat.bottleneck.gradient import GradientBottleneckError, check_vocabulary, head_projector
    from lmsat.checkpoints.adapters import lm_head_matrix
    from lmsat.degeneration.spectra import gram_matrix

    module = lm.get_output_embeddings()
    if not isinstance(module, torch.nn.Linear):
        raise GradientBottleneckError(
            f"{job.model}: the LM head is a {type(module).__name__}, not one linear map, so its logit gradient has no "
            "column space to measure. Fix: leave gradient_bottleneck out of `metrics` for this model"
        )
    head = lm_head_matrix(lm)  # (V, d), padding rows included
    check_vocabulary(int(head.shape[0]), _tokenizer_size(job), job.model, job.tokenizer)
    n_valid, gram = _head_gram(lm, job)
    if n_valid < head.shape[0]:
        gram = gram + gram_matrix(head[n_valid:])
    return {"projector": head_projector(head, module.bias, gram=gram, where=job.model), "where": job.model}


def finish_weights(results: dict, cache, tokens) -> dict:
    """{metric: result} of weights metrics, those with a finish (Metric.finish) finished on the
    checkpoint's open hidden-state cache and its token sample (n_seq, seq_len)."""
    return {name: (METRICS[name].finish(result, cache, tokens) if METRICS[name].finish else result)
            for name, result in results.items()}
