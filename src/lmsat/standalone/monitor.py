"""One evaluation of a model in memory: the pipeline's cheap per-checkpoint numbers for any
training loop (`monitor(model, sample)`; the Trainer callback, lmsat.standalone.callback,
calls it at each save).

The same eval sample as rule sample_eval_tokens builds (lmsat.data.corpus.build_sample,
through lmsat.standalone.analyse.text_sample), the same forward into a hidden-state cache
(lmsat.data.hidden_states.extract_to_cache, into a temporary file) and the same registered
metrics (lmsat.products.metrics), so `python -m lmsat analyse` on the saved checkpoint gives
the same numbers (docs/callback.md).

It never changes training: no gradient (torch.no_grad, autocast off), model.training
restored, no optimizer, scheduler or data-order access, and every RNG state it could touch
(python, numpy, torch CPU and CUDA) saved before and restored after."""

from __future__ import annotations

import contextlib
import copy
import math
import os
import random
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from lmsat.errors import MonitorError, ShardedModelError

if TYPE_CHECKING:
    from lmsat.data.corpus import SampleSize


DEFAULT_METRICS = ("loss", "anisotropy", "effective_rank", "spectra", "gradient_bottleneck")  # analyse's, but the attention grid
# watched when asked: WeightWatcher's and pico-analyze's per-matrix diagnostics (a few seconds per
# evaluation on a CPU at Pythia-160m's size, benchmarks/weightwatcher_side_by_side.py)
WATCHABLE = (*DEFAULT_METRICS, "weight_diagnostics")
LOG_PREFIX = "lmsat/"


@dataclass
class Sample:
    """An eval token sample: tokens (n_seq, seq_len) int, its attributes (sha256, corpus,
    tokenizer, ...) as lmsat.data.corpus.read_sample returns them, and where it is on disk."""

    tokens: np.ndarray
    attrs: dict
    path: Path | None = None
    settings: dict = field(default_factory=dict)  # the sample settings it was built with (text samples)
    size: SampleSize | None = None  # how a text sample's size was chosen (text samples)


def load_sample(path) -> Sample:
    """A run's sample file (results/<run>/samples/<corpus>/<tokenizer>.h5) as a Sample."""
    from lmsat.data.corpus import read_sample

    path = Path(path)
    if not path.is_file():
        raise MonitorError(f"sample {path}: no such file. Fix: give results/<run>/samples/<corpus>/<tokenizer>.h5, or text=")
    tokens, attrs = read_sample(path)
    return Sample(tokens, attrs, path)


CALLBACK_OPTIONS = {"n_tokens": "n_tokens={}", "seq_len": "seq_len={}"}  # how the callback's user sets them


def text_sample(text, tokenizer_dir, out_path, model_config: dict, *, seq_len=None, n_tokens=None, config=None) -> Sample:
    """The sample of text file(s) for this model, built as rule sample_eval_tokens builds it,
    its size chosen as `lmsat init` and `lmsat analyse --text` choose it
    (lmsat.standalone.analyse.sample_settings): seq_len and n_tokens when given, else `config`'s (a
    run config file) when given, else lmsat.data.corpus.text_sample_size's for this text and the
    model's context. The Sample's `size` says what was chosen and why (size.describe())."""
    from lmsat.standalone import analyse as analysis

    files = [Path(f) for f in ([text] if isinstance(text, (str, Path)) else text)]
    try:
        chosen, size = analysis.sample_settings(analysis.run_settings(config), model_config, files, Path(tokenizer_dir),
                                                seq_len=seq_len, n_tokens=n_tokens, config=config, options=CALLBACK_OPTIONS)
        tokens, attrs = analysis.text_sample(files, Path(tokenizer_dir), out_path, chosen)
    except analysis.AnalyseError as error:
        raise MonitorError(str(error).replace("--text ", "text=")) from None
    return Sample(tokens, attrs, Path(out_path), chosen, size)


# ---------------------------------------------------------------- checks before training


