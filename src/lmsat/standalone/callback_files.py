"""The files a watched training run gets, as the pipeline writes them: each evaluation's
metric records under <output_dir>/lmsat/, the tables built from them, the history a resumed
run reads back, the checkpoint each evaluation measured, and the evaluations a resume from
an earlier checkpoint abandons."""

from __future__ import annotations

import hashlib
import json
import math
import re
import shutil
from pathlib import Path

import numpy as np

from lmsat.errors import MonitorError
from lmsat.standalone.monitor import Sample

OWN_TABLES = ("saturation_verdicts",)  # the callback writes these itself, from its own verdict (its alpha)
FAILED = "failed"  # <output_dir>/lmsat/failed/<model>/<revision>.json: the measures that failed at an evaluation
SAMPLE = "sample.h5"  # <output_dir>/lmsat/sample.h5: the sample every kept evaluation was measured on
BUILDING = ".sample-building.h5"  # a text sample, built beside SAMPLE until checked (install_sample)
MARK = "measure_failed"  # the callback tables' last column: "" where measured, else why the row holds no values
CHECKPOINTS = "checkpoints"  # <output_dir>/lmsat/checkpoints/<model>.json: revision -> the checkpoint it measured


# ---------------------------------------------------------------- the pipeline's files


def write_evaluation(directory: Path, record: dict, identity: dict, sample: Sample, epoch: float = math.nan) -> None:
    """One evaluation's files under `directory` (<output_dir>/lmsat), laid out as a run's
    results: metrics/<metric>/<model>/<revision>.json (rule compute_checkpoint_metric's
    records), spectra/<model>/<revision>.h5, gradient_bottleneck/<model>/<revision>.h5 and
    weight_diagnostics/<model>/<revision>.h5 (rule analyse_checkpoint's files) and
    sequence_losses/<model>/<revision>.npz (each sequence's mean loss, for the verdict, and
    the Trainer's `epoch` then; none when the loss failed), and failed/<model>/<revision>.json
    when a measure failed (record["failed"], write_failures)."""
    from lmsat.core.io import source_sha256, write_json
    from lmsat.products.metrics import METRICS

    model, revision = identity["model"], identity["revision"]
    write_failures(directory, identity, record.get("failed", {}), epoch, sample.attrs["sha256"])
    for metric, values in record.items():
        if metric in ("sequence_losses", "spectrum", "gradient", "diagnostics", "weight_diagnostics", "failed"):
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
    if record["sequence_losses"] is None:  # the loss failed: no units for the verdict at this evaluation
        return
    path = directory / "sequence_losses" / model / f"{revision}.npz"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".tmp"), "wb") as handle:
        np.savez(handle, losses=np.asarray(record["sequence_losses"], dtype=np.float64), step=identity["step"],
                 sample_sha256=sample.attrs["sha256"], epoch=float(epoch))
    path.with_suffix(".tmp").replace(path)


def write_failures(directory: Path, identity: dict, failed: dict, epoch: float = math.nan, sample_sha256: str = "") -> None:
    """failed/<model>/<revision>.json: `failed` ({metric: "ErrorType: message"}) with the
    evaluation's identity and sample, which marks its rows in the tables (write_tables); none
    (an earlier one removed) when nothing failed."""
    from lmsat.core.io import source_sha256, write_json

    path = directory / FAILED / identity["model"] / f"{identity['revision']}.json"
    if not failed:
        path.unlink(missing_ok=True)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, {**identity, "failed": dict(failed), "epoch": float(epoch), "sample_sha256": sample_sha256,
                      "lmsat_source": source_sha256()})


def read_failures(directory: Path, model: str) -> dict[str, dict]:
    """revision -> its failure record (write_failures) of `model`'s evaluations."""
    from lmsat.core.io import read_record

    return {path.stem: read_record(path, "model", "revision")
            for path in sorted((directory / FAILED / model).glob("*.json"))}


def metric_files(directory: Path, metric: str, model: str) -> list[Path]:
    from lmsat.products.metrics import METRICS

    if METRICS[metric].reads == "cache":
        return sorted((directory / "metrics" / metric / model).glob("*.json"))
    return sorted((directory / metric / model).glob("*.h5"))  # a weights metric's files, as the run's (spectra/, ...)


