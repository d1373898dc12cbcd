"""Watch saturation while a model trains: the pipeline's per-checkpoint numbers, computed on
the model in memory at every checkpoint save, logged through the Trainer and written as the
pipeline's tables.

    from lmsat.callbacks import SaturationCallback
    trainer = Trainer(model=model, args=args, train_dataset=data, processing_class=tokenizer,
                      callbacks=[SaturationCallback(text="eval.txt")])
    trainer.train()

At each save (and, with `every_n_steps`, between saves) the callback runs the cheap metrics
of `lmsat analyse` (loss and its standard error, last-layer anisotropy, effective rank and
singular entropy of the representations, the head's spectrum, the gradient bottleneck: the
share of the loss's logit gradient the head passes back, from the callback's own forward,
never from the trainer's gradients) through the same functions:
the same eval sample as rule sample_eval_tokens builds (lmsat.corpus.build_sample, through
lmsat.analysis.text_sample), the same forward into a hidden-state cache
(lmsat.cache.extract_to_cache, into a temporary file) and the same registered metrics
(lmsat.metrics). So `python -m lmsat analyse <output_dir>/checkpoint-N --text <same file>`
and a `python -m lmsat init <output_dir>` run with the same sample settings give the same
numbers (docs/callback.md).

`monitor(model, sample)` is the same record for any other loop (PyTorch Lightning, a loop of
one's own).

It never changes training: no gradient (torch.no_grad, autocast off), model.training
restored, no optimizer, scheduler or data-order access, and every RNG state it could touch
(python, numpy, torch CPU and CUDA) saved before and restored after. Under distributed
training only the world's process zero computes; the others go on and wait at their next
collective (no extra collective is added).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import logging
import math
import os
import random
import re
import shutil
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from lmsat.errors import MonitorError

if TYPE_CHECKING:
    from lmsat.corpus import SampleSize

log = logging.getLogger(__name__)

DEFAULT_METRICS = ("loss", "anisotropy", "effective_rank", "spectra", "gradient_bottleneck")  # analyse's, but the attention grid
# watched when asked: WeightWatcher's and pico-analyze's per-matrix diagnostics (a few seconds per
# evaluation on a CPU at Pythia-160m's size, benchmarks/weightwatcher_side_by_side.py)
WATCHABLE = (*DEFAULT_METRICS, "weight_diagnostics")
LOG_PREFIX = "lmsat/"
OWN_TABLES = ("saturation_verdicts",)  # the callback writes these itself, from its own verdict (its alpha)


@dataclass
class Sample:
    """An eval token sample: tokens (n_seq, seq_len) int, its attributes (sha256, corpus,
    tokenizer, ...) as lmsat.corpus.read_sample returns them, and where it is on disk."""

    tokens: np.ndarray
    attrs: dict
    path: Path | None = None
    settings: dict = field(default_factory=dict)  # the sample settings it was built with (text samples)
    size: SampleSize | None = None  # how a text sample's size was chosen (text samples)


def load_sample(path) -> Sample:
    """A run's sample file (results/<run>/samples/<corpus>/<tokenizer>.h5) as a Sample."""
    from lmsat.corpus import read_sample

    path = Path(path)
    if not path.is_file():
        raise MonitorError(f"sample {path}: no such file. Fix: give results/<run>/samples/<corpus>/<tokenizer>.h5, or text=")
    tokens, attrs = read_sample(path)
    return Sample(tokens, attrs, path)


CALLBACK_OPTIONS = {"n_tokens": "n_tokens={}", "seq_len": "seq_len={}"}  # how the callback's user sets them


def text_sample(text, tokenizer_dir, out_path, model_config: dict, *, seq_len=None, n_tokens=None, config=None) -> Sample:
    """The sample of text file(s) for this model, built as rule sample_eval_tokens builds it,
    its size chosen as `lmsat init` and `lmsat analyse --text` choose it
    (lmsat.analysis.sample_settings): seq_len and n_tokens when given, else `config`'s (a
    run config file) when given, else lmsat.corpus.text_sample_size's for this text and the
    model's context. The Sample's `size` says what was chosen and why (size.describe())."""
    from lmsat import analysis

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
    """MonitorError unless lmsat.adapters knows the model's family (the metrics find its
    blocks, final norm and head through it)."""
    from lmsat.adapters import family_adapter

    try:
        family_adapter(model)
    except ValueError as error:
        raise MonitorError(f"cannot watch this model: {error}") from None