def check_model(model) -> None:
    """MonitorError unless lmsat.checkpoints.adapters knows the model's family (the metrics find its
    blocks, final norm and head through it)."""
    from lmsat.checkpoints.adapters import family_adapter

    try:
        family_adapter(model)
    except ValueError as error:
        raise MonitorError(f"cannot watch this model: {error}") from None


def check_sample(model, sample: Sample, tokenizer=None) -> None:
    """MonitorError before any forward when the sample cannot be scored by `model`: sequences
    longer than its context, ids past its vocabulary, or (with `tokenizer`, the model's)
    ids that this tokenizer does not give back when it decodes and encodes them again
    (another tokenizer's ids: most of them change)."""
    from lmsat.checkpoints.loading import context_length

    n_seq, seq_len = sample.tokens.shape
    where = f"the sample {sample.path or '(in memory)'}"
    found = context_length(model.config.to_dict())
    if found and seq_len > found[1]:
        raise MonitorError(
            f"{where} has sequences of {seq_len} tokens, past the model's context ({found[0]}={found[1]}): positions "
            f"past it would give wrong losses, without an error. Fix: seq_len={found[1]} (or less) with text=, or a "
            "sample built for this model"
        )
    if n_seq < 2:
        raise MonitorError(f"{where} holds {n_seq} sequence(s); the verdict needs at least 2. Fix: a larger n_tokens")
    rows = model.get_input_embeddings().weight.shape[0]
    head = model.get_output_embeddings()
    rows = min(rows, head.weight.shape[0]) if head is not None else rows
    top = int(sample.tokens.max())
    if top >= rows:
        raise MonitorError(
            f"{where} holds token id {top}, but the model's vocabulary has {rows} rows: it was tokenized with "
            "another tokenizer than the model's. Fix: build the sample with the model's tokenizer (text=...)"
        )
    if tokenizer is not None:
        kept = tokenizer_agreement(tokenizer, sample.tokens)
        if kept < 0.9:
            raise MonitorError(
                f"{where} was tokenized with another tokenizer than the model's ({type(tokenizer).__name__}, "
                f"{len(tokenizer)} tokens): decoding and re-encoding its sequences keeps {kept:.0%} of their ids "
                "(the model's own tokenizer keeps nearly all). Fix: build the sample with the model's tokenizer "
                "(text=...), or pass the run's sample of this tokenizer"
            )


def check_unsharded(model) -> None:
    """ShardedModelError naming the first parameter that is sharded across processes: a
    DTensor (FSDP2, tensor parallelism), a module wrapped by FSDP (its flat parameters), a
    DeepSpeed ZeRO-3 parameter. The watch reads the whole model on the process that
    evaluates, with no collective (which every rank would have to join, at the same step)."""
    import torch

    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # a torch without torch.distributed
        DTensor = ()
    fix = ("Fix: measure the saved checkpoints instead (`lmsat init <output_dir>` + snakemake, or `lmsat analyse "
           "<checkpoint>`), or watch an unsharded run (DDP, one process)")
    for name, parameter in model.named_parameters():
        if isinstance(parameter, DTensor):
            mesh = parameter.device_mesh
            raise ShardedModelError(
                f"cannot watch this model: its parameter {name!r} is a DTensor (placements {tuple(parameter.placements)} "
                f"on a device mesh of {mesh.size()} process(es)), sharded or distributed across processes by FSDP2 or "
                f"tensor parallelism, and the watch reads the whole model on one process. {fix}")
        if hasattr(parameter, "ds_id"):
            raise ShardedModelError(f"cannot watch this model: its parameter {name!r} is a DeepSpeed ZeRO-3 parameter, "
                                    f"partitioned across processes, and the watch reads the whole model on one process. {fix}")
    if torch.distributed.is_available():
        from torch.distributed.fsdp import FullyShardedDataParallel

        wrapped = [name or "the model" for name, module in model.named_modules()
                   if isinstance(module, FullyShardedDataParallel)]
        if wrapped:
            raise ShardedModelError(f"cannot watch this model: {wrapped[0]!r} is wrapped by FullyShardedDataParallel, "
                                    f"which flattens and shards its parameters across processes. {fix}")