def write_checkpoint_path(directory: Path, model: str, revision: str, checkpoint) -> None:
    """Record that evaluation `revision` measured the checkpoint saved at `checkpoint` (a
    folder or a file; relative to <output_dir> when inside it), for on_disk (write_tables)."""
    from lmsat.core.io import write_json

    path = directory / CHECKPOINTS / f"{model}.json"
    found = read_checkpoint_paths(directory, model)
    checkpoint = Path(checkpoint).absolute()
    try:
        found[revision] = str(checkpoint.relative_to(directory.parent.absolute()))
    except ValueError:  # outside <output_dir>
        found[revision] = str(checkpoint)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, found)


def read_checkpoint_paths(directory: Path, model: str) -> dict[str, str]:
    """revision -> the checkpoint it measured (write_checkpoint_path), {} when none was recorded."""
    path = directory / CHECKPOINTS / f"{model}.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def on_disk(directory: Path, model: str, revisions, checkpoints: Path | None = None) -> set[str]:
    """The revisions among `revisions` whose checkpoint is there now: the one recorded for it
    (write_checkpoint_path; relative to <output_dir>), else the folder `checkpoints`/<revision>
    (a Trainer's checkpoint-<N>). None for an evaluation between saves (step-<N>)."""
    recorded = read_checkpoint_paths(directory, model)
    there = set()
    for revision in revisions:
        if revision in recorded:
            there.update([revision] if (directory.parent / recorded[revision]).exists() else [])
        elif checkpoints is not None and (Path(checkpoints) / revision).is_dir():
            there.add(revision)
    return there


def write_tables(directory: Path, metrics, model: str, config_sha256: str, checkpoints: Path | None = None) -> dict:
    """Every table of `metrics` (lmsat.products.metrics registers them) from the files under
    `directory`, built by the registered builders and written by lmsat.products.table_files.write_csv with
    provenance, as rule tabulate_metric writes results/<run>/tables/<table>.csv, but OWN_TABLES
    (the callback writes its verdict itself). -> {name: frame}

    The workflow's columns, then MARK: an evaluation whose measure failed (read_failures) has
    a row with its identity, is_final false, no values and MARK saying why; so has one whose
    needed table (a builder's `needs`: the loss beside the anisotropy) has no value there.
    on_disk as the workflow's (lmsat.products.table_rows.mark_on_disk): whether the
    evaluation's checkpoint is there now (on_disk: the one it recorded, else the folder
    `checkpoints`/<revision>); false for one that save_total_limit rotated away and for an
    evaluation between saves (step-<N>, no checkpoint).
    """
    from lmsat.products.metrics import METRICS
    from lmsat.products.table_files import write_csv
    from lmsat.products.table_rows import mark_on_disk

    failures = read_failures(directory, model)
    revisions = set(failures) | {p.stem for m in metrics for p in metric_files(directory, m, model)}
    gone = {f"{model}@{r}" for r in revisions - on_disk(directory, model, revisions, checkpoints)}
    built, measured, marked = {}, {}, {}
    for metric in metrics:
        files = metric_files(directory, metric, model)
        failed_here = {revision: failure["failed"][metric] for revision, failure in failures.items()
                       if metric in failure["failed"]}
        for name, table in METRICS[metric].tables.items():
            if name in OWN_TABLES or not table.monitor:  # its own verdict; a table of the whole run
                continue
            why = dict(failed_here)
            for need in table.needs:  # a row its needed table lacks cannot be built (anisotropy's loss)
                for revision, reason in marked[need].items():
                    why.setdefault(revision, f"no {need} here ({reason})")
            kept = [f for f in files if f.stem not in why]
            if any(measured[need] is None for need in table.needs):
                kept = []
            frame = table.build(kept, {need: measured[need] for need in table.needs}, [model]) if kept else None
            measured[name], marked[name] = frame, why
            frame = mark_on_disk(with_marked_rows(frame, why, failures), gone)
            frame = frame[[c for c in frame.columns if c != MARK] + [MARK]]  # the workflow's columns, then MARK
            inputs = [*kept, *(directory / FAILED / model / f"{revision}.json" for revision in why if revision in failures)]
            write_csv(frame, directory / "tables" / f"{name}.csv", config_sha256, inputs if table.row_provenance else ())
            built[name] = frame
    return built


