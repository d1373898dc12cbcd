"""lmsat.standalone.callback: a real transformers.Trainer run of a tiny Llama (pad_token_id =
eos_token_id: a zero embedding row) watched by SaturationCallback, against the same run
without it (bit-identical weights, the same checkpoints) and against what `lmsat init` +
snakemake compute on its checkpoints (the same numbers); the values in the Trainer's log and
in TensorBoard's event files; bad input refused before training starts; a measure that
fails marked, never the end of training."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from test_analyse import analyse
from test_own_run import Windows, init, snakemake, train_tokenizer, write_text

slow = pytest.mark.slow
STEPS, SAVE = 24, 8  # checkpoint-8, -16, -24
TOL = dict(rtol=1e-6, atol=1e-7)  # the workflow's own reruns agree to this (test_own_run)


def trainer_of(out, text, tokenizer, callbacks=(), max_steps=STEPS, save_steps=SAVE, report_to="none", family="gpt_neox",
               **extra):
    """The Trainer of test_own_run.train (same seed, model and data), with `callbacks`. family
    "llama": a tiny Llama with pad_token_id = eos_token_id, a common recipe: transformers
    builds its embedding with padding_idx, so that row is zero and stays zero, and the eval
    sample joins its documents with that token (layer-0 states of zero there)."""
    import torch
    from transformers import (
        GPTNeoXConfig,
        GPTNeoXForCausalLM,
        LlamaConfig,
        LlamaForCausalLM,
        Trainer,
        TrainingArguments,
        default_data_collator,
    )

    torch.manual_seed(0)
    torch.set_num_threads(1)
    if family == "llama":
        model = LlamaForCausalLM(LlamaConfig(
            vocab_size=len(tokenizer) + 4, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
            intermediate_size=32, max_position_embeddings=64, tie_word_embeddings=False,
            pad_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.eos_token_id))
    else:
        model = GPTNeoXForCausalLM(GPTNeoXConfig(
            vocab_size=len(tokenizer) + 4, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
            max_position_embeddings=64, tie_word_embeddings=False, eos_token_id=tokenizer.eos_token_id,
            bos_token_id=tokenizer.eos_token_id))
    args = TrainingArguments(
        output_dir=str(out), max_steps=max_steps, save_steps=save_steps, per_device_train_batch_size=4,
        learning_rate=3e-3, warmup_steps=2, report_to=report_to, use_cpu=True, seed=0, dataloader_num_workers=0,
        disable_tqdm=True, save_strategy="steps", **{"logging_steps": 1000, **extra},
    )
    return Trainer(model=model, args=args, train_dataset=Windows(tokenizer, text),
                   processing_class=tokenizer, data_collator=default_data_collator, callbacks=list(callbacks))


def texts_and_tokenizer(base: Path, train_lines: int, eval_lines: int = 300):
    """(train text, eval text, a tokenizer trained on the first and saved in base/tokenizer)."""
    text = write_text(base / "train.txt", train_lines, seed=0)
    eval_text = write_text(base / "eval.txt", eval_lines, seed=1)
    tokenizer = train_tokenizer(text)
    tokenizer.save_pretrained(base / "tokenizer")
    return text, eval_text, tokenizer


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two 24-step runs of one seed of a tiny Llama with pad_token_id = eos_token_id, one
    watched (every default metric), one not. The eval text holds about 19k tokens (issue 44,
    item 3): too few for the paper's 50k-token sample, and the callback is given no size: it
    takes the sample `lmsat init` writes into the workflow's config. The sample joins its
    documents with the eos token, whose embedding row is zero (issue 49, item 1: anisotropy's
    ValueError on its zero vectors stopped trainer.train() at the first save)."""
    from lmsat.standalone.callback import SaturationCallback

    base = tmp_path_factory.mktemp("watched")
    text, eval_text, tokenizer = texts_and_tokenizer(base, train_lines=600, eval_lines=1530)
    plain = trainer_of(base / "plain" / "out", text, tokenizer, family="llama", logging_steps=1)
    plain.train()
    callback = SaturationCallback(text=eval_text)
    watched = trainer_of(base / "watched" / "out", text, tokenizer, [callback], report_to="tensorboard", family="llama",
                         logging_steps=1)
    watched.train()
    return dict(base=base, eval=eval_text, plain=plain, watched=watched, callback=callback)


def weights(folder):
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


@slow
def test_watching_changes_no_bit_of_training_and_saves_the_same_checkpoints(runs):
    plain, watched = runs["base"] / "plain" / "out", runs["base"] / "watched" / "out"
    names = sorted(p.name for p in plain.glob("checkpoint-*"))
    assert names == ["checkpoint-16", "checkpoint-24", "checkpoint-8"]
    assert sorted(p.name for p in watched.glob("checkpoint-*")) == names
    for name in names:
        assert sorted(p.name for p in (plain / name).iterdir()) == sorted(p.name for p in (watched / name).iterdir())
        a, b = weights(plain / name), weights(watched / name)
        assert a.keys() == b.keys() and all(a[k].dtype == b[k].dtype and bool((a[k] == b[k]).all()) for k in a)
    # the optimizer and scheduler states and the training losses too
    import torch

    for kind in ("optimizer.pt", "scheduler.pt"):
        x = torch.load(plain / "checkpoint-24" / kind, weights_only=True)
        y = torch.load(watched / "checkpoint-24" / kind, weights_only=True)
        assert str(x) == str(y) if kind == "scheduler.pt" else all(
            torch.equal(x["state"][i][k], y["state"][i][k]) for i in x["state"] for k in x["state"][i])
    assert runs["plain"].state.log_history[-1]["train_loss"] == runs["watched"].state.log_history[-1]["train_loss"]
    # every step's training loss, and every parameter of the trained model in memory
    losses = [[h["loss"] for h in run.state.log_history if "loss" in h] for run in (runs["plain"], runs["watched"])]
    assert len(losses[0]) == STEPS and losses[0] == losses[1]
    trained = dict(runs["watched"].model.named_parameters())
    assert all(torch.equal(p, trained[k]) for k, p in runs["plain"].model.named_parameters())


