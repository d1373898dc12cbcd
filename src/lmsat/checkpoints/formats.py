"""Checkpoint formats transformers has no class for, converted at load time to one that computes the same thing.

Two suites publish checkpoints that `AutoModelForCausalLM` cannot load as they are:

    model_type     written by                                        loaded as
    hf_olmo        ai2-olmo's hf_olmo wrapper (OLMo 1, DataDecide)   OlmoForCausalLM (non-parametric LayerNorm:
                                                                     OLMo 1) or LlamaForCausalLM (RMSNorm with
                                                                     weights: DataDecide)
    pico_decoder   pico-train's PicoDecoderHF (custom code: Pico)    LlamaForCausalLM, q/k rows permuted per head

Other trainers' saved steps (OLMo-core, torchtitan, Megatron, nanoGPT, nanochat, litgpt,
Lightning: lmsat.checkpoints.trainer_layouts, docs/trainers.md) are converted the same way,
their architecture read from the run's own file instead of a config.json.

`from_pretrained(target, **kwargs)` is `AutoModelForCausalLM.from_pretrained(target, **kwargs)`
for every checkpoint: a native one goes straight there; a converted one has its config.json
checked field by field (`check_config`: every field that changes the maths is mapped or
refused by name), its safetensors tensors checked against the names and shapes that config
implies, renamed and reshaped into the native class's state dict (`Conversion.convert`), and
loaded by transformers' own `from_pretrained(None, config=..., state_dict=...)`, whose load
report and dtype handling are the usual ones. Offline, no code of the checkpoint's repository
runs, and nothing is written to disk.

The maths each conversion preserves (read in the code that wrote the checkpoints: ai2-olmo
0.6.0 and allenai/OLMo's `olmo/model.py`; pico-lm/pico-train's `src/model/pico_decoder.py`):

- hf_olmo: `att_proj` is q, k, v stacked as rows (d, n_kv d_head, n_kv d_head), split
  as transformers' convert_olmo_weights_to_hf.py does; `ff_proj` is [up; gate] (OLMo's SwiGLU
  is `x, gate = chunk(2); silu(gate) * x`), so up_proj is its first half; RoPE is rotate-half
  with theta `rope_theta`, as Llama's; `clip_qkv` clamps q, k, v (OlmoForCausalLM does, Llama
  cannot: refused there); the head is `transformer.ff_out`, or the embedding when
  `weight_tying`; `embedding_size` rows (padding included) are the vocabulary.
- pico_decoder: RMSNorm (eps `norm_eps`, weight after normalising), SwiGLU
  `w_2(silu(w_0 x) * w_1 x)` (gate w_0, up w_1, down w_2), grouped-query attention
  (`repeat_interleave`, as Llama's `repeat_kv`), untied head `de_embedding_proj`. Its RoPE is
  interleaved (complex product of adjacent pairs (2i, 2i+1)), Llama's rotate-half (pairs (i,
  i + d_head/2)), at the same frequencies theta^(-2i/d_head): each head's q and k rows are
  permuted (w.view(n, d_head/2, 2, d).transpose(1, 2)), as transformers' Llama conversion
  does. One permutation P for every head of q and k, so every score q_h . k_h, hence every
  logit, and every bilinear form q[h]^T k[h] lmsat.checkpoints.adapters gives (P^T P = I) is unchanged.

What is not bit-identical, by the classes' own precision choices: transformers' norms and
RoPE angle tables run in float32 whatever the model's dtype (so do OLMo's RMSNorm and Pico's
RMSNorm and RoPE); OLMo 1's LayerNorm runs in the input's dtype. In float32, the pipeline's
dtype, the converted model computes the same operations; benchmarks/suite_formats.py measures
the difference against each suite's own code.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from lmsat.checkpoints.native_models import tensor_mismatches
from lmsat.errors import ModelLoadError

log = logging.getLogger(__name__)

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
EXTENDING = "docs/extending.md, 'A checkpoint format transformers does not load'"

# ---------------------------------------------------------------- config checks (no torch)

# ai2-olmo's ModelConfig fields (0.6.0 = allenai/OLMo main; DataDecide's branch has a subset)
# that do not change what a trained model computes in eval mode: dropout, init, kernels,
# token ids, precision hints (rope_full_precision: RoPE in float32; lmsat's dtype decides).
OLMO_INERT = frozenset({
    "alibi_bias_max", "attention_dropout", "residual_dropout", "embedding_dropout", "flash_attention",
    "init_device", "init_fn", "init_std", "init_cutoff_factor", "precision", "scale_emb_init", "emb_init_std",
    "eos_token_id", "pad_token_id", "rope_full_precision", "use_cache", "attention_layer_norm_with_affine",
})
# fields read into the converted config (their values are checked below)
OLMO_MAPPED = frozenset({
    "d_model", "n_heads", "n_kv_heads", "multi_query_attention", "n_layers", "mlp_ratio", "mlp_hidden_size",
    "max_sequence_length", "vocab_size", "embedding_size", "weight_tying", "rope_theta", "layer_norm_eps",
    "layer_norm_type", "layer_norm_with_affine", "clip_qkv", "include_bias", "bias_for_layer_norm",
})
# fields whose every other value changes the maths in a way no conversion here maps
OLMO_REQUIRED = {
    "block_type": ("sequential",),  # "llama" blocks store q_proj/k_proj/v_proj: another layout
    "block_group_size": (1,),  # >1 stores blocks under transformer.block_groups
    "activation_type": ("swiglu",),  # OLMo's gelu/relu MLPs are not gated
    "alibi": (False,),  # ALiBi attention biases
    "rope": (True,),  # without RoPE, learned positions (transformer.wpe)
    "attention_layer_norm": (False,),  # QK-norm on the whole q/k projections
    "embedding_layer_norm": (False,),  # a norm on the embeddings
    "norm_after": (False,),  # post-norm blocks (Swin-style)
    "scale_logits": (False,),  # logits / sqrt(d)
}
PICO_MAPPED = frozenset({
    "d_model", "n_layers", "vocab_size", "max_seq_len", "attention_n_heads", "attention_n_kv_heads",
    "activation_hidden_dim", "norm_eps", "position_emb_theta",
})
PICO_INERT = frozenset({"batch_size"})  # pico's training batch, also in its model config
# PretrainedConfig's own attributes (transformers 4.x, whose save_pretrained wrote the suites'
# config.json, and 5.x): names, versions, generation and label settings, which neither
# hf_olmo's nor Pico's model class reads (neither ties weights through tie_word_embeddings)
SAVED_BY_TRANSFORMERS = frozenset({
    "_attn_implementation_autoset", "_name_or_path", "_commit_hash", "add_cross_attention", "architectures", "auto_map",
    "bad_words_ids", "begin_suppress_tokens", "bos_token_id", "chunk_size_feed_forward", "cross_attention_hidden_size",
    "decoder_start_token_id", "diversity_penalty", "do_sample", "dtype", "early_stopping", "encoder_no_repeat_ngram_size",
    "eos_token_id", "exponential_decay_length_penalty", "finetuning_task", "forced_bos_token_id", "forced_eos_token_id",
    "id2label", "is_decoder", "is_encoder_decoder", "label2id", "length_penalty", "max_length", "min_length",
    "model_type", "no_repeat_ngram_size", "num_beam_groups", "num_beams", "num_return_sequences", "output_attentions",
    "output_hidden_states", "output_scores", "pad_token_id", "prefix", "problem_type", "pruned_heads",
    "remove_invalid_values", "repetition_penalty", "return_dict", "return_dict_in_generate", "sep_token_id",
    "suppress_tokens", "task_specific_params", "temperature", "tf_legacy_loss", "tie_encoder_decoder",
    "tie_word_embeddings", "tokenizer_class", "top_k", "top_p", "torch_dtype", "torchscript", "transformers_version",
    "typical_p", "use_bfloat16", "use_cache",
})


class UnsupportedCheckpoint(ModelLoadError):
    """A converted format's config.json with a field (or value) lmsat does not convert."""


