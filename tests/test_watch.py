"""lmsat.standalone.watch and lightning_watch: a hand-written PyTorch loop and a real Lightning
Trainer run of a tiny GPT-NeoX, each watched (SaturationWatch.step; LightningSaturationCallback)
against the same run without it (every parameter and every step's loss bit-identical) and
against `lmsat analyse` on the weights saved at that step (the same numbers); only rank 0
evaluates (RANK=1; a real two-process Lightning DDP run); a sharded model (a real FSDP2
DTensor on a one-process gloo group) is refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from test_analyse import analyse
from test_callbacks import texts_and_tokenizer
from test_own_run import Windows

TOL = dict(rtol=1e-6, atol=1e-7)  # the workflow's own reruns agree to this (test_own_run)
STEPS, SAVE = 12, 4


def tiny_model(tokenizer):
    """A tiny GPT-NeoX with dropout: training draws from torch's RNG at every step, so a watch
    that drew from it too would change the run."""
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    return GPTNeoXForCausalLM(GPTNeoXConfig(
        vocab_size=len(tokenizer) + 4, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
        max_position_embeddings=64, tie_word_embeddings=False, hidden_dropout=0.1, attention_dropout=0.1,
        eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.eos_token_id))


def hand_loop(out: Path, text: Path, tokenizer, watch=None, steps: int = STEPS, save_every: int = SAVE):
    """A training loop of one's own: random batches (torch's RNG), AdamW, a save_pretrained
    folder checkpoint_<step> every `save_every` steps, and `watch.step` after every step.
    -> (the trained model, every step's loss, every value watch.step returned)."""
    import torch

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = tiny_model(tokenizer).train()
    windows = Windows(tokenizer, text).tokens  # (n, 32)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses, returned = [], {}
    for step in range(1, steps + 1):
        batch = windows[torch.randint(len(windows), (4,))]
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
        saved = None
        if step % save_every == 0:
            saved = out / f"checkpoint_{step:05d}"
            model.save_pretrained(saved)
            tokenizer.save_pretrained(saved)
        if watch is not None:
            logged = watch.step(model, step, checkpoint=saved, tokens_seen=step * 4 * 32)
            if logged:
                returned[step] = logged
    if watch is not None:
        watch.close()
    return model, losses, returned


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    base = tmp_path_factory.mktemp("watch")
    text, eval_text, tokenizer = texts_and_tokenizer(base, train_lines=300)
    return dict(base=base, text=text, eval=eval_text, tokenizer=tokenizer)


def same_training(plain: tuple, watched: tuple) -> None:
    """Every parameter and every step's loss, bit for bit."""
    import torch

    assert plain[1] == watched[1] and len(plain[1]) > 0
    trained = dict(watched[0].named_parameters())
    assert all(torch.equal(p, trained[k]) for k, p in plain[0].named_parameters())


def equals_analyse(checkpoint: Path, logged: dict, eval_text: Path, cwd: Path, *extra) -> float:
    """`lmsat analyse` on the saved weights gives the values the watch logged at that step
    (TOL). -> the largest relative difference."""
    from lmsat.standalone.monitor import DEFAULT_METRICS, scalars

    done = analyse(checkpoint, "--text", eval_text, "--n-tokens", 640, "--metrics", *DEFAULT_METRICS, "--json", *extra,
                   cwd=cwd)
    assert done.returncode == 0, done.stderr
    theirs = scalars(json.loads(done.stdout)["metrics"])
    ours = {k: v for k, v in logged.items() if k in theirs}
    assert set(ours) == set(theirs) and len(ours) == 18, sorted(set(theirs) ^ set(ours))
    for key, value in theirs.items():
        assert np.isclose(ours[key], value, **TOL), (key, ours[key], value)
    return max(abs(ours[k] - v) / max(abs(v), 1e-12) for k, v in theirs.items())


# ---------------------------------------------------------------- a loop of one's own


def test_a_hand_written_loop_is_watched_without_a_bit_of_change_and_gives_analyse_s_numbers(assets, tmp_path, capsys):
    from lmsat.products.table_files import read_table
    from lmsat.standalone.watch import SaturationWatch

    plain = hand_loop(tmp_path / "plain", assets["text"], assets["tokenizer"])
    received = []
    watch = SaturationWatch(text=assets["eval"], tokenizer=assets["tokenizer"], output_dir=tmp_path / "out", n_tokens=640,
                            every_n_steps=2, log=lambda values, step: received.append((step, values)))
    watched = hand_loop(tmp_path / "out", assets["text"], assets["tokenizer"], watch)
    same_training(plain, watched)
    # every save and every 2 steps between them, each evaluated once, the values also given to log=
    assert sorted(watched[2]) == [2, 4, 6, 8, 10, 12] and [s for s, _ in received] == [2, 4, 6, 8, 10, 12]
    assert all(values == watched[2][step] for step, values in received)
    tables = tmp_path / "out" / "lmsat" / "tables"
    loss = read_table(tables / "loss.csv")
    assert loss["revision"].tolist() == ["step-2", "checkpoint_00004", "step-6", "checkpoint_00008", "step-10",
                                         "checkpoint_00012"]
    assert loss["tokens"].tolist() == [s * 128 for s in (2, 4, 6, 8, 10, 12)]
    assert loss["on_disk"].tolist() == [False, True] * 3 and loss["measure_failed"].isna().all()
    assert read_table(tables / "saturation_verdicts.csv")["checkpoints"].tolist() == [6]
    difference = equals_analyse(tmp_path / "out" / "checkpoint_00008", watched[2][8], assets["eval"], tmp_path)
    print(f"hand-written loop: largest relative difference against lmsat analyse {difference:.2e}")
    # a checkpoint deleted since (a rotation) is no longer on disk when the tables are written again
    import shutil

    shutil.rmtree(tmp_path / "out" / "checkpoint_00004")
    watch.close()
    assert read_table(tables / "loss.csv")["on_disk"].tolist() == [False, False, False, True, False, True]


def test_only_rank_0_evaluates_and_a_model_given_as_a_function_is_built_only_when_due(assets, tmp_path, monkeypatch):
    """RANK=1 (as torchrun exports it): nothing evaluated, nothing written, training the
    same. A function for the model (a converter from another framework's model) is called
    only at an evaluation, and what it draws from the RNG is given back."""
    import torch

    from lmsat.standalone.watch import SaturationWatch

    monkeypatch.setenv("RANK", "1")
    other = SaturationWatch(text=assets["eval"], tokenizer=assets["tokenizer"], output_dir=tmp_path / "rank1", n_tokens=640)
    assert hand_loop(tmp_path / "rank1", assets["text"], assets["tokenizer"], other, steps=4)[2] == {}
    assert not (tmp_path / "rank1" / "lmsat").exists() and not other.active
    monkeypatch.setenv("RANK", "0")

    built = []

    def converted():  # draws from torch's RNG, as building a model does
        built.append(torch.rand(1))
        return model

    watch = SaturationWatch(text=assets["eval"], tokenizer=assets["base"] / "tokenizer", output_dir=tmp_path / "fn",
                            n_tokens=640, every_n_steps=3)
    torch.manual_seed(0)
    model = tiny_model(assets["tokenizer"])
    watch.start(converted, step=0)
    state = torch.get_rng_state()
    assert [watch.step(converted, s) is not None for s in (1, 2, 3)] == [False, False, True]
    assert len(built) == 2 and torch.equal(torch.get_rng_state(), state)  # start's and step 3's
    assert watch.step(converted, 3) is None and len(built) == 2  # a step is evaluated once


def test_a_resume_abandons_the_later_evaluations_and_bad_options_are_named(assets, tmp_path):
    from lmsat.errors import MonitorError
    from lmsat.products.table_files import read_table
    from lmsat.standalone.watch import SaturationWatch

    options = dict(text=assets["eval"], tokenizer=assets["tokenizer"], output_dir=tmp_path / "out", n_tokens=640)
    hand_loop(tmp_path / "out", assets["text"], assets["tokenizer"], SaturationWatch(**options), steps=8)
    again = SaturationWatch(**options)
    import torch

    torch.manual_seed(0)
    with pytest.warns(UserWarning, match=r"training starts at step 4, so the 1 evaluation\(s\) after it "
                                         r"\(checkpoint_00008\) belong to an abandoned trajectory"):
        again.start(tiny_model(assets["tokenizer"]), step=4)
    assert sorted(again.history) == [4]
    assert read_table(tmp_path / "out" / "lmsat" / "tables" / "loss.csv")["revision"].tolist() == ["checkpoint_00004"]
    with pytest.raises(MonitorError, match=r"SaturationWatch writes its files under <output_dir>/lmsat and was given no "
                                           r"output_dir\. Fix: SaturationWatch\(\.\.\., output_dir='out'\)"):
        SaturationWatch(text=assets["eval"], tokenizer=assets["tokenizer"]).start(tiny_model(assets["tokenizer"]))
    with pytest.raises(MonitorError, match=r"text= needs the model's tokenizer, and SaturationWatch was given none"):
        SaturationWatch(text=assets["eval"], output_dir=tmp_path / "x").start(tiny_model(assets["tokenizer"]))
    with pytest.raises(MonitorError, match=r"log=3 is not a function"):
        SaturationWatch(text=assets["eval"], log=3)
    with pytest.raises(MonitorError, match=r"tokens_per_step='128' is a str, not a whole number"):
        SaturationWatch(text=assets["eval"], tokens_per_step="128")


@pytest.fixture
def gloo_group(tmp_path):
    """A real one-process gloo process group (torch.distributed), destroyed after."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_a_model_sharded_by_fsdp2_is_refused_naming_a_parameter(assets, tmp_path, gloo_group):
    """FSDP2 (torch.distributed.fsdp.fully_shard) on a one-process gloo group: the parameters
    are DTensors. The watch reads the whole model on one process without a collective, so it
    refuses the model when it starts, naming a parameter and its placement."""
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor

    from lmsat.errors import ShardedModelError
    from lmsat.standalone.watch import SaturationWatch

    torch.manual_seed(0)
    model = tiny_model(assets["tokenizer"])
    fully_shard(model, mesh=init_device_mesh("cpu", (1,)))
    assert isinstance(next(model.parameters()), DTensor)
    watch = SaturationWatch(text=assets["eval"], tokenizer=assets["tokenizer"], output_dir=tmp_path / "out", n_tokens=640)
    with pytest.raises(ShardedModelError, match=r"its parameter 'gpt_neox\.embed_in\.weight' is a DTensor \(placements "
                                                r"\(Shard\(dim=0\),\) on a device mesh of 1 process\(es\)\).*Fix: measure the "
                                                r"saved checkpoints instead"):
        watch.start(model, step=0)
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- Lightning


def lightning_run(out: Path, text: Path, tokenizer, callbacks=(), steps: int = STEPS, every: int = SAVE, **trainer_options):
    """A real lightning.Trainer run: a LightningModule holding the tiny GPT-NeoX (attribute
    `model`), a ModelCheckpoint every `every` steps (all kept) and a CSVLogger. -> (the
    module, every step's training loss, the Trainer)."""
    import lightning
    import torch
    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning.pytorch.loggers import CSVLogger
    from torch.utils.data import DataLoader

    torch.set_num_threads(1)
    lightning.seed_everything(0, verbose=False)

    class Module(lightning.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = tiny_model(tokenizer)
            self.losses = []

        def training_step(self, batch, batch_idx):
            loss = self.model(input_ids=batch, labels=batch).loss
            self.losses.append(loss.item())
            return loss

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=3e-3)

    module = Module()
    data = DataLoader(Windows(tokenizer, text).tokens, batch_size=4, shuffle=True)  # shuffled by torch's RNG
    options = dict(accelerator="cpu", devices=1, logger=CSVLogger(out, name="logs"), enable_progress_bar=False,
                   default_root_dir=out, enable_model_summary=False) | trainer_options
    trainer = lightning.Trainer(max_steps=steps, callbacks=[
        ModelCheckpoint(dirpath=out / "checkpoints", every_n_train_steps=every, save_top_k=-1), *callbacks], **options)
    trainer.fit(module, data)
    return module, module.losses, trainer


def test_lightning_is_watched_at_each_save_without_a_bit_of_change_and_gives_analyse_s_numbers(assets, tmp_path):
    import torch
    from transformers import GPTNeoXForCausalLM

    from lmsat.products.table_files import read_table
    from lmsat.standalone.lightning_watch import LightningSaturationCallback

    plain = lightning_run(tmp_path / "plain", assets["text"], assets["tokenizer"])
    callback = LightningSaturationCallback(text=assets["eval"], tokenizer=assets["tokenizer"], n_tokens=640,
                                           every_n_steps=2, tables_interval=0)
    watched = lightning_run(tmp_path / "out", assets["text"], assets["tokenizer"], [callback])
    same_training(plain[:2], watched[:2])
    for name in ("epoch=0-step=4.ckpt", "epoch=0-step=8.ckpt", "epoch=0-step=12.ckpt"):  # the saved weights too
        a, b = (torch.load(run / "checkpoints" / name, weights_only=True)["state_dict"] for run in (tmp_path / "plain",
                                                                                                    tmp_path / "out"))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    # each save under its file's name (as `lmsat init` names it), every 2 steps between them, each once
    loss = read_table(tmp_path / "out" / "lmsat" / "tables" / "loss.csv")
    assert loss["revision"].tolist() == ["step-2", "epoch-0-step-4.ckpt", "step-6", "epoch-0-step-8.ckpt", "step-10",
                                         "epoch-0-step-12.ckpt"]
    assert loss["on_disk"].tolist() == [False, True] * 3 and loss["step"].tolist() == [2, 4, 6, 8, 10, 12]
    # the values reach the Trainer's logger (CSVLogger's metrics.csv), at their steps
    import pandas as pd

    (metrics,) = (tmp_path / "out" / "logs").rglob("metrics.csv")
    logged = pd.read_csv(metrics).dropna(subset=["lmsat/loss"])
    assert logged["step"].tolist() == [2, 4, 6, 8, 10, 12]
    assert np.allclose(logged["lmsat/loss"], loss["loss"], rtol=1e-12)
    # lmsat analyse on the weights of the step-8 file: its module's state dict, read without unpickling code,
    # as the transformers model it holds, saved with save_pretrained
    saved = torch.load(tmp_path / "out" / "checkpoints" / "epoch=0-step=8.ckpt", weights_only=True)
    model = GPTNeoXForCausalLM(watched[0].model.config)
    model.load_state_dict({k.removeprefix("model."): v for k, v in saved["state_dict"].items()})
    model.save_pretrained(tmp_path / "step8")
    assets["tokenizer"].save_pretrained(tmp_path / "step8")
    at_8 = logged[logged["step"] == 8].iloc[0]
    difference = equals_analyse(tmp_path / "step8", {k: at_8[k] for k in logged.columns if k.startswith("lmsat/")},
                                assets["eval"], tmp_path)
    print(f"Lightning: largest relative difference against lmsat analyse {difference:.2e}")


def test_lightning_refuses_what_it_cannot_watch_before_training(assets, tmp_path):
    import lightning
    from lightning.pytorch.callbacks import ModelCheckpoint

    from lmsat.errors import MonitorError
    from lmsat.standalone.lightning_watch import LightningSaturationCallback

    options = dict(text=assets["eval"], tokenizer=assets["tokenizer"], n_tokens=640)
    with pytest.raises(MonitorError, match=r"model='lm': Module has no attribute 'lm'"):
        lightning_run(tmp_path / "a", assets["text"], assets["tokenizer"], [LightningSaturationCallback(model="lm", **options)])
    weights_only = ModelCheckpoint(dirpath=tmp_path / "b", every_n_train_steps=2, save_weights_only=True)
    with pytest.raises(MonitorError, match=r"save_weights_only=True\) saves without calling the callbacks' "
                                           r"on_save_checkpoint: it would never evaluate"):
        lightning.Trainer(max_steps=2, accelerator="cpu", logger=False, enable_progress_bar=False,
                          callbacks=[weights_only, LightningSaturationCallback(**options)]).fit(
            *lightning_parts(assets))
    assert not list((tmp_path / "b").glob("*.ckpt"))


def lightning_parts(assets):
    """A LightningModule holding two transformers models (which one to watch is the user's to
    say), and its data."""
    import lightning
    import torch
    from torch.utils.data import DataLoader

    class Two(lightning.LightningModule):
        def __init__(self):
            super().__init__()
            self.student, self.teacher = tiny_model(assets["tokenizer"]), tiny_model(assets["tokenizer"])

        def training_step(self, batch, batch_idx):
            return self.student(input_ids=batch, labels=batch).loss

        def configure_optimizers(self):
            return torch.optim.AdamW(self.student.parameters(), lr=3e-3)

    return Two(), DataLoader(Windows(assets["tokenizer"], assets["text"]).tokens, batch_size=4)


def test_lightning_names_the_models_a_module_holds_when_it_cannot_tell_which(assets, tmp_path):
    import lightning

    from lmsat.errors import MonitorError
    from lmsat.standalone.lightning_watch import LightningSaturationCallback

    callback = LightningSaturationCallback(text=assets["eval"], tokenizer=assets["tokenizer"], n_tokens=640)
    trainer = lightning.Trainer(max_steps=2, accelerator="cpu", logger=False, enable_progress_bar=False,
                                enable_checkpointing=False, default_root_dir=tmp_path, callbacks=[callback])
    with pytest.raises(MonitorError, match=r"Two holds 2 such child modules \(its children: student \(GPTNeoXForCausalLM\), "
                                           r"teacher \(GPTNeoXForCausalLM\)\)\. Fix: LightningSaturationCallback\(\.\.\., "
                                           r"model='attribute'\)"):
        trainer.fit(*lightning_parts(assets))
    assert trainer.global_step == 0
    watched = LightningSaturationCallback(text=assets["eval"], tokenizer=assets["tokenizer"], n_tokens=640,
                                          model="student", every_n_steps=2)
    lightning.Trainer(max_steps=2, accelerator="cpu", logger=False, enable_progress_bar=False, enable_checkpointing=False,
                      default_root_dir=tmp_path, callbacks=[watched]).fit(*lightning_parts(assets))
    assert sorted(watched.history) == [2] and (tmp_path / "lmsat" / "tables" / "loss.csv").is_file()



def test_lightning_ddp_on_two_processes_evaluates_on_rank_0_alone(assets, tmp_path):
    """A real two-process DDP run (Lightning's ddp_fork on the CPU, gloo): rank 0 evaluates
    each save, logs and writes the tables; rank 1 trains on and evaluates nothing."""
    import pandas as pd

    from lmsat.products.table_files import read_table
    from lmsat.standalone.lightning_watch import LightningSaturationCallback

    def mark(values, step):  # log=: a file per evaluation, named after the process that made it
        import torch.distributed as dist

        (tmp_path / f"evaluated-on-rank-{dist.get_rank()}-at-{step}").touch()

    callback = LightningSaturationCallback(text=assets["eval"], tokenizer=assets["base"] / "tokenizer", n_tokens=640,
                                           log=mark)
    lightning_run(tmp_path, assets["text"], assets["tokenizer"], [callback], steps=8, strategy="ddp_fork", devices=2)
    assert sorted(p.name for p in tmp_path.glob("evaluated-*")) == ["evaluated-on-rank-0-at-4", "evaluated-on-rank-0-at-8"]
    loss = read_table(tmp_path / "lmsat" / "tables" / "loss.csv")
    assert loss["revision"].tolist() == ["epoch-0-step-4.ckpt", "epoch-0-step-8.ckpt"]
    (metrics,) = (tmp_path / "logs").rglob("metrics.csv")
    assert pd.read_csv(metrics).dropna(subset=["lmsat/loss"])["step"].tolist() == [4, 8]