@slow
def test_a_zero_embedding_row_is_left_out_of_anisotropy_counted_and_training_goes_on(runs):
    """Issue 49, item 1: the Llama's eos row (padding_idx) is zero, so are the layer-0 states
    of the sample's eos tokens, and, at every layer, those of an eos that opens a sequence (it
    attends to itself alone, and a Llama block has no bias). Anisotropy leaves them out and
    counts them (zero_rows), the callback says so once, and every evaluation is measured
    (measure_failed empty)."""
    from lmsat.data.hidden_states import layer_sample_index
    from lmsat.products.table_files import read_table

    model, eos = runs["watched"].model, runs["watched"].processing_class.eos_token_id
    assert model.config.pad_token_id == eos and not model.get_input_embeddings().weight[eos].any()
    assert runs["watched"].state.global_step == STEPS
    tables = runs["base"] / "watched" / "out" / "lmsat" / "tables"
    layers, training = read_table(tables / "anisotropy_layers.csv"), read_table(tables / "anisotropy_training.csv")
    tokens = runs["callback"].sample.tokens  # (n_seq, seq_len)
    is_eos = (tokens == eos).ravel()
    opening = (np.cumprod(tokens == eos, axis=1) == 1).ravel()  # the eos tokens a sequence opens with
    sampled = layer_sample_index(tokens.size, 4096, 0)  # the layer subsample (extraction defaults)
    assert is_eos[sampled].sum() > opening[sampled].sum() > 0 and opening.sum() > 0
    for step in (8, 16, 24):
        at = layers[layers["step"] == step].sort_values("layer")
        expected = [int(is_eos[sampled].sum())] + [int(opening[sampled].sum())] * 2
        assert at["zero_rows"].tolist() == expected and (at["n_tokens"] + at["zero_rows"] == 4096).all()
    assert training["zero_rows"].tolist() == [int(opening.sum())] * 3
    assert (training["n_tokens"] + training["zero_rows"] == tokens.size).all()
    assert layers["anisotropy"].notna().all() and training["anisotropy_last"].notna().all()
    for path in sorted(tables.glob("*.csv")):
        if path.name != "saturation_verdicts.csv":
            assert read_table(path)["measure_failed"].isna().all(), path.name


@slow
def test_the_values_reach_the_trainer_s_log_and_tensorboard(runs):
    history = [h for h in runs["watched"].state.log_history if "lmsat/loss" in h]
    assert [h["step"] for h in history] == [8, 16, 24]
    for h in history:
        assert h["lmsat/loss"] > 0 and 0 < h["lmsat/loss_sem"] < 0.1 and -1 < h["lmsat/anisotropy_last"] <= 1
        assert 1 <= h["lmsat/effective_rank"] <= 16 and 1 <= h["lmsat/head_effective_rank"] <= 16
        assert "lmsat/head_singular_entropy" in h and "lmsat/saturates" in h and "lmsat/anisotropy_layer_2" in h
        # the gradient bottleneck, from the callback's own forward (a share of the logit gradient's energy)
        assert 0 < h["lmsat/gradient_energy_kept"] < 1 and 0 < h["lmsat/gradient_energy_kept_sem"] < 0.1
        assert h["lmsat/gradient_random_energy"] == 16 / (len(runs["watched"].processing_class) + 4)  # d / V rows
    assert "lmsat/rise" not in history[0] and "lmsat/rise" in history[-1]  # the verdict needs 3 evaluations
    loss = pd.read_csv(runs["base"] / "watched" / "out" / "lmsat" / "tables" / "loss.csv")
    assert np.allclose(loss["loss"], [h["lmsat/loss"] for h in history], rtol=1e-12)
    # TensorBoard's own reader on the event files the Trainer's TensorBoardCallback wrote
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    (events,) = {p.parent for p in (runs["base"] / "watched" / "out").rglob("events.out.tfevents.*")}
    reader = event_accumulator.EventAccumulator(str(events))
    reader.Reload()
    assert "train/lmsat/loss" in reader.Tags()["scalars"]  # the Trainer prefixes training logs with train/
    scalars = reader.Scalars("train/lmsat/loss")
    assert [s.step for s in scalars] == [8, 16, 24]
    assert np.allclose([s.value for s in scalars], [h["lmsat/loss"] for h in history], rtol=1e-6)


