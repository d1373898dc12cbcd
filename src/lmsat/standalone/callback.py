"""Watch saturation while a model trains: the pipeline's per-checkpoint numbers, computed on
the model in memory at every checkpoint save, logged through the Trainer and written as the
pipeline's tables.

    from lmsat import SaturationCallback
    trainer = Trainer(model=model, args=args, train_dataset=data, processing_class=tokenizer,
                      callbacks=[SaturationCallback(text="eval.txt")])
    trainer.train()

At each save (and, with `every_n_steps`, between saves) the callback runs the cheap metrics
of `lmsat analyse` (loss and its standard error, last-layer anisotropy, effective rank and
singular entropy of the representations, the head's spectrum, the gradient bottleneck: the
share of the loss's logit gradient the head passes back, from the callback's own forward,
never from the trainer's gradients) through the same functions:
the same eval sample as rule sample_eval_tokens builds (lmsat.data.corpus.build_sample, through
lmsat.standalone.analyse.text_sample), the same forward into a hidden-state cache
(lmsat.data.hidden_states.extract_to_cache, into a temporary file) and the same registered metrics
(lmsat.products.metrics). So `python -m lmsat analyse <output_dir>/checkpoint-N --text <same file>`
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

import logging
import math
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from lmsat.errors import MonitorError
from lmsat.standalone.callback_files import (
    abandon_evaluations,
    epoch_note,
    make_directories,
    read_history,
    settings_sha256,
    write_evaluation,
    write_tables,
)
from lmsat.standalone.monitor import (
    DEFAULT_METRICS,
    LOG_PREFIX,
    VERDICT_LOGGED,
    WATCHABLE,
    check_model,
    check_sample,
    load_sample,
    monitor,
    scalars,
    text_sample,
)

log = logging.getLogger(__name__)

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
    them, lmsat.data.corpus.text_sample_size, and printed); config: a run config whose sample,
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
        from lmsat.products.metrics import METRICS
        from lmsat.saturation.verdict import DEFAULT_ALPHA
        from lmsat.standalone.analyse import run_settings

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
        from lmsat.products.table_files import write_csv

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
        from lmsat.saturation.verdict import verdict_from_paired

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
        trainer_state.json (lmsat.checkpoints.trainer_runs.tokens_per_step), else from the Trainer's state."""
        from lmsat.checkpoints import trainer_runs

        if checkpoint is not None and (found := trainer_runs.tokens_per_step(checkpoint)):
            return found[0]
        step = max(state.global_step, 1)
        if state.num_input_tokens_seen:
            return int(round(state.num_input_tokens_seen / step))
        flos = state.total_flos + getattr(self.trainer, "current_flos", 0)
        parameters = model.num_parameters(exclude_embeddings=True)
        return int(round(flos / (6 * parameters) / step)) if parameters and flos else 0

    def evaluate(self, args, state, control, model, revision: str, checkpoint: Path | None) -> dict:
        from lmsat.saturation.verdict import SATURATES, verdict_from_paired

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
