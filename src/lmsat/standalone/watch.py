"""Watch saturation in any training loop: one object, one call per step, the pipeline's
cheap per-checkpoint numbers and tables (docs/callback.md).

    watch = lmsat.SaturationWatch(text="eval.txt", tokenizer="tokenizer/", output_dir="out")
    watch.start(model, step=start_step)                # optional: every check before the first step
    for step in range(start_step + 1, max_steps + 1):
        ...                                             # forward, backward, optimizer step
        saved = save_checkpoint(step) if step % 100 == 0 else None
        logged = watch.step(model, step, checkpoint=saved, tokens_seen=step * tokens_per_step)
        if watch.should_stop:
            break
    watch.close()                                      # the tables with every evaluation

At each call with a `checkpoint` (the folder or file just saved, whose weights the model in
memory holds), and every `every_n_steps` steps between saves, it runs lmsat.monitor on the
model (the forward, metrics and sample of `lmsat analyse`), writes the records, spectra and
sequence losses under <output_dir>/lmsat/ as a run's results/<run>/ (callback_files), the
tables every `tables_interval` seconds, and the saturation verdict over every evaluation so
far; it returns the logged values, `lmsat/<name>` -> float, and hands them to `log=`. The
framework callbacks are this object with their framework's hooks: SaturationCallback
(transformers.Trainer, callback.py), LightningSaturationCallback (lightning_watch.py),
OLMoCoreSaturationCallback (olmo_core_watch.py).

It never changes training: the evaluation computes under no_grad with autocast off, puts
model.training back, touches no optimizer, scheduler or data, and keeps every RNG state
(monitor.rng_kept) across everything it does, building a model included. It never stops
training either, unless asked (strict=True): a measure that fails is a warning naming it
and a row marked `measure_failed` in its tables. Only the process of rank 0 evaluates
(monitor.process_rank); a model sharded across processes is refused (check_unsharded).
"""

from __future__ import annotations

import logging
import math
import os
import re
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from lmsat.errors import MonitorError
from lmsat.standalone.callback_files import (
    BUILDING,
    abandon_evaluations,
    check_recorded_sample,
    epoch_note,
    evaluation_files,
    install_sample,
    loss_failures_note,
    make_directories,
    read_history,
    revision_step,
    settings_sha256,
    write_checkpoint_path,
    write_evaluation,
    write_failures,
    write_tables,
)
from lmsat.standalone.monitor import (
    DEFAULT_METRICS,
    LOG_PREFIX,
    VERDICT_LOGGED,
    WATCHABLE,
    check_model,
    check_sample,
    check_unsharded,
    load_sample,
    monitor,
    process_rank,
    rng_kept,
    scalars,
    text_sample,
)


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


def check_name(name) -> str:
    """`name` as one path component (lmsat.core.names.PATH_NAME_PATTERN, the workflow's rule for a
    model's name), or a MonitorError: the watch writes <output_dir>/lmsat/*/<name>/."""
    from lmsat.core.names import PATH_NAME_PATTERN

    if not isinstance(name, str):
        raise MonitorError(f"name={name!r}: a {type(name).__name__}, not a string. Fix: name='my-model'")
    if not re.fullmatch(PATH_NAME_PATTERN, name):
        from lmsat.commands.init import path_name

        raise MonitorError(f"name={name!r} cannot be a folder name: the callback writes <output_dir>/lmsat/*/<name>/, "
                           "and a name takes 1-200 letters, digits, '.', '_' or '-', starting with a letter or digit (no "
                           f"'/', '..' or absolute path). Fix: name={path_name(name)!r}, or leave it out (the output "
                           "folder's name)")
    return name


def checkpoint_revision(checkpoint, step: int) -> str:
    """The revision of an evaluation of the checkpoint saved at `checkpoint` at `step`: its
    folder's or file's name, as `lmsat init` names a saved step (each character a path
    component may not hold made '-': `epoch=0-step=8.ckpt` -> `epoch-0-step-8.ckpt`), when
    that name's last number is the step; else `step-<step>` (a file overwritten at every
    save, `ckpt.pt` or `last.ckpt`, names no step)."""
    from lmsat.core.names import revision_name

    name = revision_name(Path(checkpoint).name)
    return name if revision_step(name) == step else f"step-{step}"


