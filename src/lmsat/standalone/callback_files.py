"""The files a watched training run gets, as the pipeline writes them: each evaluation's
metric records under <output_dir>/lmsat/, the tables built from them, the history a resumed
run reads back, and the evaluations a resume from an earlier checkpoint abandons."""

from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path

import numpy as np

from lmsat.errors import MonitorError
from lmsat.standalone.monitor import Sample

OWN_TABLES = ("saturation_verdicts",)  # the callback writes these itself, from its own verdict (its alpha)


# ---------------------------------------------------------------- the pipeline's files


def write_evaluation(directory: Path, record: dict, identity: dict, sample: Sample, epoch: float = math.nan) -> None:
    """One evaluation's files under `directory` (<output_dir>/lmsat), laid out as a run's
    results: metrics/<metric>/<model>/<revision>.json (rule compute_checkpoint_metric's
    records), spectra/<model>/<revision>.h5, gradient_bottleneck/<model>/<revision>.h5 and
    weight_diagnostics/<model>/<revision>.h5 (rule analyse_checkpoint's files) and
    sequence_losses/<model>/<revision>.npz (each sequence's mean loss, for the verdict, and
    the Trainer's `epoch` then)."""
    from lmsat.core.io import source_sha256, write_json
    from lmsat.products.metrics import METRICS

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
    from lmsat.products.metrics import METRICS

    if METRICS[metric].reads == "cache":
        return sorted((directory / "metrics" / metric / model).glob("*.json"))
    return sorted((directory / metric / model).glob("*.h5"))  # a weights metric's files, as the run's (spectra/, ...)


def write_tables(directory: Path, metrics, model: str, config_sha256: str) -> dict:
    """Every table of `metrics` (lmsat.products.metrics registers them) from the files under
    `directory`, built by the registered builders and written by lmsat.products.table_files.write_csv with
    provenance, as rule tabulate_metric writes results/<run>/tables/<table>.csv, but OWN_TABLES
    (the callback writes its verdict itself). -> {name: frame}"""
    from lmsat.products.metrics import METRICS
    from lmsat.products.table_files import write_csv
    from lmsat.products.table_rows import mark_on_disk

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
    from lmsat.products.metrics import METRICS

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
