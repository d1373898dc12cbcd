"""Saved steps written as each trainer writes them, and float64 forwards from each trainer's formulas.

The frameworks are not lmsat's dependencies (benchmarks/trainer_formats.py runs them in
venvs of their own); the tests write tiny random checkpoints to the layouts their code
writes (read at: ai2-olmo-core 3.0.0, torchtitan 0.3.0, megatron-core 0.16.1, litgpt 0.5.13,
lightning 2.6.6, karpathy/nanoGPT 3adf61e1, karpathy/nanochat's gpt.py of 2025-12) and
compute each model's logits in float64 from that code's formulas, on the weights as the
trainer stores them (fused, stacked, interleaved): independent of lmsat's conversions.

    write_distributed(folder, {key: tensor or [(offsets, chunk), ...]})   # torch DCP's files
    weights, write = olmo_core_step(...); reference = olmo_core_logits(weights, ..., ids)
"""

from __future__ import annotations

import argparse
import enum
import json
import math
import pickle
import sys
import types
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

F64 = torch.float64
D, HEADS, KV, LAYERS, VOCAB, HIDDEN = 32, 4, 2, 2, 64, 48
HEAD = D // HEADS


def rand(*shape, generator, scale=None):
    """Random weights of the scale a trained model has (1/sqrt(fan_in) for matrices)."""
    scale = scale if scale is not None else (1 / math.sqrt(shape[-1]) if len(shape) > 1 else 1.0)
    return torch.randn(*shape, generator=generator, dtype=F64) * scale


def norm_weight(n, generator):
    return 1 + 0.3 * torch.randn(n, generator=generator, dtype=F64)


# ---------------------------------------------------------------- torch.distributed.checkpoint's files


@contextmanager
def fake_module(name: str, **members):
    """A module `name` holding `members` while pickling, so a pickle names the trainer's own class."""
    created = []
    parts = name.split(".")
    for i in range(1, len(parts) + 1):
        prefix = ".".join(parts[:i])
        if prefix not in sys.modules:
            sys.modules[prefix] = types.ModuleType(prefix)
            created.append(prefix)
    for key, value in members.items():
        value.__module__, value.__qualname__ = name, key
        setattr(sys.modules[name], key, value)
    try:
        yield sys.modules[name]
    finally:
        for prefix in created:
            del sys.modules[prefix]


@dataclass
class OlmoCoreStorageInfo:  # olmo_core.distributed.checkpoint.filesystem._StorageInfo's fields
    relative_path: str
    offset: int
    length: int


def write_distributed(folder: Path, entries: dict, ranks: int = 2, storage_info=None, byte_entries=()) -> None:
    """A distributed checkpoint as torch.distributed.checkpoint's FileSystemWriter writes one:
    each chunk a torch.save blob in rank r's `__r_0.distcp`, `.metadata` the pickled Metadata
    (shapes, dtypes, chunks, where each chunk's bytes are). `entries`: {key: tensor} (one
    chunk) or {key: [(offsets, chunk), ...]}; `storage_info`: the writer's record class
    (torch's, or OLMo-core's own); `byte_entries`: keys saved as pickled bytes (Megatron's
    `_extra_state`)."""
    from torch.distributed.checkpoint import filesystem
    from torch.distributed.checkpoint.metadata import (
        BytesStorageMetadata,
        ChunkStorageMetadata,
        Metadata,
        MetadataIndex,
        TensorProperties,
        TensorStorageMetadata,
    )

    storage_info = storage_info or filesystem._StorageInfo
    folder.mkdir(parents=True, exist_ok=True)
    handles = {r: open(folder / f"__{r}_0.distcp", "wb") for r in range(ranks)}
    tensors, storage, n = {}, {}, 0
    try:
        for key, value in entries.items():
            chunks = [((0,) * value.dim(), value)] if isinstance(value, torch.Tensor) else value
            shape = [max(o[d] + c.shape[d] for o, c in chunks) for d in range(chunks[0][1].dim())]
            described = []
            for index, (offsets, chunk) in enumerate(chunks):
                rank = n % ranks
                n += 1
                handle = handles[rank]
                start = handle.tell()
                torch.save(chunk.clone(), handle)
                storage[MetadataIndex(key, torch.Size(offsets), index)] = storage_info(
                    f"__{rank}_0.distcp", start, handle.tell() - start)
                described.append(ChunkStorageMetadata(offsets=torch.Size(offsets), sizes=chunk.shape))
            tensors[key] = TensorStorageMetadata(TensorProperties(dtype=chunks[0][1].dtype), torch.Size(shape), described)
        for key in byte_entries:
            handle = handles[0]
            start = handle.tell()
            handle.write(pickle.dumps(None))
            storage[MetadataIndex(key)] = storage_info("__0_0.distcp", start, handle.tell() - start)
            tensors[key] = BytesStorageMetadata()
    finally:
        for handle in handles.values():
            handle.close()
    with open(folder / ".metadata", "wb") as handle:
        pickle.dump(Metadata(state_dict_metadata=tensors, storage_data=storage, planner_data={}), handle)


# ---------------------------------------------------------------- the maths the trainers share


def rms(x, weight=None, eps=1e-6):
    x = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return x if weight is None else x * weight


