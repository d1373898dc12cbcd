"""Watch saturation while OLMo-core's Trainer trains: an olmo_core.train.callbacks.Callback
holding a lmsat.standalone.watch.SaturationWatch (docs/callback.md, "OLMo-core").

    from lmsat.standalone.olmo_core_watch import OLMoCoreSaturationCallback
    trainer_config = trainer_config.with_callback(
        "lmsat", OLMoCoreSaturationCallback(text="eval.txt", tokenizer="tokenizer/"))

Every checkpoint the CheckpointerCallback saves is an evaluation of the model at that step,
revision the step folder's name (`step1000`), as `lmsat init` names it; with every_n_steps
also every N steps between saves. OLMo-core saves asynchronously by default and announces a
save (post_checkpoint_saved) only once it is written, possibly steps later: the evaluation
runs in post_train_batch of the step the save began at (this callback's priority is below
the checkpointer's, so it runs after it), when the model still holds the saved weights; a
save announced on the training thread at its own step (a synchronous one, the final one)
is evaluated there. The model is OLMo-core's Transformer: each evaluation measures the
transformers model of the same weights, built by OLMo-core's own converter
(olmo_core.nn.hf: get_hf_config, convert_state_to_hf; OLMo 2 and 3 blocks), a float copy
freed after. The values are recorded through trainer.record_metric (namespace `lmsat/`,
no cross-rank reduction), so every metrics callback (console, W&B, Comet) receives them.
Only rank 0 evaluates; a model sharded across processes (FSDP, tensor parallelism: DTensor
parameters) is refused when training starts.

Importing this module imports OLMo-core (`pip install ai2-olmo-core`), which lmsat does not
need otherwise.
"""

from __future__ import annotations

import math
import threading
from pathlib import Path
from typing import ClassVar

from olmo_core.train.callbacks import Callback

from lmsat.errors import MonitorError
from lmsat.standalone.monitor import check_unsharded
from lmsat.standalone.watch import SaturationWatch


class OLMoCoreSaturationCallback(Callback):
    """SaturationWatch at every checkpoint an OLMo-core Trainer saves (and every_n_steps).

    output_dir: where the watch writes lmsat/ (default: the trainer's save_folder, which must
    then be a local folder). The other options are SaturationWatch's (text or sample,
    tokenizer, seq_len, n_tokens, config, metrics, every_n_steps, stop_on_saturation: the run
    is canceled (trainer.cancel_run) once the verdict is `saturates`, alpha, name,
    tokens_per_step, log, tables_interval, strict). `watch` is that SaturationWatch: its
    verdict, history and sample. (OLMo-core's Callback has its own `step` and `trainer`,
    so the watch is held, not inherited.)
    """

    priority: ClassVar[int] = 0  # below CheckpointerCallback's 1: runs after it in every hook

    def __init__(self, text=None, *, output_dir=None, **options):
        self.user_log = options.pop("log", None)
        self.watch = SaturationWatch(text, output_dir=output_dir, log=self.record, **options)
        self.training_thread = None

    # -- before training

    def pre_train(self):
        from olmo_core.distributed.utils import get_rank
        from olmo_core.io import is_url

        step = self.trainer.global_step
        self.training_thread = threading.get_ident()
        if get_rank() != 0:
            self.watch.start(step=step, is_main=False)
            return
        output_dir = self.watch.output_dir
        if output_dir is None:
            if is_url(self.trainer.save_folder):
                raise MonitorError(f"OLMoCoreSaturationCallback writes its files under <output_dir>/lmsat, and the "
                                   f"trainer saves to {self.trainer.save_folder}, not a local folder. Fix: "
                                   "OLMoCoreSaturationCallback(..., output_dir='a/local/folder')")
            output_dir = Path(self.trainer.save_folder)
        self.watch.start(self.transformers_model, step=step, output_dir=output_dir, is_main=True)
        saved = self.checkpoint_saved_now()  # the checkpointer's pre-train save (step 0), before this hook
        if saved is not None:
            self.olmo_step(saved)

    def transformers_model(self):
        """The transformers model of the trainer's model's weights now, built by OLMo-core's own
        converter (a copy, in the model's dtype); ShardedModelError for DTensor parameters,
        MonitorError for an architecture the converter has no transformers class for."""
        from accelerate import init_empty_weights
        from olmo_core.nn.hf.config import get_hf_config
        from olmo_core.nn.hf.convert import convert_state_to_hf
        from transformers import AutoModelForCausalLM

        module = self.trainer.train_module
        model = module.model
        check_unsharded(model)
        try:
            config = get_hf_config(model)
        except (NotImplementedError, ValueError, RuntimeError) as error:
            raise MonitorError(f"OLMo-core's converter (olmo_core.nn.hf.get_hf_config) has no transformers model for "
                               f"this {type(model).__name__} ({type(error).__name__}: {error}), so it cannot be watched. "
                               "Fix: measure its saved checkpoints with `lmsat analyse` / `lmsat init`") from None
        # the context it trains at (the converter leaves -1): longer eval sequences are refused before training
        config.max_position_embeddings = int(module.max_sequence_length)
        state = {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}
        with init_empty_weights():  # parameters on the meta device (no random init); buffers (RoPE) built
            lm = AutoModelForCausalLM.from_config(config)
        lm.load_state_dict(convert_state_to_hf(config, state), assign=True)
        return lm.to(next(model.parameters()).device).eval().requires_grad_(False)

    # -- during training

    def checkpoint_saved_now(self) -> str | None:
        """The path of the checkpoint the CheckpointerCallback began saving at this step, else None."""
        from olmo_core.train.callbacks import CheckpointerCallback

        for callback in self.trainer.callbacks.values():
            if isinstance(callback, CheckpointerCallback) and callback._latest_checkpoint_step == self.trainer.global_step:
                return callback._latest_checkpoint_path or None
        return None

    def post_train_batch(self):
        self.olmo_step(self.checkpoint_saved_now())

    def post_checkpoint_saved(self, path):
        # a save announced on the training thread at its own step (the model holds its weights); an
        # asynchronous one announced later was evaluated when it began (post_train_batch)
        now = self.trainer.checkpointer.checkpoint_dirname(self.trainer.global_step)
        if threading.get_ident() == self.training_thread and Path(str(path)).name == now:
            self.olmo_step(str(path))

    def olmo_step(self, checkpoint: str | None) -> None:
        trainer = self.trainer
        per_epoch = trainer.tokens_per_epoch
        epoch = trainer.global_train_tokens_seen / per_epoch if per_epoch else math.nan
        self.watch.step(self.transformers_model, trainer.global_step, checkpoint=checkpoint,
                        tokens_seen=trainer.global_train_tokens_seen, epoch=epoch)
        if self.watch.should_stop and not trainer.is_canceled:
            trainer.cancel_run("lmsat: the eval loss saturates (stop_on_saturation=True)")

    def record(self, logged: dict, step: int) -> None:
        """Each value as a metric of the trainer's current step (no reduction across ranks: rank 0 alone has them)."""
        for name, value in logged.items():
            self.trainer.record_metric(name, value, reduce_type=None)
        if self.user_log is not None:
            self.user_log(logged, step)

    def close(self):
        self.watch.close()  # always called before fit() exits, an error included