def with_marked_rows(frame, why: dict[str, str], failures: dict[str, dict]):
    """`frame` (None: nothing measured) with column MARK ("" on its rows) and a row per
    revision of `why` (revision -> the reason): its identity from `failures` (RECORD_KEYS),
    is_final false, MARK the reason, every other column empty; rows by step."""
    import pandas as pd

    from lmsat.degeneration.weight_files import RECORD_KEYS

    rows = [{**{k: failures[r][k] for k in RECORD_KEYS if k in failures.get(r, {})}, "revision": r, "is_final": False,
             MARK: reason} for r, reason in why.items()]
    if frame is None:
        frame = pd.DataFrame(rows, columns=[*RECORD_KEYS, "is_final", MARK])
    else:
        frame = frame.assign(**{MARK: ""})
        if not rows:
            return frame
        rows = pd.DataFrame(rows)[[c for c in rows[0] if c in frame.columns or c == MARK]]
        frame = pd.concat([frame, rows], ignore_index=True)[list(frame.columns)]
    return frame.sort_values("step", kind="stable").reset_index(drop=True) if "step" in frame else frame


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


# The revisions an evaluation writes (SaturationWatch.revision_for): step-<N>, or the name of the
# checkpoint it measured (checkpoint-<N>, step<N>, epoch-0-step-<N>.ckpt, ckpt_<N>.pt, ...), whose
# last number is the step. Group 1: that number.
EVALUATION_REVISION = re.compile(r".*?(\d+)\D*")


def revision_step(revision: str) -> int | None:
    """The step of an evaluation's revision (EVALUATION_REVISION), None for a name without a number."""
    match = EVALUATION_REVISION.fullmatch(revision)
    return int(match.group(1)) if match else None


def evaluation_files(directory: Path, model: str) -> dict[str, list[Path]]:
    """revision -> every file of that evaluation of `model` under `directory` (metric records,
    every weights metric's file: spectra/, gradient_bottleneck/, ...; sequence losses)."""
    from lmsat.products.metrics import METRICS

    found: dict[str, list[Path]] = {}
    weights = [directory / name / model for name, metric in METRICS.items() if metric.reads == "weights"]
    places = [*(directory / "metrics").glob(f"*/{model}"), *weights, directory / "sequence_losses" / model,
              directory / FAILED / model]
    for place in places:
        for path in sorted(place.glob("*")) if place.is_dir() else ():
            if path.suffix in (".json", ".h5", ".npz") and revision_step(path.stem) is not None:
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
            if revision_step(revision) > step}
    if not late:
        return None, []
    folder = abandoned_folder(directory, step)
    moved = [*(path for paths in late.values() for path in paths), *sorted((directory / "tables").glob("*.csv"))]
    for path in moved:
        target = folder / path.relative_to(directory)
        target.parent.mkdir(parents=True, exist_ok=True)
        path.replace(target)
    if (directory / SAMPLE).is_file():  # the sample they were measured on (the next run may use another)
        shutil.copy2(directory / SAMPLE, folder / SAMPLE)
    return folder, sorted(late, key=revision_step)


def recorded_samples(directory: Path, model: str, up_to_step: int) -> dict[str, list[str]]:
    """sample sha256 -> the revisions of `model`'s evaluations up to `up_to_step` measured on
    it (their sequence losses and failure records say), by step."""
    found: dict[str, list[tuple[int, str]]] = {}
    for path in sorted((directory / "sequence_losses" / model).glob("*.npz")):
        with np.load(path) as saved:
            if int(saved["step"]) <= up_to_step:
                found.setdefault(str(saved["sample_sha256"]), []).append((int(saved["step"]), path.stem))
    for revision, failure in read_failures(directory, model).items():
        if failure["step"] <= up_to_step and failure.get("sample_sha256"):
            found.setdefault(failure["sample_sha256"], []).append((failure["step"], revision))
    return {sha: [r for _, r in sorted(set(pairs))] for sha, pairs in found.items()}


def sample_words(tokens_shape, sha256: str) -> str:
    n_seq, seq_len = tokens_shape
    return f"{n_seq} sequences of {seq_len} tokens ({n_seq * seq_len:,} tokens, n_tokens={n_seq * seq_len}), sha256 {sha256[:12]}"