def process_rank() -> int:
    """This process's rank in a distributed run: torch.distributed's once initialised, else
    the RANK a launcher (torchrun, SLURM's srun with it set) exported, else 0."""
    import torch

    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank()
    return int(os.environ.get("RANK", "0") or 0)


def tokenizer_agreement(tokenizer, tokens: np.ndarray, sequences: int = 8) -> float:
    """The fraction of a sample's ids (its first `sequences` sequences) that `tokenizer` gives
    back when it decodes and encodes them again (difflib's matching blocks): near 1 for
    the tokenizer that made them (only the cut words at a window's ends may split
    otherwise), far less for another one."""
    from difflib import SequenceMatcher

    kept = total = 0
    for row in np.asarray(tokens[:sequences]):
        ids = [int(i) for i in row]
        again = tokenizer(tokenizer.decode(ids), add_special_tokens=False)["input_ids"]
        kept += sum(block.size for block in SequenceMatcher(None, ids, again, autojunk=False).get_matching_blocks())
        total += len(ids)
    return kept / max(total, 1)


# ---------------------------------------------------------------- the record of one evaluation


@contextlib.contextmanager
def rng_kept():
    """The RNG states of python, numpy and torch (CPU and every initialised CUDA device) as
    they were before the block: whatever it draws (a model built on the way, a sample),
    training draws the same numbers after it."""
    import torch

    states = (random.getstate(), np.random.get_state(), torch.get_rng_state(),
              torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None)
    try:
        yield
    finally:
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.set_rng_state(states[2])
        if states[3] is not None:
            torch.cuda.set_rng_state_all(states[3])


@contextlib.contextmanager
def untouched(model):
    """Everything `monitor` could change, as it was: model.training, and the RNG states
    (rng_kept)."""
    was_training = model.training
    try:
        with rng_kept():
            yield
    finally:
        model.train(was_training)