def check_sample(model, sample: Sample, tokenizer=None) -> None:
    """MonitorError before any forward when the sample cannot be scored by `model`: sequences
    longer than its context, ids past its vocabulary, or (with `tokenizer`, the model's)
    ids that this tokenizer does not give back when it decodes and encodes them again
    (another tokenizer's ids: most of them change)."""
    from lmsat.models import context_length

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
def untouched(model):
    """Everything `monitor` could change, as it was: model.training, and the RNG states of
    python, numpy and torch (CPU and every initialised CUDA device)."""
    import torch

    was_training = model.training
    states = (random.getstate(), np.random.get_state(), torch.get_rng_state(),
              torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None)
    try:
        yield
    finally:
        model.train(was_training)
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.set_rng_state(states[2])
        if states[3] is not None:
            torch.cuda.set_rng_state_all(states[3])


def monitor(model, sample, *, settings: dict | None = None, metrics=DEFAULT_METRICS, tokenizer_dir=None,
            name: str = "model", revision: str = "in-memory") -> dict:
    """The per-checkpoint numbers of `model` (in memory, on its device) on `sample` (a Sample,
    a sample file, or (tokens, attrs)), as rule analyse_checkpoint and the metric rules
    compute them for a saved checkpoint. -> {metric: its values (spectra, gradient_bottleneck:
    their summaries, as `lmsat analyse` prints them)} plus "sequence_losses": (n_seq,) each
    sequence's mean token loss (the units of lmsat.verdict.verdict_from_paired), "spectrum":
    the head spectrum result (what the spectra file holds) and "gradient": the gradient
    bottleneck's result (its file's), None when not asked. The gradient bottleneck is
    computed from this forward's cached last hidden states and the head (a float32 copy):
    no gradient of the model is taken or read.

    `settings`: lmsat.analysis.run_settings(...) (default: the schema's, as `lmsat analyse`);
    extraction.dtype is the forward's: a model in another dtype is copied and cast (the
    copy is freed after), as the pipeline casts a loaded checkpoint. `tokenizer_dir`: the
    tokenizer whose size marks the head's padding rows (spectra.drop_padding_rows).
    Training is untouched (`untouched`): no gradient, autocast off, state restored.
    """
    import torch

    from lmsat.analysis import gradient_summary, run_settings, spectrum_summary, tokenizer_spec
    from lmsat.cache import ExtractionSettings, extract_to_cache, open_cache
    from lmsat.metrics import METRICS, WeightsJob, finish_weights
    from lmsat.verdict import sequence_means

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
    report, spectrum, gradient, diagnostics, pending = {}, None, None, None, {}
    with untouched(model), torch.no_grad(), torch.autocast(device.type, enabled=False):
        model.eval()
        weights = [m for m in metrics if METRICS[m].reads == "weights"]
        if weights:  # one job: the weights metrics share the head's Gram and the tokenizer's size
            drop = bool(settings["spectra"]["drop_padding_rows"] and tokenizer_dir is not None)
            job = WeightsJob(model=f"{name}@{revision}", tokenizer=str(tokenizer_dir or ""),
                             tokenizer_spec=tokenizer_spec(Path(tokenizer_dir)) if tokenizer_dir else {},
                             drop_padding_rows=drop)
            for metric in weights:
                pending[metric] = METRICS[metric].compute(model, job)
        if "spectra" in pending:
            spectrum = pending.pop("spectra")
            report["spectra"] = spectrum_summary(spectrum)
        if "weight_diagnostics" in pending:
            from lmsat.analysis import diagnostics_summary

            diagnostics = pending.pop("weight_diagnostics")
            report["weight_diagnostics"] = diagnostics_summary(diagnostics)
        forward_dtype = getattr(torch, extraction_settings.dtype)
        lm = model if parameter.dtype == forward_dtype else copy.deepcopy(model).to(dtype=forward_dtype)
        identity = dict(model=name, revision=revision, model_id="in-memory", sample_sha256=sample.attrs["sha256"])
        with tempfile.TemporaryDirectory(prefix="lmsat-monitor-", dir=scratch_dir(model, sample.tokens.size,
                                                                                extraction_settings)) as scratch:
            path = Path(scratch) / "cache.h5"
            extract_to_cache(lm, sample.tokens, path, identity=identity, settings=extraction_settings, device=str(device))
            del lm
            with open_cache(path, expect=dict(sample_sha256=sample.attrs["sha256"])) as cache:
                gradient = finish_weights(pending, cache, sample.tokens).get("gradient_bottleneck")
                if gradient is not None:
                    report["gradient_bottleneck"] = gradient_summary(gradient)
                for metric in metrics:
                    if METRICS[metric].reads == "cache":
                        report[metric] = METRICS[metric].compute(cache)
                # the loss record holds them (the same float64 means); read the cache only without it
                sequence_losses = (np.asarray(report["loss"]["sequence_loss"]) if "loss" in report
                                   else sequence_means(cache["loss"][...]))
    ordered = {m: report[m] for m in metrics}
    extra = {"diagnostics": diagnostics} if "weight_diagnostics" in metrics else {}
    return {**ordered, "sequence_losses": sequence_losses, "spectrum": spectrum, "gradient": gradient, **extra}


