"""Adapters against the models' own forward passes (tiny random models built offline)."""

import sys

import pytest
import torch
from transformers import (
    GemmaConfig,
    GemmaForCausalLM,
    GPT2Config,
    GPT2LMHeadModel,
    GPTNeoConfig,
    GPTNeoForCausalLM,
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    OlmoConfig,
    OlmoForCausalLM,
    OPTConfig,
    OPTForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from lmsat.adapters import (
    SUPPORTED_FAMILIES,
    attention_heads,
    decoder_layers,
    final_norm,
    lm_head_matrix,
    num_layers,
)

VOCAB = 97
D = 32
N_HEADS = 4
N_LAYERS = 2
SEQ = 7
COMMON = dict(vocab_size=VOCAB, bos_token_id=0, eos_token_id=1, pad_token_id=2, attn_implementation="eager")
LLAMA_STYLE = dict(
    COMMON, hidden_size=D, num_hidden_layers=N_LAYERS, num_attention_heads=N_HEADS, intermediate_size=48
)


def _randomise_biases(model: torch.nn.Module) -> None:
    """Non-zero biases so the test would notice a wrongly split bias (inits are zero)."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("bias"):
                param.normal_(0.0, 0.5)


def build(family: str, tied: bool = False) -> torch.nn.Module:
    torch.manual_seed(0)
    if family == "gpt_neox":
        config = GPTNeoXConfig(
            **COMMON, hidden_size=D, num_hidden_layers=N_LAYERS, num_attention_heads=N_HEADS,
            intermediate_size=48, tie_word_embeddings=tied,
        )  # partial rotary (0.25) and fused head-interleaved qkv, as in Pythia
        model = GPTNeoXForCausalLM(config)
    elif family == "gpt2":
        config = GPT2Config(**COMMON, n_embd=D, n_layer=N_LAYERS, n_head=N_HEADS, n_positions=32)
        model = GPT2LMHeadModel(config)
    elif family == "opt":
        config = OPTConfig(
            **COMMON, hidden_size=D, num_hidden_layers=N_LAYERS, num_attention_heads=N_HEADS,
            ffn_dim=48, word_embed_proj_dim=D, tie_word_embeddings=tied,
        )
        model = OPTForCausalLM(config)
    elif family == "llama":  # grouped-query attention: 2 kv heads for 4 query heads
        model = LlamaForCausalLM(LlamaConfig(**LLAMA_STYLE, num_key_value_heads=2, tie_word_embeddings=tied))
    elif family == "gemma":  # multi-query attention, head_dim != d / n_heads, tied head
        model = GemmaForCausalLM(GemmaConfig(**LLAMA_STYLE, num_key_value_heads=1, head_dim=12))
    elif family == "mistral":
        model = MistralForCausalLM(MistralConfig(**LLAMA_STYLE, num_key_value_heads=2))
    elif family == "qwen2":  # q/k/v biases
        model = Qwen2ForCausalLM(Qwen2Config(**LLAMA_STYLE, num_key_value_heads=2))
    elif family == "olmo":
        model = OlmoForCausalLM(OlmoConfig(**LLAMA_STYLE, num_key_value_heads=4))
    else:
        raise AssertionError(family)
    _randomise_biases(model)
    return model.eval()


def _layer_output(output):
    return output[0] if isinstance(output, tuple) else output


@torch.no_grad()
def _run_capturing(model: torch.nn.Module, layer: int):
    """Forward a random sequence; capture layer `layer`'s attention input/kwargs/output."""
    block = decoder_layers(model)[layer]
    attn = next(m for name, m in block.named_children() if name in ("attention", "attn", "self_attn"))
    captured = {}

    def pre_hook(module, args, kwargs):
        captured["x"] = args[0] if args else kwargs["hidden_states"]
        captured["kwargs"] = kwargs

    def post_hook(module, args, kwargs, output):
        captured["out"] = output[0]

    def last_block_hook(module, args, output):
        captured["last_hidden"] = _layer_output(output)

    handles = [
        attn.register_forward_pre_hook(pre_hook, with_kwargs=True),
        attn.register_forward_hook(post_hook, with_kwargs=True),
        decoder_layers(model)[-1].register_forward_hook(last_block_hook),
    ]
    generator = torch.Generator().manual_seed(1)
    input_ids = torch.randint(3, VOCAB, (2, SEQ), generator=generator)
    try:
        result = model(input_ids, output_attentions=True)
    finally:
        for handle in handles:
            handle.remove()
    return attn, captured, result


def _recompute_attention(model, attn, captured, layer):
    """Attention probabilities and output of one layer from the adapter's per-head split."""
    heads = attention_heads(model, layer)
    x = captured["x"]  # (B, T, d)

    def project(weight, bias):  # (H, d_head, d) -> (B, H, T, d_head)
        y = torch.einsum("hed,btd->bhte", weight, x)
        return y if bias is None else y + bias[None, :, None, :]

    q = project(heads.q, heads.q_bias)
    k = project(heads.k, heads.k_bias)
    v = project(heads.v, heads.v_bias)
    position_embeddings = captured["kwargs"].get("position_embeddings")
    if position_embeddings is not None:  # rotary: use the model's own rotation on our q, k
        cos, sin = position_embeddings
        q, k = sys.modules[type(attn).__module__].apply_rotary_pos_emb(q, k, cos, sin)
    scores = q @ k.transpose(-1, -2) * attn.scaling  # (B, H, T, T)
    causal = torch.ones(SEQ, SEQ, dtype=torch.bool).tril()
    probs = scores.masked_fill(~causal, float("-inf")).softmax(-1)
    mixed = probs @ v  # (B, H, T, d_head)
    out = torch.einsum("hdk,bhtk->btd", heads.o, mixed)
    if heads.o_bias is not None:
        out = out + heads.o_bias
    return heads, probs, out


FAMILIES = ["gpt_neox", "gpt2", "opt", "llama", "gemma", "mistral", "qwen2", "olmo"]


def test_every_registered_family_is_tested():
    assert sorted(FAMILIES) == sorted(SUPPORTED_FAMILIES)


@pytest.mark.parametrize("family", FAMILIES)
def test_per_head_split_reproduces_attention_of_layer_0_and_1(family):
    model = build(family)
    for layer in range(N_LAYERS):
        attn, captured, result = _run_capturing(model, layer)
        heads, probs, out = _recompute_attention(model, attn, captured, layer)
        torch.testing.assert_close(probs, result.attentions[layer], atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(out, captured["out"], atol=1e-5, rtol=1e-4)
    assert heads.q.shape == heads.k.shape == heads.v.shape == (N_HEADS, heads.d_head, D)
    assert heads.o.shape == (N_HEADS, D, heads.d_head)


def test_neox_split_is_head_interleaved_not_blocked():
    """A blocked (q|k|v) reading of the fused weight must NOT reproduce the attention."""
    model = build("gpt_neox")
    heads = attention_heads(model, 0)
    fused = model.gpt_neox.layers[0].attention.query_key_value.weight
    blocked_q = fused[:D].view(N_HEADS, -1, D)
    assert not torch.equal(blocked_q, heads.q)
    torch.testing.assert_close(heads.q[1], fused[3 * 8 : 4 * 8])  # head 1's q rows (d_head 8)


@pytest.mark.parametrize("family", ["llama", "gemma"])
def test_gqa_repeats_kv_heads_for_the_query_heads_that_share_them(family):
    model = build(family)
    heads = attention_heads(model, 0)
    group = N_HEADS // heads.n_kv_heads
    assert heads.n_kv_heads < N_HEADS
    for h in range(N_HEADS):
        torch.testing.assert_close(heads.k[h], heads.k[(h // group) * group])


@pytest.mark.parametrize("family", FAMILIES)
def test_head_matrix_and_final_norm_produce_the_logits(family):
    model = build(family)
    W = lm_head_matrix(model)
    assert W.shape == (VOCAB, D)
    assert torch.equal(W, model.get_output_embeddings().weight)
    assert num_layers(model) == N_LAYERS
    _, captured, result = _run_capturing(model, 0)
    logits = final_norm(model)(captured["last_hidden"]) @ W.T
    torch.testing.assert_close(logits, result.logits, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("family", ["gpt_neox", "opt", "llama", "gpt2", "gemma"])
def test_tied_head_is_the_input_embedding(family):
    model = build(family, tied=True)
    W = lm_head_matrix(model)
    embedding = model.get_input_embeddings().weight
    assert W.data_ptr() == embedding.data_ptr() and torch.equal(W, embedding)


def test_untied_head_is_not_the_input_embedding():
    model = build("gpt_neox", tied=False)  # Pythia: untied embed_out
    assert lm_head_matrix(model).data_ptr() != model.get_input_embeddings().weight.data_ptr()


def test_unknown_family_names_itself_and_the_supported_ones():
    config = GPTNeoConfig(
        vocab_size=VOCAB, hidden_size=D, num_layers=2, num_heads=N_HEADS,
        attention_types=[[["global"], 2]], max_position_embeddings=32,
    )
    model = GPTNeoForCausalLM(config)
    with pytest.raises(ValueError, match=r"'gpt_neo'.*gpt2.*gpt_neox.*llama"):
        lm_head_matrix(model)
    with pytest.raises(ValueError, match="gpt_neo"):
        attention_heads(model, 0)


def test_layer_out_of_range():
    with pytest.raises(ValueError, match="layer=5"):
        attention_heads(build("gpt2"), 5)
