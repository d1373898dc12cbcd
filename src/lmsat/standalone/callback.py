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

It is lmsat.standalone.watch.SaturationWatch (one implementation of the evaluation, its
files, the verdict and what a failure does) with the Trainer's hooks: the same watch serves
any other loop (`watch.step(model, step, checkpoint=...)`), Lightning
(lightning_watch.LightningSaturationCallback) and OLMo-core (olmo_core_watch).

It never changes training: no gradient (torch.no_grad, autocast off), model.training
restored, no optimizer, scheduler or data-order access, and every RNG state it could touch
(python, numpy, torch CPU and CUDA) saved before and restored after. It never stops it
either, unless asked (strict=True): a measure that fails is a warning naming it and a row
marked `measure_failed` in its tables (callback_files.write_tables). Under distributed
training only the world's process zero computes; the others go on and wait at their next
collective (no extra collective is added).
"""

from __future__ import annotations

import math
from pathlib import Path

from lmsat.errors import MonitorError
from lmsat.standalone.monitor import DEFAULT_METRICS
from lmsat.standalone.watch import SaturationWatch

try:
    from transformers import TrainerCallback
except ImportError:  # transformers is a dependency of lmsat; this only keeps the module importable
    TrainerCallback = object


class SaturationCallback(SaturationWatch, TrainerCallback):
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
    always when training ends). strict: a measure that fails stops training (default: a
    warning naming it and a row marked `measure_failed` in its tables; training goes on).
    Options of the wrong type are refused here; the sample, the model and the output folder
    when training starts, before its first step, and a resumed run's sample unless it is
    the one its kept evaluations were measured on. Evaluations after the step training
    starts at (a resumed run's) move to <output_dir>/lmsat/abandoned/.
    """

    def __init__(self, text=None, *, sample=None, tokenizer=None, seq_len: int | None = None, n_tokens: int | None = None,
                 config=None, metrics=DEFAULT_METRICS, every_n_steps: int | None = None, stop_on_saturation: bool = False,
                 alpha: float | None = None, name: str | None = None, trainer=None, tables_interval: float = 300.0,
                 strict: bool = False):
        super().__init__(text, sample=sample, tokenizer=tokenizer, seq_len=seq_len, n_tokens=n_tokens, config=config,
                         metrics=metrics, every_n_steps=every_n_steps, stop_on_saturation=stop_on_saturation, alpha=alpha,
                         name=name, tables_interval=tables_interval, strict=strict)
        self.trainer = trainer

    # -- before training: every check (SaturationWatch.start)

    def on_train_begin(self, args, state, control, model=None, processing_class=None, **kwargs):
        if not state.is_world_process_zero:
            # rank 0 computes; the others never wait for it outside their own collectives
            self.start(step=state.global_step, is_main=False)
            return
        if getattr(args, "fsdp", None) or getattr(args, "deepspeed", None):
            raise MonitorError("SaturationCallback reads the whole model on one process, and FSDP/DeepSpeed shard it. "
                               "Fix: run `lmsat analyse` (or `lmsat init` + snakemake) on the saved checkpoints instead")
        self.start(model, step=state.global_step, output_dir=args.output_dir, tokenizer=processing_class, is_main=True)

    def no_tokenizer_message(self) -> str:
        return ("text= needs the model's tokenizer, and the Trainer has no processing_class. "
                "Fix: Trainer(processing_class=tokenizer), or SaturationCallback(tokenizer=DIR)")

    def check_logger(self) -> None:
        self.trainer = self.trainer or self.find_trainer()
        if self.trainer is None:
            raise MonitorError("SaturationCallback logs through the Trainer and found none running it. "
                               "Fix: SaturationCallback(..., trainer=trainer)")

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

    def on_train_end(self, args, state, control, **kwargs):
        self.close()

    # -- during training

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if self.active and self.every_n_steps and state.global_step % self.every_n_steps == 0 and not control.should_save:
            self.watch_step(state, control, model, None)  # a save at this step is evaluated by on_save
        return control

    def on_save(self, args, state, control, model=None, **kwargs):
        if self.active:
            from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

            self.watch_step(state, control, model, Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")
        return control

    def watch_step(self, state, control, model, checkpoint: Path | None) -> None:
        """SaturationWatch.step at the Trainer's step, with its tokens and epoch; stops
        training when the verdict says so and stop_on_saturation asks."""
        step = int(state.global_step)
        tokens = self.guarded("reading the tokens per step", self.trainer_tokens_per_step, state, model, checkpoint)
        epoch = float(state.epoch) if state.epoch is not None else math.nan
        self.step(model, step, checkpoint=checkpoint, tokens_seen=step * (tokens or 0), epoch=epoch)
        if self.should_stop:
            control.should_training_stop = True

    def emit(self, logged: dict, step: int) -> None:
        self.trainer.log(logged)  # every logger of report_to receives it

    def trainer_tokens_per_step(self, state, model, checkpoint: Path | None) -> int:
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