MEMORY_DIR = "/dev/shm"  # a RAM file system on Linux


def scratch_dir(model, n_tokens: int, settings) -> str | None:
    """Where `monitor` writes its temporary cache: MEMORY_DIR when it exists, is writable and
    has room for twice the cache, else None (the system's temporary directory). The cache is
    deleted once the metrics are read, so the per-chunk fsync that keeps the pipeline's
    caches whole across a kill (lmsat.cache) protects nothing here; in memory it costs
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


# ---------------------------------------------------------------- the pipeline's files


def write_evaluation(directory: Path, record: dict, identity: dict, sample: Sample, epoch: float = math.nan) -> None:
    """One evaluation's files under `directory` (<output_dir>/lmsat), laid out as a run's
    results: metrics/<metric>/<model>/<revision>.json (rule compute_checkpoint_metric's
    records), spectra/<model>/<revision>.h5, gradient_bottleneck/<model>/<revision>.h5 and
    weight_diagnostics/<model>/<revision>.h5 (rule analyse_checkpoint's files) and
    sequence_losses/<model>/<revision>.npz (each sequence's mean loss, for the verdict, and
    the Trainer's `epoch` then)."""
    from lmsat.io import source_sha256, write_json
    from lmsat.metrics import METRICS

    model, revision = identity["model"], identity["revision"]
    for metric, values in record.items():
        if metric in ("sequence_losses", "spectrum", "gradient", "diagnostics", "weight_diagnostics"):
            continue
        if METRICS[metric].reads == "cache":
            path = directory / "metrics" / metric / model / f"{revision}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            write_json(path, {**identity, "metric": metric, **values, "lmsat_source": source_sha256()})
    if record.get("spectrum") is not None:
        path = directory / "spectra" / model / f"{revision}.h5"
        path.parent.mkdir(parents=True, exist_ok=True)
        METRICS["spectra"].write(path, record["spectrum"], identity)
    if record.get("diagnostics") is not None:
        path = directory / "weight_diagnostics" / model / f"{revision}.h5"
        path.parent.mkdir(parents=True, exist_ok=True)
        METRICS["weight_diagnostics"].write(path, record["diagnostics"], identity)
    if record.get("gradient") is not None:
        path = directory / "gradient_bottleneck" / model / f"{revision}.h5"
        path.parent.mkdir(parents=True, exist_ok=True)
        METRICS["gradient_bottleneck"].write(path, record["gradient"], identity)
    path = directory / "sequence_losses" / model / f"{revision}.npz"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".tmp"), "wb") as handle:
        np.savez(handle, losses=np.asarray(record["sequence_losses"], dtype=np.float64), step=identity["step"],
                 sample_sha256=sample.attrs["sha256"], epoch=float(epoch))
    path.with_suffix(".tmp").replace(path)


def metric_files(directory: Path, metric: str, model: str) -> list[Path]:
    from lmsat.metrics import METRICS

    if METRICS[metric].reads == "cache":
        return sorted((directory / "metrics" / metric / model).glob("*.json"))
    return sorted((directory / metric / model).glob("*.h5"))  # a weights metric's files, as the run's (spectra/, ...)


