"""Issue 51's acceptance: `lmsat init` and the whole workflow on a folder of OLMo-core steps
(a distributed checkpoint trainer) and of nanoGPT's per-eval files, beside the same weights
saved with save_pretrained: every table's numbers are those of the save_pretrained copies.

The copies are made here, from the weights as each trainer stores them, by this file's own
mapping to the transformers classes (not lmsat's readers): a reader that moved a tensor would
change the tables. Slow: one offline run of the workflow, 4 models x 2 checkpoints.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

import trainer_fixtures as fx
from test_own_run import init, snakemake, train_tokenizer, write_text

VOCAB_PAD = 4  # rows past the tokenizer's, as trainers pad the vocabulary


def olmo2_copy(weights: dict, vocab: int, folder):
    """Olmo2ForCausalLM of OLMo-core's olmo2 weights (its names: nn/hf/convert of OLMo-core), saved."""
    import transformers

    config = transformers.Olmo2Config(vocab_size=vocab, hidden_size=fx.D, intermediate_size=fx.HIDDEN,
                                      num_hidden_layers=fx.LAYERS, num_attention_heads=fx.HEADS, num_key_value_heads=fx.KV,
                                      max_position_embeddings=64, rms_norm_eps=1e-6, tie_word_embeddings=False,
                                      rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
                                      pad_token_id=None, bos_token_id=None, eos_token_id=None)
    names = {"model.embed_tokens.weight": "embeddings.weight", "model.norm.weight": "lm_head.norm.weight",
             "lm_head.weight": "lm_head.w_out.weight"}
    for i in range(fx.LAYERS):
        ours, theirs = f"model.layers.{i}.", f"blocks.{i}."
        names.update({ours + "self_attn.q_proj.weight": theirs + "attention.w_q.weight",
                      ours + "self_attn.k_proj.weight": theirs + "attention.w_k.weight",
                      ours + "self_attn.v_proj.weight": theirs + "attention.w_v.weight",
                      ours + "self_attn.o_proj.weight": theirs + "attention.w_out.weight",
                      ours + "self_attn.q_norm.weight": theirs + "attention.q_norm.weight",
                      ours + "self_attn.k_norm.weight": theirs + "attention.k_norm.weight",
                      ours + "post_attention_layernorm.weight": theirs + "attention_norm.weight",
                      ours + "post_feedforward_layernorm.weight": theirs + "feed_forward_norm.weight",
                      ours + "mlp.gate_proj.weight": theirs + "feed_forward.w1.weight",
                      ours + "mlp.up_proj.weight": theirs + "feed_forward.w3.weight",
                      ours + "mlp.down_proj.weight": theirs + "feed_forward.w2.weight"})
    model = transformers.Olmo2ForCausalLM(config)
    model.load_state_dict({k: weights[v].float() for k, v in names.items()}, strict=True)
    model.save_pretrained(folder)


def gpt2_copy(weights: dict, vocab: int, folder):
    """GPT2LMHeadModel of nanoGPT's weights (as nanoGPT's GPT.from_pretrained maps them, in reverse:
    Conv1D (in, out) is nn.Linear's (out, in) transposed)."""
    import transformers

    config = transformers.GPT2Config(vocab_size=vocab, n_positions=32, n_embd=fx.D, n_layer=fx.LAYERS, n_head=fx.HEADS,
                                     activation_function="gelu", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                     bos_token_id=None, eos_token_id=None)
    conv1d = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
    state = {k: (v.t() if k.endswith(conv1d) else v).float().contiguous() for k, v in weights.items()
             if not k.endswith(".attn.bias")}
    model = transformers.GPT2LMHeadModel(config)
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all(k.endswith(".attn.bias") or k == "lm_head.weight" for k in missing), missing
    model.save_pretrained(folder)


def with_vocab(weights: dict, rows: int, generator) -> dict:
    """The weights with embedding and head resized to `rows` (the tokenizer's vocabulary, padded)."""
    out = dict(weights)
    for key, value in weights.items():
        if value.dim() == 2 and value.shape[0] == fx.VOCAB and ("emb" in key or "wte" in key or "w_out" in key or "lm_head" in key):
            out[key] = torch.randn(rows, value.shape[1], generator=generator, dtype=torch.float64) / math.sqrt(value.shape[1])
    if "lm_head.weight" in out and "transformer.wte.weight" in out:
        out["lm_head.weight"] = out["transformer.wte.weight"]  # nanoGPT ties them
    return out