def _generic(key: str) -> bool:
    """Whether `key` is one of the installed transformers' PretrainedConfig attributes, which
    neither hf_olmo's nor Pico's model reads. Imported only for a key no list above names."""
    from transformers import PretrainedConfig

    return hasattr(PretrainedConfig(), key)


def _refuse(where: str, fmt: str, problems: list[str]) -> UnsupportedCheckpoint:
    return UnsupportedCheckpoint(
        f"{where}: its config.json ({fmt}) has {'; '.join(problems)}. lmsat converts {fmt} checkpoints to a "
        f"transformers class of the same maths (lmsat.checkpoints.formats) and refuses what it does not convert rather than "
        f"compute something else. Fix: analyse another checkpoint, or add the conversion ({EXTENDING})"
    )


def _unknown(config: dict, known: frozenset) -> list[str]:
    return sorted(k for k in config if k not in known and k not in SAVED_BY_TRANSFORMERS and not _generic(k))


def _olmo_plan(config: dict, where: str) -> dict:
    """The checked facts of an hf_olmo config.json: {target, d, n_heads, n_kv, ...}."""
    problems = []
    unknown = _unknown(config, OLMO_INERT | OLMO_MAPPED | frozenset(OLMO_REQUIRED))
    if unknown:
        problems.append(f"field(s) {', '.join(unknown)} that lmsat's conversion does not know (they may change the maths)")
    defaults = {"block_type": "sequential", "block_group_size": 1, "activation_type": "swiglu", "alibi": False,
                "rope": False, "attention_layer_norm": False, "embedding_layer_norm": False, "norm_after": False,
                "scale_logits": False}  # ModelConfig's defaults, for a config.json that omits one
    for key, allowed in OLMO_REQUIRED.items():
        value = config.get(key, defaults[key])
        if value not in allowed:
            problems.append(f"{key}={value!r} (converted: {' or '.join(map(repr, allowed))})")
    norm, affine = config.get("layer_norm_type", "default"), config.get("layer_norm_with_affine", True)
    eps = config.get("layer_norm_eps", 1e-5)
    bias = config.get("bias_for_layer_norm")
    include_bias = config.get("include_bias", True)
    if include_bias:
        problems.append("include_bias=true (biases in every linear layer: not converted)")
    if bias if bias is not None else include_bias:
        problems.append("bias_for_layer_norm=true (norm biases: not converted)")
    target = None
    if norm in ("default", "low_precision") and not affine:
        target = "olmo"  # OlmoLayerNorm: LayerNorm without weight or bias, eps 1e-5
        if eps != 1e-5:
            problems.append(f"layer_norm_eps={eps} with a non-parametric LayerNorm (OlmoForCausalLM's is 1e-5)")
    elif norm == "rms" and affine:
        target = "llama"  # RMSNorm with a weight, eps layer_norm_eps
        if config.get("clip_qkv") is not None:
            problems.append(f"clip_qkv={config['clip_qkv']} with RMSNorm (LlamaForCausalLM does not clip q, k, v)")
    else:
        problems.append(f"layer_norm_type={norm!r} with layer_norm_with_affine={affine!r} (converted: "
                        "'default'/'low_precision' without affine -> OlmoForCausalLM, 'rms' with affine -> LlamaForCausalLM)")
    d, n_heads = config.get("d_model"), config.get("n_heads")
    n_kv = config.get("n_kv_heads")
    if n_kv is None:
        n_kv = 1 if config.get("multi_query_attention") else n_heads
    hidden = config.get("mlp_hidden_size") or (config.get("mlp_ratio", 4) * d if isinstance(d, int) else None)
    rows = config.get("embedding_size") or config.get("vocab_size")
    sizes = dict(d_model=d, n_heads=n_heads, n_kv_heads=n_kv, n_layers=config.get("n_layers"), mlp_hidden_size=hidden,
                 embedding_size=rows)
    bad = [f"{k}={v!r}" for k, v in sizes.items() if not isinstance(v, int) or isinstance(v, bool) or v <= 0]
    if bad:
        problems.append(f"no usable size in {', '.join(bad)}")
    elif d % n_heads or n_heads % n_kv or hidden % 2 or (d // n_heads) % 2:
        problems.append(f"inconsistent sizes d_model={d}, n_heads={n_heads}, n_kv_heads={n_kv}, mlp_hidden_size={hidden} "
                        "(d_model / n_heads must be even, n_kv_heads divide n_heads, the MLP width be even)")
    theta = config.get("rope_theta", 10_000)
    if not isinstance(theta, (int, float)) or theta <= 0:
        problems.append(f"rope_theta={theta!r}")
    if problems:
        raise _refuse(where, "hf_olmo", problems)
    return dict(target=target, d=d, n_heads=n_heads, n_kv=n_kv, n_layers=config["n_layers"], hidden=hidden,
                intermediate=hidden // 2, rows=rows,  # ff_proj holds [up; gate]
                tied=bool(config.get("weight_tying", True)), eps=float(eps), theta=float(theta),
                clip_qkv=config.get("clip_qkv"), context=config.get("max_sequence_length", 1024))


def _pico_plan(config: dict, where: str) -> dict:
    """The checked facts of a pico_decoder config.json."""
    problems = []
    unknown = _unknown(config, PICO_MAPPED | PICO_INERT)
    if unknown:
        problems.append(f"field(s) {', '.join(unknown)} that lmsat's conversion does not know (they may change the maths)")
    missing = sorted(k for k in PICO_MAPPED if config.get(k) is None)
    if missing:
        problems.append(f"no value for {', '.join(missing)} (pico-train's model needs each)")
    else:
        d, n_heads, n_kv = config["d_model"], config["attention_n_heads"], config["attention_n_kv_heads"]
        if d % n_heads or n_heads % n_kv or (d // n_heads) % 2:
            problems.append(f"inconsistent sizes d_model={d}, attention_n_heads={n_heads}, attention_n_kv_heads={n_kv}")
        if config["position_emb_theta"] <= 0 or config["norm_eps"] < 0:
            problems.append(f"position_emb_theta={config['position_emb_theta']}, norm_eps={config['norm_eps']}")
    if problems:
        raise _refuse(where, "pico_decoder", problems)
    return dict(target="llama", d=config["d_model"], n_heads=config["attention_n_heads"],
                n_kv=config["attention_n_kv_heads"], n_layers=config["n_layers"], hidden=config["activation_hidden_dim"],
                intermediate=config["activation_hidden_dim"],
                rows=config["vocab_size"], tied=False, eps=float(config["norm_eps"]),
                theta=float(config["position_emb_theta"]), clip_qkv=None, context=config["max_seq_len"])


PLANS: dict[str, Callable[[dict, str], dict]] = {"hf_olmo": _olmo_plan, "pico_decoder": _pico_plan}
CONVERTED = tuple(PLANS)  # the model_types converted at load time


def check_config(config: dict, where: str) -> str | None:
    """The converted format of a config.json (as a dict), None for a native one; an
    UnsupportedCheckpoint naming every field lmsat does not convert. No torch: the fetch job
    calls it on config.json alone, before any weight is downloaded."""
    fmt = config.get("model_type")
    if fmt not in PLANS:
        return None
    PLANS[fmt](config, where)
    return fmt


# ---------------------------------------------------------------- conversions


@dataclass(frozen=True)
class Conversion:
    """How one checkpoint of a converted format becomes a native transformers model."""

    fmt: str  # the checkpoint's model_type
    native: object  # the transformers config (OlmoConfig or LlamaConfig)
    stored: dict[str, tuple[int, ...]]  # tensor name in the files -> shape its config.json implies
    sources: dict[str, str] = field(default_factory=dict)  # native tensor name -> the stored one it is read from
    convert: Callable[[dict], dict] | None = None  # stored tensors -> native state dict

    @property
    def summary(self) -> str:
        return f"{self.fmt} as {self.native.architectures[0]}"


def _native_config(facts: dict, config: dict):
    """The transformers config of the converted model."""
    import transformers
    from packaging.version import Version

    d, n_heads = facts["d"], facts["n_heads"]
    common = dict(
        vocab_size=facts["rows"], hidden_size=d, intermediate_size=facts["intermediate"],
        num_hidden_layers=facts["n_layers"], num_attention_heads=n_heads, num_key_value_heads=facts["n_kv"],
        hidden_act="silu", max_position_embeddings=facts["context"], tie_word_embeddings=facts["tied"],
        attention_bias=False, bos_token_id=None, pad_token_id=config.get("pad_token_id"),
        eos_token_id=config.get("eos_token_id"),
    )
    # transformers 5 takes RoPE's theta in rope_parameters, 4.x as rope_theta
    if Version(transformers.__version__) >= Version("5.0.0.dev0"):
        common["rope_parameters"] = {"rope_type": "default", "rope_theta": facts["theta"]}
    else:
        common["rope_theta"] = facts["theta"]
    if facts["target"] == "olmo":
        native = transformers.OlmoConfig(**common, clip_qkv=facts["clip_qkv"])
        native.architectures = ["OlmoForCausalLM"]
    else:
        native = transformers.LlamaConfig(**common, rms_norm_eps=facts["eps"], mlp_bias=False, head_dim=d // n_heads)
        native.architectures = ["LlamaForCausalLM"]
    return native


def _split(weight, sizes):
    """Rows of `weight` in consecutive blocks of `sizes` (views)."""
    return list(weight.split(list(sizes), dim=0))


def interleaved_to_half(weight, n_heads: int):
    """Projection rows (n_heads * d_head, d) of a head whose RoPE rotates the pairs (2i, 2i+1)
    reordered for one that rotates (i, i + d_head/2): per head, rows 0, 2, 4, ... then 1, 3, 5, ...
    (transformers' Llama conversion's `permute`)."""
    rows, d = weight.shape
    return weight.reshape(n_heads, rows // n_heads // 2, 2, d).transpose(1, 2).reshape(rows, d)


def _olmo_conversion(facts: dict, config: dict) -> Conversion:
    d, n_kv, d_head, hidden = facts["d"], facts["n_kv"], facts["d"] // facts["n_heads"], facts["hidden"]
    rms = facts["target"] == "llama"
    pre = "model.transformer."
    stored: dict[str, tuple[int, ...]] = {f"{pre}wte.weight": (facts["rows"], d)}
    sources = {"model.embed_tokens.weight": f"{pre}wte.weight"}
    for i in range(facts["n_layers"]):
        block, layer = f"{pre}blocks.{i}.", f"model.layers.{i}."
        stored.update({f"{block}att_proj.weight": (d + 2 * n_kv * d_head, d), f"{block}attn_out.weight": (d, d),
                       f"{block}ff_proj.weight": (hidden, d), f"{block}ff_out.weight": (d, hidden // 2)})
        sources.update({f"{layer}self_attn.{p}_proj.weight": f"{block}att_proj.weight" for p in "qkv"})
        sources.update({f"{layer}self_attn.o_proj.weight": f"{block}attn_out.weight",
                        f"{layer}mlp.up_proj.weight": f"{block}ff_proj.weight",
                        f"{layer}mlp.gate_proj.weight": f"{block}ff_proj.weight",
                        f"{layer}mlp.down_proj.weight": f"{block}ff_out.weight"})
        if rms:
            stored.update({f"{block}attn_norm.weight": (d,), f"{block}ff_norm.weight": (d,)})
            sources.update({f"{layer}input_layernorm.weight": f"{block}attn_norm.weight",
                            f"{layer}post_attention_layernorm.weight": f"{block}ff_norm.weight"})
    if rms:
        stored[f"{pre}ln_f.weight"] = (d,)
        sources["model.norm.weight"] = f"{pre}ln_f.weight"
    if not facts["tied"]:
        stored[f"{pre}ff_out.weight"] = (facts["rows"], d)
        sources["lm_head.weight"] = f"{pre}ff_out.weight"

    def convert(tensors: dict) -> dict:
        state = {}
        for native, source in sources.items():
            if source.endswith("att_proj.weight"):
                q, k, v = _split(tensors[source], (d, n_kv * d_head, n_kv * d_head))
                state[native] = {"q_proj": q, "k_proj": k, "v_proj": v}[native.split(".")[-2]]
            elif source.endswith("ff_proj.weight"):
                up, gate = tensors[source].chunk(2, dim=0)  # OLMo's SwiGLU: x, gate = chunk(2); silu(gate) * x
                state[native] = up if native.endswith("up_proj.weight") else gate
            else:
                state[native] = tensors[source]
        return state

    return Conversion("hf_olmo", _native_config(facts, config), stored, sources, convert)


def _pico_conversion(facts: dict, config: dict) -> Conversion:
    d, n_heads, n_kv, hidden = facts["d"], facts["n_heads"], facts["n_kv"], facts["hidden"]
    d_head = d // n_heads
    pre = "pico_decoder."
    stored: dict[str, tuple[int, ...]] = {f"{pre}embedding_proj.weight": (facts["rows"], d),
                                          f"{pre}output_norm.weight": (d,),
                                          f"{pre}de_embedding_proj.weight": (facts["rows"], d)}
    sources = {"model.embed_tokens.weight": f"{pre}embedding_proj.weight", "model.norm.weight": f"{pre}output_norm.weight",
               "lm_head.weight": f"{pre}de_embedding_proj.weight"}
    for i in range(facts["n_layers"]):
        block, layer = f"{pre}layers.{i}.", f"model.layers.{i}."
        stored.update({f"{block}attention.q_proj.weight": (n_heads * d_head, d),
                       f"{block}attention.k_proj.weight": (n_kv * d_head, d),
                       f"{block}attention.v_proj.weight": (n_kv * d_head, d),
                       f"{block}attention.o_proj.weight": (d, n_heads * d_head),
                       f"{block}swiglu.w_0.weight": (hidden, d), f"{block}swiglu.w_1.weight": (hidden, d),
                       f"{block}swiglu.w_2.weight": (d, hidden),
                       f"{block}attention_norm.weight": (d,), f"{block}swiglu_norm.weight": (d,)})
        sources.update({f"{layer}self_attn.{p}_proj.weight": f"{block}attention.{p}_proj.weight" for p in "qkvo"})
        sources.update({f"{layer}mlp.gate_proj.weight": f"{block}swiglu.w_0.weight",
                        f"{layer}mlp.up_proj.weight": f"{block}swiglu.w_1.weight",
                        f"{layer}mlp.down_proj.weight": f"{block}swiglu.w_2.weight",
                        f"{layer}input_layernorm.weight": f"{block}attention_norm.weight",
                        f"{layer}post_attention_layernorm.weight": f"{block}swiglu_norm.weight"})

    def convert(tensors: dict) -> dict:
        state = {native: tensors[source] for native, source in sources.items()}
        for i in range(facts["n_layers"]):  # interleaved RoPE pairs -> rotate-half pairs
            attn = f"model.layers.{i}.self_attn."
            state[f"{attn}q_proj.weight"] = interleaved_to_half(state[f"{attn}q_proj.weight"], n_heads)
            state[f"{attn}k_proj.weight"] = interleaved_to_half(state[f"{attn}k_proj.weight"], n_kv)
        return state

    return Conversion("pico_decoder", _native_config(facts, config), stored, sources, convert)


CONVERSIONS = {"hf_olmo": _olmo_conversion, "pico_decoder": _pico_conversion}


def plan_conversion(config: dict, where: str) -> Conversion | None:
    """The Conversion of a config.json (dict) of a converted format; None for a native one."""
    fmt = check_config(config, where)
    return None if fmt is None else CONVERSIONS[fmt](PLANS[fmt](config, where), config)


# ---------------------------------------------------------------- loading


def _locate(target, kwargs: dict) -> tuple[Path, dict] | None:
    """(directory, config.json as a dict) of `target` as from_pretrained would resolve it
    (a directory, or a hub id at a revision in a hub cache); None when it cannot be read here
    (from_pretrained then says why)."""
    from transformers.utils import cached_file

    hub = {k: kwargs[k] for k in ("revision", "cache_dir", "local_files_only", "token") if k in kwargs}
    try:
        path = cached_file(str(target), "config.json", _raise_exceptions_for_missing_entries=False, **hub)
    except (OSError, ValueError):
        return None
    if path is None:
        return None
    try:
        return Path(path).parent, json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def read_config(target, **kwargs) -> dict | None:
    """config.json of `target` (resolved as from_pretrained resolves it) as a dict; None if unreadable.
    Another trainer's saved step: the config of the transformers model it loads as."""
    from lmsat.checkpoints import trainer_layouts

    if trainer_layouts.layout_of(target):
        return trainer_layouts.saved_step_config(target)
    located = _locate(target, kwargs)
    return None if located is None else located[1]


def load_config(target, **kwargs):
    """AutoConfig.from_pretrained(target, **kwargs), but the converted model's config for a
    converted format (what the loaded model's `config` will be)."""
    from transformers import AutoConfig

    from lmsat.checkpoints import trainer_layouts

    if trainer_layouts.layout_of(target):
        return trainer_layouts.plan_saved_step(target).native
    config = read_config(target, **kwargs)
    conversion = plan_conversion(config, str(target)) if config else None
    return conversion.native if conversion else AutoConfig.from_pretrained(target, **kwargs)


def _stored_tensors(directory: Path, where: str, fix: str) -> tuple[dict, list[str]]:
    """{name: tensor} of the safetensors files in `directory` (model.safetensors, or the shards
    its index lists) and the files read."""
    from safetensors.torch import load_file

    if (directory / INDEX).is_file():
        try:
            shards = sorted(set(json.loads((directory / INDEX).read_text())["weight_map"].values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
            raise ModelLoadError(f"{where}: {directory / INDEX} is unreadable ({error}). Fix: {fix}") from None
    elif (directory / SINGLE).is_file():
        shards = [SINGLE]
    else:
        found = sorted(p.name for p in directory.iterdir()) if directory.is_dir() else []
        raise ModelLoadError(f"{where}: {directory} holds no {SINGLE} (files: {', '.join(found) or 'none'}); lmsat "
                             f"converts this format from safetensors weights only. Fix: {fix}")
    tensors = {}
    for shard in shards:
        tensors.update(load_file(str(directory / shard)))
    return tensors, [str(directory / shard) for shard in shards]


def _check_stored(conversion: Conversion, tensors: dict, files: list[str], where: str, fix: str) -> None:
    """ModelLoadError unless the files hold exactly the tensors, of the shapes, that the
    checkpoint's config.json implies (a converted format gets no load report of its own names)."""
    shapes = {k: tensor.shape for k, tensor in tensors.items()}
    problems = tensor_mismatches(conversion.stored, shapes, "its config.json", "config")
    if problems:
        raise ModelLoadError(f"{where}: {', '.join(files)} does not match its config.json ({conversion.fmt}): "
                             f"{'; '.join(problems)}. Fix: {fix}")


def from_pretrained(target, *, where: str = "", fix: str = "", trainer_options: dict | None = None, **kwargs):
    """`AutoModelForCausalLM.from_pretrained(target, **kwargs)`, converting a checkpoint of a
    format transformers has no class for (CONVERTED) into the class of the same maths.

    With output_loading_info=True the load report gains "converted" (e.g. "hf_olmo as
    LlamaForCausalLM") and "stored_names" ({native tensor name: its name in the files}) for a
    converted checkpoint. `where` names the checkpoint in errors, `fix` says how to replace
    broken files. Refusals are ModelLoadErrors (UnsupportedCheckpoint for a config.json field
    lmsat does not convert).

    Another trainer's saved step (lmsat.checkpoints.trainer_layouts: OLMo-core, torchtitan,
    Megatron, nanoGPT, nanochat, litgpt, Lightning) is read the same way, its architecture
    from its run's own file (`trainer_options`: config=, prefix=, when the run did not record
    it), checked against its files' index before any weight is read; its load report also
    gains "stored_index" ({stored name: (dtype, shape)}), what check_weight_files gives for
    safetensors."""
    import transformers

    from lmsat.checkpoints import trainer_layouts

    where = where or str(target)
    stored_index = None
    if trainer_layouts.layout_of(target):  # another trainer's saved step (lmsat.checkpoints.trainer_layouts)
        conversion = trainer_layouts.plan_saved_step(target, **(trainer_options or {}))
        stored_index = trainer_layouts.check_saved_step(conversion, where, fix)  # before any weight is read
        tensors, directory = conversion.read(), Path(target)
    else:
        located = _locate(target, kwargs)
        if located is None or not isinstance(located[1], dict) or located[1].get("model_type") not in CONVERSIONS:
            return transformers.AutoModelForCausalLM.from_pretrained(target, **kwargs)
        directory, config = located
        conversion = plan_conversion(config, where)
        tensors, files = _stored_tensors(directory, where, fix or f"replace {directory} with a complete copy")
        _check_stored(conversion, tensors, files, where, fix or f"replace {directory} with a complete copy")
    state = conversion.convert(tensors)
    dtype_key = "dtype" if "dtype" in kwargs else "torch_dtype"
    dtype = kwargs.get(dtype_key)
    if dtype == "auto" or dtype is None:  # the dtype most stored values have, as from_pretrained's "auto"
        sizes: dict = {}
        for tensor in tensors.values():
            sizes[tensor.dtype] = sizes.get(tensor.dtype, 0) + tensor.numel()
        dtype = max(sizes, key=sizes.get)
    want_info = kwargs.get("output_loading_info", False)
    model_class = getattr(transformers, conversion.native.architectures[0])
    loaded = model_class.from_pretrained(
        None, config=conversion.native, state_dict=state, output_loading_info=True, **{dtype_key: dtype},
        **{k: kwargs[k] for k in ("device_map", "ignore_mismatched_sizes", "attn_implementation") if k in kwargs},
    )
    lm, info = loaded
    lm.config._name_or_path = str(directory)
    log.info("%s: %s converted to %s at load (lmsat.checkpoints.formats)", where, conversion.fmt, type(lm).__name__)
    if not want_info:
        return lm
    info = {**info, "converted": conversion.summary, "stored_names": dict(conversion.sources)}
    return lm, ({**info, "stored_index": stored_index} if stored_index is not None else info)