def layer_norm(x, weight, bias, eps=1e-5):
    return torch.nn.functional.layer_norm(x, x.shape[-1:], weight, bias, eps)


def frequencies(dim, theta, llama3=None):
    """RoPE's inverse frequencies theta^(-2i/dim); Llama 3's scaling (torchtitan's rope.py) when given."""
    freqs = 1.0 / theta ** (torch.arange(0, dim, 2, dtype=F64) / dim)
    if llama3:
        factor, low, high, original = llama3
        wavelength = 2 * math.pi / freqs
        smooth = (original / wavelength - low) / (high - low)
        scaled = torch.where(wavelength > original / low, freqs / factor, freqs)
        middle = (wavelength <= original / low) & (wavelength >= original / high)
        freqs = torch.where(middle, (1 - smooth) * freqs / factor + smooth * freqs, scaled)
    return freqs


def rope(x, freqs, pairs="half", sign=1.0):
    """Rotate x (B, H, T, dim) by position x freq: pairs (i, i + dim/2) ("half") or (2i, 2i+1)
    ("adjacent"); sign -1 rotates by -angle (nanochat)."""
    T, dim = x.shape[2], x.shape[3]
    angle = torch.arange(T, dtype=F64)[:, None] * freqs[None]  # (T, dim/2)
    cos, sin = angle.cos(), sign * angle.sin()
    if pairs == "half":
        a, b = x[..., : dim // 2], x[..., dim // 2:]
        return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack([a * cos - b * sin, b * cos + a * sin], dim=-1).flatten(-2)


def attention(q, k, v):
    """Causal softmax attention; q (B, H, T, hd), k and v (B, KV, T, hd), query head h reads kv head h // (H / KV)."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    T = q.shape[2]
    scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    return scores.softmax(-1) @ v


def heads(x, n):
    """(B, T, n hd) -> (B, n, T, hd)."""
    B, T, _ = x.shape
    return x.view(B, T, n, -1).transpose(1, 2)


def merge(x):
    B, H, T, hd = x.shape
    return x.transpose(1, 2).reshape(B, T, H * hd)


# ---------------------------------------------------------------- OLMo-core


def olmo_core_weights(generator, olmo2: bool = True, vocab: int = VOCAB) -> dict:
    """OLMo-core's TransformerConfig.build() state dict (olmo2_30M's blocks if olmo2, llama2_271M's else)."""
    w = {"embeddings.weight": rand(vocab, D, generator=generator, scale=1.0),
         "lm_head.norm.weight": norm_weight(D, generator), "lm_head.w_out.weight": rand(vocab, D, generator=generator)}
    for i in range(LAYERS):
        b = f"blocks.{i}."
        w.update({b + "attention.w_q.weight": rand(D, D, generator=generator),
                  b + "attention.w_k.weight": rand(KV * HEAD, D, generator=generator),
                  b + "attention.w_v.weight": rand(KV * HEAD, D, generator=generator),
                  b + "attention.w_out.weight": rand(D, D, generator=generator),
                  b + "attention_norm.weight": norm_weight(D, generator),
                  b + "feed_forward.w1.weight": rand(HIDDEN, D, generator=generator),
                  b + "feed_forward.w2.weight": rand(D, HIDDEN, generator=generator),
                  b + "feed_forward.w3.weight": rand(HIDDEN, D, generator=generator),
                  b + "feed_forward_norm.weight": norm_weight(D, generator)})
        if olmo2:
            w.update({b + "attention.q_norm.weight": norm_weight(D, generator),
                      b + "attention.k_norm.weight": norm_weight(KV * HEAD, generator)})
    return w


def olmo_core_config(olmo2: bool = True, vocab: int = VOCAB, eps: float = 1e-6, theta: float = 500000) -> dict:
    """The 'model' section OLMo-core's ConfigSaverCallback writes (TransformerConfig.as_config_dict())."""
    norm = {"name": "rms", "eps": eps, "bias": False, "dtype": "float32", "_CLASS_": "olmo_core.nn.layer_norm.LayerNormConfig"}
    attention = {"name": "default", "n_heads": HEADS, "n_kv_heads": KV, "bias": False,
                 "rope": {"name": "default", "theta": theta, "full_precision": True, "no_global_rope": False,
                          "partial_rotary_factor": 1.0, "_CLASS_": "olmo_core.nn.rope.RoPEConfig"},
                 "dtype": "float32", "scalable_softmax": False, "attention_sinks": False,
                 "_CLASS_": "olmo_core.nn.attention.AttentionConfig", "type": "attention"}
    if olmo2:
        attention.update(qk_norm=dict(norm), use_head_qk_norm=False)
    return {"d_model": D, "vocab_size": vocab, "n_layers": LAYERS,
            "block": {"sequence_mixer": attention, "layer_norm": dict(norm),
                      "feed_forward": {"hidden_size": HIDDEN, "name": "default", "bias": False, "dtype": "float32",
                                       "activation": "silu", "_CLASS_": "olmo_core.nn.feed_forward.FeedForwardConfig"},
                      "name": "reordered_norm" if olmo2 else "default",
                      "_CLASS_": "olmo_core.nn.transformer.config.TransformerBlockConfig"},
            "lm_head": {"name": "default", "layer_norm": dict(norm), "bias": False, "dtype": "float32",
                        "loss_implementation": "default", "_CLASS_": "olmo_core.nn.lm_head.LMHeadConfig"},
            "name": "default", "dtype": "float32", "init_method": "normal", "init_seed": 0, "init_std": 0.02,
            "tie_word_embeddings": False, "_CLASS_": "olmo_core.nn.transformer.config.TransformerConfig"}


def write_olmo_core(step_dir: Path, weights: dict, config: dict | None) -> None:
    """stepN/ as OLMo-core's Checkpointer writes it: model_and_optim/ (its own writer's
    _StorageInfo), the model's keys under model., the optimizer's under optim.; config.json
    (ConfigSaverCallback); train/rank0.pt; .metadata.json."""
    entries = {f"model.{k}": v for k, v in weights.items()}
    for k, v in weights.items():  # AdamW's moments: twice the model, never to be read
        entries[f"optim.state.{k}.exp_avg"] = torch.zeros_like(v)
        entries[f"optim.state.{k}.exp_avg_sq"] = torch.zeros_like(v)
        entries[f"optim.state.{k}.step"] = torch.tensor(4.0)
    with fake_module("olmo_core.distributed.checkpoint.filesystem", _StorageInfo=OlmoCoreStorageInfo):
        write_distributed(step_dir / "model_and_optim", entries, storage_info=OlmoCoreStorageInfo)
    if config is not None:
        (step_dir / "config.json").write_text(json.dumps({"model": config, "train_module": {"max_sequence_length": 64}}))
    (step_dir / "train").mkdir(exist_ok=True)
    torch.save({"global_step": int(step_dir.name.removeprefix("step"))}, step_dir / "train" / "rank0.pt")
    (step_dir / ".metadata.json").write_text(json.dumps({"ephemeral": False, "version": "3.0.0"}))


def olmo_core_logits(w: dict, ids, olmo2: bool = True, eps: float = 1e-6, theta: float = 500000):
    """OLMo-core's Transformer forward (nn/transformer/block.py: TransformerBlock and
    ReorderedNormTransformerBlock; nn/attention: q/k norm over the whole projection, then RoPE)."""
    h = w["embeddings.weight"][ids]
    freqs = frequencies(HEAD, theta)
    for i in range(LAYERS):
        b = f"blocks.{i}."

        def attend(x):
            q, k, v = (x @ w[b + f"attention.w_{n}.weight"].T for n in "qkv")
            if olmo2:
                q, k = rms(q, w[b + "attention.q_norm.weight"], eps), rms(k, w[b + "attention.k_norm.weight"], eps)
            q, k, v = rope(heads(q, HEADS), freqs), rope(heads(k, KV), freqs), heads(v, KV)
            return merge(attention(q, k, v)) @ w[b + "attention.w_out.weight"].T

        def mlp(x):
            silu = torch.nn.functional.silu(x @ w[b + "feed_forward.w1.weight"].T)
            return (silu * (x @ w[b + "feed_forward.w3.weight"].T)) @ w[b + "feed_forward.w2.weight"].T

        if olmo2:  # reordered_norm: h + norm(f(h))
            h = h + rms(attend(h), w[b + "attention_norm.weight"], eps)
            h = h + rms(mlp(h), w[b + "feed_forward_norm.weight"], eps)
        else:
            h = h + attend(rms(h, w[b + "attention_norm.weight"], eps))
            h = h + mlp(rms(h, w[b + "feed_forward_norm.weight"], eps))
    return rms(h, w["lm_head.norm.weight"], eps) @ w["lm_head.w_out.weight"].T


# ---------------------------------------------------------------- torchtitan

LLAMA3_SCALING = (8.0, 1.0, 4.0, 32)  # factor, low_freq_factor, high_freq_factor, original context (small: it matters)


def torchtitan_weights(generator, vocab: int = VOCAB) -> dict:
    """torchtitan's Llama 3 state dict (its flattened model keys)."""
    w = {"tok_embeddings.weight": rand(vocab, D, generator=generator, scale=1.0), "norm.weight": norm_weight(D, generator),
         "lm_head.weight": rand(vocab, D, generator=generator)}
    for i in range(LAYERS):
        b = f"layers.{i}."
        w.update({b + "attention.qkv_linear.wq.weight": rand(D, D, generator=generator),
                  b + "attention.qkv_linear.wk.weight": rand(KV * HEAD, D, generator=generator),
                  b + "attention.qkv_linear.wv.weight": rand(KV * HEAD, D, generator=generator),
                  b + "attention.wo.weight": rand(D, D, generator=generator),
                  b + "attention_norm.weight": norm_weight(D, generator),
                  b + "feed_forward.w1.weight": rand(HIDDEN, D, generator=generator),
                  b + "feed_forward.w2.weight": rand(D, HIDDEN, generator=generator),
                  b + "feed_forward.w3.weight": rand(HIDDEN, D, generator=generator),
                  b + "ffn_norm.weight": norm_weight(D, generator)})
    return w


def _titan_linear(i, o):
    return {"param_init": {"weight": "functools.partial(<function trunc_normal_>, std=0.02)"}, "sharding_config": None,
            "in_features": i, "out_features": o, "bias": False}


def _titan_norm(eps):
    return {"param_init": {"weight": "<function ones_>"}, "sharding_config": None, "normalized_shape": D, "eps": eps,
            "elementwise_affine": True}


def torchtitan_job_config(name: str = "llama3", eps: float = 1e-5, theta: float = 500000, vocab: int = VOCAB) -> dict:
    """What torchtitan 0.3.0's --debug.save_config_file writes (Trainer.Config.to_dict()), its model part."""
    factor, low, high, original = LLAMA3_SCALING
    layer = {"param_init": None, "sharding_config": None,
             "attention": {"param_init": None, "sharding_config": None, "n_heads": HEADS,
                           "inner_attention": {"param_init": None, "sharding_config": None, "block_size": 128,
                                               "kernel_options": {}},
                           "dim": D, "qkv_linear": {"param_init": None, "sharding_config": None, "head_dim": HEAD,
                                                    "n_heads": HEADS, "n_kv_heads": KV,
                                                    "wqkv": _titan_linear(D, D + 2 * KV * HEAD)},
                           "wo": _titan_linear(D, D), "qk_norm": None, "n_kv_heads": None, "head_dim": None,
                           "rope": {"param_init": None, "sharding_config": None, "dim": HEAD, "max_seq_len": 131072,
                                    "theta": theta, "scaling": "llama", "scaling_factor": factor, "low_freq_factor": low,
                                    "high_freq_factor": high, "original_max_position_embeddings": original,
                                    "rope_factor": 1.0, "beta_fast": 32.0, "beta_slow": 1.0, "original_seq_len": 4096,
                                    "truncate": True}},
             "feed_forward": {"param_init": None, "sharding_config": None, "w1": _titan_linear(D, HIDDEN),
                              "w2": _titan_linear(HIDDEN, D), "w3": _titan_linear(D, HIDDEN)},
             "moe": None, "attention_norm": _titan_norm(eps), "ffn_norm": _titan_norm(eps)}
    model = {"param_init": None, "sharding_config": None, "dim": D, "vocab_size": vocab,
             "lm_head": _titan_linear(D, vocab), "tok_embeddings": {"param_init": None, "sharding_config": None,
                                                                   "num_embeddings": vocab, "embedding_dim": D},
             "norm": _titan_norm(eps), "layers": [json.loads(json.dumps(layer)) for _ in range(LAYERS)],
             "enable_weight_tying": False}
    return {"model_spec": {"name": name, "flavor": "tiny", "model": model}, "dump_folder": "./outputs",
            "checkpoint": {"enable": True, "folder": "checkpoint", "interval": 2}}


def write_torchtitan(dump: Path, step: int, weights: dict, job_config: dict | None) -> Path:
    """<dump>/checkpoint/step-N as torchtitan's CheckpointManager writes it (model keys flattened
    beside optimizer.*, lr_scheduler.*, train_state.*), and the job config JSON in <dump>."""
    entries = dict(weights)
    for k, v in weights.items():
        entries[f"optimizer.state.{k}.exp_avg"] = torch.zeros_like(v)
    entries["train_state.step"] = torch.tensor(step)
    step_dir = dump / "checkpoint" / f"step-{step}"
    write_distributed(step_dir, entries, ranks=1)
    if job_config is not None:
        (dump / "job_config.json").write_text(json.dumps(job_config))
    return step_dir


def torchtitan_logits(w: dict, ids, eps: float = 1e-5, theta: float = 500000):
    """torchtitan's Llama 3 (models/llama3, models/common: ComplexRoPE rotates adjacent pairs,
    Llama 3 frequency scaling; pre-norm blocks; SwiGLU w2(silu(w1 x) * w3 x))."""
    h = w["tok_embeddings.weight"][ids]
    freqs = frequencies(HEAD, theta, LLAMA3_SCALING)
    for i in range(LAYERS):
        b = f"layers.{i}."
        x = rms(h, w[b + "attention_norm.weight"], eps)
        q, k, v = (x @ w[b + f"attention.qkv_linear.w{n}.weight"].T for n in "qkv")
        q, k = rope(heads(q, HEADS), freqs, "adjacent"), rope(heads(k, KV), freqs, "adjacent")
        h = h + merge(attention(q, k, heads(v, KV))) @ w[b + "attention.wo.weight"].T
        x = rms(h, w[b + "ffn_norm.weight"], eps)
        silu = torch.nn.functional.silu(x @ w[b + "feed_forward.w1.weight"].T)
        h = h + (silu * (x @ w[b + "feed_forward.w3.weight"].T)) @ w[b + "feed_forward.w2.weight"].T
    return rms(h, w["norm.weight"], eps) @ w["lm_head.weight"].T


# ---------------------------------------------------------------- Megatron (torch_dist)


def megatron_weights(generator) -> dict:
    """Megatron's GPT (local spec, RMSNorm, SwiGLU, RoPE, GQA) as its torch_dist sharded state
    dict stores it: layers stacked on a first axis; linear_qkv per query group [q of its heads; k; v]."""
    group_rows = (HEADS // KV + 2) * HEAD
    return {"embedding.word_embeddings.weight": rand(VOCAB, D, generator=generator, scale=1.0),
            "decoder.layers.self_attention.linear_qkv.weight": rand(LAYERS, KV * group_rows, D, generator=generator),
            "decoder.layers.self_attention.linear_qkv.layer_norm_weight": norm_weight(LAYERS * D, generator).view(LAYERS, D),
            "decoder.layers.self_attention.linear_proj.weight": rand(LAYERS, D, D, generator=generator),
            "decoder.layers.mlp.linear_fc1.weight": rand(LAYERS, 2 * HIDDEN, D, generator=generator),
            "decoder.layers.mlp.linear_fc1.layer_norm_weight": norm_weight(LAYERS * D, generator).view(LAYERS, D),
            "decoder.layers.mlp.linear_fc2.weight": rand(LAYERS, D, HIDDEN, generator=generator),
            "decoder.final_layernorm.weight": norm_weight(D, generator),
            "output_layer.weight": rand(VOCAB, D, generator=generator)}


class AttnBackend(enum.Enum):  # megatron.core.transformer.enums.AttnBackend (its saved args hold one)
    flash = 1
    fused = 2
    unfused = 3
    local = 4
    auto = 5


def megatron_args(**overrides) -> argparse.Namespace:
    """Megatron-LM's args (megatron/training/arguments.py names) of the model megatron_weights stores."""
    args = dict(num_layers=LAYERS, hidden_size=D, num_attention_heads=HEADS, group_query_attention=True,
                num_query_groups=KV, ffn_hidden_size=HIDDEN, kv_channels=HEAD, normalization="RMSNorm", norm_epsilon=1e-5,
                swiglu=True, position_embedding_type="rope", rotary_base=10000, rotary_percent=1.0,
                rotary_interleaved=False, use_rope_scaling=False, add_bias_linear=False, add_qkv_bias=False,
                qk_layernorm=False, untie_embeddings_and_output_weights=True, padded_vocab_size=VOCAB,
                max_position_embeddings=64, seq_length=32, apply_residual_connection_post_layernorm=False,
                num_experts=None, multi_latent_attention=False, window_size=None, params_dtype=torch.float32,
                lr=3e-4, micro_batch_size=4, ckpt_format="torch_dist", attention_backend=AttnBackend.auto)
    args.update(overrides)
    return argparse.Namespace(**args)


def write_megatron(step_dir: Path, weights: dict, args: argparse.Namespace | None) -> None:
    """iter_NNNNNNN/ as megatron.core.dist_checkpointing.save (torch_dist) writes it: stacked
    layers in one chunk per layer (and per half of SwiGLU's fc1, as Megatron shards it),
    `_extra_state` bytes, common.pt ({args, iteration, checkpoint_version}), metadata.json."""
    entries = {}
    for key, value in weights.items():
        if not key.startswith("decoder.layers."):
            entries[key] = value
        elif key.endswith("linear_fc1.weight"):
            half = value.shape[1] // 2
            entries[key] = [((i, j * half, 0), value[i : i + 1, j * half : (j + 1) * half]) for i in range(LAYERS)
                            for j in range(2)]
        else:
            entries[key] = [((i,) + (0,) * (value.dim() - 1), value[i : i + 1]) for i in range(LAYERS)]
    extra = [f"decoder.layers.{n}._extra_state/shard_{i}_{LAYERS}" for n in ("self_attention.linear_qkv", "mlp.linear_fc1")
             for i in range(LAYERS)]
    write_distributed(step_dir, entries, byte_entries=extra)
    state = {"iteration": int(step_dir.name.removeprefix("iter_")), "checkpoint_version": 3.0}
    if args is not None:
        state["args"] = args
    with fake_module("megatron.core.transformer.enums", AttnBackend=AttnBackend):
        torch.save(state, step_dir / "common.pt")
    (step_dir / "metadata.json").write_text(json.dumps({"sharded_backend": "torch_dist", "sharded_backend_version": 1,
                                                        "common_backend": "torch", "common_backend_version": 1}))


def megatron_logits(w: dict, ids, eps: float = 1e-5, theta: float = 10000):
    """Megatron's GPTModel forward (TransformerLayer: input_layernorm, SelfAttention with its
    fused per-group qkv, rotate-half RoPE; pre_mlp_layernorm, MLP with glu: act(x[0]) * x[1])."""
    group = HEADS // KV
    h = w["embedding.word_embeddings.weight"][ids]
    freqs = frequencies(HEAD, theta)
    B, T = ids.shape
    for i in range(LAYERS):
        x = rms(h, w["decoder.layers.self_attention.linear_qkv.layer_norm_weight"][i], eps)
        mixed = (x @ w["decoder.layers.self_attention.linear_qkv.weight"][i].T).view(B, T, KV, (group + 2) * HEAD)
        q, k, v = mixed.split([group * HEAD, HEAD, HEAD], dim=-1)  # per query group
        q = q.reshape(B, T, HEADS, HEAD).transpose(1, 2)
        k, v = k.transpose(1, 2), v.transpose(1, 2)
        out = attention(rope(q, freqs), rope(k, freqs), v)
        h = h + merge(out) @ w["decoder.layers.self_attention.linear_proj.weight"][i].T
        x = rms(h, w["decoder.layers.mlp.linear_fc1.layer_norm_weight"][i], eps)
        gate, up = (x @ w["decoder.layers.mlp.linear_fc1.weight"][i].T).chunk(2, dim=-1)
        h = h + (torch.nn.functional.silu(gate) * up) @ w["decoder.layers.mlp.linear_fc2.weight"][i].T
    return rms(h, w["decoder.final_layernorm.weight"], eps) @ w["output_layer.weight"].T


# ---------------------------------------------------------------- nanoGPT

NANOGPT_ARGS = dict(n_layer=LAYERS, n_head=HEADS, n_embd=D, block_size=32, bias=True, vocab_size=VOCAB, dropout=0.0)


def nanogpt_weights(generator, bias: bool = True) -> dict:
    """nanoGPT's GPT.state_dict() (model.py): nn.Linear (out, in); lm_head tied to wte (one tensor)."""
    w = {"transformer.wte.weight": rand(VOCAB, D, generator=generator, scale=0.5),
         "transformer.wpe.weight": rand(32, D, generator=generator, scale=0.2),
         "transformer.ln_f.weight": norm_weight(D, generator)}
    for i in range(LAYERS):
        b = f"transformer.h.{i}."
        w.update({b + "ln_1.weight": norm_weight(D, generator), b + "ln_2.weight": norm_weight(D, generator),
                  b + "attn.c_attn.weight": rand(3 * D, D, generator=generator),
                  b + "attn.c_proj.weight": rand(D, D, generator=generator),
                  b + "mlp.c_fc.weight": rand(4 * D, D, generator=generator),
                  b + "mlp.c_proj.weight": rand(D, 4 * D, generator=generator),
                  b + "attn.bias": torch.ones(32, 32, dtype=F64).tril().view(1, 1, 32, 32)})  # the slow path's mask
        if bias:
            w.update({b + n + ".bias": 0.1 * torch.randn(w[b + n + ".weight"].shape[0], generator=generator, dtype=F64)
                      for n in ("ln_1", "ln_2", "attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")})
    if bias:
        w["transformer.ln_f.bias"] = 0.1 * torch.randn(D, generator=generator, dtype=F64)
    w["lm_head.weight"] = w["transformer.wte.weight"]
    return w


def write_nanogpt(path: Path, weights: dict, iter_num: int, bias: bool = True, full: bool = True) -> None:
    """What nanoGPT's train.py saves (torch.compile on: every key `_orig_mod.`): ckpt.pt's dict,
    or (full=False) the per-eval file of docs/trainers.md's patch (model, model_args, iter_num)."""
    checkpoint = {"model": {f"_orig_mod.{k}": v for k, v in weights.items()}, "model_args": dict(NANOGPT_ARGS, bias=bias),
                  "iter_num": iter_num}
    if full:
        checkpoint.update(optimizer={"state": {0: {"step": torch.tensor(4.0), "exp_avg": torch.zeros(VOCAB, D)}},
                                     "param_groups": [{"lr": 6e-4, "weight_decay": 0.1, "params": [0]}]},
                          best_val_loss=torch.tensor(3.2), config={"out_dir": "out", "batch_size": 4, "compile": True})
    torch.save(checkpoint, path)


def nanogpt_logits(w: dict, ids, bias: bool = True):
    """nanoGPT's GPT.forward with targets (model.py: LayerNorm eps 1e-5, exact GELU, lm_head tied)."""
    def linear(x, name):
        out = x @ w[name + ".weight"].T
        return out + w[name + ".bias"] if bias else out

    def ln(x, name):
        return layer_norm(x, w[name + ".weight"], w[name + ".bias"] if bias else None)

    T = ids.shape[1]
    h = w["transformer.wte.weight"][ids] + w["transformer.wpe.weight"][:T]
    for i in range(LAYERS):
        b = f"transformer.h.{i}."
        q, k, v = linear(ln(h, b + "ln_1"), b + "attn.c_attn").split(D, dim=2)
        h = h + linear(merge(attention(heads(q, HEADS), heads(k, HEADS), heads(v, HEADS))), b + "attn.c_proj")
        h = h + linear(torch.nn.functional.gelu(linear(ln(h, b + "ln_2"), b + "mlp.c_fc")), b + "mlp.c_proj")
    return ln(h, "transformer.ln_f") @ w["lm_head.weight"].T


# ---------------------------------------------------------------- nanochat

NANOCHAT_CONFIG = dict(sequence_len=64, vocab_size=60, n_layer=LAYERS, n_head=HEADS, n_kv_head=KV, n_embd=D)
NANOCHAT_ROWS = 64  # vocab 60 padded to a multiple of 64, as nanochat's GPT pads it


def nanochat_weights(generator) -> dict:
    """nanochat's GPT.state_dict() (gpt.py of 2025-12: wte, per block c_q/c_k/c_v/c_proj and
    mlp.c_fc/c_proj, untied lm_head; no norm weights; vocab rows padded)."""
    w = {"transformer.wte.weight": rand(NANOCHAT_ROWS, D, generator=generator, scale=1.0),
         "lm_head.weight": rand(NANOCHAT_ROWS, D, generator=generator)}
    for i in range(LAYERS):
        b = f"transformer.h.{i}."
        w.update({b + "attn.c_q.weight": rand(D, D, generator=generator),
                  b + "attn.c_k.weight": rand(KV * HEAD, D, generator=generator),
                  b + "attn.c_v.weight": rand(KV * HEAD, D, generator=generator),
                  b + "attn.c_proj.weight": rand(D, D, generator=generator),
                  b + "mlp.c_fc.weight": rand(4 * D, D, generator=generator),
                  b + "mlp.c_proj.weight": rand(D, 4 * D, generator=generator)})
    return w


def write_nanochat(folder: Path, step: int, weights: dict) -> Path:
    """checkpoint_manager.save_checkpoint's files: model_{step:06d}.pt, meta_{step:06d}.json, optim_{step:06d}_rank0.pt."""
    folder.mkdir(parents=True, exist_ok=True)
    torch.save({f"_orig_mod.{k}": v for k, v in weights.items()}, folder / f"model_{step:06d}.pt")
    (folder / f"meta_{step:06d}.json").write_text(json.dumps({"step": step, "val_bpb": 1.5, "model_config": NANOCHAT_CONFIG,
                                                              "user_config": {"depth": LAYERS}}))
    torch.save([{"state": {}}], folder / f"optim_{step:06d}_rank0.pt")
    return folder / f"model_{step:06d}.pt"


def nanochat_logits(w: dict, ids, eps: float = torch.finfo(torch.float32).eps):
    """nanochat's GPT.forward of 2025-12 (gpt.py: norm = F.rms_norm without weight, on the
    embedding, before each block's attention and MLP, at the end; RoPE base 10000 rotating by
    -angle; QK norm after RoPE; relu^2; logits cropped to vocab_size, 15 tanh(logits / 15))."""
    freqs = frequencies(HEAD, 10000.0)
    h = rms(w["transformer.wte.weight"][ids], eps=eps)
    for i in range(LAYERS):
        b = f"transformer.h.{i}."
        x = rms(h, eps=eps)
        q, k, v = (x @ w[b + f"attn.c_{n}.weight"].T for n in "qkv")
        q, k = rope(heads(q, HEADS), freqs, sign=-1.0), rope(heads(k, KV), freqs, sign=-1.0)
        q, k = rms(q, eps=eps), rms(k, eps=eps)
        h = h + merge(attention(q, k, heads(v, KV))) @ w[b + "attn.c_proj.weight"].T
        x = rms(h, eps=eps)
        h = h + torch.relu(x @ w[b + "mlp.c_fc.weight"].T).square() @ w[b + "mlp.c_proj.weight"].T
    logits = (rms(h, eps=eps) @ w["lm_head.weight"].T)[..., : NANOCHAT_CONFIG["vocab_size"]]
    return 15 * torch.tanh(logits / 15)


# ---------------------------------------------------------------- litgpt


def litgpt_config(family: str) -> dict:
    """model_config.yaml as litgpt's save_config writes it (asdict(Config)): a Pythia-like or a Llama-like config."""
    config = dict(attention_logit_softcapping=None, attention_scores_scalar=None, attn_bias=False, block_size=64,
                  final_logit_softcapping=None, first_k_dense_replace=None, head_size=HEAD, hf_config={},
                  latent_attention=None, lm_head_bias=False, moe_intermediate_size=None, n_embd=D, n_expert=0,
                  n_expert_groups=None, n_expert_per_token=0, n_head=HEADS, n_layer=LAYERS, n_shared_expert=None,
                  n_topk_groups=None, n_topk_scores_per_group=None, name=f"tiny-{family}", norm_1=True, norm_2=True,
                  norm_eps=1e-5, norm_qk=False, norm_qk_type="default", norm_topk_prob=False, padded_vocab_size=VOCAB,
                  padding_multiple=64, post_attention_norm=False, post_mlp_norm=False, rope_adjustments=None,
                  rope_base=10000, rope_condense_ratio=1, rope_indices=None, rope_interleave=False,
                  rope_local_base_freq=None, routed_scaling_factor=1.0, scale_embeddings=False,
                  shared_attention_norm=False, sliding_window_indices=None, sliding_window_size=None, vocab_size=60)
    if family == "pythia":
        config.update(bias=True, gelu_approximate="none", intermediate_size=4 * D, mlp_class_name="GptNeoxMLP",
                      n_query_groups=HEADS, norm_class_name="LayerNorm", parallel_residual=True, rotary_percentage=0.25)
    else:
        config.update(bias=False, gelu_approximate="none", intermediate_size=HIDDEN, mlp_class_name="LLaMAMLP",
                      n_query_groups=KV, norm_class_name="RMSNorm", parallel_residual=False, rotary_percentage=1.0)
    return config


def litgpt_weights(generator, family: str) -> dict:
    """litgpt's GPT state dict (model.py: attn.qkv = [q of every head; k; v])."""
    pythia = family == "pythia"
    kv = HEADS if pythia else KV
    hidden = 4 * D if pythia else HIDDEN
    w = {"transformer.wte.weight": rand(VOCAB, D, generator=generator, scale=1.0),
         "transformer.ln_f.weight": norm_weight(D, generator), "lm_head.weight": rand(VOCAB, D, generator=generator)}
    for i in range(LAYERS):
        b = f"transformer.h.{i}."
        w.update({b + "norm_1.weight": norm_weight(D, generator), b + "norm_2.weight": norm_weight(D, generator),
                  b + "attn.qkv.weight": rand((HEADS + 2 * kv) * HEAD, D, generator=generator),
                  b + "attn.proj.weight": rand(D, D, generator=generator)})
        if pythia:
            w.update({b + "mlp.fc.weight": rand(hidden, D, generator=generator),
                      b + "mlp.proj.weight": rand(D, hidden, generator=generator)})
        else:
            w.update({b + "mlp.fc_1.weight": rand(hidden, D, generator=generator),
                      b + "mlp.fc_2.weight": rand(hidden, D, generator=generator),
                      b + "mlp.proj.weight": rand(D, hidden, generator=generator)})
    if pythia:
        w.update({k.removesuffix("weight") + "bias": 0.1 * torch.randn(v.shape[0], generator=generator, dtype=F64)
                  for k, v in list(w.items()) if k.startswith("transformer.") and "wte" not in k})
    return w


def write_litgpt(step_dir: Path, weights: dict, family: str, config: bool = True) -> None:
    """out_dir/step-{N:08d}/ as litgpt pretrain's save_checkpoint writes it: lit_model.pth
    (fabric.save of {model, optimizer, iter_num, step_count}), model_config.yaml, hyperparameters.yaml."""
    import yaml

    step_dir.mkdir(parents=True, exist_ok=True)
    torch.save({"model": weights, "optimizer": {"state": {}, "param_groups": []}, "iter_num": 4, "step_count": 4},
               step_dir / "lit_model.pth")
    if config:
        (step_dir / "model_config.yaml").write_text(yaml.dump(litgpt_config(family)))
    (step_dir / "hyperparameters.yaml").write_text(yaml.dump({"model_name": f"tiny-{family}"}))


def litgpt_logits(w: dict, ids, family: str):
    """litgpt's GPT.forward (model.py: Block with parallel_residual; CausalSelfAttention splitting
    qkv into [q; k; v]; rotate-half RoPE on the first rotary_percentage of each head)."""
    pythia = family == "pythia"
    kv = HEADS if pythia else KV
    n_rope = HEAD // 4 if pythia else HEAD
    freqs = frequencies(n_rope, 10000.0)

    def norm(x, name):
        if pythia:
            return layer_norm(x, w[name + ".weight"], w[name + ".bias"])
        return rms(x, w[name + ".weight"], 1e-5)

    def linear(x, name):
        out = x @ w[name + ".weight"].T
        return out + w[name + ".bias"] if pythia else out

    h = w["transformer.wte.weight"][ids]
    for i in range(LAYERS):
        b = f"transformer.h.{i}."
        q, k, v = linear(norm(h, b + "norm_1"), b + "attn.qkv").split([HEADS * HEAD, kv * HEAD, kv * HEAD], dim=-1)
        q, k, v = heads(q, HEADS), heads(k, kv), heads(v, kv)
        q = torch.cat([rope(q[..., :n_rope], freqs), q[..., n_rope:]], dim=-1)
        k = torch.cat([rope(k[..., :n_rope], freqs), k[..., n_rope:]], dim=-1)
        attended = linear(merge(attention(q, k, v)), b + "attn.proj")
        if pythia:  # parallel residual: x + attn(norm_1(x)) + mlp(norm_2(x))
            mlp = linear(torch.nn.functional.gelu(linear(norm(h, b + "norm_2"), b + "mlp.fc")), b + "mlp.proj")
            h = h + attended + mlp
        else:
            h = h + attended
            x = norm(h, b + "norm_2")
            h = h + linear(torch.nn.functional.silu(linear(x, b + "mlp.fc_1")) * linear(x, b + "mlp.fc_2"), b + "mlp.proj")
    return norm(h, "transformer.ln_f") @ w["lm_head.weight"].T


# ---------------------------------------------------------------- Lightning


def lightning_module_and_file(path: Path, generator, step: int = 4):
    """A LightningModule holding a transformers GPT-2 as `self.model`, its `.ckpt` as Lightning
    2.6's Trainer.save_checkpoint writes it (state_dict with the module's prefix, global_step,
    loops, callbacks, optimizer_states, hyper_parameters), and its config.json beside
    (model.config.save_pretrained). -> the GPT-2 (the reference)."""
    import transformers

    config = transformers.GPT2Config(n_embd=D, n_layer=LAYERS, n_head=HEADS, vocab_size=VOCAB, n_positions=64,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(int(torch.randint(0, 2**31, (1,), generator=generator)))
    model = transformers.GPT2LMHeadModel(config).to(F64).eval()
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"epoch": 0, "global_step": step, "pytorch-lightning_version": "2.6.6",
                "state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
                "loops": {"fit_loop": {"state_dict": {}, "epoch_progress": {"total": {"ready": 1}}}},
                "callbacks": {"ModelCheckpoint{'monitor': None}": {"best_model_path": str(path)}},
                "optimizer_states": [{"state": {}, "param_groups": [{"lr": 3e-3, "params": [0]}]}], "lr_schedulers": [],
                "hparams_name": "kwargs", "hyper_parameters": {"config": {"n_embd": D}}}, path)
    config.save_pretrained(path.parent.parent)
    return model