@pytest.mark.slow
def test_init_and_the_workflow_on_olmo_core_and_nanogpt_runs_give_the_tables_of_their_save_pretrained_copies(tmp_path):
    text = write_text(tmp_path / "train.txt", 300, seed=0)
    write_text(tmp_path / "eval.txt", 300, seed=1)
    tokenizer = train_tokenizer(text)
    tokenizer.save_pretrained(tmp_path / "tokenizer")
    rows = len(tokenizer) + VOCAB_PAD
    runs = tmp_path / "runs"
    generator = torch.Generator().manual_seed(0)
    for step in (2, 4):
        olmo = fx.olmo_core_weights(generator, True, rows)
        config = fx.olmo_core_config(True, vocab=rows)
        fx.write_olmo_core(runs / "olmo" / f"step{step}", {k: v.float() for k, v in olmo.items()}, config)
        olmo2_copy(olmo, rows, runs / "olmo-hf" / f"checkpoint-{step}")
        nanogpt = with_vocab(fx.nanogpt_weights(generator), rows, generator)
        (runs / "nanogpt").mkdir(parents=True, exist_ok=True)
        as_float = {k: v.float() for k, v in nanogpt.items()}
        as_float["lm_head.weight"] = as_float["transformer.wte.weight"]
        args = dict(fx.NANOGPT_ARGS, vocab_size=rows)
        for name, full in (("ckpt.pt", True), (f"ckpt_{step:07d}.pt", False)):  # train.py's file and the patch's
            checkpoint = {"model": {f"_orig_mod.{k}": v for k, v in as_float.items()}, "model_args": args, "iter_num": step}
            if full:
                checkpoint["optimizer"] = {"state": {}, "param_groups": []}
            torch.save(checkpoint, runs / "nanogpt" / name)
        gpt2_copy(nanogpt, rows, runs / "nanogpt-hf" / f"checkpoint-{step}")
    work = tmp_path / "work"
    work.mkdir()
    folders = [runs / name for name in ("olmo", "olmo-hf", "nanogpt", "nanogpt-hf")]
    done = init(*folders, "--text", tmp_path / "eval.txt", "--tokenizer", tmp_path / "tokenizer", "--tokens-per-step", 128,
                "--run", "trainers", "-o", work / "mine.yaml", cwd=work)
    assert done.returncode == 0, done.stderr
    models = {m["name"]: m for m in yaml.safe_load((work / "mine.yaml").read_text())["suites"]["trainers"]["models"]}
    assert models["olmo"]["revisions"] == {"discover": "step*"}
    assert models["nanogpt"]["revisions"] == {"discover": "ckpt_*.pt", "step_regex": r"ckpt_(\d+)\.pt$"}
    ran = snakemake(work, work / "mine.yaml")
    assert ran.returncode == 0, ran.stdout[-6000:]
    tables = work / "results" / "trainers" / "tables"
    loss = pd.read_csv(tables / "loss.csv", comment="#")
    assert sorted(loss.loc[loss["model"] == "olmo", "revision"]) == ["step2", "step4"]
    assert sorted(loss.loc[loss["model"] == "nanogpt", "revision"]) == ["ckpt_0000002.pt", "ckpt_0000004.pt"]
    compared = 0
    for path in sorted(tables.glob("*.csv")):
        table = pd.read_csv(path, comment="#")
        if "model" not in table.columns or "step" not in table.columns:
            continue
        for ours, theirs in (("olmo", "olmo-hf"), ("nanogpt", "nanogpt-hf")):
            names = [c for c in table.columns if c == "model" or "revision" in c]  # the checkpoints' names differ
            a, b = (table[table["model"] == m].drop(columns=names) for m in (ours, theirs))
            if a.empty:
                continue
            keys = [c for c in ("step", "layer", "head", "rank", "metric", "kind") if c in a.columns]
            a, b = a.sort_values(keys).reset_index(drop=True), b.sort_values(keys).reset_index(drop=True)
            assert len(a) == len(b), (path.name, ours)
            for column in a.columns:
                if column.endswith("sha256") and column.startswith("table"):
                    continue
                if pd.api.types.is_numeric_dtype(a[column]):
                    assert np.allclose(a[column], b[column], rtol=1e-6, atol=1e-9, equal_nan=True), (path.name, ours, column)
                else:
                    assert list(a[column].fillna("")) == list(b[column].fillna("")), (path.name, ours, column)
            compared += 1
    assert compared >= 6, compared
