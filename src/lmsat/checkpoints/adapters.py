"""Architecture adapters: one place that knows where each model family keeps its weights.

The metrics (`spectra`, `attention`) want plain matrices: the LM head W (V x d), the final
norm, and per layer the attention weights split per head. Each transformers family stores
them differently (GPT-NeoX fuses q,k,v head-interleaved, GPT-2 uses transposed Conv1D, Llama
has grouped-query attention, ...). This module hides that behind a small registry keyed by
`model.config.model_type`:

    from lmsat.checkpoints.adapters import lm_head_matrix, attention_heads, num_layers
    W = lm_head_matrix(model)              # (V, d), shares storage with the model
    heads = attention_heads(model, layer=0)
    heads.q[h] @ x                          # query of head h for a (post-norm) input x (d,)

Per-head convention (column-vector form, the shapes of torch `nn.Linear.weight`):

    q_h = q[h] @ x + q_bias[h]        q, k, v: (n_heads, d_head, d)
    k_h = k[h] @ x + k_bias[h]        q_bias, k_bias, v_bias: (n_heads, d_head) or None
    v_h = v[h] @ x + v_bias[h]
    out = sum_h o[h] @ z_h + o_bias   o: (n_heads, d, d_head), z_h = attention-mixed v_h

so the pre-softmax score of head h is (q[h] x_i)^T (k[h] x_j) * scale (+ bias terms and
rotary position embedding where the family uses one), i.e. the bilinear form
x_i^T q[h]^T k[h] x_j. Grouped-query attention (n_kv_heads < n_heads) is expanded by
repeating each key/value head for the n_heads / n_kv_heads query heads that share it (query
head h reads kv head h // (n_heads / n_kv_heads), as transformers' `repeat_kv` does);
`AttentionHeads.n_kv_heads` records how many distinct ones there are.

Returned tensors are detached views of the model's parameters (no copy, same dtype).
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class AttentionHeads:
    """Attention weights of one layer, split per head (see the module docstring)."""

    q: torch.Tensor  # (n_heads, d_head, d) query projection per head
    k: torch.Tensor  # (n_heads, d_head, d) key projection per head (kv heads repeated for GQA)
    v: torch.Tensor  # (n_heads, d_head, d) value projection per head (repeated for GQA)
    o: torch.Tensor  # (n_heads, d, d_head) output projection slice read by each head
    q_bias: torch.Tensor | None  # (n_heads, d_head), None when the family has no bias
    k_bias: torch.Tensor | None  # (n_heads, d_head)
    v_bias: torch.Tensor | None  # (n_heads, d_head)
    o_bias: torch.Tensor | None  # (d,) added once after summing the heads
    n_kv_heads: int  # distinct key/value heads before repetition (== n_heads without GQA)

    @property
    def n_heads(self) -> int:
        return self.q.shape[0]

    @property
    def d_head(self) -> int:
        return self.q.shape[1]


@dataclass(frozen=True)
class FamilyAdapter:
    """How to find the pieces of one architecture family, given the base (headless) model."""

    layers: Callable[[nn.Module], Sequence[nn.Module]]  # base model -> decoder blocks in order
    final_norm: Callable[[nn.Module], nn.Module | None]  # base model -> norm before the head
    heads: Callable[[nn.Module, nn.Module], AttentionHeads]  # (config holder, block) -> heads
    note: str = ""  # caveat a user of this family should know


def _bias(linear: nn.Module) -> torch.Tensor | None:
    bias = getattr(linear, "bias", None)
    return None if bias is None else bias.detach()


def _split_rows(weight: torch.Tensor, n_heads: int) -> torch.Tensor:
    """nn.Linear weight (n_heads * d_head, d) -> (n_heads, d_head, d)."""
    return weight.detach().view(n_heads, -1, weight.shape[-1])


def _split_columns(weight: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Output nn.Linear weight (d, n_heads * d_head) -> (n_heads, d, d_head)."""
    d = weight.shape[0]
    return weight.detach().view(d, n_heads, -1).permute(1, 0, 2)


def _split_bias(bias: torch.Tensor | None, n_heads: int) -> torch.Tensor | None:
    return None if bias is None else bias.view(n_heads, -1)


