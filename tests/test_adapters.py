"""Adapters against the models' own forward passes (tiny random models built offline)."""

import sys

import numpy as np
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
    Olmo2Config,
    Olmo2ForCausalLM,
    OlmoConfig,
    OlmoForCausalLM,
    OPTConfig,
    OPTForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    SmolLM3Config,
    SmolLM3ForCausalLM,
)

from lmsat.checkpoints.adapters import (
    SUPPORTED_FAMILIES,
    attention_heads,
    decoder_layers,
    family_adapter,
    final_norm,
    lm_head_matrix,
    num_layers,
)

VOCAB = 97
D = 32
N_HEADS = 4
N_LAYERS = 2
SEQ = 7
PROJ = 16  # word_embed_proj_dim of the OPT-350m-like model (!= D)
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
    elif family == "olmo2":  # QK-norm over the full q / k projections
        model = Olmo2ForCausalLM(Olmo2Config(**LLAMA_STYLE, num_key_value_heads=4))
    elif family == "smollm3":  # Llama's blocks, grouped-query, some layers without RoPE (every 4th in SmolLM3-3B)
        model = SmolLM3ForCausalLM(SmolLM3Config(**LLAMA_STYLE, num_key_value_heads=2, tie_word_embeddings=tied,
                                                 no_rope_layer_interval=2))
    elif family == "opt_project_out":  # OPT-350m: head and embedding PROJ wide, post-norm blocks
        config = OPTConfig(
            **COMMON, hidden_size=D, num_hidden_layers=N_LAYERS, num_attention_heads=N_HEADS,
            ffn_dim=48, word_embed_proj_dim=PROJ, do_layer_norm_before=False,
        )
        model = OPTForCausalLM(config)
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
    if hasattr(attn, "q_norm"):  # OLMo 2: RMSNorm over all heads' q (k) at once, then split
        def merged_norm(norm, y):  # (B, H, T, d_head) -> same, normed over H * d_head
            b, h, t, e = y.shape
            return norm(y.transpose(1, 2).reshape(b, t, h * e)).reshape(b, t, h, e).transpose(1, 2)

        q, k = merged_norm(attn.q_norm, q), merged_norm(attn.k_norm, k)
    v = project(heads.v, heads.v_bias)
    position_embeddings = captured["kwargs"].get("position_embeddings")
    # rotary: use the model's own rotation on our q, k (not on SmolLM3's NoPE layers, use_rope 0)
    if position_embeddings is not None and getattr(attn, "use_rope", True):
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


FAMILIES = ["gpt_neox", "gpt2", "opt", "llama", "gemma", "mistral", "qwen2", "olmo", "olmo2", "smollm3"]
# Every family, plus the variants the paper's models need: OPT-350m's project_out, tied heads.
VARIANTS = [(f, False) for f in FAMILIES] + [
    ("opt_project_out", True), ("gpt_neox", True), ("opt", True), ("llama", True), ("smollm3", True),
]


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


# ------------------------------------------------------------------ the paper's model families
# (GPT-2, OPT with and without project_out, Gemma, Llama with GQA, GPT-NeoX): what the
# pipeline reads from each, checked against the model's own forward and float64 references.


def _forward(model):
    generator = torch.Generator().manual_seed(2)
    input_ids = torch.randint(3, VOCAB, (2, SEQ), generator=generator)
    with torch.no_grad():
        return input_ids, model(input_ids, output_hidden_states=True)


@pytest.mark.parametrize("family, tied", VARIANTS)
def test_last_hidden_state_is_the_head_input_and_layer_widths(family, tied):
    """hidden_states[-1] @ W^T (float64) gives the model's logits, with W = lm_head_matrix
    (the matrix whose spectrum is measured); one hidden state per block plus the embeddings,
    each d wide except OPT-350m's last (project_out: PROJ wide, as its head)."""
    model = build(family, tied=tied)
    _, out = _forward(model)
    W = lm_head_matrix(model).double()
    head_in = PROJ if family == "opt_project_out" else D
    assert W.shape == (VOCAB, head_in)
    hidden = out.hidden_states
    assert len(hidden) == N_LAYERS + 1
    assert [h.shape[-1] for h in hidden] == [D] * N_LAYERS + [head_in]
    reference = hidden[-1].double() @ W.T  # (B, T, V)
    torch.testing.assert_close(out.logits.double(), reference, atol=1e-4, rtol=1e-4)
    if tied or family in ("gpt2", "gemma"):  # tied: the spectrum is the input embedding's
        assert lm_head_matrix(model).data_ptr() == model.get_input_embeddings().weight.data_ptr()
    else:
        assert lm_head_matrix(model).data_ptr() != model.get_input_embeddings().weight.data_ptr()


def test_opt_project_out_has_no_final_norm_and_projects_the_last_layer():
    model = build("opt_project_out")
    assert final_norm(model) is None and "project_out" in family_adapter(model).note
    _, out = _forward(model)
    decoder = model.model.decoder
    last_block = out.hidden_states[-1]  # what the head reads: project_out(last block output)
    captured = {}
    handle = decoder.layers[-1].register_forward_hook(lambda m, a, o: captured.update(out=_layer_output(o)))
    try:
        _forward(model)
    finally:
        handle.remove()
    torch.testing.assert_close(last_block, decoder.project_out(captured["out"]))


def test_gemma_scales_its_embedding_and_ties_the_unscaled_one():
    model = build("gemma")
    input_ids, out = _forward(model)
    embedding = model.get_input_embeddings().weight  # (V, d), the tied head
    normalizer = torch.tensor(D**0.5, dtype=embedding.dtype)
    torch.testing.assert_close(out.hidden_states[0], embedding[input_ids] * normalizer)
    assert torch.equal(lm_head_matrix(model), embedding)  # the head is the unscaled embedding