def monitor(model, sample, *, settings: dict | None = None, metrics=DEFAULT_METRICS, tokenizer_dir=None,
            name: str = "model", revision: str = "in-memory", strict: bool = True) -> dict:
    """The per-checkpoint numbers of `model` (in memory, on its device) on `sample` (a Sample,
    a sample file, or (tokens, attrs)), as rule analyse_checkpoint and the metric rules
    compute them for a saved checkpoint. -> {metric: its values (spectra, gradient_bottleneck:
    their summaries, as `lmsat analyse` prints them)} plus "sequence_losses": (n_seq,) each
    sequence's mean token loss (the units of lmsat.saturation.verdict.verdict_from_paired), "spectrum":
    the head spectrum result (what the spectra file holds) and "gradient": the gradient
    bottleneck's result (its file's), None when not asked. The gradient bottleneck is
    computed from this forward's cached last hidden states and the head (a float32 copy):
    no gradient of the model is taken or read.

    `settings`: lmsat.standalone.analyse.run_settings(...) (default: the schema's, as `lmsat analyse`);
    extraction.dtype is the forward's: a model in another dtype is copied and cast (the
    copy is freed after), as the pipeline casts a loaded checkpoint. `tokenizer_dir`: the
    tokenizer whose size marks the head's padding rows (spectra.drop_padding_rows).
    Training is untouched (`untouched`): no gradient, autocast off, state restored.

    `strict`: a measure that fails raises (True), or (False) is left out of the record and
    named in its "failed": {metric: "ErrorType: message"} (a failed forward fails every
    metric that reads it; "sequence_losses" is then None, as when the loss failed), and
    the others are measured: SaturationCallback's way, which never stops training.
    """
    import torch

    from lmsat.data.hidden_states import ExtractionSettings, extract_to_cache, open_cache
    from lmsat.products.metrics import METRICS, WeightsJob, finish_weights
    from lmsat.saturation.verdict import sequence_means
    from lmsat.standalone.analyse import SUMMARIES, run_settings, tokenizer_spec

    sample = as_sample(sample)
    settings = settings or run_settings()
    unknown = [m for m in metrics if m not in WATCHABLE]
    if unknown:
        raise MonitorError(f"metrics {unknown} are not watched. Fix: choose among {', '.join(WATCHABLE)}")
    check_model(model)
    check_sample(model, sample)
    extraction = settings["extraction"]
    extraction_settings = ExtractionSettings(
        **{k: extraction[k] for k in ("batch_size", "chunk_sequences", "dtype", "storage_dtype", "layer_sample")},
        seed=settings["seed"],
    )
    parameter = next(model.parameters())
    device = parameter.device
    report, failed, pending, results = {}, {}, {}, {}
    measure = Measure(failed, strict)
    sequence_losses = lm = None
    with untouched(model), torch.no_grad(), torch.autocast(device.type, enabled=False):
        model.eval()
        weights = [m for m in metrics if METRICS[m].reads == "weights"]
        if weights:  # one job: the weights metrics share the head's Gram and the tokenizer's size
            drop = bool(settings["spectra"]["drop_padding_rows"] and tokenizer_dir is not None)
            job = WeightsJob(model=f"{name}@{revision}", tokenizer=str(tokenizer_dir or ""),
                             tokenizer_spec=tokenizer_spec(Path(tokenizer_dir)) if tokenizer_dir else {},
                             drop_padding_rows=drop)
            for metric in weights:
                with measure(metric):
                    pending[metric] = METRICS[metric].compute(model, job)
        for metric in [m for m in pending if METRICS[m].finish is None]:  # spectra, weight_diagnostics: done
            results[metric] = pending.pop(metric)
        forward_dtype = getattr(torch, extraction_settings.dtype)
        identity = dict(model=name, revision=revision, model_id="in-memory", sample_sha256=sample.attrs["sha256"])
        readers = [m for m in metrics if METRICS[m].reads == "cache" or m in pending]
        readers += [] if "loss" in metrics else [SEQUENCE_LOSSES]
        with measure(*readers, what="the forward into the hidden-state cache"), \
                tempfile.TemporaryDirectory(prefix="lmsat-monitor-", dir=scratch_dir(model, sample.tokens.size,
                                                                                     extraction_settings)) as scratch:
            path = Path(scratch) / "cache.h5"
            lm = model if parameter.dtype == forward_dtype else copy.deepcopy(model).to(dtype=forward_dtype)
            extract_to_cache(lm, sample.tokens, path, identity=identity, settings=extraction_settings, device=str(device))
            lm = None
            with open_cache(path, expect=dict(sample_sha256=sample.attrs["sha256"])) as cache:
                for metric, prepared in pending.items():
                    with measure(metric):
                        results.update(finish_weights({metric: prepared}, cache, sample.tokens))
                for metric in metrics:
                    if METRICS[metric].reads == "cache":
                        with measure(metric):
                            report[metric] = METRICS[metric].compute(cache)
                if "loss" not in metrics:  # the verdict's units, read from the cache
                    with measure(SEQUENCE_LOSSES):
                        sequence_losses = sequence_means(cache["loss"][...])
        lm = None  # a float32 copy, when the forward failed
    for metric, result in results.items():
        with measure(metric, what=f"the summary of {metric}"):
            report[metric] = SUMMARIES[metric](result)
    if "loss" in report:  # the loss record holds each sequence's mean (the same float64 means)
        sequence_losses = np.asarray(report["loss"]["sequence_loss"])
    ordered = {m: report[m] for m in metrics if m in report}
    extra = {"diagnostics": results.get("weight_diagnostics")} if "weight_diagnostics" in metrics else {}
    return {**ordered, "sequence_losses": sequence_losses, "spectrum": results.get("spectra"),
            "gradient": results.get("gradient_bottleneck"), **extra, "failed": failed}


SEQUENCE_LOSSES = "sequence_losses"  # a record's failed key when the verdict's units could not be read (no loss metric)


class Measure:
    """`with measure(*metrics, what=...)`: a failure inside is raised (strict) or written into
    `failed` for each of `metrics` not failed already ("ErrorType: message", prefixed by
    `what` when given) and the block left: the other measures go on."""

    def __init__(self, failed: dict, strict: bool):
        self.failed, self.strict = failed, strict

    @contextlib.contextmanager
    def __call__(self, *metrics, what: str = ""):
        try:
            yield
        except Exception as error:  # noqa: BLE001 (any failure of a measure: named, never the end of training)
            if self.strict:
                raise
            message = f"{type(error).__name__}: {error}"
            for metric in metrics:
                self.failed.setdefault(metric, f"{what} failed: {message}" if what else message)