def write_tables(directory: Path, metrics, model: str, config_sha256: str) -> dict:
    """Every table of `metrics` (lmsat.metrics registers them) from the files under
    `directory`, built by the registered builders and written by lmsat.tables.write_csv with
    provenance, as rule tabulate_metric writes results/<run>/tables/<table>.csv, but OWN_TABLES
    (the callback writes its verdict itself). -> {name: frame}"""
    from lmsat.metrics import METRICS
    from lmsat.tables import mark_on_disk, write_csv

    built = {}
    for metric in metrics:
        files = metric_files(directory, metric, model)
        for name, table in METRICS[metric].tables.items():
            if name in OWN_TABLES:
                continue
            # the workflow's columns; on_disk (a checkpoint directory gone since it was analysed) is never
            # false here: the callback scores the model in memory and reads no checkpoint directory
            frame = mark_on_disk(table.build(files, {need: built[need] for need in table.needs}, [model]), ())
            write_csv(frame, directory / "tables" / f"{name}.csv", config_sha256, files if table.row_provenance else ())
            built[name] = frame
    return built


def read_history(directory: Path, model: str, sample_sha256: str, up_to_step: int) -> tuple[dict, dict]:
    """(step -> per-sequence losses, step -> the Trainer's epoch then (nan if unrecorded)) of
    the earlier evaluations on this sample (a resumed run), those after `up_to_step`
    (checkpoints a resumed run saves again) left out."""
    history, epochs = {}, {}
    for path in sorted((directory / "sequence_losses" / model).glob("*.npz")):
        with np.load(path) as saved:
            if str(saved["sample_sha256"]) == sample_sha256 and int(saved["step"]) <= up_to_step:
                history[int(saved["step"])] = saved["losses"]
                epochs[int(saved["step"])] = float(saved["epoch"]) if "epoch" in saved.files else math.nan
    return history, epochs


EVALUATION_REVISION = re.compile(r"(?:checkpoint|step)-(\d+)")  # the revisions an evaluation writes (evaluate)


def evaluation_files(directory: Path, model: str) -> dict[str, list[Path]]:
    """revision -> every file of that evaluation of `model` under `directory` (metric records,
    every weights metric's file: spectra/, gradient_bottleneck/, ...; sequence losses)."""
    from lmsat.metrics import METRICS

    found: dict[str, list[Path]] = {}
    weights = [directory / name / model for name, metric in METRICS.items() if metric.reads == "weights"]
    places = [*(directory / "metrics").glob(f"*/{model}"), *weights, directory / "sequence_losses" / model]
    for place in places:
        for path in sorted(place.glob("*")) if place.is_dir() else ():
            if EVALUATION_REVISION.fullmatch(path.stem):
                found.setdefault(path.stem, []).append(path)
    return found


def abandoned_folder(directory: Path, step: int) -> Path:
    """Where the evaluations past `step` go when training starts again at `step`: a new folder
    abandoned/after-step-<step>[-<n>] (an earlier abandonment at that step is kept)."""
    folder, n = directory / "abandoned" / f"after-step-{step}", 1
    while folder.exists():
        n += 1
        folder = directory / "abandoned" / f"after-step-{step}-{n}"
    return folder


def abandon_evaluations(directory: Path, model: str, step: int) -> tuple[Path | None, list[str]]:
    """Move every evaluation of `model` after `step` (the step training starts at) out of the
    tables, into abandoned_folder(directory, step) with their relative paths, and the tables
    of the abandoned trajectory with them: a run resumed from an earlier checkpoint (or
    started afresh in the same output_dir) never evaluates them again, and its tables and
    verdict must not mix two trajectories. -> (that folder, the revisions moved), (None, [])
    when there are none."""
    late = {revision: paths for revision, paths in evaluation_files(directory, model).items()
            if int(EVALUATION_REVISION.fullmatch(revision).group(1)) > step}
    if not late:
        return None, []
    folder = abandoned_folder(directory, step)
    moved = [*(path for paths in late.values() for path in paths), *sorted((directory / "tables").glob("*.csv"))]
    for path in moved:
        target = folder / path.relative_to(directory)
        target.parent.mkdir(parents=True, exist_ok=True)
        path.replace(target)
    return folder, sorted(late, key=lambda r: int(EVALUATION_REVISION.fullmatch(r).group(1)))


EPOCH_NOTE = ("the Trainer has gone through {epoch:.3g} epochs of its training data (> 1): the data repeat, and a "
              "held-out loss that rises then may be overfitting to them rather than saturation; the verdict tests a "
              "rise, not its cause")