def _bruteforce_products(model, layer):
    """{kind: (A, B)}, stacks (n_heads, d, d_head) in float64 with A B^T = W_Q^T W_K ("qk",
    A = q^T, B = k^T) or W_O W_V ("vo", A = o, B = v^T) per query head, read from the raw
    module weights (not the adapter); grouped-query heads read kv head h // (H / KV)."""
    config = model.config
    block = decoder_layers(model)[layer]
    H = config.num_attention_heads
    if family_of(model) == "gpt_neox":
        fused = block.attention.query_key_value.weight.double().view(H, 3, -1, D)
        q, k, v = fused[:, 0], fused[:, 1], fused[:, 2]
        o = block.attention.dense.weight.double().view(D, H, -1).permute(1, 0, 2)
    elif family_of(model) == "gpt2":
        q, k, v = block.attn.c_attn.weight.double().T.chunk(3, dim=0)
        q, k, v = (w.reshape(H, -1, D) for w in (q, k, v))
        o = block.attn.c_proj.weight.double().T.view(D, H, -1).permute(1, 0, 2)
    else:
        attn = block.self_attn
        KV = getattr(config, "num_key_value_heads", None) or H
        out_proj = attn.out_proj if hasattr(attn, "out_proj") else attn.o_proj
        q = attn.q_proj.weight.double().view(H, -1, D)
        k_kv = attn.k_proj.weight.double().view(KV, -1, D)
        v_kv = attn.v_proj.weight.double().view(KV, -1, D)
        kv_of = [h // (H // KV) for h in range(H)]
        k, v = k_kv[kv_of], v_kv[kv_of]
        o = out_proj.weight.double().view(D, H, -1).permute(1, 0, 2)
    factors = {"qk": (q.transpose(1, 2), k.transpose(1, 2)), "vo": (o, v.transpose(1, 2))}  # A, B: (H, d, d_head)
    return {kind: (a.detach().numpy(), b.detach().numpy()) for kind, (a, b) in factors.items()}


def family_of(model):
    return model.config.model_type


@pytest.mark.parametrize("family", ["gpt_neox", "gpt2", "opt", "opt_project_out", "llama", "gemma", "olmo2"])
def test_attention_factors_match_the_full_products_singular_values(family):
    """attention_lowrank (QR of the factors) against the full SVD of each d x d product."""
    from lmsat.degeneration.attention import attention_lowrank

    model = build(family)
    records = attention_lowrank(model)
    H = model.config.num_attention_heads
    assert len(records) == N_LAYERS * 2 * H
    d_head = attention_heads(model, 0).d_head
    for layer in range(N_LAYERS):
        factors = _bruteforce_products(model, layer)
        for record in (r for r in records if r.layer == layer):
            a, b = (f[record.head] for f in factors[record.kind])  # (d, d_head) each
            full = np.linalg.svd(a @ b.T, compute_uv=False)  # (d,): the d x d product's, float64
            rank = min(D, d_head)
            np.testing.assert_allclose(record.metrics.singular_values, full[:rank], rtol=1e-7, atol=1e-9)
            assert full[rank:].max(initial=0.0) < 1e-9 * full[0]  # the product has rank <= d_head
            m = record.metrics
            assert np.isclose(m.nuclear_norm, full.sum(), rtol=1e-7)
            frob_a, frob_b = (a**2).sum(), (b**2).sum()
            assert np.isclose(m.nuclear_ratio, full.sum() / ((frob_a + frob_b) / 2), rtol=1e-7)
            assert np.isclose(m.balance_gap, np.linalg.norm(a.T @ a - b.T @ b) / frob_a, rtol=1e-7)
            assert np.isclose(m.stable_rank, (full**2).sum() / full[0] ** 2, rtol=1e-7)


def test_cache_of_opt_project_out_stores_each_layer_at_its_tokens(tmp_path):
    """OPT-350m through the hidden-state cache: per-layer anisotropy from the cache equals the
    float64 brute force over the model's own hidden states at the cached tokens."""
    from lmsat.data.hidden_states import ExtractionSettings, extract_to_cache, open_cache
    from lmsat.degeneration.anisotropy import mean_pairwise_cosine_bruteforce
    from lmsat.products.metrics import METRICS

    model = build("opt_project_out")
    tokens = np.random.default_rng(0).integers(3, VOCAB, size=(6, SEQ)).astype(np.int32)
    settings = ExtractionSettings(batch_size=2, chunk_sequences=3, layer_sample=20, seed=1)
    identity = dict(model="opt-tiny", revision="main", model_id="local/opt-tiny", sample_sha256="abc")
    extract_to_cache(model, tokens, tmp_path / "c.h5", identity=identity, settings=settings)
    with torch.no_grad():
        hidden = model(torch.as_tensor(tokens, dtype=torch.long), output_hidden_states=True).hidden_states
    with open_cache(tmp_path / "c.h5") as cache:
        index = cache["layer_index"][...]
        measured = METRICS["anisotropy"].compute(cache)
        np.testing.assert_allclose(cache["hidden"][...], hidden[-1].reshape(-1, PROJ).numpy(), atol=1e-5)
    expected = [mean_pairwise_cosine_bruteforce(h.reshape(-1, h.shape[-1]).double().numpy()[index]) for h in hidden]
    np.testing.assert_allclose(measured["anisotropy_layers"], expected, atol=1e-5)
