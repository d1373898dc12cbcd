"""What every trainer reader shares: the plan of one saved step (SavedStep), the
transformers configs it converts into, the checks of a run's own architecture file, and
the named refusals.

A reader (lmsat.checkpoints.distributed_families, lmsat.checkpoints.single_file) reads a
saved step's architecture from the run's own file (OLMo-core's config.json, torchtitan's
job config, Megatron's saved args, nanoGPT's model_args, nanochat's meta JSON, litgpt's
model_config.yaml, a Lightning module's transformers config), checks every field that
changes the maths (mapped, or refused by name: `check_fields`), and returns a SavedStep:
the transformers config of the same maths, the tensors the files must hold (names and
shapes), how to read them (model tensors only) and how to rename and reshape them into the
transformers class's state dict. lmsat.checkpoints.trainer_layouts loads it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from lmsat.errors import ModelLoadError

EXTENDING = "docs/extending.md, 'A checkpoint format transformers does not load'"


class TrainerConfigMissing(ModelLoadError):
    """A saved step whose run does not record its architecture where lmsat reads it: names
    the file to put there (lmsat never guesses an architecture from tensor shapes)."""


class UnsupportedArchitecture(ModelLoadError):
    """A run's architecture (a field or value of its config file) that no conversion here
    maps to a transformers class of the same maths; or a layout of a family without a key map."""


@dataclass(frozen=True)
class SavedStep:
    """One saved training step of a trainer lmsat reads, planned (nothing read but its index)."""

    fmt: str  # the trainer: "olmo-core", "torchtitan", "megatron", "nanogpt", "nanochat", "litgpt", "lightning"
    path: Path  # the saved step: a folder or a file
    native: object  # the transformers config of the converted model (its architectures[0] names the class)
    stored: dict[str, tuple[int, ...]]  # model tensors in the files -> shape the run's architecture implies
    sources: dict[str, str]  # transformers tensor name -> the stored one it is read from
    convert: Callable[[dict], dict]  # stored tensors -> transformers state dict
    index: Callable[[], dict[str, tuple[str, tuple[int, ...]]]]  # {stored: (dtype, shape)} of the files, no bytes read
    read: Callable[[], dict]  # the stored model tensors (files checked first; the optimizer's never read)
    files: tuple[Path, ...]  # the files its tensors are in
    architecture_file: Path  # where the architecture was read
    step: int | None = None  # the training step the files record, when they do
    notes: tuple[str, ...] = field(default_factory=tuple)  # what the conversion does not keep bit for bit

    @property
    def summary(self) -> str:
        return f"{self.fmt} as {self.native.architectures[0]}"


def refuse(where, trainer: str, problems: list[str], fix: str = "") -> UnsupportedArchitecture:
    return UnsupportedArchitecture(
        f"{where}: its {trainer} architecture has {'; '.join(problems)}. lmsat converts a {trainer} checkpoint to the "
        f"transformers class of the same maths and refuses what it does not convert rather than compute something else. "
        f"Fix: {fix or 'analyse another run, or add the conversion (' + EXTENDING + ')'}"
    )


def check_fields(section: dict, where: str, *, mapped=(), inert=(), required: dict | None = None,
                 defaults: dict | None = None) -> list[str]:
    """Problems of one section of a run's architecture file: a field neither mapped, inert
    nor required (it may change the maths), or a required field with another value.
    `defaults`: the framework's value of a required field the file leaves out."""
    required, defaults = required or {}, defaults or {}
    problems = []
    unknown = sorted(k for k in section if k not in mapped and k not in inert and k not in required)
    if unknown:
        problems.append(f"field(s) {', '.join(f'{where}.{k}' for k in unknown)} that lmsat's conversion does not know "
                        "(they may change the maths)")
    for key, allowed in required.items():
        value = section.get(key, defaults.get(key))
        if value not in allowed:
            problems.append(f"{where}.{key}={value!r} (converted: {' or '.join(map(repr, allowed))})")
    return problems


def positive_ints(values: dict) -> list[str]:
    """Problems of sizes that must be positive integers."""
    return [f"{k}={v!r} (a positive integer is needed)" for k, v in values.items()
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0]