def check_recorded_sample(directory: Path, model: str, sample: Sample, step: int, asked: str) -> None:
    """A MonitorError naming both unless `sample` is the one the kept evaluations of `model`
    (those up to `step`, where training starts) were measured on (`asked`: how the callback
    was given this one). Their losses and the next ones would be one curve over two samples,
    and the verdict would compare them."""
    kept = {sha: revisions for sha, revisions in recorded_samples(directory, model, step).items()
            if sha != sample.attrs["sha256"]}
    if not kept:
        return
    target = directory / SAMPLE
    sha, revisions = next(iter(kept.items()))
    old = f"sha256 {sha[:12]}"
    if target.is_file():
        from lmsat.data.corpus import read_sample

        tokens, attrs = read_sample(target)
        if attrs["sha256"] == sha:
            old = f"{target}: {sample_words(tokens.shape, sha)}"
    shown = ", ".join(revisions[:4]) + (f", ... ({len(revisions)} in all)" if len(revisions) > 4 else "")
    raise MonitorError(
        f"training starts at step {step} with another eval sample than the one its kept evaluations ({shown}) "
        f"were measured on: theirs is {old}; this callback's ({asked}) is "
        f"{sample_words(sample.tokens.shape, sample.attrs['sha256'])}. Their losses and the next ones would be drawn as "
        "one curve over two samples, and the verdict would compare them. Fix: resume with the recorded sample (the "
        f"same text= and n_tokens=/seq_len=, or sample='{target}'); for the new sample, train into another output_dir "
        f"or move {directory} aside (a new series starts), and measure the saved checkpoints on it with `lmsat init "
        "<output_dir> --text ...` + snakemake (or `lmsat analyse`)"
    )


def install_sample(directory: Path, sample: Sample) -> None:
    """`sample` (checked by check_recorded_sample) as <directory>/sample.h5 (SAMPLE): a text
    sample built at BUILDING moves there, a sample= file is copied, so that the next run can
    say what these evaluations were measured on."""
    target = directory / SAMPLE
    if sample.path is None or sample.path.resolve() == target.resolve():
        return
    if sample.path.name == BUILDING:
        sample.path.replace(target)
    else:
        shutil.copy2(sample.path, target)
    sample.path = target


def loss_failures_note(directory: Path, model: str) -> str:
    """What the verdict leaves out: the evaluations whose loss failed (failed/, write_failures)."""
    from lmsat.standalone.monitor import SEQUENCE_LOSSES

    failed = [revision for revision, failure in read_failures(directory, model).items()
              if {"loss", SEQUENCE_LOSSES} & set(failure["failed"])]
    if not failed:
        return ""
    return (f"the loss of {len(failed)} evaluation(s) could not be measured ({', '.join(failed)}; loss.csv's "
            "measure_failed says why): the verdict is over the others")


EPOCH_NOTE = ("the Trainer has gone through {epoch:.3g} epochs of its training data (> 1): the data repeat, and a "
              "held-out loss that rises then may be overfitting to them rather than saturation; the verdict tests a "
              "rise, not its cause")


def epoch_note(epoch: float) -> str:
    """What to say beside a verdict whose final evaluation came at the Trainer's `epoch`: "" up
    to epoch 1, EPOCH_NOTE past it."""
    return EPOCH_NOTE.format(epoch=epoch) if math.isfinite(epoch) and epoch > 1 else ""


def make_directories(directory: Path, who: str = "SaturationCallback") -> None:
    """<output_dir>/lmsat and its folders, or a MonitorError naming a file in the way (before
    training starts: mkdir would raise FileExistsError there). `who`: the watch's class, named."""
    for path in (directory, *(directory / sub for sub in ("tables", "metrics", "spectra", "sequence_losses",
                                                          "tokenizer", "abandoned", FAILED, CHECKPOINTS))):
        if path.exists() and not path.is_dir():
            raise MonitorError(f"{path} is a file, where {who} writes a folder of its files. Fix: move or "
                               "delete that file, or train into another output_dir")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise MonitorError(f"cannot make {directory} ({error.strerror}): {who} writes its files there. "
                           "Fix: an output_dir you can write to, with no file in the way") from None


def settings_sha256(settings: dict, sample: Sample, metrics) -> str:
    """The `config_sha256` of the callback's tables: its settings, metrics and sample."""
    payload = {"settings": settings, "metrics": list(metrics), "sample_sha256": sample.attrs["sha256"]}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()
