"""Watch saturation while a Lightning Trainer trains a LightningModule that holds a
transformers model: lmsat.standalone.watch.SaturationWatch with Lightning's hooks
(docs/callback.md, "Lightning").

    from lmsat.standalone.lightning_watch import LightningSaturationCallback
    trainer = lightning.Trainer(callbacks=[ModelCheckpoint(every_n_train_steps=100, save_top_k=-1),
                                           LightningSaturationCallback(text="eval.txt", tokenizer="tokenizer/")])
    trainer.fit(module, data)

Every checkpoint save (`on_save_checkpoint`, which runs while Trainer.save_checkpoint
builds the file's contents, so the module in memory holds exactly the saved weights) is an
evaluation, whose revision is the file's name as `lmsat init` names it
(`epoch=0-step=100.ckpt` -> `epoch-0-step-100.ckpt`); with every_n_steps also every N
optimizer steps between saves. The values go to every logger of the Trainer
(`logger.log_metrics(values, step=global_step)`: LightningModule.log is not allowed in
on_save_checkpoint). Only the global rank 0 evaluates; a sharded strategy (FSDP, DeepSpeed,
ModelParallel) is refused when training starts.

Importing this module imports Lightning (`pip install lightning`), which lmsat does not need
otherwise.
"""

from __future__ import annotations

import math
from pathlib import Path

from lightning.pytorch.callbacks import Callback

from lmsat.errors import MonitorError, ShardedModelError
from lmsat.standalone.watch import SaturationWatch

SHARDED_STRATEGIES = ("FSDPStrategy", "DeepSpeedStrategy", "ModelParallelStrategy")  # they shard the module's weights


class LightningSaturationCallback(SaturationWatch, Callback):
    """SaturationWatch at every checkpoint save of a Lightning Trainer (and every_n_steps).

    model: where the LightningModule holds its transformers model: an attribute name
    ("model", "net.lm"), or a function module -> model (default: the one child module of
    the LightningModule that is a transformers PreTrainedModel). output_dir: where the
    watch writes lmsat/ (default: the Trainer's default_root_dir). The other options are
    SaturationWatch's (text or sample, tokenizer, seq_len, n_tokens, config, metrics,
    every_n_steps, stop_on_saturation: trainer.should_stop once the verdict is `saturates`,
    alpha, name, tokens_per_step, log, tables_interval, strict).
    """

    def __init__(self, text=None, *, model=None, output_dir=None, **options):
        super().__init__(text, output_dir=output_dir, **options)
        if model is not None and not (isinstance(model, str) or callable(model)):
            raise MonitorError(f"model={model!r}: neither an attribute name nor a function. Fix: model='model' (the "
                               "LightningModule's attribute holding the transformers model) or model=lambda module: ...")
        self.model_accessor, self.pending, self.lightning_trainer = model, None, None

    def transformers_model(self, pl_module):
        """The transformers model the LightningModule holds (model=), or a MonitorError naming
        what it holds."""
        from transformers import PreTrainedModel

        if callable(self.model_accessor):
            return self.model_accessor(pl_module)
        if isinstance(self.model_accessor, str):
            found = pl_module
            for part in self.model_accessor.split("."):
                if not hasattr(found, part):
                    raise MonitorError(f"model={self.model_accessor!r}: {type(pl_module).__name__} has no attribute "
                                       f"{self.model_accessor!r}. Fix: the attribute that holds the transformers model")
                found = getattr(found, part)
            return found
        children = [(name, child) for name, child in pl_module.named_children() if isinstance(child, PreTrainedModel)]
        if len(children) == 1:
            return children[0][1]
        held = ", ".join(f"{name} ({type(child).__name__})" for name, child in pl_module.named_children()) or "none"
        raise MonitorError(f"LightningSaturationCallback watches a transformers model that the LightningModule holds, and "
                           f"{type(pl_module).__name__} holds {len(children) or 'no'} such child modules (its children: "
                           f"{held}). Fix: LightningSaturationCallback(..., model='attribute') or model=lambda module: ...")

    # -- before training

    def on_train_start(self, trainer, pl_module):
        self.lightning_trainer = trainer
        if not trainer.is_global_zero:
            self.start(step=trainer.global_step, is_main=False)
            return
        strategy = type(trainer.strategy).__name__
        if strategy in SHARDED_STRATEGIES:
            raise ShardedModelError(f"LightningSaturationCallback reads the whole model on one process, and {strategy} "
                                    "shards it across processes. Fix: measure the saved checkpoints instead (`lmsat init "
                                    "<folder>` + snakemake, or `lmsat analyse <checkpoint>`), or train with DDP")
        if self.every_n_steps is None:
            weights_only = [type(c).__name__ for c in trainer.checkpoint_callbacks if getattr(c, "save_weights_only", False)]
            if weights_only and len(weights_only) == len(trainer.checkpoint_callbacks):
                raise MonitorError("LightningSaturationCallback evaluates at each save, and ModelCheckpoint("
                                   "save_weights_only=True) saves without calling the callbacks' on_save_checkpoint: it "
                                   "would never evaluate. Fix: save_weights_only=False, or every_n_steps=N")
        output_dir = self.output_dir if self.output_dir is not None else Path(trainer.default_root_dir)
        self.start(self.transformers_model(pl_module), step=trainer.global_step, output_dir=output_dir, is_main=True)

    # -- during training

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        if self.active:  # an evaluation of the weights being saved, named after their file
            self.pending = None
            self.lightning_step(trainer, pl_module, self.saving_path())

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        step = trainer.global_step
        if self.active and self.every_n_steps and step % self.every_n_steps == 0 and step != self.last_step:
            # evaluated at the next batch's start (the same weights) unless a save at this step evaluates it first:
            # the ModelCheckpoints run after every other callback
            self.pending = step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.flush_pending(trainer, pl_module)

    def on_train_end(self, trainer, pl_module):
        self.flush_pending(trainer, pl_module)
        self.close()

    def flush_pending(self, trainer, pl_module) -> None:
        if self.pending is not None and self.pending == trainer.global_step:
            self.lightning_step(trainer, pl_module, None)
        self.pending = None

    def lightning_step(self, trainer, pl_module, checkpoint: Path | None) -> None:
        step = trainer.global_step
        batches = trainer.num_training_batches  # per epoch; inf for an iterable of unknown length
        epoch = step * trainer.accumulate_grad_batches / batches if 0 < batches < math.inf else math.nan
        self.step(lambda: self.transformers_model(pl_module), step, checkpoint=checkpoint, epoch=epoch)
        if self.should_stop:
            trainer.should_stop = True

    def saving_path(self) -> Path | None:
        """The file this save writes: the `filepath` of the Trainer.save_checkpoint call that
        runs on_save_checkpoint (a ModelCheckpoint's, or the user's own call); None when
        another route saves."""
        import inspect

        from lightning.pytorch import Trainer

        frame = inspect.currentframe()
        while frame is not None:
            if frame.f_code is Trainer.save_checkpoint.__code__:
                return Path(frame.f_locals["filepath"])
            frame = frame.f_back
        return None

    def emit(self, logged: dict, step: int) -> None:
        for logger in self.lightning_trainer.loggers:
            logger.log_metrics(logged, step=step)
        super().emit(logged, step)

    def no_tokenizer_message(self) -> str:
        return ("text= needs the model's tokenizer. Fix: LightningSaturationCallback(..., tokenizer=DIR), the folder "
                "the tokenizer was saved to (or the tokenizer object)")