# ---------------------------------------------------------------- transformers configs of the converted models


def rope_settings(theta: float, scaling: dict | None = None) -> dict:
    """RoPE's settings for a transformers config: `rope_parameters` (transformers 5) or
    `rope_theta` and `rope_scaling` (4.x). `scaling`: e.g. {"rope_type": "llama3", "factor": 8, ...}."""
    import transformers
    from packaging.version import Version

    if Version(transformers.__version__) >= Version("5.0.0.dev0"):
        return {"rope_parameters": {"rope_type": "default", "rope_theta": float(theta), **(scaling or {})}}
    return {"rope_theta": float(theta), **({"rope_scaling": dict(scaling)} if scaling else {})}


def _named(config, architecture: str):
    config.architectures = [architecture]
    return config


def llama_config(*, vocab: int, d: int, layers: int, heads: int, kv_heads: int, intermediate: int, eps: float,
                 theta: float, context: int, tied: bool, head_dim: int | None = None, scaling: dict | None = None):
    """LlamaForCausalLM: RMSNorm (weight after normalising), SwiGLU, rotate-half RoPE, no bias."""
    import transformers

    return _named(transformers.LlamaConfig(
        vocab_size=vocab, hidden_size=d, intermediate_size=intermediate, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim or d // heads, hidden_act="silu",
        max_position_embeddings=context, rms_norm_eps=float(eps), tie_word_embeddings=tied, attention_bias=False,
        mlp_bias=False, bos_token_id=None, eos_token_id=None, pad_token_id=None, **rope_settings(theta, scaling),
    ), "LlamaForCausalLM")


def olmo2_config(*, vocab: int, d: int, layers: int, heads: int, kv_heads: int, intermediate: int, eps: float,
                 theta: float, context: int, tied: bool):
    """Olmo2ForCausalLM: OLMo 2's blocks (norms after attention and MLP, before the residual
    add; RMSNorm of the whole q and k projections), SwiGLU, rotate-half RoPE, no bias."""
    import transformers

    return _named(transformers.Olmo2Config(
        vocab_size=vocab, hidden_size=d, intermediate_size=intermediate, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads, hidden_act="silu", max_position_embeddings=context,
        rms_norm_eps=float(eps), tie_word_embeddings=tied, attention_bias=False, bos_token_id=None, eos_token_id=None,
        pad_token_id=None, **rope_settings(theta),
    ), "Olmo2ForCausalLM")


def gpt2_config(*, vocab: int, d: int, layers: int, heads: int, context: int, eps: float = 1e-5,
                activation: str = "gelu"):
    """GPT2LMHeadModel: learned positions, pre-LayerNorm blocks, fused c_attn (Conv1D: (in, out)), tied head."""
    import transformers

    return _named(transformers.GPT2Config(
        vocab_size=vocab, n_positions=context, n_embd=d, n_layer=layers, n_head=heads, n_inner=4 * d,
        activation_function=activation, layer_norm_epsilon=float(eps), tie_word_embeddings=True,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=None, eos_token_id=None,
    ), "GPT2LMHeadModel")


def gpt_neox_config(*, vocab: int, d: int, layers: int, heads: int, intermediate: int, eps: float, theta: float,
                    rotary_pct: float, context: int, parallel: bool, tied: bool, activation: str):
    """GPTNeoXForCausalLM (Pythia's class): LayerNorm with bias, biased projections, partial rotate-half RoPE."""
    import transformers

    rope = rope_settings(theta)
    if "rope_parameters" in rope:
        rope["rope_parameters"]["partial_rotary_factor"] = float(rotary_pct)
    else:
        rope["rotary_pct"] = float(rotary_pct)
        rope["rotary_emb_base"] = float(theta)
    return _named(transformers.GPTNeoXConfig(
        vocab_size=vocab, hidden_size=d, num_hidden_layers=layers, num_attention_heads=heads,
        intermediate_size=intermediate, hidden_act=activation, layer_norm_eps=float(eps),
        max_position_embeddings=context, use_parallel_residual=parallel, tie_word_embeddings=tied,
        attention_bias=True, hidden_dropout=0.0, attention_dropout=0.0, bos_token_id=None, eos_token_id=None, **rope,
    ), "GPTNeoXForCausalLM")