def _gpt_neox_heads(config, block: nn.Module) -> AttentionHeads:
    attn = block.attention
    n_heads = config.num_attention_heads
    # The fused output is laid out per head: (n_heads, [q | k | v], d_head); the model's own
    # forward does `.view(..., n_heads, 3 * d_head)` then `chunk(3, dim=-1)`.
    fused = attn.query_key_value.weight.detach()  # (3 * n_heads * d_head, d)
    per_head = fused.view(n_heads, 3, -1, fused.shape[-1])  # (n_heads, 3, d_head, d)
    fused_bias = _bias(attn.query_key_value)
    bias = None if fused_bias is None else fused_bias.view(n_heads, 3, -1)  # (n_heads, 3, d_head)
    return AttentionHeads(
        q=per_head[:, 0],
        k=per_head[:, 1],
        v=per_head[:, 2],
        o=_split_columns(attn.dense.weight, n_heads),
        q_bias=None if bias is None else bias[:, 0],
        k_bias=None if bias is None else bias[:, 1],
        v_bias=None if bias is None else bias[:, 2],
        o_bias=_bias(attn.dense),
        n_kv_heads=n_heads,
    )


def _gpt2_heads(config, block: nn.Module) -> AttentionHeads:
    attn = block.attn
    n_heads = config.num_attention_heads
    # Conv1D computes x @ W + b with W (d, 3d): columns are [q | k | v], each (n_heads * d_head).
    fused = attn.c_attn.weight.detach().T  # (3d, d), now nn.Linear orientation
    q, k, v = fused.chunk(3, dim=0)  # each (d, d)
    q_bias, k_bias, v_bias = attn.c_attn.bias.detach().chunk(3)
    out = attn.c_proj.weight.detach().T  # (d, d) nn.Linear orientation: (out, n_heads * d_head)
    return AttentionHeads(
        q=_split_rows(q, n_heads),
        k=_split_rows(k, n_heads),
        v=_split_rows(v, n_heads),
        o=_split_columns(out, n_heads),
        q_bias=q_bias.view(n_heads, -1),
        k_bias=k_bias.view(n_heads, -1),
        v_bias=v_bias.view(n_heads, -1),
        o_bias=attn.c_proj.bias.detach(),
        n_kv_heads=n_heads,
    )


def _separate_projection_heads(attn: nn.Module, out_proj: nn.Module, config) -> AttentionHeads:
    """Shared by OPT and the Llama-style families: q/k/v/out as separate nn.Linear."""
    n_heads = config.num_attention_heads
    n_kv_heads = getattr(config, "num_key_value_heads", None) or n_heads
    repeats = n_heads // n_kv_heads

    def kv(linear: nn.Module) -> tuple[torch.Tensor, torch.Tensor | None]:
        weight = _split_rows(linear.weight, n_kv_heads).repeat_interleave(repeats, dim=0)
        bias = _split_bias(_bias(linear), n_kv_heads)
        return weight, None if bias is None else bias.repeat_interleave(repeats, dim=0)

    k, k_bias = kv(attn.k_proj)
    v, v_bias = kv(attn.v_proj)
    return AttentionHeads(
        q=_split_rows(attn.q_proj.weight, n_heads),
        k=k,
        v=v,
        o=_split_columns(out_proj.weight, n_heads),
        q_bias=_split_bias(_bias(attn.q_proj), n_heads),
        k_bias=k_bias,
        v_bias=v_bias,
        o_bias=_bias(out_proj),
        n_kv_heads=n_kv_heads,
    )


_GPT_NEOX = FamilyAdapter(
    layers=lambda base: base.layers,
    final_norm=lambda base: base.final_layer_norm,
    heads=_gpt_neox_heads,
)
_GPT2 = FamilyAdapter(
    layers=lambda base: base.h,
    final_norm=lambda base: base.ln_f,
    heads=_gpt2_heads,
)
_OPT = FamilyAdapter(
    layers=lambda base: base.decoder.layers,
    final_norm=lambda base: base.decoder.final_layer_norm,
    heads=lambda config, block: _separate_projection_heads(
        block.self_attn, block.self_attn.out_proj, config
    ),
    note=(
        "OPT-350m has no final norm (None) and a `project_out` (d -> word_embed_proj_dim) "
        "between the last layer and the head, so its head is V x word_embed_proj_dim."
    ),
)
_LLAMA_STYLE = FamilyAdapter(
    layers=lambda base: base.layers,
    final_norm=lambda base: base.norm,
    heads=lambda config, block: _separate_projection_heads(
        block.self_attn, block.self_attn.o_proj, config
    ),
    note="Gemma's RMSNorm scales by (1 + weight): apply the returned module, not its weight.",
)