@slow
def test_the_rows_equal_the_workflow_s_on_the_saved_checkpoints(runs, tmp_path):
    from lmsat.products.table_files import read_table

    out, work = runs["base"] / "watched" / "out", tmp_path / "work"
    work.mkdir()
    done = init(out, "--text", runs["eval"], "-o", work / "mine.yaml", cwd=work)
    assert done.returncode == 0, done.stderr
    import yaml

    config = yaml.safe_load((work / "mine.yaml").read_text())
    # the text's tokens (the sample pool reads them all): about 19k, so half its 64-token windows
    text_tokens = runs["callback"].sample.attrs["pool_tokens"]
    assert 18_000 < text_tokens < 21_000
    assert config["sample"] == {"corpus": "text", "n_tokens": text_tokens // 64 // 2 * 64, "seq_len": 64}
    assert runs["callback"].sample.settings["sample"] == {**config["sample"], "pool_factor": 20}
    tables = ("loss", "anisotropy_training", "anisotropy_layers", "effective_rank", "singular_entropy", "spectra",
              "gradient_bottleneck")
    ran = snakemake(work, work / "mine.yaml", "--", *(f"results/out/tables/{t}.csv" for t in tables))
    assert ran.returncode == 0, ran.stdout[-6000:]
    mine = out / "lmsat"
    # the same sample: the very tokens the workflow's rule sample_eval_tokens drew
    from lmsat.data.corpus import read_sample

    (pipeline_sample,) = (work / "results" / "out" / "samples").rglob("*.h5")
    assert read_sample(pipeline_sample)[1]["sha256"] == read_sample(mine / "sample.h5")[1]["sha256"]
    for name in tables:
        theirs, ours = read_table(work / "results" / "out" / "tables" / f"{name}.csv"), read_table(mine / "tables" / f"{name}.csv")
        assert ours.pop("measure_failed").isna().all(), name  # the callback's own column: every measure done
        assert list(ours.columns) == list(theirs.columns), name  # same columns, provenance included
        assert len(ours) == len(theirs) > 0, name
        for column in ours.columns:
            if column.endswith(("sha256", "_version", "row_lmsat_source")):
                continue
            if pd.api.types.is_float_dtype(theirs[column]):
                assert np.allclose(ours[column], theirs[column], equal_nan=True, **TOL), (name, column)
            else:
                assert ours[column].tolist() == theirs[column].tolist(), (name, column)
    verdicts = read_table(mine / "tables" / "saturation_verdicts.csv")
    from dataclasses import fields

    from lmsat.saturation.verdict import Verdict

    assert list(verdicts.columns[: 1 + len(fields(Verdict))]) == ["model", *(f.name for f in fields(Verdict))]
    assert verdicts["checkpoints"].tolist() == [3] and verdicts["final_step"].tolist() == [24]
    # `lmsat analyse` on a checkpoint with the same text (no config, no size) reproduces the logged numbers
    analysed = analyse(out / "checkpoint-16", "--text", runs["eval"], "--metrics", "loss", "anisotropy", "--json",
                       cwd=tmp_path)
    assert analysed.returncode == 0, analysed.stderr
    assert f"eval sample of {config['sample']['n_tokens'] // 64} sequences of 64 tokens" in analysed.stderr
    report = json.loads(analysed.stdout)["metrics"]
    (logged,) = [h for h in runs["watched"].state.log_history if h.get("step") == 16 and "lmsat/loss" in h]
    assert np.isclose(report["loss"]["loss"], logged["lmsat/loss"], **TOL)
    assert np.isclose(report["anisotropy"]["anisotropy_last"], logged["lmsat/anisotropy_last"], **TOL)
    layer_0 = read_table(mine / "tables" / "anisotropy_layers.csv").query("layer == 0 and step == 16")
    assert report["anisotropy"]["zero_rows_layers"][0] == layer_0["zero_rows"].item() > 0  # the eos tokens' zero states
    assert np.isclose(report["anisotropy"]["anisotropy_layers"][0], layer_0["anisotropy"].item(), **TOL)


# ---------------------------------------------------------------- bad input, before training starts


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    base = tmp_path_factory.mktemp("assets")
    text, eval_text, tokenizer = texts_and_tokenizer(base, train_lines=300)
    other = base / "other.txt"  # another language: another tokenizer's merges
    rng = np.random.default_rng(2)
    other.write_text("\n".join(" ".join("".join(rng.choice(list("xqzvkjwy"), size=int(rng.integers(2, 7))))
                                        for _ in range(10)) for _ in range(300)) + "\n")
    train_tokenizer(other).save_pretrained(base / "other-tokenizer")
    return dict(base=base, text=text, eval=eval_text, tokenizer=tokenizer)


def sample_of(assets, tokenizer_dir, name, **sample):
    from lmsat.standalone.analyse import run_settings, text_sample

    settings = run_settings()
    settings["sample"].update(sample)
    text_sample([assets["eval"]], tokenizer_dir, assets["base"] / name, settings)
    return assets["base"] / name


def refused_before_training(trainer, match):
    from lmsat.errors import MonitorError

    with pytest.raises(MonitorError, match=match):
        trainer.train()
    assert trainer.state.global_step == 0 and not list(Path(trainer.args.output_dir).glob("checkpoint-*"))


def test_a_sample_of_another_tokenizer_is_refused_before_training(assets, tmp_path):
    from lmsat.standalone.callback import SaturationCallback
    from lmsat.standalone.monitor import load_sample, tokenizer_agreement

    own = sample_of(assets, assets["base"] / "tokenizer", "own.h5", n_tokens=640, seq_len=64)
    other = sample_of(assets, assets["base"] / "other-tokenizer", "other.h5", n_tokens=640, seq_len=64)
    assert tokenizer_agreement(assets["tokenizer"], load_sample(own).tokens) > 0.97
    assert tokenizer_agreement(assets["tokenizer"], load_sample(other).tokens) < 0.9
    trainer = trainer_of(tmp_path / "out", assets["text"], assets["tokenizer"], [SaturationCallback(sample=other)])
    refused_before_training(trainer, r"other\.h5 was tokenized with another tokenizer than the model's.*Fix: build the sample")
    # the run's own sample is taken
    watched = trainer_of(tmp_path / "ok", assets["text"], assets["tokenizer"], [SaturationCallback(sample=own)], max_steps=2,
                         save_steps=2)
    watched.train()
    assert [h["step"] for h in watched.state.log_history if "lmsat/loss" in h] == [2]


def test_a_sample_longer_than_the_context_is_refused_before_training(assets, tmp_path):
    from lmsat.standalone.callback import SaturationCallback

    long = sample_of(assets, assets["base"] / "tokenizer", "long.h5", n_tokens=1280, seq_len=128)
    trainer = trainer_of(tmp_path / "out", assets["text"], assets["tokenizer"], [SaturationCallback(sample=long)])
    refused_before_training(trainer, r"sequences of 128 tokens, past the model's context \(max_position_embeddings=64\).*Fix: seq_len=64")
    asked = trainer_of(tmp_path / "asked", assets["text"], assets["tokenizer"],
                       [SaturationCallback(text=assets["eval"], seq_len=65, n_tokens=640)])
    refused_before_training(asked, r"seq_len=65 exceeds the context .*max_position_embeddings=64.*Fix: seq_len=64 or less")


def test_a_family_the_adapters_do_not_know_is_refused_before_training(assets, tmp_path):
    import torch
    from transformers import BloomConfig, BloomForCausalLM, Trainer, TrainingArguments, default_data_collator

    from lmsat.standalone.callback import SaturationCallback

    torch.manual_seed(0)
    model = BloomForCausalLM(BloomConfig(vocab_size=len(assets["tokenizer"]), hidden_size=16, n_layer=1, n_head=2))
    args = TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=4, save_steps=2, report_to="none", use_cpu=True,
                             per_device_train_batch_size=4, disable_tqdm=True)
    trainer = Trainer(model=model, args=args, train_dataset=Windows(assets["tokenizer"], assets["text"]),
                      processing_class=assets["tokenizer"], data_collator=default_data_collator,
                      callbacks=[SaturationCallback(text=assets["eval"], n_tokens=640)])
    refused_before_training(
        trainer, r"cannot watch this model: model_type 'bloom' has no adapter in lmsat.checkpoints.adapters; supported: .*gpt_neox"
    )