def nanochat_config(*, vocab: int, d: int, layers: int, heads: int, kv_heads: int, context: int, eps: float,
                    theta: float, softcap: float):
    """NanoChatForCausalLM (transformers' class of nanochat's 2025 GPT): parameter-free RMSNorm
    (on the embedding, before each block and at the end), RMSNorm of q and k per head after
    RoPE, relu^2 MLP of width 4d, untied head, logits soft-capped."""
    import transformers

    if not hasattr(transformers, "NanoChatConfig"):
        raise UnsupportedArchitecture(f"transformers {transformers.__version__} has no NanoChatForCausalLM (added in 5.0). "
                                      "Fix: upgrade transformers")
    return _named(transformers.NanoChatConfig(
        vocab_size=vocab, hidden_size=d, intermediate_size=4 * d, num_hidden_layers=layers, num_attention_heads=heads,
        num_key_value_heads=kv_heads, max_position_embeddings=context, hidden_act="relu2", rms_norm_eps=float(eps),
        final_logit_softcapping=float(softcap), tie_word_embeddings=False, attention_bias=False,
        bos_token_id=None, eos_token_id=None, pad_token_id=None, **rope_settings(theta),
    ), "NanoChatForCausalLM")


def interleaved_to_half(weight, n_heads: int):
    """Projection rows (n_heads * d_head, d) of a head whose RoPE rotates the pairs (2i, 2i+1)
    reordered for one that rotates (i, i + d_head/2): per head, rows 0, 2, 4, ... then 1, 3, 5, ...
    (transformers' Llama conversion's `permute`; torchtitan's state_dict_adapter does the same)."""
    rows, d = weight.shape
    return weight.reshape(n_heads, rows // n_heads // 2, 2, d).transpose(1, 2).reshape(rows, d)


# LlamaForCausalLM's and Olmo2ForCausalLM's tensor names by role ({i}: the layer)
LLAMA_NAMES = {
    "embed": "model.embed_tokens.weight", "norm": "model.norm.weight", "head": "lm_head.weight",
    "q": "model.layers.{i}.self_attn.q_proj.weight", "k": "model.layers.{i}.self_attn.k_proj.weight",
    "v": "model.layers.{i}.self_attn.v_proj.weight", "o": "model.layers.{i}.self_attn.o_proj.weight",
    "q_norm": "model.layers.{i}.self_attn.q_norm.weight", "k_norm": "model.layers.{i}.self_attn.k_norm.weight",
    "gate": "model.layers.{i}.mlp.gate_proj.weight", "up": "model.layers.{i}.mlp.up_proj.weight",
    "down": "model.layers.{i}.mlp.down_proj.weight", "input_norm": "model.layers.{i}.input_layernorm.weight",
    "post_attention_norm": "model.layers.{i}.post_attention_layernorm.weight",
    "post_feedforward_norm": "model.layers.{i}.post_feedforward_layernorm.weight",
}


def tensor_mismatches(expected: dict, found: dict, described_by: str, source: str) -> list[str]:
    """What differs between the tensors an architecture implies ({name: shape}, read from
    `source`, which `described_by` names in a sentence) and those its files hold ({name:
    shape}): one phrase per kind (missing, unknown, of another shape), naming at most 8
    tensors each; [] when they agree."""
    missing = sorted(set(expected) - set(found))
    unknown = sorted(set(found) - set(expected))
    wrong = sorted(f"{k} (stored {tuple(found[k])}, {source} {tuple(expected[k])})"
                   for k in expected if k in found and tuple(found[k]) != tuple(expected[k]))
    return [f"{len(keys)} tensor(s) {what}: {', '.join(keys[:8])}{' and more' if len(keys) > 8 else ''}"
            for what, keys in (("missing from the files", missing),
                               (f"in the files but not in the model {described_by} describes", unknown),
                               (f"of another shape than {described_by} implies", wrong)) if keys]