class SaturationWatch:
    """The pipeline's cheap per-checkpoint numbers at every save of any training loop
    (docs/callback.md lists every option; the framework callbacks take the same ones).

    text: text file(s) the eval sample is built from (as `lmsat analyse --text`), or
    sample: a run's sample file. output_dir: where the run saves its checkpoints; the watch
    writes <output_dir>/lmsat/ (the framework callbacks take their trainer's). tokenizer: the
    model's tokenizer, a directory or an object with save_pretrained (saved under
    <output_dir>/lmsat/tokenizer); text= needs it. seq_len, n_tokens, config: the text
    sample's size and the run config whose settings are used (as SaturationCallback's).
    metrics: among WATCHABLE (None: all). every_n_steps: also evaluate every N steps between
    saves. stop_on_saturation: `should_stop` turns True once the verdict is `saturates`
    (default: only warn). alpha: the verdict's level. name: the model's name in the tables
    (default: the output folder's). tokens_per_step: tokens trained per step, for the tables'
    `tokens` when a call gives no tokens_seen (default: 0, unknown). log: a function
    log(values, step) each evaluation's logged values go to (wandb.log, a SummaryWriter's).
    tables_interval: seconds between rebuilds of the tables. strict: a measure that fails
    raises (default: a warning and a marked row; training goes on).
    """

    def __init__(self, text=None, *, sample=None, output_dir=None, tokenizer=None, seq_len: int | None = None,
                 n_tokens: int | None = None, config=None, metrics=DEFAULT_METRICS, every_n_steps: int | None = None,
                 stop_on_saturation: bool = False, alpha: float | None = None, name: str | None = None,
                 tokens_per_step: int | None = None, log=None, tables_interval: float = 300.0, strict: bool = False):
        from lmsat.products.metrics import METRICS
        from lmsat.saturation.verdict import DEFAULT_ALPHA
        from lmsat.standalone.analyse import TOKENIZER_FILES, run_settings

        who = type(self).__name__
        if (text is None) == (sample is None):
            raise MonitorError(f"{who} needs one eval sample. Fix: pass text='eval.txt' (built as "
                               "`lmsat analyse --text` builds it) or sample='results/<run>/samples/<corpus>/<tokenizer>.h5'")
        # every option's type, here: a wrong one would otherwise fail inside training
        seq_len, n_tokens = check_count("seq_len", seq_len, 2), check_count("n_tokens", n_tokens, 1)
        every_n_steps = check_count("every_n_steps", every_n_steps, 1)
        tokens_per_step = check_count("tokens_per_step", tokens_per_step, 0)
        tables_interval = check_number("tables_interval", tables_interval, 0)
        for option, value in (("stop_on_saturation", stop_on_saturation), ("strict", strict)):
            if not isinstance(value, (bool, np.bool_)):
                raise MonitorError(f"{option}={value!r}. Fix: True or False")
        if log is not None and not callable(log):
            raise MonitorError(f"log={log!r} is not a function. Fix: log=lambda values, step: wandb.log(values, step=step), "
                               "or leave it out (step() returns the values)")
        if name is not None:
            check_name(name)
        for option, value in (("sample", sample), ("config", config), ("output_dir", output_dir)):
            if value is not None:
                check_paths(option, value)
        if tokenizer is not None and not hasattr(tokenizer, "save_pretrained"):
            check_paths("tokenizer", tokenizer)
        if text is not None:
            check_paths("text", text, many=True)
        if metrics is None:  # as `metrics: null` in a run's config: every metric (here: every one watched)
            metrics = WATCHABLE
        if isinstance(metrics, str):
            raise MonitorError(f"metrics={metrics!r}: a string, not a list of metrics. Fix: metrics=[{metrics!r}]")
        if not isinstance(metrics, (list, tuple, set, frozenset)):
            raise MonitorError(f"metrics={metrics!r}: a {type(metrics).__name__}, not a list of metrics. Fix: a list "
                               f"among {', '.join(WATCHABLE)}, or None for all of them")
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
        if config is not None and not Path(config).is_file():
            raise MonitorError(f"config={config}: no such file. Fix: a run's config file (its sample, extraction, seed "
                               "and spectra settings), or leave it out (the schema's defaults)")
        if isinstance(tokenizer, (str, os.PathLike)) and not any((Path(tokenizer) / f).is_file() for f in TOKENIZER_FILES):
            raise MonitorError(f"tokenizer={tokenizer} holds no tokenizer ({', '.join(TOKENIZER_FILES)}). Fix: the "
                               "directory the tokenizer was saved to (save_pretrained), or leave it out (the Trainer's "
                               "processing_class)")
        self.text, self.sample_path, self.tokenizer = texts, sample, tokenizer
        self.seq_len, self.n_tokens, self.config = seq_len, n_tokens, config
        self.settings = run_settings(config)
        self.metrics, self.every_n_steps, self.stop_on_saturation = metrics, every_n_steps, stop_on_saturation
        self.strict, self.zero_rows_warned = bool(strict), False
        self.name, self.tables_interval = name, float(tables_interval)
        self.output_dir = Path(output_dir) if output_dir is not None else None
        self.tokens_per_step, self.log_function = tokens_per_step, log
        self.tables_written = -math.inf  # time.monotonic() of the last rebuild of the tables
        self.active, self.sample, self.history, self.verdict, self.warned = False, None, {}, None, False
        self.epochs = {}  # step -> the training's epoch at that evaluation
        self.started, self.start_step, self.last_step, self.should_stop = False, 0, None, False

    @property
    def logger(self) -> logging.Logger:
        """The logger of the watch's own module (a framework callback's: lmsat.standalone.callback, ...)."""
        return logging.getLogger(type(self).__module__)

    # -- before training: every check

    def start(self, model=None, *, step: int = 0, output_dir=None, tokenizer=None, is_main: bool | None = None):
        """Before training: training starts at `step` (0, or the step a resumed run resumes at).
        On the process of rank 0 (`is_main`, default: monitor.process_rank() == 0) it checks
        the model (a transformers model, or a function returning one), the output folder, the
        sample and the kept evaluations' sample, and moves the evaluations after `step` to
        abandoned/ (a resumed run's dead trajectory). Without `model` the checks wait for the
        first evaluation. Every other process does nothing, here and at every step. -> self"""
        step = check_count("step", step, 0)
        self.started, self.start_step = True, step
        if is_main is None:
            is_main = process_rank() == 0
        if not is_main:
            self.active = False
            return self
        who = type(self).__name__
        if model is not None:
            with rng_kept():
                model = self.resolve(model)
            check_model(model)
            check_unsharded(model)
        from lmsat.commands.init import path_name

        output_dir = self.output_dir if output_dir is None else Path(output_dir)
        if output_dir is None:
            raise MonitorError(f"{who} writes its files under <output_dir>/lmsat and was given no output_dir. Fix: "
                               f"{who}(..., output_dir='out'), the folder the run saves its checkpoints in")
        self.output_dir = Path(output_dir)
        self.directory = self.output_dir / "lmsat"
        make_directories(self.directory, who)
        self.name = self.name or path_name(self.output_dir.resolve().name)
        # the tokenizer given to the watch (a folder or an object), else the framework's (tokenizer=)
        objects = [t for t in (self.tokenizer, tokenizer) if hasattr(t, "save_pretrained")]
        self.tokenizer_object = objects[0] if objects else None
        if isinstance(self.tokenizer, (str, os.PathLike)):
            self.tokenizer_dir = Path(self.tokenizer)
        elif self.tokenizer_object is not None:
            self.tokenizer_dir = self.directory / "tokenizer"
            self.tokenizer_object.save_pretrained(self.tokenizer_dir)
        else:
            self.tokenizer_dir = None
        if self.text and self.tokenizer_dir is None:
            raise MonitorError(self.no_tokenizer_message())
        self.pending_checks = True
        if model is not None:
            self.prepare(model)
        return self

    def no_tokenizer_message(self) -> str:
        who = type(self).__name__
        return f"text= needs the model's tokenizer, and {who} was given none. Fix: {who}(..., tokenizer=DIR or tokenizer)"

    def resolve(self, model):
        """The transformers model to measure: `model`, or what it returns when it is a function
        (called only when an evaluation is due; a converter from another framework's model)."""
        from torch import nn

        return model() if callable(model) and not isinstance(model, nn.Module) else model

    def prepare(self, model) -> None:
        """The checks that need the model (start's, or the first evaluation's when start had
        none), then the kept evaluations: the later ones abandoned, the earlier ones read back."""
        check_model(model)
        check_unsharded(model)
        building = self.directory / BUILDING  # beside sample.h5, which stays the kept evaluations' until checked
        try:
            self.check_before_training(model, building, self.start_step)
        except BaseException:
            building.unlink(missing_ok=True)  # a refusal leaves no sample that no evaluation was measured on
            raise
        folder, abandoned = abandon_evaluations(self.directory, self.name, self.start_step)
        install_sample(self.directory, self.sample)  # after abandoning: their copy of sample.h5 is the old one
        self.history, self.epochs = read_history(self.directory, self.name, self.sample.attrs["sha256"], self.start_step)
        if abandoned:
            message = (f"lmsat: {self.name}: training starts at step {self.start_step}, so the {len(abandoned)} "
                       f"evaluation(s) after it ({', '.join(abandoned)}) belong to an abandoned trajectory: moved to "
                       f"{folder} with the tables they were in, and left out of every table and of the verdict")
            warnings.warn(message, stacklevel=3)
            self.logger.warning(message)
            self.rebuild_after_abandoning()
        self.pending_checks, self.active = False, True
        n_seq, seq_len = self.sample.tokens.shape
        self.logger.info("lmsat: watching %s on %d x %d tokens (sha256 %s), metrics %s; files under %s", self.name, n_seq,
                      seq_len, self.sample.attrs["sha256"][:12], ", ".join(self.metrics), self.directory)

    def check_before_training(self, model, building: Path, step: int) -> None:
        """The sample (built into `building` from text=, or loaded), checked against the model,
        its tokenizer and the kept evaluations' sample (check_recorded_sample)."""
        if self.text:
            self.sample = text_sample(self.text, self.tokenizer_dir, building, model.config.to_dict(),
                                      seq_len=self.seq_len, n_tokens=self.n_tokens, config=self.config)
            self.settings = {**self.settings, "sample": self.sample.settings["sample"]}
            chosen = f"lmsat: {self.name}: {self.sample.size.describe()}"
            print(chosen, file=sys.stderr)  # the user reads the size chosen once, whatever the logging level
            self.logger.info(chosen)
        else:
            self.sample = load_sample(self.sample_path)
        tokenizer = self.tokenizer_object
        if tokenizer is None and self.tokenizer_dir is not None:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(self.tokenizer_dir)
        check_sample(model, self.sample, tokenizer)
        self.check_logger()
        self.config_sha256 = settings_sha256(self.settings, self.sample, self.metrics)
        check_recorded_sample(self.directory, self.name, self.sample, step, self.describe_sample())

    def check_logger(self) -> None:
        """A framework callback's check that it can log (the Trainer's); nothing here."""

    def describe_sample(self) -> str:
        """How this watch's sample was asked for, as the user wrote it (for check_recorded_sample's refusal)."""
        if not self.text:
            return f"sample={str(self.sample_path)!r}"
        options = [f"n_tokens={self.n_tokens}"] * (self.n_tokens is not None) + [f"seq_len={self.seq_len}"] * (
            self.seq_len is not None) + [f"config={str(self.config)!r}"] * (self.config is not None)
        texts = [str(t) for t in self.text]
        return f"text={texts[0] if len(texts) == 1 else texts!r}" + "".join(f", {o}" for o in options)

    # -- during training

    def step(self, model, step: int, *, checkpoint=None, tokens_seen: int | None = None, epoch: float | None = None):
        """After optimizer step `step` (the model in memory holds the weights of `step` steps):
        an evaluation when `checkpoint` (the folder or file just saved) is given or `step` is a
        multiple of every_n_steps, else nothing. `model`: the transformers model, or a function
        returning one (called only then: a converter from another framework's model).
        tokens_seen: tokens trained so far (default: step x tokens_per_step); epoch: epochs
        trained so far (past 1, the verdict says the data repeat). -> the logged values
        (`lmsat/<name>` -> float; also given to log=), or None when nothing was evaluated. A
        step already evaluated is not evaluated again."""
        step = check_count("step", step, 0)
        if not self.started:
            self.start(step=step)
        due = checkpoint is not None or bool(self.every_n_steps and step % self.every_n_steps == 0)
        if not due or not (self.active or getattr(self, "pending_checks", False)) or step == self.last_step:
            return None
        if not self.active:  # start had no model: its checks now, refusals raised
            with rng_kept():
                model = self.resolve(model)
            self.prepare(model)
        revision = f"step-{step}" if checkpoint is None else checkpoint_revision(checkpoint, step)
        if tokens_seen is None:
            tokens_seen = step * (self.tokens_per_step or 0)
        self.last_step = step
        epoch = math.nan if epoch is None else float(epoch)
        return self.guarded(f"the evaluation of {revision}", self.evaluate, model, step, revision, checkpoint,
                            int(tokens_seen), epoch)

    def close(self) -> None:
        """The tables with every evaluation's rows, whatever tables_interval skipped (when
        training ends). Also `with SaturationWatch(...) as watch:`."""
        if self.active and evaluation_files(self.directory, self.name):
            self.guarded(f"rebuilding the tables at the end of training (step {self.last_step})", self.write_tables)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()
        return False

    def guarded(self, what: str, action, *arguments):
        """action(*arguments); what fails in it is a warning naming `what` (training goes on),
        or, with strict=True, raised. A failed measure is named and marked by evaluate itself."""
        try:
            return action(*arguments)
        except Exception as error:  # noqa: BLE001 (the watch never stops training unless strict)
            if self.strict:
                raise
            self.warn(f"lmsat: {self.name}: {what} failed ({type(error).__name__}: {error}). Training goes on "
                      "(strict=True stops it)")
            return None

    def warn(self, message: str) -> None:
        warnings.warn(message, stacklevel=3)
        self.logger.warning(message)

    def emit(self, logged: dict, step: int) -> None:
        """Hand an evaluation's values to log= (a framework callback logs them through its trainer)."""
        if self.log_function is not None:
            self.log_function(logged, step)

    def evaluate(self, model, step: int, revision: str, checkpoint, tokens: int, epoch: float) -> dict:
        from lmsat.saturation.verdict import SATURATES, verdict_from_paired

        identity = dict(suite=self.name, model=self.name, revision=revision, step=step, tokens=tokens)
        try:
            with rng_kept():  # a converter may build a model (random init) on the way
                model = self.resolve(model)
                check_unsharded(model)
                record = monitor(model, self.sample, settings=self.settings, metrics=self.metrics,
                                 tokenizer_dir=self.tokenizer_dir, name=self.name, revision=revision, strict=self.strict)
        except Exception as error:  # noqa: BLE001 (outside any one measure: every one failed)
            if self.strict:
                raise
            record = {"failed": {m: f"the evaluation failed: {type(error).__name__}: {error}" for m in self.metrics},
                      "sequence_losses": None, "spectrum": None, "gradient": None}
        try:
            write_evaluation(self.directory, record, identity, self.sample, epoch=epoch)
        except Exception:
            write_failures(self.directory, identity, {m: "its files could not be written" for m in self.metrics}, epoch,
                           self.sample.attrs["sha256"])
            raise
        if checkpoint is not None:
            write_checkpoint_path(self.directory, self.name, revision, checkpoint)
        self.report_measures(step, revision, record)
        logged = {**scalars(record), f"{LOG_PREFIX}measures_failed": float(len(record["failed"]))}
        measured = record["sequence_losses"] is not None  # else no loss here: the verdict stays the earlier ones'
        if measured:
            self.history[step] = np.asarray(record["sequence_losses"])
            self.epochs[step] = epoch
            steps = sorted(self.history)
            self.verdict = verdict_from_paired(steps, np.stack([self.history[s] for s in steps]), alpha=self.alpha)
            logged[f"{LOG_PREFIX}saturates"] = float(self.verdict.verdict == SATURATES)
            logged.update({f"{LOG_PREFIX}{key}": float(getattr(self.verdict, key)) for key in VERDICT_LOGGED
                           if math.isfinite(getattr(self.verdict, key))})
        if time.monotonic() - self.tables_written >= self.tables_interval:
            self.write_tables()  # with the verdict's table
        self.emit(logged, step)
        if not measured:
            return logged
        v = self.verdict
        note = epoch_note(epoch)
        self.logger.info("lmsat: %s at step %d: loss %.6g +- %.2g; verdict %s over %d evaluations (rise %.3g, %.0f%% "
                      "interval [%.3g, %.3g])%s", self.name, step, record["loss"]["loss"] if "loss" in record else math.nan,
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
            self.logger.warning(message)
        if v.verdict == SATURATES and self.stop_on_saturation:
            self.should_stop = True
        return logged

    def report_measures(self, step: int, revision: str, record: dict) -> None:
        """A warning naming each measure that failed at this evaluation (marked in its tables), and
        once per run one saying that anisotropy left out zero vectors (counted in its tables)."""
        if record["failed"]:
            failed = "; ".join(f"{metric} ({why})" for metric, why in record["failed"].items())
            self.warn(f"lmsat: {self.name} at step {step} ({revision}): {len(record['failed'])} measure(s) failed: "
                      f"{failed}. Their rows in the tables are marked (column measure_failed); training goes on "
                      "(strict=True stops it)")
        values = record.get("anisotropy")
        if values and (any(values["zero_rows_layers"]) or values["zero_rows_last"]) and not self.zero_rows_warned:
            self.zero_rows_warned = True
            where = ", ".join(f"layer {i}: {n} of {values['layer_sample']}" for i, n in
                              enumerate(values["zero_rows_layers"]) if n)
            last = f"{values['zero_rows_last']} of the last layer's tokens" if values["zero_rows_last"] else ""
            self.warn(f"lmsat: {self.name} at step {step}: anisotropy left out zero vectors, which have no direction "
                      f"({', '.join(x for x in (where, last) if x)}), and is measured over the others; the tables count "
                      "them (column zero_rows of anisotropy_layers.csv and anisotropy_training.csv). An embedding row "
                      "kept at zero gives them (padding_idx: pad_token_id = eos_token_id, the token joining the "
                      "sample's documents)")

    # -- the tables

    def write_tables(self) -> None:
        """The registered tables, and the verdict's (saturation_verdicts.csv, OWN_TABLES): the
        Verdict's fields, then `epoch` (the training's, at the final evaluation) and `note`
        (what the verdict cannot tell there, EPOCH_NOTE)."""
        from lmsat.products.table_files import write_csv

        write_tables(self.directory, self.metrics, self.name, self.config_sha256, self.output_dir)
        if self.verdict is not None:
            import pandas as pd

            epoch = self.epochs.get(self.verdict.final_step, math.nan)
            note = "; ".join(n for n in (epoch_note(epoch), loss_failures_note(self.directory, self.name)) if n)
            write_csv(pd.DataFrame([{"model": self.name, **self.verdict.as_row(), "epoch": epoch, "note": note}]),
                      self.directory / "tables" / "saturation_verdicts.csv", self.config_sha256)
        self.tables_written = time.monotonic()

    def rebuild_after_abandoning(self) -> None:
        """The tables without the abandoned evaluations (abandon_evaluations moved the old
        ones): rebuilt from the kept ones, their verdict too; none when none is kept (the next
        evaluation writes them)."""
        from lmsat.saturation.verdict import verdict_from_paired

        steps = sorted(self.history)
        self.verdict = verdict_from_paired(steps, np.stack([self.history[s] for s in steps]), alpha=self.alpha) \
            if steps else None
        if evaluation_files(self.directory, self.name):
            self.write_tables()