def test_a_callback_without_a_sample_or_with_a_missing_file_is_refused_when_made(assets, tmp_path):
    from lmsat.errors import MonitorError
    from lmsat.standalone.callback import SaturationCallback

    with pytest.raises(MonitorError, match="needs one eval sample. Fix: pass text="):
        SaturationCallback()
    with pytest.raises(MonitorError, match=r"text=.*nothing\.txt: no such file"):
        SaturationCallback(text=tmp_path / "nothing.txt")
    with pytest.raises(MonitorError, match="not watched during training"):
        SaturationCallback(text=assets["eval"], metrics=["attention"])
    with pytest.raises(MonitorError, match="Fix: add 'loss' to metrics"):
        SaturationCallback(text=assets["eval"], metrics=["anisotropy"])


def test_monitor_leaves_the_model_and_every_rng_as_it_found_them(assets, tmp_path):
    import random

    import torch
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    import lmsat

    own = sample_of(assets, assets["base"] / "tokenizer", "own2.h5", n_tokens=640, seq_len=64)
    torch.manual_seed(0)
    model = GPTNeoXForCausalLM(GPTNeoXConfig(vocab_size=len(assets["tokenizer"]) + 4, hidden_size=16, num_hidden_layers=2,
                                             num_attention_heads=2, intermediate_size=32, max_position_embeddings=64,
                                             hidden_dropout=0.1)).train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    random.seed(1), np.random.seed(1), torch.manual_seed(1)
    states = random.getstate(), np.random.get_state()[1].copy(), torch.get_rng_state().clone()
    with torch.autocast("cpu", dtype=torch.bfloat16):  # a loop's mixed precision: the record is float32's
        record = lmsat.monitor(model, own, tokenizer_dir=assets["base"] / "tokenizer")
    assert model.training and all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())
    assert random.getstate() == states[0] and (np.random.get_state()[1] == states[1]).all()
    assert torch.equal(torch.get_rng_state(), states[2])
    again = lmsat.monitor(model.eval(), own, tokenizer_dir=assets["base"] / "tokenizer")
    assert record["loss"]["loss"] == again["loss"]["loss"] and record["sequence_losses"].shape == (10,)
    assert np.isclose(record["sequence_losses"].mean(), record["loss"]["loss"], rtol=1e-9)


def test_every_n_steps_evaluates_between_saves_and_a_resumed_run_keeps_the_earlier_evaluations(assets, tmp_path):
    from lmsat.products.table_files import read_table
    from lmsat.standalone.callback import SaturationCallback

    callback = SaturationCallback(text=assets["eval"], n_tokens=640, every_n_steps=2)
    trainer = trainer_of(tmp_path / "out", assets["text"], assets["tokenizer"], [callback], max_steps=4, save_steps=4)
    trainer.train()
    assert [h["step"] for h in trainer.state.log_history if "lmsat/loss" in h] == [2, 4]
    loss = read_table(tmp_path / "out" / "lmsat" / "tables" / "loss.csv")
    assert loss["revision"].tolist() == ["step-2", "checkpoint-4"] and loss["is_final"].tolist() == [False, True]
    # the run goes on from checkpoint-4: the verdict counts the earlier evaluations (3 in all at step 6)
    again = SaturationCallback(text=assets["eval"], n_tokens=640, every_n_steps=2)
    resumed = trainer_of(tmp_path / "out", assets["text"], assets["tokenizer"], [again], max_steps=6, save_steps=4)
    resumed.train(resume_from_checkpoint=True)
    assert sorted(again.history) == [2, 4, 6] and again.verdict.checkpoints == 3
    verdicts = read_table(tmp_path / "out" / "lmsat" / "tables" / "saturation_verdicts.csv")
    assert verdicts["final_step"].tolist() == [6] and verdicts["verdict"].iloc[0] in ("saturates", "no evidence")


def degrading(after: int, scale: float):
    """A TrainerCallback that, after `after` steps, adds noise to the LM head at every step
    (a fixed generator): the eval loss then rises, as a run that saturates does, for real."""
    import torch
    from transformers import TrainerCallback

    generator = torch.Generator().manual_seed(1)

    class Degrade(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **kwargs):
            if state.global_step > after:
                head = model.get_output_embeddings().weight
                with torch.no_grad():
                    head.add_(scale * torch.randn(head.shape, generator=generator))

    return Degrade()


@slow
def test_a_rising_loss_warns_once_and_stops_training_only_when_asked(assets, tmp_path):
    """A real run whose head is degraded after step 6: the verdict turns to `saturates`, the
    callback warns once and goes on; with stop_on_saturation=True, training stops there."""
    from lmsat.standalone.callback import SaturationCallback

    for stop in (False, True):
        callback = SaturationCallback(text=assets["eval"], n_tokens=640, every_n_steps=2, stop_on_saturation=stop)
        trainer = trainer_of(tmp_path / f"out-{stop}", assets["text"], assets["tokenizer"], [degrading(6, 0.3), callback],
                             max_steps=20, save_steps=20)
        with pytest.warns(UserWarning, match=r"saturates: at step \d+ .* above the best") as caught:
            trainer.train()
        warned = [w for w in caught if "saturates" in str(w.message)]
        assert len(warned) == 1, [str(w.message) for w in warned]
        saturated = [h["step"] for h in trainer.state.log_history if h.get("lmsat/saturates") == 1.0]
        assert saturated and callback.verdict.verdict == "saturates" and callback.verdict.best_step <= 8
        if stop:  # stopped at the first evaluation that said so
            assert trainer.state.global_step == saturated[0] < 20
            assert "stop_on_saturation=True" in str(warned[0].message) and "no further" in str(warned[0].message)
        else:  # warned once, trained to the end
            assert trainer.state.global_step == 20 and saturated[-1] == 20