def epoch_note(epoch: float) -> str:
    """What to say beside a verdict whose final evaluation came at the Trainer's `epoch`: "" up
    to epoch 1, EPOCH_NOTE past it."""
    return EPOCH_NOTE.format(epoch=epoch) if math.isfinite(epoch) and epoch > 1 else ""


def make_directories(directory: Path) -> None:
    """<output_dir>/lmsat and its folders, or a MonitorError naming a file in the way (before
    training starts: mkdir would raise FileExistsError there)."""
    for path in (directory, *(directory / sub for sub in ("tables", "metrics", "spectra", "sequence_losses",
                                                          "tokenizer", "abandoned"))):
        if path.exists() and not path.is_dir():
            raise MonitorError(f"{path} is a file, where SaturationCallback writes a folder of its files. Fix: move or "
                               "delete that file, or train into another output_dir")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise MonitorError(f"cannot make {directory} ({error.strerror}): SaturationCallback writes its files there. "
                           "Fix: an output_dir you can write to, with no file in the way") from None


def settings_sha256(settings: dict, sample: Sample, metrics) -> str:
    """The `config_sha256` of the callback's tables: its settings, metrics and sample."""
    payload = {"settings": settings, "metrics": list(metrics), "sample_sha256": sample.attrs["sha256"]}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


# ---------------------------------------------------------------- the Trainer callback


def check_count(name: str, value, minimum: int) -> int | None:
    """`value` as a whole number >= `minimum` (None stays None), or a MonitorError naming the
    option: a string, a float or a bool would fail only later, inside training."""
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        if isinstance(value, str) and value.strip().isdigit():
            fix = f"{name}={int(value)}, a number, not a string"
        elif isinstance(value, float) and value.is_integer():
            fix = f"{name}={int(value)}"
        else:
            fix = f"a whole number, e.g. {name}={minimum}"
        raise MonitorError(f"{name}={value!r} is a {type(value).__name__}, not a whole number. Fix: {fix}")
    if value < minimum:
        raise MonitorError(f"{name}={value}: at least {minimum}. Fix: {name}={minimum} or more")
    return int(value)