_OLMO2 = FamilyAdapter(
    layers=lambda base: base.layers,
    final_norm=lambda base: base.norm,
    heads=lambda config, block: _separate_projection_heads(
        block.self_attn, block.self_attn.o_proj, config
    ),
    note=(
        "OLMo 2 applies RMSNorm to the whole q_proj / k_proj outputs (QK-norm) before the "
        "heads are split: q[h], k[h] are the projection weights, and the score of head h is "
        "(q_norm(Q x)_h)^T (k_norm(K x)_h), not x^T q[h]^T k[h] x; its qk products are of the "
        "weights (what weight decay acts on), not of the score's bilinear form."
    ),
)

# model.config.model_type -> adapter. Llama-style = separate q/k/v/o_proj under
# model.model.layers[i].self_attn, final norm model.model.norm, no q/k norm. Checkpoints of
# formats transformers has no class for (hf_olmo, pico_decoder) are loaded as llama or olmo
# (lmsat.checkpoints.formats): their q, k, v are the stored fused rows, Pico's q and k reordered within
# each head, which leaves every q[h]^T k[h] as stored.
ADAPTERS: dict[str, FamilyAdapter] = {
    "gpt_neox": _GPT_NEOX,
    "gpt2": _GPT2,
    "opt": _OPT,
    "llama": _LLAMA_STYLE,
    "gemma": _LLAMA_STYLE,
    "mistral": _LLAMA_STYLE,
    "qwen2": _LLAMA_STYLE,
    "olmo": _LLAMA_STYLE,
    "olmo2": _OLMO2,
    "smollm3": _LLAMA_STYLE,  # SmolLM3: Llama's modules; its NoPE layers change the scores, not the weights' places
}
SUPPORTED_FAMILIES = tuple(sorted(ADAPTERS))


def family_adapter(model: nn.Module) -> FamilyAdapter:
    """The adapter for `model.config.model_type`; ValueError for an unknown family."""
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if model_type not in ADAPTERS:
        raise ValueError(
            f"model_type {model_type!r} has no adapter in lmsat.checkpoints.adapters; supported: "
            f"{', '.join(SUPPORTED_FAMILIES)}. Add an entry to lmsat.checkpoints.adapters.ADAPTERS."
        )
    return ADAPTERS[model_type]


def decoder_layers(model: nn.Module) -> Sequence[nn.Module]:
    """The transformer blocks of `model` in forward order."""
    return family_adapter(model).layers(model.base_model)


def num_layers(model: nn.Module) -> int:
    """Number of transformer blocks."""
    return len(decoder_layers(model))


def final_norm(model: nn.Module) -> nn.Module | None:
    """The norm applied to the last hidden state before the LM head (None if the model has none)."""
    return family_adapter(model).final_norm(model.base_model)


@torch.no_grad()
def lm_head_matrix(model: nn.Module) -> torch.Tensor:
    """The LM head W, (V, d): logits = W @ h. With tied embeddings this is the input embedding.

    V counts every row of the matrix, padding rows included (Pythia: 50304 rows for 50277
    tokenizer entries); drop them downstream (`spectra.singular_values(n_valid_rows=...)`).
    """
    family_adapter(model)  # unsupported families fail here, naming themselves
    output = model.get_output_embeddings()
    if output is None:
        raise ValueError(
            f"{type(model).__name__} has no output embeddings (no LM head): load it with "
            "AutoModelForCausalLM, not AutoModel."
        )
    # Tied models return their input embedding here (the same Parameter); a head bias, if a
    # family had one, is left out: the spectra measure the linear map W.
    return output.weight.detach()


def parameter_name(model: nn.Module, view: torch.Tensor) -> str | None:
    """Name of the parameter of `model` that `view` (e.g. a field of AttentionHeads) reads,
    by shared storage; None when it reads none (a copy)."""
    storage = view.untyped_storage().data_ptr()
    for name, parameter in model.named_parameters():
        if parameter.untyped_storage().data_ptr() == storage:
            return name
    return None


def attention_heads(model: nn.Module, layer: int) -> AttentionHeads:
    """Per-head Q, K, V, O weights of block `layer` (0-based), see the module docstring."""
    adapter = family_adapter(model)
    layers = adapter.layers(model.base_model)
    if not 0 <= layer < len(layers):
        raise ValueError(f"layer={layer} is out of range: the model has {len(layers)} layers (0-based).")
    return adapter.heads(model.config, layers[layer])