def test_monitor_s_scratch_cache_in_memory_or_on_disk_gives_the_same_record(assets, tmp_path, monkeypatch):
    import torch
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    from lmsat.data.hidden_states import ExtractionSettings
    from lmsat.standalone import monitor as monitoring
    from lmsat.standalone.monitor import load_sample, monitor, scalars, scratch_dir

    own = sample_of(assets, assets["base"] / "tokenizer", "own3.h5", n_tokens=640, seq_len=64)
    torch.manual_seed(0)
    model = GPTNeoXForCausalLM(GPTNeoXConfig(vocab_size=len(assets["tokenizer"]) + 4, hidden_size=16, num_hidden_layers=2,
                                             num_attention_heads=2, intermediate_size=32, max_position_embeddings=64))
    settings = ExtractionSettings(layer_sample=64)
    memory = tmp_path / "memory"
    memory.mkdir()
    monkeypatch.setattr(monitoring, "MEMORY_DIR", str(memory))
    assert scratch_dir(model, load_sample(own).tokens.size, settings) == str(memory)
    in_memory = monitor(model, own, tokenizer_dir=assets["base"] / "tokenizer")
    monkeypatch.setattr(monitoring, "MEMORY_DIR", str(tmp_path / "absent"))  # no such folder: the system's temporary one
    assert scratch_dir(model, load_sample(own).tokens.size, settings) is None
    on_disk = monitor(model, own, tokenizer_dir=assets["base"] / "tokenizer")
    assert list(memory.iterdir()) == []  # the scratch cache is gone after the metrics are read
    assert scalars(in_memory) == pytest.approx(scalars(on_disk), rel=1e-12)
    assert np.allclose(in_memory["sequence_losses"], on_disk["sequence_losses"], rtol=1e-12)


# ---------------------------------------------------------------- issue 44 (items 3, 13) and 46 (cases 4, 12)


def test_a_text_too_short_for_the_asked_size_is_refused_before_training_naming_n_tokens(assets, tmp_path, capsys):
    """Issue 44, item 3: n_tokens=50000 on a ~3k-token eval text stopped train() with the
    sample builder's CorpusError naming `sample.n_tokens`; it is a MonitorError before the
    first step naming `n_tokens=` and the size the text gives. Left out, the size is the one
    `lmsat init` writes for that text and model, and the callback prints it."""
    from lmsat.commands.init import sample_size
    from lmsat.errors import MonitorError
    from lmsat.standalone.callback import SaturationCallback

    chosen = sample_size([assets["eval"]], assets["base"] / "tokenizer", ("max_position_embeddings", 64))
    assert chosen.seq_len == 64 and chosen.n_tokens == chosen.windows // 2 * 64 < 50_000
    trainer = trainer_of(tmp_path / "out", assets["text"], assets["tokenizer"],
                         [SaturationCallback(text=assets["eval"], n_tokens=50_000)])
    with pytest.raises(MonitorError) as refused:
        trainer.train()
    message = str(refused.value)
    assert f"{chosen.windows} windows of 64, fewer than the 782 sequences that n_tokens=50000 needs" in message
    assert f"Fix: n_tokens={chosen.n_tokens} or less" in message and "sample.n_tokens" not in message
    assert trainer.state.global_step == 0 and not list((tmp_path / "out").glob("checkpoint-*"))
    capsys.readouterr()
    watched = trainer_of(tmp_path / "ok", assets["text"], assets["tokenizer"], [SaturationCallback(text=assets["eval"])],
                         max_steps=2, save_steps=2)
    watched.train()
    printed = capsys.readouterr().err
    assert f"lmsat: ok: eval sample of {chosen.n_seq} sequences of 64 tokens ({chosen.n_tokens:,})" in printed
    assert "half the text's" in printed and "n_tokens=N and seq_len=L set another" in printed


def test_options_of_the_wrong_type_are_refused_when_made_and_a_file_in_the_way_before_training(assets, tmp_path):
    """Issue 46, case 12: every_n_steps='10' and n_tokens='640' failed with a TypeError, an
    `<output_dir>/lmsat` that is a file with FileExistsError; each is a named MonitorError,
    the types when the callback is made, the file before the first step."""
    from lmsat.errors import MonitorError
    from lmsat.standalone.callback import SaturationCallback

    for option, value, fix in (("every_n_steps", "10", "every_n_steps=10, a number, not a string"),
                               ("n_tokens", "640", "n_tokens=640, a number, not a string"),
                               ("seq_len", 64.0, "seq_len=64"), ("every_n_steps", True, "a whole number, e.g. every_n_steps=1"),
                               ("alpha", "0.05", "a number"), ("tables_interval", "300", "a number")):
        with pytest.raises(MonitorError, match=rf"^{option}={value!r} is a {type(value).__name__}, not a .*Fix: {fix}"):
            SaturationCallback(text=assets["eval"], **{option: value})
    with pytest.raises(MonitorError, match=r"stop_on_saturation='yes'. Fix: True or False"):
        SaturationCallback(text=assets["eval"], stop_on_saturation="yes")
    with pytest.raises(MonitorError, match=r"metrics='loss': a string, not a list of metrics. Fix: metrics=\['loss'\]"):
        SaturationCallback(text=assets["eval"], metrics="loss")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "lmsat").write_text("a file where the callback's folder goes\n")
    trainer = trainer_of(tmp_path / "out", assets["text"], assets["tokenizer"],
                         [SaturationCallback(text=assets["eval"], n_tokens=640)])
    refused_before_training(trainer, r"out/lmsat is a file, where SaturationCallback writes a folder of its files\. "
                                     r"Fix: move or delete that file")


