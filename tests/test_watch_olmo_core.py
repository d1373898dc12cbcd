"""lmsat.standalone.olmo_core_watch: a real OLMo-core Trainer run of a tiny OLMo 2 (OLMo-core's
own model, data loader, train module and checkpointer, saving asynchronously as it does by
default) watched by OLMoCoreSaturationCallback, against the same run without it (every
parameter and every step's loss bit-identical) and against `lmsat analyse` on the weights the
checkpointer saved at that step (read back by OLMo-core and written by its own converter).

OLMo-core is not a dependency of lmsat (ai2-olmo-core 3.0 asks for filelock < 4, the lock has 4):
this file runs in a venv of its own, envs/olmo-core.txt on top of .venv's packages, which
.ci/run builds (LMSAT_OLMO_CORE=1 makes it required there; elsewhere it is skipped without
OLMo-core):

    python3 -m venv /tmp/olmo-core
    echo "$PWD/.venv/lib/python3.11/site-packages" > /tmp/olmo-core/lib/python3.11/site-packages/lmsat-venv.pth
    /tmp/olmo-core/bin/pip install --no-deps -r envs/olmo-core.txt
    LMSAT_OLMO_CORE=1 /tmp/olmo-core/bin/python -m pytest tests/test_watch_olmo_core.py
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

if os.environ.get("LMSAT_OLMO_CORE") != "1":
    pytest.importorskip("olmo_core", reason="OLMo-core's venv (see this file's docstring) runs these tests")

from test_analyse import analyse
from test_callbacks import texts_and_tokenizer

TOL = dict(rtol=1e-6, atol=1e-7)  # the workflow's own reruns agree to this (test_own_run)
VOCAB, SEQ, STEPS, SAVE = 384, 32, 8, 4


@pytest.fixture(scope="module")
def olmo(tmp_path_factory):
    """The tokenizer, texts and token file; a one-process gloo group (OLMo-core's
    checkpointing and bookkeeping run on it), destroyed after."""
    import torch.distributed as dist

    base = tmp_path_factory.mktemp("olmo_core")
    text, eval_text, tokenizer = texts_and_tokenizer(base, train_lines=300)
    ids = [i for line in text.read_text().splitlines() for i in tokenizer(line)["input_ids"] + [tokenizer.eos_token_id]]
    np.asarray(ids, dtype=np.uint16).tofile(base / "tokens.npy")
    dist.init_process_group("gloo", init_method=f"file://{base / 'rendezvous'}", rank=0, world_size=1)
    yield dict(base=base, eval=eval_text, tokenizer=tokenizer)
    dist.destroy_process_group()


def model_config():
    from olmo_core.nn.transformer import TransformerConfig

    config = TransformerConfig.olmo2_30M(vocab_size=VOCAB)  # OLMo 2's blocks (norms after attention and MLP, q/k norm)
    config.d_model, config.n_layers = 32, 2
    config.block.sequence_mixer.n_heads = 4
    config.block.feed_forward.hidden_size = 64
    config.block.dropout = 0.1  # training draws from torch's RNG: a watch that drew from it too would change the run
    return config


def olmo_run(folder: Path, assets: dict, callbacks: dict):
    """OLMo-core's Trainer on the tiny OLMo 2, STEPS steps of 4 x SEQ tokens, a checkpoint every
    SAVE steps (and the checkpointer's own at step 0), saved as OLMo-core saves by default
    (asynchronously). -> (trainer, every step's metrics as the trainer passed them on)."""
    import torch
    from olmo_core.data import NumpyDataLoaderConfig, NumpyFSLDatasetConfig, TokenizerConfig
    from olmo_core.optim import AdamWConfig
    from olmo_core.train import Duration, TrainerConfig
    from olmo_core.train.callbacks import Callback, CheckpointerCallback
    from olmo_core.train.train_module import TransformerTrainModuleConfig
    from olmo_core.utils import seed_all

    class Metrics(Callback):
        def __init__(self):
            self.seen = {}

        def log_metrics(self, step, metrics):
            self.seen.setdefault(step, {}).update(metrics)

    torch.set_num_threads(1)
    eos = assets["tokenizer"].eos_token_id
    dataset = NumpyFSLDatasetConfig(paths=[str(assets["base"] / "tokens.npy")], sequence_length=SEQ,
                                    tokenizer=TokenizerConfig(vocab_size=VOCAB, eos_token_id=eos, pad_token_id=eos),
                                    work_dir=str(folder / "work")).build()
    seed_all(0)
    module = TransformerTrainModuleConfig(rank_microbatch_size=4 * SEQ, max_sequence_length=SEQ,
                                          optim=AdamWConfig(lr=3e-3)).build(model_config().build(init_device="cpu"))
    loader = NumpyDataLoaderConfig(global_batch_size=4 * SEQ, seed=0, num_workers=0).build(
        dataset, dp_process_group=module.dp_process_group)
    metrics = Metrics()
    config = TrainerConfig(save_folder=str(folder / "run"), save_overwrite=True, max_duration=Duration.steps(STEPS),
                           metrics_collect_interval=1, cancel_check_interval=1, work_dir=str(folder / "work"))
    config = config.with_callback("checkpointer", CheckpointerCallback(save_interval=SAVE, ephemeral_save_interval=None))
    for name, callback in {**callbacks, "metrics": metrics}.items():
        config = config.with_callback(name, callback)
    trainer = config.build(module, loader)
    trainer.fit()
    return trainer, trainer.callbacks["metrics"].seen


def test_olmo_core_is_watched_at_each_save_without_a_bit_of_change_and_gives_analyse_s_numbers(olmo, tmp_path):
    import torch
    from olmo_core.distributed.checkpoint import load_model_and_optim_state
    from olmo_core.nn.hf import save_hf_model

    from lmsat.products.table_files import read_table
    from lmsat.standalone.monitor import DEFAULT_METRICS, scalars
    from lmsat.standalone.olmo_core_watch import OLMoCoreSaturationCallback

    plain, plain_metrics = olmo_run(tmp_path / "plain", olmo, {})
    logged = {}  # log=: each evaluation's values in full precision (the trainer's metrics are float32)
    callback = OLMoCoreSaturationCallback(text=olmo["eval"], tokenizer=olmo["tokenizer"], n_tokens=640, every_n_steps=2,
                                          tables_interval=0, log=lambda values, step: logged.setdefault(step, values))
    trainer, metrics = olmo_run(tmp_path / "out", olmo, {"lmsat": callback})
    assert trainer.callbacks["checkpointer"].save_async  # OLMo-core's default, kept
    # every step's training loss and every parameter, bit for bit
    losses = [[metrics_at[s]["train/CE loss"] for s in range(1, STEPS + 1)] for metrics_at in (plain_metrics, metrics)]
    assert losses[0] == losses[1] and all(np.isfinite(losses[0]))
    trained = dict(trainer.train_module.model.named_parameters())
    assert all(torch.equal(p, trained[k]) for k, p in plain.train_module.model.named_parameters())
    # each save (step0, the checkpointer's before training) under its folder's name, every 2 steps between
    out = tmp_path / "out" / "run" / "lmsat"
    loss = read_table(out / "tables" / "loss.csv")
    assert loss["revision"].tolist() == ["step0", "step-2", "step4", "step-6", "step8"]
    assert loss["on_disk"].tolist() == [True, False, True, False, True] and loss["measure_failed"].isna().all()
    assert loss["tokens"].tolist() == [s * 4 * SEQ for s in (0, 2, 4, 6, 8)]
    # the values reach the trainer's metrics (record_metric: float32), at their steps
    assert [s for s in sorted(metrics) if "lmsat/loss" in metrics[s]] == [0, 2, 4, 6, 8]
    assert np.allclose([metrics[s]["lmsat/loss"] for s in (0, 2, 4, 6, 8)], loss["loss"], rtol=1e-6)
    # the converted model computes OLMo-core's own forward (float32)
    watched = trainer.callbacks["lmsat"]
    tokens = torch.randint(0, VOCAB, (2, SEQ), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        theirs = trainer.train_module.model.eval()(tokens)
        ours = watched.transformers_model()(input_ids=tokens).logits
    logits_difference = float((ours - theirs).abs().max())
    print(f"OLMo-core: largest logit difference, transformers copy vs OLMo-core's forward: {logits_difference:.2e}")
    assert logits_difference < 1e-4
    # lmsat analyse on the step-4 checkpoint: read back by OLMo-core, written by its own converter
    fresh = model_config().build(init_device="cpu")
    load_model_and_optim_state(str(tmp_path / "out" / "run" / "step4" / "model_and_optim"), fresh)
    save_hf_model(tmp_path / "step4", fresh.state_dict(), fresh)
    config_file = tmp_path / "step4" / "config.json"
    config_file.write_text(json.dumps({**json.loads(config_file.read_text()), "max_position_embeddings": SEQ}))
    olmo["tokenizer"].save_pretrained(tmp_path / "step4")
    done = analyse(tmp_path / "step4", "--text", olmo["eval"], "--n-tokens", 640, "--metrics", *DEFAULT_METRICS,
                   "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    theirs = scalars(json.loads(done.stdout)["metrics"])
    ours = {k: v for k, v in logged[4].items() if k in theirs}
    assert set(ours) == set(theirs) and len(ours) == 18
    for key, value in theirs.items():
        assert np.isclose(ours[key], value, **TOL), (key, ours[key], value)
    difference = max(abs(ours[k] - v) / max(abs(v), 1e-12) for k, v in theirs.items())
    print(f"OLMo-core: largest relative difference against lmsat analyse {difference:.2e}")
    shutil.rmtree(tmp_path / "plain")