def check_number(name: str, value, low: float, high: float = math.inf) -> float:
    """`value` as a real number in [low, high), or a MonitorError naming the option."""
    if isinstance(value, (bool, np.bool_, str)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise MonitorError(f"{name}={value!r} is a {type(value).__name__}, not a number. Fix: a number (not a string)")
    if not low <= float(value) < high:
        raise MonitorError(f"{name}={value}: outside [{low}, {high}). Fix: a value in that range")
    return float(value)


def check_paths(name: str, value, *, many: bool = False) -> list[Path]:
    """`value` as paths (str or os.PathLike; a list of them with `many`), or a MonitorError."""
    values = list(value) if many and isinstance(value, (list, tuple)) else [value]
    for item in values:
        if not isinstance(item, (str, os.PathLike)):
            raise MonitorError(f"{name}={value!r}: a {type(item).__name__}, not a path. Fix: a file name (str or Path)"
                               + (" or a list of them" if many else ""))
    return [Path(item) for item in values]

try:
    from transformers import TrainerCallback
except ImportError:  # transformers is a dependency of lmsat; this only keeps the module importable
    TrainerCallback = object


class SaturationCallback(TrainerCallback):
    """The pipeline's cheap per-checkpoint numbers at every save of a transformers.Trainer
    run (docs/callback.md lists every option).

    text: text file(s) the eval sample is built from (as `lmsat analyse --text`), or
    sample: a run's sample file (results/<run>/samples/...h5). seq_len, n_tokens: the text
    sample's (default: chosen for the text and the model's context as `lmsat init` chooses
    them, lmsat.corpus.text_sample_size, and printed); config: a run config whose sample,
    extraction, seed and spectra settings are used instead of the schema's. tokenizer: the
    tokenizer directory (default: the Trainer's processing_class, saved under
    <output_dir>/lmsat/tokenizer). metrics: among
    WATCHABLE (default DEFAULT_METRICS; "weight_diagnostics" adds WeightWatcher's and
    pico-analyze's per-matrix diagnostics). every_n_steps: also evaluate every N optimizer steps between saves.
    stop_on_saturation: stop training once the verdict is `saturates` (default: only warn).
    alpha: the verdict's level. name: the model's name in the tables (default: the output
    folder's, as `lmsat init` names it). trainer: the Trainer (default: found when training
    starts). tables_interval: seconds between rebuilds of the tables during training (each
    evaluation's records are written at once; the tables are rebuilt at most this often, and
    always when training ends). Options of the wrong type are refused here; the sample, the
    model and the output folder when training starts, before its first step. Evaluations
    after the step training starts at (a resumed run's) move to <output_dir>/lmsat/abandoned/.
    """

    def __init__(self, text=None, *, sample=None, tokenizer=None, seq_len: int | None = None, n_tokens: int | None = None,
                 config=None, metrics=DEFAULT_METRICS, every_n_steps: int | None = None, stop_on_saturation: bool = False,
                 alpha: float | None = None, name: str | None = None, trainer=None, tables_interval: float = 300.0):
        from lmsat.analysis import run_settings
        from lmsat.metrics import METRICS
        from lmsat.verdict import DEFAULT_ALPHA

        if (text is None) == (sample is None):
            raise MonitorError("SaturationCallback needs one eval sample. Fix: pass text='eval.txt' (built as "
                               "`lmsat analyse --text` builds it) or sample='results/<run>/samples/<corpus>/<tokenizer>.h5'")
        # every option's type, here: a wrong one would otherwise fail inside trainer.train()
        seq_len, n_tokens = check_count("seq_len", seq_len, 2), check_count("n_tokens", n_tokens, 1)
        every_n_steps = check_count("every_n_steps", every_n_steps, 1)
        tables_interval = check_number("tables_interval", tables_interval, 0)
        if not isinstance(stop_on_saturation, (bool, np.bool_)):
            raise MonitorError(f"stop_on_saturation={stop_on_saturation!r}. Fix: True or False")
        if name is not None and not isinstance(name, str):
            raise MonitorError(f"name={name!r}: a {type(name).__name__}, not a string. Fix: name='my-model'")
        for option, value in (("sample", sample), ("tokenizer", tokenizer), ("config", config)):
            if value is not None:
                check_paths(option, value)
        if text is not None:
            check_paths("text", text, many=True)
        if isinstance(metrics, str):
            raise MonitorError(f"metrics={metrics!r}: a string, not a list of metrics. Fix: metrics=[{metrics!r}]")
        if sample is not None and (seq_len is not None or n_tokens is not None):
            raise MonitorError("seq_len and n_tokens set how a sample is built from text=; a sample= file is used as built. "
                               "Fix: leave them out, or pass text=")
        metrics = tuple(metrics)
        unknown = [m for m in metrics if m not in WATCHABLE]
        if unknown:
            raise MonitorError(f"metrics {unknown} are not watched during training. Fix: choose among {', '.join(WATCHABLE)}")
        missing = sorted({need for m in metrics for t in METRICS[m].tables.values() for need in t.needs}
                         - {t for m in metrics for t in METRICS[m].tables})
        if missing:
            raise MonitorError(f"the tables of metrics {list(metrics)} need the tables {missing}. Fix: add 'loss' to metrics")
        self.alpha = DEFAULT_ALPHA if alpha is None else check_number("alpha", alpha, 0)
        if not 0 < self.alpha < 0.5:
            raise MonitorError(f"alpha={alpha}. Fix: a level in (0, 0.5), e.g. 0.05")
        texts = [text] if isinstance(text, (str, Path)) else list(text or [])
        for path in texts:
            if not Path(path).is_file():
                raise MonitorError(f"text={path}: no such file. Fix: give the eval text file(s)")
        self.text, self.sample_path, self.tokenizer = texts, sample, tokenizer
        self.seq_len, self.n_tokens, self.config = seq_len, n_tokens, config
        self.settings = run_settings(config)
        self.metrics, self.every_n_steps, self.stop_on_saturation = metrics, every_n_steps, stop_on_saturation
        self.name, self.trainer, self.tables_interval = name, trainer, float(tables_interval)
        self.tables_written = -math.inf  # time.monotonic() of the last rebuild of the tables
        self.active, self.sample, self.history, self.verdict, self.warned = False, None, {}, None, False
        self.epochs = {}  # step -> the Trainer's epoch at that evaluation

    # -- before training: every check

    def on_train_begin(self, args, state, control, model=None, processing_class=None, **kwargs):
        if not state.is_world_process_zero:
            return  # rank 0 computes; the others never wait for it outside their own collectives
        if getattr(args, "fsdp", None) or getattr(args, "deepspeed", None):
            raise MonitorError("SaturationCallback reads the whole model on one process, and FSDP/DeepSpeed shard it. "
                               "Fix: run `lmsat analyse` (or `lmsat init` + snakemake) on the saved checkpoints instead")
        from lmsat.commands.init import path_name

        check_model(model)
        self.directory = Path(args.output_dir) / "lmsat"
        make_directories(self.directory)
        self.name = self.name or path_name(Path(args.output_dir).resolve().name)
        tokenizer_dir = self.tokenizer
        if tokenizer_dir is None and processing_class is not None:
            tokenizer_dir = self.directory / "tokenizer"
            processing_class.save_pretrained(tokenizer_dir)
        self.tokenizer_dir = Path(tokenizer_dir) if tokenizer_dir is not None else None
        if self.text:
            if self.tokenizer_dir is None:
                raise MonitorError("text= needs the model's tokenizer, and the Trainer has no processing_class. "
                                   "Fix: Trainer(processing_class=tokenizer), or SaturationCallback(tokenizer=DIR)")
            self.sample = text_sample(self.text, self.tokenizer_dir, self.directory / "sample.h5", model.config.to_dict(),
                                      seq_len=self.seq_len, n_tokens=self.n_tokens, config=self.config)
            self.settings = {**self.settings, "sample": self.sample.settings["sample"]}
            chosen = f"lmsat: {self.name}: {self.sample.size.describe()}"
            print(chosen, file=sys.stderr)  # the user reads the size chosen once, whatever the logging level
            log.info(chosen)
        else:
            self.sample = load_sample(self.sample_path)
        check_sample(model, self.sample, processing_class)
        self.trainer = self.trainer or self.find_trainer()
        if self.trainer is None:
            raise MonitorError("SaturationCallback logs through the Trainer and found none running it. "
                               "Fix: SaturationCallback(..., trainer=trainer)")
        self.config_sha256 = settings_sha256(self.settings, self.sample, self.metrics)
        folder, abandoned = abandon_evaluations(self.directory, self.name, state.global_step)
        self.history, self.epochs = read_history(self.directory, self.name, self.sample.attrs["sha256"], state.global_step)
        if abandoned:
            message = (f"lmsat: {self.name}: training starts at step {state.global_step}, so the {len(abandoned)} "
                       f"evaluation(s) after it ({', '.join(abandoned)}) belong to an abandoned trajectory: moved to "
                       f"{folder} with the tables they were in, and left out of every table and of the verdict")
            warnings.warn(message, stacklevel=2)
            log.warning(message)
            self.rebuild_after_abandoning()
        self.active = True
        n_seq, seq_len = self.sample.tokens.shape
        log.info("lmsat: watching %s on %d x %d tokens (sha256 %s), metrics %s; files under %s", self.name, n_seq, seq_len,
                 self.sample.attrs["sha256"][:12], ", ".join(self.metrics), self.directory)

    def find_trainer(self):
        """The Trainer whose callbacks hold this one, from the call stack (on_train_begin runs
        inside Trainer.train)."""
        import inspect

        from transformers import Trainer

        frame = inspect.currentframe()
        while frame is not None:
            candidate = frame.f_locals.get("self")
            if isinstance(candidate, Trainer) and any(c is self for c in candidate.callback_handler.callbacks):
                return candidate
            frame = frame.f_back
        return None

    def write_tables(self) -> None:
        """The registered tables, and the verdict's (saturation_verdicts.csv, OWN_TABLES): the
        Verdict's fields, then `epoch` (the Trainer's, at the final evaluation) and `note`
        (what the verdict cannot tell there, EPOCH_NOTE)."""
        from lmsat.tables import write_csv

        write_tables(self.directory, self.metrics, self.name, self.config_sha256)
        if self.verdict is not None:
            import pandas as pd

            epoch = self.epochs.get(self.verdict.final_step, math.nan)
            write_csv(pd.DataFrame([{"model": self.name, **self.verdict.as_row(), "epoch": epoch,
                                     "note": epoch_note(epoch)}]),
                      self.directory / "tables" / "saturation_verdicts.csv", self.config_sha256)
        self.tables_written = time.monotonic()

    def rebuild_after_abandoning(self) -> None:
        """The tables without the abandoned evaluations (abandon_evaluations moved the old
        ones): rebuilt from the kept ones, their verdict too; none when none is kept (the next
        evaluation writes them)."""
        from lmsat.verdict import verdict_from_paired

        if not self.history:
            self.verdict = None
            return
        steps = sorted(self.history)
        self.verdict = verdict_from_paired(steps, np.stack([self.history[s] for s in steps]), alpha=self.alpha)
        self.write_tables()

    def on_train_end(self, args, state, control, **kwargs):
        if self.active and self.history:
            self.write_tables()  # every evaluation's rows, whatever tables_interval skipped

    # -- during training

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if self.active and self.every_n_steps and state.global_step % self.every_n_steps == 0 and not control.should_save:
            self.evaluate(args, state, control, model, f"step-{state.global_step}", None)
        return control

    def on_save(self, args, state, control, model=None, **kwargs):
        if self.active:
            from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

            revision = f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
            self.evaluate(args, state, control, model, revision, Path(args.output_dir) / revision)
        return control

    def tokens_per_step(self, state, model, checkpoint: Path | None) -> int:
        """Tokens per optimizer step as `lmsat init` reads them: from the saved
        trainer_state.json (lmsat.rundir.tokens_per_step), else from the Trainer's state."""
        from lmsat import rundir

        if checkpoint is not None and (found := rundir.tokens_per_step(checkpoint)):
            return found[0]
        step = max(state.global_step, 1)
        if state.num_input_tokens_seen:
            return int(round(state.num_input_tokens_seen / step))
        flos = state.total_flos + getattr(self.trainer, "current_flos", 0)
        parameters = model.num_parameters(exclude_embeddings=True)
        return int(round(flos / (6 * parameters) / step)) if parameters and flos else 0

    def evaluate(self, args, state, control, model, revision: str, checkpoint: Path | None) -> dict:
        from lmsat.verdict import SATURATES, verdict_from_paired

        step = int(state.global_step)
        record = monitor(model, self.sample, settings=self.settings, metrics=self.metrics, tokenizer_dir=self.tokenizer_dir,
                         name=self.name, revision=revision)
        identity = dict(suite=self.name, model=self.name, revision=revision, step=step,
                        tokens=step * self.tokens_per_step(state, model, checkpoint))
        epoch = float(state.epoch) if state.epoch is not None else math.nan
        write_evaluation(self.directory, record, identity, self.sample, epoch=epoch)
        self.history[step] = np.asarray(record["sequence_losses"])
        self.epochs[step] = epoch
        steps = sorted(self.history)
        self.verdict = verdict_from_paired(steps, np.stack([self.history[s] for s in steps]), alpha=self.alpha)
        if time.monotonic() - self.tables_written >= self.tables_interval:
            self.write_tables()  # with the verdict's table
        logged = scalars(record)
        logged[f"{LOG_PREFIX}saturates"] = float(self.verdict.verdict == SATURATES)
        logged.update({f"{LOG_PREFIX}{key}": float(getattr(self.verdict, key)) for key in VERDICT_LOGGED
                       if math.isfinite(getattr(self.verdict, key))})
        self.trainer.log(logged)
        v = self.verdict
        note = epoch_note(epoch)
        log.info("lmsat: %s at step %d: loss %.6g +- %.2g; verdict %s over %d evaluations (rise %.3g, %.0f%% interval "
                 "[%.3g, %.3g])%s", self.name, step, record["loss"]["loss"] if "loss" in record else math.nan,
                 record["loss"]["loss_sem"] if "loss" in record else math.nan, v.verdict, v.checkpoints, v.rise,
                 100 * v.interval_level, v.rise_low, v.rise_high, f"; {note}" if note else "")
        if v.verdict == SATURATES and not self.warned:
            self.warned = True
            message = (f"lmsat: {self.name} saturates: at step {step} its eval loss {v.final_loss:.6g} is above the best, "
                       f"{v.best_loss:.6g} at step {v.best_step}, by {v.rise_low:.3g} to {v.rise_high:.3g} "
                       f"({100 * v.interval_level:.0f}% simultaneous interval; a test on one sample of "
                       f"{v.units} sequences, not a proof; it tests a rise, not its cause"
                       + (f"; {note}" if note else "") + "). Training goes on"
                       + (" no further: stop_on_saturation=True." if self.stop_on_saturation else
                          " (stop_on_saturation=True stops it)."))
            warnings.warn(message, stacklevel=2)
            log.warning(message)
        if v.verdict == SATURATES and self.stop_on_saturation:
            control.should_training_stop = True
        return record