class Dies:
    """A TrainerCallback whose run dies at the end of step `at` (a crash, a killed job)."""

    def __new__(cls, at: int):
        from transformers import TrainerCallback

        class DiesAt(TrainerCallback):
            def on_step_end(self, args, state, control, **kwargs):
                if state.global_step == at:
                    raise RuntimeError(f"the run dies at step {at}")

        return DiesAt()


def test_evaluations_past_the_resume_point_leave_every_table_and_the_verdict(assets, tmp_path):
    """Issue 46, case 4: a run evaluates at steps 2, 4 (checkpoint), 6, 8 (checkpoint) and 10,
    dies at 11 and resumes from checkpoint-4 with max_steps 8. The evaluations after step 4
    belong to the dead trajectory: they leave every table (loss.csv called step-10 final
    while the verdict said final step 8) and the verdict, kept under abandoned/."""
    from lmsat.products.table_files import read_table
    from lmsat.standalone.callback import SaturationCallback

    out, tables = tmp_path / "out", tmp_path / "out" / "lmsat" / "tables"
    first = SaturationCallback(text=assets["eval"], n_tokens=640, every_n_steps=2, tables_interval=0)
    dying = trainer_of(out, assets["text"], assets["tokenizer"], [first, Dies(11)], max_steps=12, save_steps=4)
    with pytest.raises(RuntimeError, match="dies at step 11"):
        dying.train()
    loss = read_table(tables / "loss.csv")
    assert loss["revision"].tolist()[-1] == "step-10" and loss["is_final"].tolist()[-1]  # the dead trajectory's tables

    again = SaturationCallback(text=assets["eval"], n_tokens=640, every_n_steps=2)
    resumed = trainer_of(out, assets["text"], assets["tokenizer"], [again], max_steps=8, save_steps=4)
    with pytest.warns(UserWarning, match=r"training starts at step 4, so the 3 evaluation\(s\) after it \(step-6, "
                                         r"checkpoint-8, step-10\) belong to an abandoned trajectory"):
        resumed.train(resume_from_checkpoint=str(out / "checkpoint-4"))
    loss = read_table(tables / "loss.csv")
    assert loss["revision"].tolist() == ["step-2", "checkpoint-4", "step-6", "checkpoint-8"]
    assert loss["is_final"].tolist() == [False, False, False, True]
    verdict = read_table(tables / "saturation_verdicts.csv")
    assert verdict["final_step"].tolist() == [8] and verdict["checkpoints"].tolist() == [4]
    for path in sorted(tables.glob("*.csv")):  # every table: the same steps, none of the dead trajectory's
        table = read_table(path)
        steps = set(table["step"]) if "step" in table.columns else set(table.get("final_step", []))
        assert max(steps, default=8) == 8 and "step-10" not in set(table.get("revision", [])), path.name
        assert len(table) or path.name == "identical_weights.csv", path.name  # no two evaluations share weights
    assert sorted(again.history) == [2, 4, 6, 8]
    # what the dead trajectory measured is kept, out of the tables
    kept = out / "lmsat" / "abandoned" / "after-step-4"
    assert sorted(p.name for p in (kept / "sequence_losses" / "out").iterdir()) == ["checkpoint-8.npz", "step-10.npz",
                                                                                     "step-6.npz"]
    assert (kept / "metrics" / "loss" / "out" / "step-10.json").is_file() and (kept / "spectra" / "out" / "step-10.h5").is_file()
    assert read_table(kept / "tables" / "loss.csv")["revision"].tolist()[-1] == "step-10"


def test_a_run_past_its_first_epoch_says_so_beside_the_verdict(assets, tmp_path, caplog):
    """Issue 44, item 13: a held-out loss that rises because the training data repeat reads
    `saturates` too; the verdict tests a rise, not its cause. Past epoch 1 the verdict table
    and the log say so; within it they do not."""
    import logging

    from lmsat.products.table_files import read_table
    from lmsat.standalone.callback import SaturationCallback

    short = write_text(tmp_path / "short.txt", 40, seed=3)  # about 12 windows: 3 steps an epoch
    callback = SaturationCallback(text=assets["eval"], n_tokens=640, every_n_steps=2)
    trainer = trainer_of(tmp_path / "out", short, assets["tokenizer"], [callback], max_steps=8, save_steps=4)
    with caplog.at_level(logging.INFO, logger="lmsat.standalone.callback"):
        trainer.train()
    assert trainer.state.epoch > 1
    verdict = read_table(tmp_path / "out" / "lmsat" / "tables" / "saturation_verdicts.csv")
    assert verdict["epoch"].iloc[0] == pytest.approx(trainer.state.epoch, rel=1e-9)
    note = verdict["note"].iloc[0]
    assert f"gone through {trainer.state.epoch:.3g} epochs of its training data (> 1)" in note
    assert "overfitting" in note and "not its cause" in note
    logged = [r.getMessage() for r in caplog.records if "verdict" in r.getMessage()]
    assert "(> 1)" not in logged[0] and "(> 1)" in logged[-1]  # step 2 is within the first epoch, step 8 is not
    # a run within its first epoch: no note
    within = SaturationCallback(text=assets["eval"], n_tokens=640, every_n_steps=2)
    trainer_of(tmp_path / "within", assets["text"], assets["tokenizer"], [within], max_steps=4, save_steps=4).train()
    verdict = read_table(tmp_path / "within" / "lmsat" / "tables" / "saturation_verdicts.csv")
    assert verdict["epoch"].iloc[0] < 1 and pd.isna(verdict["note"].iloc[0]) or verdict["note"].iloc[0] == ""


# ---------------------------------------------------------------- issue 49: the callback never stops training


def poisoning(at: int):
    """A TrainerCallback that writes NaN into the LM head at the end of step `at`, before that
    step's save: a run that diverges. Every measure of the callback fails there (the head's
    spectrum and gradient bottleneck on the head, the others on the forward's NaN loss), and at
    every later evaluation (the NaN reaches every weight)."""
    import torch
    from transformers import TrainerCallback

    class Poison(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **kwargs):
            if state.global_step == at:
                with torch.no_grad():
                    model.get_output_embeddings().weight[0, 0] = float("nan")

    return Poison()


