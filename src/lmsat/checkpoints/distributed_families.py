"""The trainers that save distributed checkpoints: OLMo-core, torchtitan, Megatron (torch_dist).

Each reads the run's own architecture file, checks every field that changes the maths,
and maps the model's keys of the distributed checkpoint (lmsat.checkpoints.distributed) to
the transformers class of the same maths (read in each framework's code: ai2-olmo-core 3.0.0,
torchtitan 0.3.0, megatron-core 0.16.1):

    trainer     saved step                       architecture from                       loaded as
    OLMo-core   stepN/model_and_optim/           stepN/config.json (ConfigSaverCallback)  Olmo2ForCausalLM ("reordered_norm"
                                                 its "model" section                      blocks, q/k RMSNorm) or LlamaForCausalLM
    torchtitan  <dump>/checkpoint/step-N/        the job config JSON torchtitan writes   LlamaForCausalLM (model "llama3"; its
                                                 with --debug.save_config_file            complex RoPE rows permuted per head)
    Megatron    iter_NNNNNNN/ (torch_dist)       the `args` its common.pt holds           LlamaForCausalLM (RMSNorm, SwiGLU,
                                                                                          RoPE, no bias: Llama-style GPT)

The maths each map keeps: OLMo-core's w1/w3/w2 are SwiGLU's gate/up/down
(w2(silu(w1 x) * w3 x)), its "default" RoPE rotates halves as transformers does; OLMo 2's
blocks normalise attention's and the MLP's outputs before the residual add and RMSNorm the
whole q and k projections (Olmo2ForCausalLM does both). torchtitan's Llama 3 applies RoPE
to adjacent pairs (complex multiplication), transformers to halves: q and k rows are
permuted per head as torchtitan's own state_dict_adapter does (one permutation for q and k,
so every score q.k is unchanged). Megatron stacks its layers (one tensor of shape
(n_layers, ...) per parameter), fuses q, k, v per query group ([q of the group's heads; k;
v] rows) and gate and up ([gate; up]): split as Megatron-Bridge splits them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from lmsat.checkpoints.native_models import (
    LLAMA_NAMES,
    SavedStep,
    TrainerConfigMissing,
    check_fields,
    interleaved_to_half,
    llama_config,
    olmo2_config,
    positive_ints,
    refuse,
)

CONFIG_FIX = "pass the architecture: lmsat.load_saved_step(path, config=...)"


def _dcp_step(fmt: str, path: Path, folder: Path, is_model_key, *, native, stored, sources, convert,
              architecture_file: Path, step: int | None) -> SavedStep:
    """A SavedStep whose tensors are the model keys of the distributed checkpoint in `folder`."""
    from lmsat.checkpoints.distributed import dtype_name, open_distributed

    opened: list = []

    def checkpoint():
        if not opened:
            opened.append(open_distributed(folder))
        return opened[0]

    def index():
        found = checkpoint()
        return {k: (dtype_name(dtype), shape) for k, (dtype, shape) in found.tensors.items() if is_model_key(k)}

    def read():  # the shards holding them checked (there, long enough) before a byte is read
        return checkpoint().read([k for k in stored if k in checkpoint().tensors])

    files = tuple(sorted(folder.glob("*.distcp")))
    return SavedStep(fmt, path, native, stored, sources, convert, index, read, files, architecture_file, step)


def _read_json(path: Path, where: str, fix: str) -> dict:
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise TrainerConfigMissing(f"{where}: {path} is unreadable ({error}). Fix: {fix}") from None
    if not isinstance(found, dict):
        raise TrainerConfigMissing(f"{where}: {path} holds no JSON object. Fix: {fix}")
    return found


def _step_of(name: str) -> int | None:
    match = re.search(r"(\d+)$", name)
    return int(match.group(1)) if match else None


# ---------------------------------------------------------------- OLMo-core

OLMO_CORE_INERT = ("_CLASS_", "dtype", "init_method", "init_seed", "init_std", "embedding_init_std", "freeze_params")
NORM_FIELDS = dict(mapped=("eps",), inert=("_CLASS_", "dtype", "full_precision"),
                   required={"name": ("rms",), "elementwise_affine": (None, True), "bias": (None, False)})


def olmo_core(step_dir: Path, config: dict | None = None) -> SavedStep:
    """OLMo-core's `stepN/` (model_and_optim/ and config.json): its OLMo 2 or Llama-like model."""
    where = f"OLMo-core checkpoint {step_dir}"
    config_path = step_dir / "config.json"
    if config is None:
        if not config_path.is_file():
            raise TrainerConfigMissing(
                f"{where} has no config.json, so its architecture is unknown (lmsat reads it, never guesses it from "
                "shapes). Fix: train with OLMo-core's ConfigSaverCallback (it writes the experiment config into every "
                f"step folder), or copy the run's config.json (with its 'model' section) into {step_dir}; or {CONFIG_FIX}")
        config = _read_json(config_path, where, "copy the run's experiment config.json there again")
    model = config.get("model", config)
    if not isinstance(model, dict) or "d_model" not in model:
        raise TrainerConfigMissing(f"{where}: {config_path} has no 'model' section with d_model (an OLMo-core "
                                   f"experiment config has one). Fix: {CONFIG_FIX}")
    block = model.get("block") or {}
    attention = block.get("sequence_mixer") or block.get("attention") or {}
    rope = attention.get("rope") or {}
    norm, ff = block.get("layer_norm") or {}, block.get("feed_forward") or {}
    head = model.get("lm_head") or {}
    head_norm = head.get("layer_norm") or {}
    qk_norm = attention.get("qk_norm")
    problems = check_fields(model, "model", mapped=("d_model", "vocab_size", "n_layers", "tie_word_embeddings",
                                                    "block", "lm_head"), inert=OLMO_CORE_INERT,
                            required={"name": ("default",), "embedding_norm": (None,), "block_pattern": (None,),
                                      "block_overrides": (None,), "embed_scale": (None,)}, defaults={"name": "default"})
    problems += check_fields(block, "model.block", mapped=("sequence_mixer", "attention", "layer_norm", "feed_forward"),
                             inert=("_CLASS_", "dropout"),
                             required={"name": ("default", "reordered_norm"), "feed_forward_moe": (None,),
                                       "attention_residual_alpha": (None,), "feed_forward_residual_alpha": (None,)},
                             defaults={"name": "default"})
    problems += check_fields(attention, "model.block.sequence_mixer", mapped=("n_heads", "n_kv_heads", "head_dim", "rope", "qk_norm"),
                             inert=("_CLASS_", "dtype", "dropout", "use_flash", "backend", "mxfp8_projections",
                                    "mxfp8_qkv_projection", "mxfp8_out_projection", "use_recompute_qkv_prep",
                                    "mxfp8_save_qkv_for_backward"),
                             required={"name": ("default",), "type": ("attention",), "bias": (None, False),
                                       "gate": (None,), "clip_qkv": (None,), "sliding_window": (None,),
                                       "use_head_qk_norm": (None, False), "scalable_softmax": (False,),
                                       "qk_norm_per_head_gains": (None,), "attention_sinks": (False,)},
                             defaults={"name": "default", "type": "attention", "scalable_softmax": False,
                                       "attention_sinks": False})
    problems += check_fields(rope, "model.block.sequence_mixer.rope", mapped=("theta",), inert=("_CLASS_", "full_precision"),
                             required={"name": ("default", "complex"), "no_global_rope": (False,), "scaling": (None,),
                                       "partial_rotary_factor": (1.0, 1)},
                             defaults={"name": "default", "no_global_rope": False, "partial_rotary_factor": 1.0})
    for section, name in ((norm, "model.block.layer_norm"), (head_norm, "model.lm_head.layer_norm")):
        problems += check_fields(section, name, **NORM_FIELDS)
    if qk_norm is not None:
        problems += check_fields(qk_norm, "model.block.sequence_mixer.qk_norm", **NORM_FIELDS)
    problems += check_fields(ff, "model.block.feed_forward", mapped=("hidden_size",), inert=("_CLASS_", "dtype"),
                             required={"name": ("default",), "bias": (None, False), "activation": ("silu",)},
                             defaults={"name": "default", "activation": "silu"})
    problems += check_fields(head, "model.lm_head", mapped=("layer_norm",), inert=("_CLASS_", "dtype", "loss_implementation"),
                             required={"name": ("default",), "bias": (None, False)}, defaults={"name": "default"})
    if not rope:
        problems.append("no RoPE (model.block.sequence_mixer.rope): converted only with RoPE")
    if not head_norm:
        problems.append("no final norm (model.lm_head.layer_norm)")
    d, n_heads = model.get("d_model"), attention.get("n_heads", 16)
    n_kv = attention.get("n_kv_heads") or n_heads
    sizes = dict(d_model=d, vocab_size=model.get("vocab_size"), n_layers=model.get("n_layers"), n_heads=n_heads,
                 n_kv_heads=n_kv, hidden_size=ff.get("hidden_size"))
    problems += positive_ints(sizes)
    reordered = block.get("name", "default") == "reordered_norm"
    eps = {norm.get("eps"), head_norm.get("eps")} | ({qk_norm.get("eps")} if qk_norm else set())
    if not problems:
        if d % n_heads or n_heads % n_kv or (attention.get("head_dim") not in (None, d // n_heads)):
            problems.append(f"d_model={d}, n_heads={n_heads}, n_kv_heads={n_kv}, head_dim={attention.get('head_dim')} "
                            "(converted: head_dim = d_model / n_heads, n_kv_heads dividing n_heads)")
        if reordered and qk_norm is None:
            problems.append("'reordered_norm' blocks without qk_norm (Olmo2ForCausalLM normalises q and k)")
        if not reordered and qk_norm is not None:
            problems.append("qk_norm in 'default' blocks (LlamaForCausalLM has no q/k norm)")
        if len(eps) != 1 or None in eps:
            problems.append(f"norm eps {sorted(map(str, eps))} (converted: one eps for every norm)")
    if problems:
        raise refuse(where, "OLMo-core", problems)
    layers, hidden, tied = sizes["n_layers"], sizes["hidden_size"], bool(model.get("tie_word_embeddings", False))
    d_head = d // n_heads
    context = ((config.get("train_module") or {}).get("max_sequence_length") or (config.get("dataset") or {}).get("sequence_length")
               or 4096)  # the context the run trained on, when its config.json records it
    common = dict(vocab=sizes["vocab_size"], d=d, layers=layers, heads=n_heads, kv_heads=n_kv, intermediate=hidden,
                  eps=eps.pop(), theta=rope.get("theta", 500_000), context=int(context), tied=tied)
    native = olmo2_config(**common) if reordered else llama_config(**common)
    stored: dict[str, tuple[int, ...]] = {"model.embeddings.weight": (sizes["vocab_size"], d),
                                          "model.lm_head.norm.weight": (d,)}
    sources = {LLAMA_NAMES["embed"]: "model.embeddings.weight", LLAMA_NAMES["norm"]: "model.lm_head.norm.weight"}
    if not tied:
        stored["model.lm_head.w_out.weight"] = (sizes["vocab_size"], d)
        sources[LLAMA_NAMES["head"]] = "model.lm_head.w_out.weight"
    roles = {"q": ("attention.w_q.weight", (n_heads * d_head, d)), "k": ("attention.w_k.weight", (n_kv * d_head, d)),
             "v": ("attention.w_v.weight", (n_kv * d_head, d)), "o": ("attention.w_out.weight", (d, n_heads * d_head)),
             "gate": ("feed_forward.w1.weight", (hidden, d)), "up": ("feed_forward.w3.weight", (hidden, d)),
             "down": ("feed_forward.w2.weight", (d, hidden)),
             ("post_attention_norm" if reordered else "input_norm"): ("attention_norm.weight", (d,)),
             ("post_feedforward_norm" if reordered else "post_attention_norm"): ("feed_forward_norm.weight", (d,))}
    if reordered:
        roles.update(q_norm=("attention.q_norm.weight", (n_heads * d_head,)), k_norm=("attention.k_norm.weight", (n_kv * d_head,)))
    for i in range(layers):
        for role, (name, shape) in roles.items():
            stored[f"model.blocks.{i}.{name}"] = shape
            sources[LLAMA_NAMES[role].format(i=i)] = f"model.blocks.{i}.{name}"
    complex_rope = rope.get("name", "default") == "complex"

    def convert(tensors: dict) -> dict:
        state = {native_name: tensors[source] for native_name, source in sources.items()}
        if complex_rope:  # adjacent pairs rotated: rows reordered for rotate-half (transformers)
            for i in range(layers):
                for role, heads in (("q", n_heads), ("k", n_kv)):
                    name = LLAMA_NAMES[role].format(i=i)
                    state[name] = interleaved_to_half(state[name], heads)
        return state

    return _dcp_step("olmo-core", step_dir, step_dir / "model_and_optim", lambda k: k.startswith("model."),
                     native=native, stored=stored, sources=sources, convert=convert,
                     architecture_file=config_path, step=_step_of(step_dir.name))


# ---------------------------------------------------------------- torchtitan

TORCHTITAN_INERT = ("param_init", "sharding_config")
TORCHTITAN_MODEL_PREFIXES = ("tok_embeddings.", "layers.", "norm.", "output.", "lm_head.")


def torchtitan_config_files(step_dir: Path) -> list[Path]:
    """The JSON files beside a torchtitan run's checkpoints that hold its job config
    (`model_spec`): in the dump folder (step-N/../..) or the checkpoint folder (step-N/..)."""
    found = []
    for folder in (step_dir.parent, step_dir.parent.parent):
        for path in sorted(folder.glob("*.json")):
            try:
                if "model_spec" in json.loads(path.read_text()):
                    found.append(path)
            except (OSError, ValueError, TypeError):
                continue
    return found


def _torchtitan_norm(section: dict, where: str) -> list[str]:
    return check_fields(section, where, mapped=("normalized_shape", "eps"), inert=TORCHTITAN_INERT,
                        required={"elementwise_affine": (True,)}, defaults={"elementwise_affine": True})


def _linear(section: dict, where: str) -> list[str]:
    return check_fields(section, where, mapped=("in_features", "out_features"), inert=TORCHTITAN_INERT,
                        required={"bias": (False,)}, defaults={"bias": False})


def torchtitan(step_dir: Path, config: dict | None = None) -> SavedStep:
    """torchtitan's `step-N/` (a distributed checkpoint of the model's keys, flattened, and
    the optimizer's), its model "llama3", its architecture from the job config JSON."""
    where = f"torchtitan checkpoint {step_dir}"
    config_path = step_dir.parent.parent / "job_config.json"
    if config is None:
        found = torchtitan_config_files(step_dir)
        if not found:
            raise TrainerConfigMissing(
                f"{where}: no job config beside it (a JSON file with 'model_spec' in {step_dir.parent.parent} or "
                f"{step_dir.parent}), so its architecture is unknown. Fix: train with torchtitan's "
                "--debug.save_config_file job_config.json (it writes the job config into the dump folder), or save "
                f"Trainer.Config.to_dict() of the run as JSON into {step_dir.parent.parent}; or {CONFIG_FIX}")
        if len(found) > 1:
            raise TrainerConfigMissing(f"{where}: {len(found)} job configs beside it ({', '.join(map(str, found))}); "
                                       f"keep the one the run was trained with. Or {CONFIG_FIX}")
        config_path = found[0]
        config = _read_json(config_path, where, "write the job config again")
    spec = config.get("model_spec", config)
    model = spec.get("model") if isinstance(spec, dict) else None
    if not isinstance(model, dict) or "layers" not in model:
        raise TrainerConfigMissing(f"{where}: {config_path} has no model_spec.model with its layers (torchtitan "
                                   f"0.3's Trainer.Config.to_dict()). Fix: {CONFIG_FIX}")
    problems = []
    if spec.get("name", "llama3") != "llama3":
        problems.append(f"model_spec.name={spec.get('name')!r} (converted: 'llama3'; no key map for another model)")
    problems += check_fields(model, "model", mapped=("dim", "vocab_size", "enable_weight_tying", "tok_embeddings",
                                                     "norm", "lm_head", "layers"), inert=TORCHTITAN_INERT)
    problems += _torchtitan_norm(model.get("norm") or {}, "model.norm")
    problems += _linear(model.get("lm_head") or {}, "model.lm_head")
    layers = model.get("layers") or []
    first = layers[0] if layers else {}

    def maths(layer):  # a layer without its initialisers (depth-scaled, so they differ by layer)
        if isinstance(layer, dict):
            return {k: maths(v) for k, v in layer.items() if k not in TORCHTITAN_INERT}
        return layer

    if any(maths(layer) != maths(first) for layer in layers):
        problems.append("layers that differ (converted: every layer alike)")
    attention, ff = first.get("attention") or {}, first.get("feed_forward") or {}
    qkv, rope = attention.get("qkv_linear") or {}, attention.get("rope") or {}
    problems += check_fields(first, "model.layers[0]", mapped=("attention", "feed_forward", "attention_norm", "ffn_norm"),
                             inert=TORCHTITAN_INERT, required={"moe": (None,)})
    problems += check_fields(attention, "model.layers[0].attention",
                             mapped=("n_heads", "dim", "qkv_linear", "wo", "rope", "n_kv_heads", "head_dim"),
                             inert=(*TORCHTITAN_INERT, "inner_attention"), required={"qk_norm": (None,)})
    problems += check_fields(qkv, "model.layers[0].attention.qkv_linear", mapped=("head_dim", "n_heads", "n_kv_heads", "wqkv"),
                             inert=TORCHTITAN_INERT)
    problems += _linear(qkv.get("wqkv") or {}, "model.layers[0].attention.qkv_linear.wqkv")
    problems += _linear(attention.get("wo") or {}, "model.layers[0].attention.wo")
    problems += check_fields(rope, "model.layers[0].attention.rope",
                             mapped=("dim", "max_seq_len", "theta", "scaling_factor", "low_freq_factor", "high_freq_factor",
                                     "original_max_position_embeddings"),
                             inert=(*TORCHTITAN_INERT, "rope_factor", "beta_fast", "beta_slow", "original_seq_len", "truncate"),
                             required={"scaling": ("none", "llama")})
    for name in ("w1", "w2", "w3"):
        problems += _linear(ff.get(name) or {}, f"model.layers[0].feed_forward.{name}")
    problems += check_fields(ff, "model.layers[0].feed_forward", mapped=("w1", "w2", "w3"), inert=TORCHTITAN_INERT)
    for name in ("attention_norm", "ffn_norm"):
        problems += _torchtitan_norm(first.get(name) or {}, f"model.layers[0].{name}")
    d, vocab = model.get("dim"), model.get("vocab_size")
    n_heads = qkv.get("n_heads") or attention.get("n_heads")
    n_kv = qkv.get("n_kv_heads") or attention.get("n_kv_heads") or n_heads
    d_head = qkv.get("head_dim") or attention.get("head_dim") or (d // n_heads if isinstance(d, int) and n_heads else None)
    hidden = (ff.get("w1") or {}).get("out_features")
    problems += positive_ints(dict(dim=d, vocab_size=vocab, layers=len(layers), n_heads=n_heads, n_kv_heads=n_kv,
                                   head_dim=d_head, hidden_dim=hidden))
    eps = {(model.get("norm") or {}).get("eps"), (first.get("attention_norm") or {}).get("eps"),
           (first.get("ffn_norm") or {}).get("eps")}
    if not problems:
        if n_heads % n_kv or rope.get("dim", d_head) != d_head:
            problems.append(f"n_heads={n_heads}, n_kv_heads={n_kv}, rope dim {rope.get('dim')} (head_dim {d_head})")
        if len(eps) != 1:
            problems.append(f"norm eps {sorted(map(str, eps))} (converted: one eps for every norm)")
    if problems:
        raise refuse(where, "torchtitan", problems)
    scaling = None
    if rope.get("scaling") == "llama":
        scaling = {"rope_type": "llama3", "factor": float(rope["scaling_factor"]),
                   "low_freq_factor": float(rope["low_freq_factor"]), "high_freq_factor": float(rope["high_freq_factor"]),
                   "original_max_position_embeddings": int(rope["original_max_position_embeddings"])}
    n_layers, tied = len(layers), bool(model.get("enable_weight_tying", False))
    native = llama_config(vocab=vocab, d=d, layers=n_layers, heads=n_heads, kv_heads=n_kv, intermediate=hidden,
                          eps=eps.pop(), theta=rope["theta"], context=int(rope.get("max_seq_len") or 4096), tied=tied,
                          head_dim=d_head, scaling=scaling)
    stored: dict[str, tuple[int, ...]] = {"tok_embeddings.weight": (vocab, d), "norm.weight": (d,)}
    sources = {LLAMA_NAMES["embed"]: "tok_embeddings.weight", LLAMA_NAMES["norm"]: "norm.weight"}
    if not tied:
        stored["lm_head.weight"] = (vocab, d)
        sources[LLAMA_NAMES["head"]] = "lm_head.weight"
    roles = {"q": ("attention.qkv_linear.wq.weight", (n_heads * d_head, d)),
             "k": ("attention.qkv_linear.wk.weight", (n_kv * d_head, d)),
             "v": ("attention.qkv_linear.wv.weight", (n_kv * d_head, d)),
             "o": ("attention.wo.weight", (d, n_heads * d_head)),
             "gate": ("feed_forward.w1.weight", (hidden, d)), "up": ("feed_forward.w3.weight", (hidden, d)),
             "down": ("feed_forward.w2.weight", (d, hidden)), "input_norm": ("attention_norm.weight", (d,)),
             "post_attention_norm": ("ffn_norm.weight", (d,))}
    for i in range(n_layers):
        for role, (name, shape) in roles.items():
            stored[f"layers.{i}.{name}"] = shape
            sources[LLAMA_NAMES[role].format(i=i)] = f"layers.{i}.{name}"

    def convert(tensors: dict) -> dict:
        state = {native_name: tensors[source] for native_name, source in sources.items()}
        for i in range(n_layers):  # torchtitan's Llama 3 RoPE is complex (adjacent pairs): its adapter's permute
            for role, heads in (("q", n_heads), ("k", n_kv)):
                name = LLAMA_NAMES[role].format(i=i)
                state[name] = interleaved_to_half(state[name], heads)
        return state

    return _dcp_step("torchtitan", step_dir, step_dir, lambda k: k.startswith(TORCHTITAN_MODEL_PREFIXES),
                     native=native, stored=stored, sources=sources, convert=convert, architecture_file=config_path,
                     step=_step_of(step_dir.name))


# ---------------------------------------------------------------- Megatron (torch_dist)

MEGATRON_MODEL_PREFIXES = ("embedding.", "decoder.", "output_layer.")
# Megatron-LM arguments that change a GPT's maths, with the values of a Llama-style GPT
# (the defaults megatron/training/arguments.py gives a run that does not set them)
MEGATRON_REQUIRED = {
    "normalization": ("RMSNorm",), "swiglu": (True,), "position_embedding_type": ("rope",),
    "rotary_percent": (1.0,), "rotary_interleaved": (False,), "use_rope_scaling": (False,),
    "add_bias_linear": (False,), "add_qkv_bias": (False,), "qk_layernorm": (False,),
    "apply_residual_connection_post_layernorm": (False,), "num_experts": (None,),
    "multi_latent_attention": (False,), "window_size": (None,), "heterogeneous_layers_config_path": (None,),
    "rotary_seq_len_interpolation_factor": (None, 1), "softmax_type": ("vanilla",), "attention_output_gate": (False,),
}
MEGATRON_DEFAULTS = {"normalization": "LayerNorm", "swiglu": False, "position_embedding_type": "learned_absolute",
                     "rotary_percent": 1.0, "rotary_interleaved": False, "use_rope_scaling": False,
                     "add_bias_linear": True, "add_qkv_bias": False, "qk_layernorm": False,
                     "apply_residual_connection_post_layernorm": False, "num_experts": None,
                     "multi_latent_attention": False, "window_size": None, "heterogeneous_layers_config_path": None,
                     "rotary_seq_len_interpolation_factor": None, "softmax_type": "vanilla", "attention_output_gate": False}


def _enum_stand_in(name: str):
    """An inert stand-in for an enum of megatron.core in the saved args: what it was is kept
    as text, and no code of Megatron is imported or run."""
    def stand_in(*args):
        return f"{name}{args}"
    return stand_in


MEGATRON_ENUMS = ("megatron.core.transformer.enums.AttnBackend", "megatron.core.transformer.enums.AttnMaskType",
                  "megatron.core.transformer.enums.ModelType", "megatron.core.enums.ModelType",
                  "megatron.core.transformer.enums.LayerType", "megatron.core.enums.Fp8Recipe",
                  "megatron.core.transformer.enums.CudaGraphScope")


def megatron_args(step_dir: Path) -> dict:
    """The `args` Megatron-LM saves in a torch_dist checkpoint's common.pt, as a dict: read
    with torch.load(weights_only=True), argparse.Namespace allowed, megatron.core's enums inert."""
    import argparse

    from lmsat.checkpoints.pickles import load_torch_file

    where = f"Megatron checkpoint {step_dir}"
    common = step_dir / "common.pt"
    if not common.is_file():
        raise TrainerConfigMissing(f"{where} has no common.pt (Megatron-LM saves its args there), so its architecture "
                                   f"is unknown. Fix: {CONFIG_FIX} (Megatron-LM's args as a dict)")
    allow = [argparse.Namespace, *[(_enum_stand_in(name.rsplit(".", 1)[1]), name) for name in MEGATRON_ENUMS]]
    state = load_torch_file(common, what="Megatron's common state", allow=allow,
                            fix=f"{CONFIG_FIX} (Megatron-LM's args as a dict)")
    args = state.get("args") if isinstance(state, dict) else None
    if args is None:
        raise TrainerConfigMissing(f"{where}: {common} holds no 'args' (Megatron-LM's arguments), so its architecture "
                                   f"is unknown. Fix: {CONFIG_FIX} (Megatron-LM's args as a dict)")
    return dict(vars(args)) if not isinstance(args, dict) else args


def megatron(step_dir: Path, config: dict | None = None) -> SavedStep:
    """Megatron's `iter_NNNNNNN/` in torch_dist format: a Llama-style GPT (RMSNorm, SwiGLU,
    RoPE, no bias), its architecture from the args Megatron-LM saves in common.pt."""
    where = f"Megatron checkpoint {step_dir}"
    args = config if config is not None else megatron_args(step_dir)
    metadata = step_dir / "metadata.json"
    if metadata.is_file():
        backend = _read_json(metadata, where, "copy the checkpoint again").get("sharded_backend")
        if backend != "torch_dist":
            raise refuse(where, "Megatron", [f"sharded_backend {backend!r} in {metadata} (read: torch_dist)"],
                         "save with --ckpt-format torch_dist")
    problems = check_fields({k: v for k, v in args.items() if k in MEGATRON_REQUIRED}, "args",
                            required=MEGATRON_REQUIRED, defaults=MEGATRON_DEFAULTS)
    problems = [p for p in problems if "does not know" not in p]
    d, n_heads, n_layers = args.get("hidden_size"), args.get("num_attention_heads"), args.get("num_layers")
    n_kv = args.get("num_query_groups") if args.get("group_query_attention") else n_heads
    d_head = args.get("kv_channels") or (d // n_heads if isinstance(d, int) and isinstance(n_heads, int) and n_heads else None)
    hidden = args.get("ffn_hidden_size")
    vocab = args.get("padded_vocab_size")
    problems += positive_ints(dict(hidden_size=d, num_attention_heads=n_heads, num_layers=n_layers, num_query_groups=n_kv,
                                   kv_channels=d_head, ffn_hidden_size=hidden, padded_vocab_size=vocab))
    if not problems and n_heads % n_kv:
        problems.append(f"num_query_groups={n_kv} does not divide num_attention_heads={n_heads}")
    if problems:
        raise refuse(where, "Megatron", problems)
    tied = not args.get("untie_embeddings_and_output_weights", False)
    context = int(args.get("max_position_embeddings") or args.get("seq_length") or 4096)
    native = llama_config(vocab=vocab, d=d, layers=n_layers, heads=n_heads, kv_heads=n_kv, intermediate=hidden,
                          eps=float(args.get("norm_epsilon", 1e-5)), theta=float(args.get("rotary_base", 10000)),
                          context=context, tied=tied, head_dim=d_head)
    group = n_heads // n_kv
    qkv_rows = n_kv * (group + 2) * d_head
    stored = {"embedding.word_embeddings.weight": (vocab, d), "decoder.final_layernorm.weight": (d,),
              "decoder.layers.self_attention.linear_qkv.weight": (n_layers, qkv_rows, d),
              "decoder.layers.self_attention.linear_qkv.layer_norm_weight": (n_layers, d),
              "decoder.layers.self_attention.linear_proj.weight": (n_layers, d, n_heads * d_head),
              "decoder.layers.mlp.linear_fc1.weight": (n_layers, 2 * hidden, d),
              "decoder.layers.mlp.linear_fc1.layer_norm_weight": (n_layers, d),
              "decoder.layers.mlp.linear_fc2.weight": (n_layers, d, hidden)}
    sources = {LLAMA_NAMES["embed"]: "embedding.word_embeddings.weight", LLAMA_NAMES["norm"]: "decoder.final_layernorm.weight"}
    if not tied:
        stored["output_layer.weight"] = (vocab, d)
        sources[LLAMA_NAMES["head"]] = "output_layer.weight"
    per_layer = {"q": "self_attention.linear_qkv.weight", "k": "self_attention.linear_qkv.weight",
                 "v": "self_attention.linear_qkv.weight", "o": "self_attention.linear_proj.weight",
                 "gate": "mlp.linear_fc1.weight", "up": "mlp.linear_fc1.weight", "down": "mlp.linear_fc2.weight",
                 "input_norm": "self_attention.linear_qkv.layer_norm_weight",
                 "post_attention_norm": "mlp.linear_fc1.layer_norm_weight"}
    for i in range(n_layers):
        for role, name in per_layer.items():
            sources[LLAMA_NAMES[role].format(i=i)] = f"decoder.layers.{name}"

    def convert(tensors: dict) -> dict:
        state = {native_name: tensors[source] for native_name, source in sources.items() if not source.startswith("decoder.layers.")}
        for i in range(n_layers):
            names = {role: LLAMA_NAMES[role].format(i=i) for role in per_layer}
            # (n_kv, group + 2, d_head, d): per query group, its q heads' rows, then k's, then v's
            qkv = tensors["decoder.layers.self_attention.linear_qkv.weight"][i].reshape(n_kv, group + 2, d_head, d)
            state[names["q"]] = qkv[:, :group].reshape(n_heads * d_head, d)
            state[names["k"]] = qkv[:, group].reshape(n_kv * d_head, d)
            state[names["v"]] = qkv[:, group + 1].reshape(n_kv * d_head, d)
            gate, up = tensors["decoder.layers.mlp.linear_fc1.weight"][i].chunk(2, dim=0)  # Megatron's glu: act(x[0]) * x[1]
            state.update({names["gate"]: gate, names["up"]: up,
                          names["o"]: tensors["decoder.layers.self_attention.linear_proj.weight"][i],
                          names["down"]: tensors["decoder.layers.mlp.linear_fc2.weight"][i],
                          names["input_norm"]: tensors["decoder.layers.self_attention.linear_qkv.layer_norm_weight"][i],
                          names["post_attention_norm"]: tensors["decoder.layers.mlp.linear_fc1.layer_norm_weight"][i]})
        return state

    def is_model_key(key: str) -> bool:
        return key.startswith(MEGATRON_MODEL_PREFIXES) and "_extra_state" not in key

    return _dcp_step("megatron", step_dir, step_dir, is_model_key, native=native, stored=stored, sources=sources,
                     convert=convert, architecture_file=step_dir / "common.pt", step=_step_of(step_dir.name))