MEMORY_DIR = "/dev/shm"  # a RAM file system on Linux


def scratch_dir(model, n_tokens: int, settings) -> str | None:
    """Where `monitor` writes its temporary cache: MEMORY_DIR when it exists, is writable and
    has room for twice the cache, else None (the system's temporary directory). The cache is
    deleted once the metrics are read, so the per-chunk fsync that keeps the pipeline's
    caches whole across a kill (lmsat.data.hidden_states) protects nothing here; in memory it costs
    nothing. The same bytes either way, so the same numbers."""
    if not (os.path.isdir(MEMORY_DIR) and os.access(MEMORY_DIR, os.W_OK)):
        return None
    head = model.get_output_embeddings()
    head = model.get_input_embeddings() if head is None else head
    width = int(head.weight.shape[1])
    config = model.config
    layers = getattr(config, "num_hidden_layers", None) or getattr(config, "n_layer", None) or 64
    item = np.dtype(settings.storage_dtype if settings.storage_dtype != "bfloat16" else "float16").itemsize
    needed = (n_tokens + settings.layer_sample * (layers + 1)) * width * item + n_tokens * 4
    return MEMORY_DIR if shutil.disk_usage(MEMORY_DIR).free > 2 * needed else None


def as_sample(sample) -> Sample:
    if isinstance(sample, Sample):
        return sample
    if isinstance(sample, (str, Path)):
        return load_sample(sample)
    if isinstance(sample, tuple) and len(sample) == 2:
        return Sample(np.asarray(sample[0]), dict(sample[1]))
    raise MonitorError(f"sample: a Sample, a sample file or (tokens, attrs) from lmsat.read_sample, not {type(sample).__name__}")


LOGGED = {  # metric -> (value in its record, logged name after lmsat/)
    "loss": (("loss", "loss"), ("loss_sem", "loss_sem")),
    "anisotropy": (("anisotropy_last", "anisotropy_last"),),
    "effective_rank": (("effective_rank", "effective_rank"), ("effective_rank_centered", "effective_rank_centered"),
                       ("singular_entropy", "singular_entropy")),
    "spectra": (("singular_entropy_sigma", "head_singular_entropy"), ("singular_entropy_sigma2", "head_singular_entropy_sigma2"),
                ("effective_rank", "head_effective_rank"), ("stable_rank", "head_stable_rank"), ("s1", "head_s1")),
    "weight_diagnostics": (("head_alpha", "head_alpha"), ("head_alpha_sigma", "head_alpha_sigma"),
                           ("head_mp_softrank", "head_mp_softrank"), ("median_alpha", "median_alpha"),
                           ("median_stable_rank", "median_stable_rank"), ("median_mp_softrank", "median_mp_softrank")),
    "gradient_bottleneck": (("energy_kept", "gradient_energy_kept"), ("energy_kept_sem", "gradient_energy_kept_sem"),
                            ("norm_kept", "gradient_norm_kept"), ("random_energy", "gradient_random_energy")),
}
VERDICT_LOGGED = ("rise", "rise_low", "rise_high", "p_value")  # with lmsat/saturates (1 or 0)


def scalars(record: dict) -> dict[str, float]:
    """The logged scalars of a monitor record, `lmsat/<name>` -> float: LOGGED, and each
    layer's anisotropy as lmsat/anisotropy_layer_<i> (0 = embeddings)."""
    out = {}
    for metric, pairs in LOGGED.items():
        if metric in record:  # a value documented as NaN (an alpha not fitted) is not logged
            out.update({LOG_PREFIX + label: float(record[metric][key]) for key, label in pairs
                        if math.isfinite(float(record[metric][key]))})
    for i, value in enumerate(record.get("anisotropy", {}).get("anisotropy_layers", [])):
        out[f"{LOG_PREFIX}anisotropy_layer_{i}"] = float(value)
    return out