def test_a_measure_that_fails_is_a_named_warning_and_a_marked_row_and_strict_stops_training(assets, tmp_path):
    """Issue 49, item 1: any failure of a measure inside the callback stopped trainer.train().
    It is a warning naming the measure and a row marked `measure_failed` in its tables;
    training goes on; the verdict is over the losses measured and its note names the others.
    strict=True stops training there. A measure that fails alone leaves the others' rows,
    and marks the rows of a table that needs it (anisotropy's, which hold the loss)."""
    from lmsat.products.table_files import read_table
    from lmsat.standalone.callback import SaturationCallback

    callback = SaturationCallback(text=assets["eval"], n_tokens=640, tables_interval=0)
    trainer = trainer_of(tmp_path / "out", assets["text"], assets["tokenizer"], [poisoning(4), callback], max_steps=6,
                         save_steps=2)
    with pytest.warns(UserWarning, match=r"out at step 4 \(checkpoint-4\): 5 measure\(s\) failed: spectra \(.*NaN/Inf.*\); "
                                         r"gradient_bottleneck \(.*; loss \(the forward into the hidden-state cache failed: "
                                         r"CacheError: the forward of out@checkpoint-4 gave non-finite loss.*\)\. Their rows in "
                                         r"the tables are marked \(column measure_failed\); training goes on"):
        trainer.train()
    assert trainer.state.global_step == 6 and (tmp_path / "out" / "checkpoint-6").is_dir()
    tables = tmp_path / "out" / "lmsat" / "tables"
    for name in ("loss", "anisotropy_layers", "anisotropy_training", "effective_rank", "singular_entropy",
                 "gradient_bottleneck"):
        table = read_table(tables / f"{name}.csv")
        assert list(dict.fromkeys(table["revision"])) == ["checkpoint-2", "checkpoint-4", "checkpoint-6"], name
        marked = table.drop_duplicates("revision")["measure_failed"]
        assert marked.isna().tolist() == [True, False, False] and "non-finite" in " ".join(marked.iloc[1:]) or \
            "NaN/Inf" in " ".join(marked.iloc[1:]), name
    loss = read_table(tables / "loss.csv")
    assert loss["loss"].isna().tolist() == [False, True, True]
    assert loss["is_final"].tolist() == [True, False, False]  # the last loss measured, the verdict's final
    verdict = read_table(tables / "saturation_verdicts.csv")
    assert verdict["checkpoints"].tolist() == [1] and verdict["final_step"].tolist() == [2]
    assert "the loss of 2 evaluation(s) could not be measured (checkpoint-4, checkpoint-6" in verdict["note"].iloc[0]
    logged = [h for h in trainer.state.log_history if "lmsat/measures_failed" in h]
    assert [h["lmsat/measures_failed"] for h in logged] == [0.0, 5.0, 5.0] and "lmsat/loss" not in logged[1]

    # the loss alone failing at checkpoint-2 (its record gone, a failure in its place): the other tables keep
    # their rows there, and anisotropy's, which hold the loss beside it, are marked
    from lmsat.standalone.callback_files import write_failures, write_tables

    lmsat_dir = tmp_path / "out" / "lmsat"
    (lmsat_dir / "metrics" / "loss" / "out" / "checkpoint-2.json").unlink()
    identity = dict(suite="out", model="out", revision="checkpoint-2", step=2, tokens=loss["tokens"].iloc[0])
    write_failures(lmsat_dir, identity, {"loss": "CacheError: a loss that failed alone"})
    built = write_tables(lmsat_dir, callback.metrics, "out", callback.config_sha256, tmp_path / "out")
    assert built["loss"]["measure_failed"].iloc[0] == "CacheError: a loss that failed alone"
    assert built["effective_rank"]["measure_failed"].iloc[0] == "" and built["effective_rank"]["effective_rank"].notna()[0]
    for name in ("anisotropy_training", "anisotropy_layers"):
        assert built[name]["measure_failed"].iloc[0] == "no loss here (CacheError: a loss that failed alone)", name
        assert len(built[name].query("revision == 'checkpoint-2'")) == 1, name  # one marked row, no layers

    strict = trainer_of(tmp_path / "strict", assets["text"], assets["tokenizer"],
                        [poisoning(4), SaturationCallback(text=assets["eval"], n_tokens=640, strict=True)], max_steps=6,
                        save_steps=2)
    with pytest.raises(ValueError, match="NaN/Inf"):
        strict.train()
    assert strict.state.global_step == 4 and not (tmp_path / "strict" / "checkpoint-6").exists()


def test_a_resume_with_another_sample_is_refused_before_training_naming_both(assets, tmp_path):
    """Issue 49, item 2: a run watched on 640 tokens, resumed (resume_from_checkpoint=True)
    with n_tokens=1280, drew both samples' losses as one curve, kept is_best on the old
    sample's checkpoint and overwrote sample.h5. It is refused when training starts, naming
    both samples and the fix; nothing is trained, moved or overwritten. The same sample
    resumes."""
    from lmsat.data.corpus import read_sample
    from lmsat.errors import MonitorError
    from lmsat.products.table_files import read_table
    from lmsat.standalone.callback import SaturationCallback

    out, lmsat_dir = tmp_path / "out", tmp_path / "out" / "lmsat"
    trainer_of(out, assets["text"], assets["tokenizer"], [SaturationCallback(text=assets["eval"], n_tokens=640)],
               max_steps=4, save_steps=2).train()
    old_sha = read_sample(lmsat_dir / "sample.h5")[1]["sha256"]
    before = {p.relative_to(out): p.read_bytes() for p in lmsat_dir.rglob("*") if p.is_file()}
    larger = trainer_of(out, assets["text"], assets["tokenizer"], [SaturationCallback(text=assets["eval"], n_tokens=1280)],
                        max_steps=6, save_steps=2)
    with pytest.raises(MonitorError) as refused:
        larger.train(resume_from_checkpoint=True)
    message = str(refused.value)
    assert "training starts at step 4 with another eval sample than the one its kept evaluations (checkpoint-2, " \
           "checkpoint-4) were measured on" in message
    assert f"sample.h5: 10 sequences of 64 tokens (640 tokens, n_tokens=640), sha256 {old_sha[:12]}" in message
    assert f"(text='{assets['eval']}', n_tokens=1280) is 20 sequences of 64 tokens (1,280 tokens" in message
    assert "one curve over two samples" in message and "Fix: resume with the recorded sample" in message
    assert larger.state.global_step == 4 and not (out / "checkpoint-6").exists()
    assert {p.relative_to(out): p.read_bytes() for p in lmsat_dir.rglob("*") if p.is_file()} == before
    # the recorded sample resumes, one curve on one sample
    same = SaturationCallback(text=assets["eval"], n_tokens=640)
    trainer_of(out, assets["text"], assets["tokenizer"], [same], max_steps=6, save_steps=2).train(resume_from_checkpoint=True)
    loss = read_table(lmsat_dir / "tables" / "loss.csv")
    assert loss["revision"].tolist() == ["checkpoint-2", "checkpoint-4", "checkpoint-6"] and sorted(same.history) == [2, 4, 6]
    assert read_sample(lmsat_dir / "sample.h5")[1]["sha256"] == old_sha
    # training afresh in that folder abandons every evaluation (after step 0), with the sample they were measured
    # on; the new sample is then the folder's
    with pytest.warns(UserWarning, match=r"the 3 evaluation\(s\) after it .* belong to an abandoned trajectory"):
        trainer_of(out, assets["text"], assets["tokenizer"], [SaturationCallback(text=assets["eval"], n_tokens=1280)],
                   max_steps=2, save_steps=2).train()
    assert read_sample(lmsat_dir / "abandoned" / "after-step-0" / "sample.h5")[1]["sha256"] == old_sha
    assert read_sample(lmsat_dir / "sample.h5")[0].size == 1280
    assert read_table(lmsat_dir / "tables" / "loss.csv")["revision"].tolist() == ["checkpoint-2"]


def test_on_disk_says_which_evaluations_still_have_their_checkpoint_folder(assets, tmp_path):
    """Issue 49, item 3: on_disk was true on every row of the callback's tables, also for
    checkpoints that save_total_limit rotated away and for evaluations between saves (no
    folder). It is the workflow's: whether <output_dir>/<revision> is there. Every metric the
    callback watches, its weight diagnostics too."""
    from lmsat.products.table_files import read_table
    from lmsat.standalone.callback import SaturationCallback
    from lmsat.standalone.monitor import WATCHABLE

    callback = SaturationCallback(text=assets["eval"], n_tokens=640, every_n_steps=3, metrics=WATCHABLE)
    trainer_of(tmp_path / "out", assets["text"], assets["tokenizer"], [callback], max_steps=6, save_steps=2,
               save_total_limit=1).train()
    assert sorted(p.name for p in (tmp_path / "out").glob("checkpoint-*")) == ["checkpoint-6"]
    tables = sorted((tmp_path / "out" / "lmsat" / "tables").glob("*.csv"))
    assert {"weight_alpha.csv", "loss.csv", "anisotropy_layers.csv"} <= {p.name for p in tables}
    for path in tables:
        table = read_table(path)
        if "on_disk" in table:
            assert set(table["revision"]) <= {"checkpoint-2", "step-3", "checkpoint-4", "checkpoint-6"}, path.name
            assert (table["on_disk"] == (table["revision"] == "checkpoint-6")).all(), path.name
    assert read_table(tmp_path / "out" / "lmsat" / "tables" / "loss.csv")["revision"].tolist() == [
        "checkpoint-2", "step-3", "checkpoint-4", "checkpoint-6"]


def test_a_name_that_is_no_folder_name_and_metrics_none_when_made(assets):
    """Issue 49, item 4: name='../../escape' (or 'a/b') was taken and failed inside training
    with an IdentityError blaming a copied file; it is refused when the callback is made,
    with a name that works. metrics=None was a bare TypeError; it means every metric, as
    `metrics: null` in a run's config."""
    from lmsat.errors import MonitorError
    from lmsat.standalone.callback import SaturationCallback
    from lmsat.standalone.monitor import WATCHABLE

    for name, fix in (("../../escape", "escape"), ("a/b", "a-b"), ("", "run"), (".hidden", "hidden")):
        with pytest.raises(MonitorError, match=rf"name={name!r} cannot be a folder name: .*Fix: name={fix!r}"):
            SaturationCallback(text=assets["eval"], name=name)
    assert SaturationCallback(text=assets["eval"], name="my-model.v2").name == "my-model.v2"
    assert SaturationCallback(text=assets["eval"], metrics=None).metrics == WATCHABLE
    with pytest.raises(MonitorError, match=r"metrics=5: a int, not a list of metrics"):
        SaturationCallback(text=assets["eval"], metrics=5)
    with pytest.raises(MonitorError, match=r"strict='yes'. Fix: True or False"):
        SaturationCallback(text=assets["eval"], strict="yes")


def test_a_missing_config_or_a_folder_without_a_tokenizer_is_refused_when_made(assets, tmp_path):
    """Issue 49, item 1 (the list of what is refused before training, complete): config= a
    missing file was a bare FileNotFoundError; tokenizer= a folder without a tokenizer failed
    when training started. Both are refused when the callback is made, naming the option."""
    from lmsat.errors import MonitorError
    from lmsat.standalone.callback import SaturationCallback

    with pytest.raises(MonitorError, match=r"config=.*nope\.yaml: no such file\. Fix: a run's config file"):
        SaturationCallback(text=assets["eval"], config=tmp_path / "nope.yaml")
    with pytest.raises(MonitorError, match=r"tokenizer=.*empty holds no tokenizer \(tokenizer\.json, .*Fix: the directory"):
        (tmp_path / "empty").mkdir()
        SaturationCallback(text=assets["eval"], tokenizer=tmp_path / "empty")
    assert SaturationCallback(text=assets["eval"], tokenizer=assets["base"] / "tokenizer").tokenizer == assets["base"] / "tokenizer"
