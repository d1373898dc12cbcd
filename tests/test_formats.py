"""Checkpoints in formats transformers has no class for (hf_olmo: OLMo 1, DataDecide; pico_decoder:
Pico), converted at load time (lmsat.checkpoints.formats) through the job's loader (lmsat.checkpoints.loading.load_causal_lm).

Each tiny checkpoint is written here as its suite writes it (config.json with the fields ai2-olmo
0.6.0 or pico-train save, safetensors under the original tensor names), without their code: the
logits of the loaded model are compared with a float64 forward written below from the formulas of
the original code (OLMo's olmo/model.py, pico-train's src/model/pico_decoder.py), and each
formula that a conversion could get wrong (RoPE pairing and theta, norm eps, the SwiGLU halves,
clip_qkv) is changed once to show the comparison catches it. benchmarks/suite_formats.py checks
the same against the suites' own code.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from lmsat.checkpoints import formats
from lmsat.checkpoints.loading import load_causal_lm
from lmsat.errors import FetchError, ModelLoadError
from lmsat.standalone.analyse import analyse_checkpoint, checkpoint_entry

V, SEQ = 48, 12

# ai2-olmo 0.6.0's ModelConfig, as hf_olmo's save_pretrained writes it (every field), set as
# allenai/OLMo's DataDecide branch (scripts/ladder.py) trains: RMSNorm with weights, SwiGLU, RoPE
OLMO_FIELDS = dict(
    d_model=32, n_heads=4, n_kv_heads=None, clip_qkv=None, n_layers=2, mlp_ratio=8, mlp_hidden_size=None,
    activation_type="swiglu", block_type="sequential", block_group_size=1, alibi=False, alibi_bias_max=8.0, rope=True,
    rope_full_precision=True, rope_theta=10000, flash_attention=True, attention_dropout=0.0, multi_query_attention=None,
    attention_layer_norm=False, residual_dropout=0.0, embedding_dropout=0.0, embedding_layer_norm=False,
    layer_norm_type="rms", layer_norm_with_affine=True, layer_norm_eps=1e-6, attention_layer_norm_with_affine=False,
    max_sequence_length=64, include_bias=False, bias_for_layer_norm=False, scale_logits=False, vocab_size=45,
    embedding_size=V, weight_tying=False, eos_token_id=44, pad_token_id=1, init_device="cuda", init_fn="normal",
    init_std=0.02, init_cutoff_factor=3, precision="amp_bf16", scale_emb_init=False, emb_init_std=None, norm_after=False,
    architectures=["OLMoForCausalLM"], model_type="hf_olmo", torch_dtype="float32", transformers_version="4.48.3",
    use_cache=False,
)
# OLMo 1 (allenai/OLMo-1B's config): non-parametric LayerNorm, tied head; here with clip_qkv
OLMO1 = dict(layer_norm_type="default", layer_norm_with_affine=False, layer_norm_eps=1e-5, weight_tying=True,
             clip_qkv=1.0)
# pico-train's ModelConfig as PicoDecoderHFConfig saves it (src/config/model_config.py), shrunk
PICO_FIELDS = dict(
    d_model=48, n_layers=2, vocab_size=V, batch_size=1024, max_seq_len=64, attention_n_heads=6, attention_n_kv_heads=2,
    activation_hidden_dim=96, norm_eps=1e-6, position_emb_theta=10000.0, model_type="pico_decoder",
    architectures=["PicoDecoderHF"], torch_dtype="float32", transformers_version="4.48.3",
    auto_map={"AutoConfig": "pico_decoder.PicoDecoderHFConfig", "AutoModelForCausalLM": "pico_decoder.PicoDecoderHF"},
)


def _random(gen, *shape, scale=None):
    return torch.randn(*shape, generator=gen, dtype=torch.float64) * (scale if scale is not None else shape[-1] ** -0.5)


def olmo_tensors(c: dict, seed: int = 0) -> dict:
    """A random state dict under hf_olmo's names (model.transformer.*), float64. Embeddings are
    small, so the norms' eps matters; norm weights are away from 1."""
    gen = torch.Generator().manual_seed(seed)
    d, heads = c["d_model"], c["n_heads"]
    kv = c["n_kv_heads"] or heads
    hidden = c["mlp_hidden_size"] or c["mlp_ratio"] * d
    rms = c["layer_norm_type"] == "rms"
    t = {"model.transformer.wte.weight": _random(gen, c["embedding_size"], d, scale=0.003)}
    for i in range(c["n_layers"]):
        b = f"model.transformer.blocks.{i}."
        t[b + "att_proj.weight"] = _random(gen, d + 2 * kv * d // heads, d)
        t[b + "attn_out.weight"] = _random(gen, d, d)
        t[b + "ff_proj.weight"] = _random(gen, hidden, d)
        t[b + "ff_out.weight"] = _random(gen, d, hidden // 2)
        if rms:
            t[b + "attn_norm.weight"] = 1 + 0.3 * _random(gen, d, scale=1)
            t[b + "ff_norm.weight"] = 1 + 0.3 * _random(gen, d, scale=1)
    if rms:
        t["model.transformer.ln_f.weight"] = 1 + 0.3 * _random(gen, d, scale=1)
    if not c["weight_tying"]:
        t["model.transformer.ff_out.weight"] = _random(gen, c["embedding_size"], d)
    return t


def pico_tensors(c: dict, seed: int = 0) -> dict:
    """A random state dict under PicoDecoderHF's names (pico_decoder.*), float64."""
    gen = torch.Generator().manual_seed(seed)
    d, heads, kv, hidden = c["d_model"], c["attention_n_heads"], c["attention_n_kv_heads"], c["activation_hidden_dim"]
    hd = d // heads
    t = {"pico_decoder.embedding_proj.weight": _random(gen, c["vocab_size"], d, scale=0.003),
         "pico_decoder.output_norm.weight": 1 + 0.3 * _random(gen, d, scale=1),
         "pico_decoder.de_embedding_proj.weight": _random(gen, c["vocab_size"], d)}
    for i in range(c["n_layers"]):
        b = f"pico_decoder.layers.{i}."
        t[b + "attention.q_proj.weight"] = _random(gen, heads * hd, d)
        t[b + "attention.k_proj.weight"] = _random(gen, kv * hd, d)
        t[b + "attention.v_proj.weight"] = _random(gen, kv * hd, d)
        t[b + "attention.o_proj.weight"] = _random(gen, d, heads * hd)
        t[b + "swiglu.w_0.weight"] = _random(gen, hidden, d)
        t[b + "swiglu.w_1.weight"] = _random(gen, hidden, d)
        t[b + "swiglu.w_2.weight"] = _random(gen, d, hidden)
        t[b + "attention_norm.weight"] = 1 + 0.3 * _random(gen, d, scale=1)
        t[b + "swiglu_norm.weight"] = 1 + 0.3 * _random(gen, d, scale=1)
    return t


def save_checkpoint(directory, config: dict, tensors: dict):
    """config.json and model.safetensors (float32, as both suites store them) in `directory`."""
    directory.mkdir(parents=True)
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    save_file({k: v.float().contiguous() for k, v in tensors.items()}, str(directory / "model.safetensors"))
    return directory


# ---------------------------------------------------------------- the originals' maths, in float64


def _rms(x, weight, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * weight


def _layer_norm(x, eps):  # OLMo 1: no weight, no bias
    mean = x.mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(((x - mean) ** 2).mean(-1, keepdim=True) + eps)


def _rope(x, theta, pairs):
    """x (n_heads, T, hd) rotated by position t * theta^(-2i/hd) on the pairs (2i, 2i+1)
    ("interleaved": Pico's complex product) or (i, i + hd/2) ("half": OLMo's rotate_half)."""
    hd = x.shape[-1]
    angle = torch.arange(x.shape[1], dtype=torch.float64)[:, None] * theta ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    cos, sin = torch.cos(angle), torch.sin(angle)  # (T, hd/2)
    if pairs == "interleaved":
        a, b = x[..., 0::2], x[..., 1::2]
        return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)
    a, b = x[..., : hd // 2], x[..., hd // 2:]
    return torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1)


def _attention(q, k, v, n_heads, n_kv, theta, pairs):
    """Causal attention of one sequence: q (T, n_heads hd), k, v (T, n_kv hd) -> (T, n_heads hd)."""
    T = q.shape[0]
    q, k, v = (x.reshape(T, -1, x.shape[1] // h).transpose(0, 1) for x, h in ((q, n_heads), (k, n_kv), (v, n_kv)))
    q, k = _rope(q, theta, pairs), _rope(k, theta, pairs)
    group = n_heads // n_kv  # query head h reads key/value head h // group
    k, v = k.repeat_interleave(group, dim=0), v.repeat_interleave(group, dim=0)
    scores = q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), -math.inf)
    return (torch.softmax(scores, dim=-1) @ v).transpose(0, 1).reshape(T, -1)


def olmo_forward(c: dict, t: dict, ids, *, pairs="half", theta=None, eps=None, up_first=True, clip=True):
    """OLMo's OLMoSequentialBlock forward (olmo/model.py), one sequence: logits (T, V). The
    keyword arguments change one formula, to show that the comparison would catch it."""
    d, heads = c["d_model"], c["n_heads"]
    kv = c["n_kv_heads"] or heads
    theta = theta or c["rope_theta"]
    eps = c["layer_norm_eps"] if eps is None else eps
    rms = c["layer_norm_type"] == "rms"
    norm = (lambda x, w: _rms(x, t[w], eps)) if rms else (lambda x, w: _layer_norm(x, eps))
    pre = "model.transformer."
    x = t[pre + "wte.weight"][ids]
    for i in range(c["n_layers"]):
        b = f"{pre}blocks.{i}."
        qkv = norm(x, b + "attn_norm.weight") @ t[b + "att_proj.weight"].T
        if clip and c["clip_qkv"] is not None:
            qkv = qkv.clamp(-c["clip_qkv"], c["clip_qkv"])
        q, k, v = qkv.split((d, kv * d // heads, kv * d // heads), dim=-1)
        x = x + _attention(q, k, v, heads, kv, theta, pairs) @ t[b + "attn_out.weight"].T
        first, second = (norm(x, b + "ff_norm.weight") @ t[b + "ff_proj.weight"].T).chunk(2, dim=-1)
        up, gate = (first, second) if up_first else (second, first)  # OLMo's SwiGLU: x, gate = chunk(2)
        x = x + (torch.nn.functional.silu(gate) * up) @ t[b + "ff_out.weight"].T
    x = norm(x, pre + "ln_f.weight")
    return x @ (t[pre + "wte.weight"] if c["weight_tying"] else t[pre + "ff_out.weight"]).T


def pico_forward(c: dict, t: dict, ids, *, pairs="interleaved", theta=None, eps=None, up_first=True, clip=True):
    """pico-train's PicoDecoder forward (src/model/pico_decoder.py), one sequence: logits (T, V)."""
    heads, kv = c["attention_n_heads"], c["attention_n_kv_heads"]
    theta = theta or c["position_emb_theta"]
    eps = c["norm_eps"] if eps is None else eps
    x = t["pico_decoder.embedding_proj.weight"][ids]
    for i in range(c["n_layers"]):
        b = f"pico_decoder.layers.{i}."
        h = _rms(x, t[b + "attention_norm.weight"], eps)
        q, k, v = (h @ t[f"{b}attention.{p}_proj.weight"].T for p in "qkv")
        x = x + _attention(q, k, v, heads, kv, theta, pairs) @ t[b + "attention.o_proj.weight"].T
        h = _rms(x, t[b + "swiglu_norm.weight"], eps)
        gate, up = h @ t[b + "swiglu.w_0.weight"].T, h @ t[b + "swiglu.w_1.weight"].T
        if not up_first:
            gate, up = up, gate
        x = x + (torch.nn.functional.silu(gate) * up) @ t[b + "swiglu.w_2.weight"].T
    return _rms(x, t["pico_decoder.output_norm.weight"], eps) @ t["pico_decoder.de_embedding_proj.weight"].T


# The variants: (format, config.json, tensors, reference forward, native class)
VARIANTS = {
    "datadecide": ("hf_olmo", OLMO_FIELDS, olmo_tensors, olmo_forward, "LlamaForCausalLM"),
    "olmo-gqa": ("hf_olmo", dict(OLMO_FIELDS, n_kv_heads=2, rope_theta=500000), olmo_tensors, olmo_forward,
                 "LlamaForCausalLM"),
    "olmo1": ("hf_olmo", dict(OLMO_FIELDS, **OLMO1), olmo_tensors, olmo_forward, "OlmoForCausalLM"),
    "pico": ("pico_decoder", PICO_FIELDS, pico_tensors, pico_forward, "LlamaForCausalLM"),
}
# What the comparison must catch: each a formula a conversion could get wrong
MISTAKES = {
    "RoPE pairs": lambda fmt: dict(pairs="half" if fmt == "pico_decoder" else "interleaved"),
    "RoPE theta": lambda fmt: dict(theta=1000.0),
    "norm eps": lambda fmt: dict(eps=1e-4),
    "SwiGLU halves": lambda fmt: dict(up_first=False),
}


def ids(n_seq=2):
    return torch.randint(0, V - 3, (n_seq, SEQ), generator=torch.Generator().manual_seed(7))


def tolerance(reference) -> float:
    """What float64 rounding would leave is ~1e-15; transformers keeps two float32 stages in a
    float64 model (its norms normalise in float32, its RoPE cos/sin tables are float32), each
    rounding relatively at 2^-24 (6e-8). Through 2 blocks (5 norms, 2 RoPE'd attentions) and
    the head that is a few 2^-24 of the largest logit (measured: 3.2 to 7.5); 64 of them
    bounds it, and every mistake of MISTAKES moves logits by more than a million of them."""
    return 64 * 2.0 ** -24 * float(reference.abs().max())


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """variant -> (checkpoint directory, config, float64 tensors as stored)."""
    root = tmp_path_factory.mktemp("formats")
    made = {}
    for name, (fmt, config, make, _, _) in VARIANTS.items():
        tensors = {k: v.float().double() for k, v in make(config).items()}  # as stored: float32 values
        made[name] = (save_checkpoint(root / name, config, tensors), config, tensors)
    return made


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_the_loader_converts_each_format_to_a_model_of_the_same_maths(variant, checkpoints):
    directory, config, tensors = checkpoints[variant]
    fmt, _, _, forward, native = VARIANTS[variant]
    lm = load_causal_lm(checkpoint_entry(directory), directory.name, dtype="float64")
    assert type(lm).__name__ == native
    batch = ids()
    with torch.no_grad():
        logits = lm(batch).logits
    reference = torch.stack([forward(config, tensors, row) for row in batch])
    tol = tolerance(reference)
    assert float((logits - reference).abs().max()) < tol
    for mistake, change in MISTAKES.items():
        wrong = torch.stack([forward(config, tensors, row, **change(fmt)) for row in batch])
        assert float((wrong - reference).abs().max()) > 1000 * tol / 64, f"{variant}: {mistake} would go unnoticed"
    if config.get("clip_qkv"):  # the clip bites in this model: without it, other logits
        unclipped = torch.stack([forward(config, tensors, row, clip=False) for row in batch])
        assert float((unclipped - reference).abs().max()) > 1000 * tol / 64
    # the stored dtype by default ("auto"), the job's: float32 weights equal to the files'
    stored = load_causal_lm(checkpoint_entry(directory), directory.name, dtype="auto")
    assert stored.dtype == torch.float32
    assert torch.equal(stored.get_input_embeddings().weight.double(), next(v for k, v in tensors.items()
                                                                           if k.endswith(("wte.weight", ".embedding_proj.weight"))))


def test_the_converted_heads_are_the_stored_weights_and_pico_s_qk_forms_survive_the_row_permutation(checkpoints):
    """lmsat.checkpoints.adapters on a converted model: the LM head is the stored head; per head, q[h]^T k[h]
    (what the attention metrics decompose) equals the original projections' own, although
    Pico's q and k rows were reordered for rotate-half RoPE."""
    from lmsat.checkpoints.adapters import attention_heads, lm_head_matrix

    directory, config, tensors = checkpoints["pico"]
    lm = load_causal_lm(checkpoint_entry(directory), directory.name, dtype="float64")
    assert torch.equal(lm_head_matrix(lm), tensors["pico_decoder.de_embedding_proj.weight"])
    heads, kv, d = config["attention_n_heads"], config["attention_n_kv_heads"], config["d_model"]
    for layer in range(config["n_layers"]):
        got = attention_heads(lm, layer)
        q = tensors[f"pico_decoder.layers.{layer}.attention.q_proj.weight"].view(heads, -1, d)  # (n_heads, hd, d)
        k = tensors[f"pico_decoder.layers.{layer}.attention.k_proj.weight"].view(kv, -1, d).repeat_interleave(heads // kv, 0)
        assert not torch.equal(got.q, q)  # the rows were permuted ...
        torch.testing.assert_close(got.q.transpose(1, 2) @ got.k, q.transpose(1, 2) @ k, rtol=0, atol=1e-12)  # ... the forms not
    directory, config, tensors = checkpoints["olmo1"]
    lm = load_causal_lm(checkpoint_entry(directory), directory.name, dtype="float64")
    assert torch.equal(lm_head_matrix(lm), tensors["model.transformer.wte.weight"])  # weight_tying: the embedding
    q = tensors["model.transformer.blocks.1.att_proj.weight"][: config["d_model"]]
    assert torch.equal(attention_heads(lm, 1).q.reshape(-1, config["d_model"]), q)


@pytest.mark.parametrize("variant", ["datadecide", "pico"])
def test_the_pipeline_s_per_checkpoint_metrics_run_on_converted_checkpoints(variant, checkpoints):
    """Every registered metric (lmsat.products.metrics), through the workflow's own functions (lmsat.standalone.analyse)."""
    from lmsat.products.metrics import METRICS

    directory, _, _ = checkpoints[variant]
    tokens = np.asarray(torch.randint(0, V - 3, (8, 16), generator=torch.Generator().manual_seed(3)), dtype=np.int32)
    from lmsat.data.corpus import tokens_sha256

    report = analyse_checkpoint(directory, tokens, {"sha256": tokens_sha256(tokens), "tokenizer": "none"})
    assert set(report) == {name for name, metric in METRICS.items() if metric.reads != "cache_pairs"}  # of one checkpoint
    assert np.isfinite(report["loss"]["loss"]) and 0 < report["loss"]["loss"] < 2 * math.log(V)
    assert report["spectra"]["n_rows"] == V and np.isfinite(report["spectra"]["singular_entropy_sigma"])
    assert report["attention"]["shape"]["n_layers"] == 2


# ---------------------------------------------------------------- refusals, by name


REFUSED = [
    ("hf_olmo", dict(alibi=True, rope=False), "alibi=True"),
    ("hf_olmo", dict(attention_layer_norm=True), "attention_layer_norm=True"),
    ("hf_olmo", dict(norm_after=True), "norm_after=True"),
    ("hf_olmo", dict(scale_logits=True), "scale_logits=True"),
    ("hf_olmo", dict(block_type="llama"), "block_type='llama'"),
    ("hf_olmo", dict(activation_type="gelu"), "activation_type='gelu'"),
    ("hf_olmo", dict(layer_norm_with_affine=False), "layer_norm_type='rms' with layer_norm_with_affine=False"),
    ("hf_olmo", dict(include_bias=True), "include_bias=true"),
    ("hf_olmo", dict(clip_qkv=8.0), "clip_qkv=8.0 with RMSNorm"),
    ("hf_olmo", dict(OLMO1, layer_norm_eps=1e-6), "layer_norm_eps=1e-06 with a non-parametric LayerNorm"),
    ("hf_olmo", dict(softmax_temperature=2.0), "field(s) softmax_temperature that lmsat's conversion does not know"),
    ("pico_decoder", dict(attention_bias=True), "field(s) attention_bias that lmsat's conversion does not know"),
    ("pico_decoder", dict(norm_eps=None), "no value for norm_eps"),
]


@pytest.mark.parametrize("fmt, change, named", REFUSED)
def test_a_config_json_field_the_conversion_does_not_map_is_refused_by_name(fmt, change, named, tmp_path):
    config = dict(OLMO_FIELDS if fmt == "hf_olmo" else PICO_FIELDS, **change)
    with pytest.raises(formats.UnsupportedCheckpoint, match="x: its config.json") as error:
        formats.check_config(config, "x")
    assert named in str(error.value) and "Fix:" in str(error.value)
    # through the job's loader, naming model and revision
    tensors = (olmo_tensors if fmt == "hf_olmo" else pico_tensors)(OLMO_FIELDS if fmt == "hf_olmo" else PICO_FIELDS)
    directory = save_checkpoint(tmp_path / "step100", config, tensors)
    with pytest.raises(ModelLoadError, match=r"model step100 \(.*\) at revision step100: its config.json") as error:
        load_causal_lm(checkpoint_entry(directory), "step100")
    assert named in str(error.value)


def test_the_context_of_each_format_is_read_before_any_forward():
    from lmsat.checkpoints.loading import context_length

    assert context_length(OLMO_FIELDS) == ("max_sequence_length", 64)
    assert context_length(PICO_FIELDS) == ("max_seq_len", 64)


def test_generic_transformers_fields_are_not_refused():
    assert formats.check_config(dict(PICO_FIELDS, tie_word_embeddings=True, return_dict=True), "x") == "pico_decoder"
    assert formats.check_config({"model_type": "llama"}, "x") is None  # native: from_pretrained as usual


def test_files_that_do_not_hold_what_config_json_describes_are_refused_naming_tensor_and_file(tmp_path):
    tensors = olmo_tensors(OLMO_FIELDS)
    del tensors["model.transformer.blocks.1.ff_norm.weight"]
    tensors["model.transformer.blocks.0.att_proj.weight"] = tensors["model.transformer.blocks.0.att_proj.weight"][:-8]
    directory = save_checkpoint(tmp_path / "step5", OLMO_FIELDS, tensors)
    with pytest.raises(ModelLoadError) as error:
        load_causal_lm(checkpoint_entry(directory), "step5")
    message = str(error.value)
    assert "model step5" in message and str(directory / "model.safetensors") in message
    assert "1 tensor(s) missing from the files: model.transformer.blocks.1.ff_norm.weight" in message
    assert "model.transformer.blocks.0.att_proj.weight (stored (88, 32), config (96, 32))" in message
    assert "Fix: replace" in message


def test_a_zeroed_converted_matrix_is_named_by_its_stored_tensor(tmp_path):
    tensors = pico_tensors(PICO_FIELDS)
    tensors["pico_decoder.layers.1.attention.k_proj.weight"].zero_()
    directory = save_checkpoint(tmp_path / "step9", PICO_FIELDS, tensors)
    with pytest.raises(ModelLoadError, match=r"1 all-zero matrix: pico_decoder\.layers\.1\.attention\.k_proj\.weight"):
        load_causal_lm(checkpoint_entry(directory), "step9")


def test_an_unsupported_checkpoint_is_refused_before_its_weights_are_fetched(tmp_path, monkeypatch):
    """fetch_checkpoint reads config.json alone first: a staged hub snapshot holding only an
    hf_olmo config.json with ALiBi is refused naming `alibi`, not for its missing weights."""
    from huggingface_hub import constants

    from lmsat.checkpoints.fetch import fetch_checkpoint

    from test_faults import MIRROR_ID, MIRROR_REVISION, entry, stage_snapshot

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    stage_snapshot(tmp_path, MIRROR_ID, MIRROR_REVISION, {"config.json": json.dumps(dict(OLMO_FIELDS, alibi=True)).encode()})
    with pytest.raises(FetchError, match=r"cannot fetch model mirror .* at revision step1: its config.json \(hf_olmo\) has "
                                         r"alibi=True") as error:
        fetch_checkpoint(entry(), MIRROR_REVISION, tmp_path)
    assert "weights" not in str(error.value).split("Fix:")[0]
    # a supported one gets to the weights (here: none staged, so refused for that)
    stage_snapshot(tmp_path / "ok", MIRROR_ID, MIRROR_REVISION, {"config.json": json.dumps(OLMO_FIELDS).encode()})
    with pytest.raises(FetchError, match="has no safetensors weights"):
        fetch_checkpoint(entry(), MIRROR_REVISION, tmp_path / "ok")


def test_parameters_of_a_converted_format_are_counted_from_the_converted_config(checkpoints):
    from lmsat.saturation.scaling import config_parameter_counts, count_parameters

    for variant in ("datadecide", "olmo1", "pico"):
        directory, _, tensors = checkpoints[variant]
        config = formats.load_config(str(directory), local_files_only=True)
        lm = load_causal_lm(checkpoint_entry(directory), directory.name)
        assert config_parameter_counts(config) == {kind: count_parameters(lm, kind) for kind in ("non_embedding", "total")}
        assert count_parameters(lm, "total") == sum(t.numel() for t in tensors.values())


def test_a_hub_checkpoint_in_its_fetched_cache_is_converted_as_the_workflow_loads_it(checkpoints, tmp_path, monkeypatch):
    """A hub model's revision read from the hub cache the fetch job filled (offline), as rule
    analyse_checkpoint loads it: from_pretrained(id, revision=..., cache_dir=...) resolved to
    the snapshot, then converted; the fetch itself passes config.json's check."""
    import dataclasses

    from huggingface_hub import constants

    from lmsat.checkpoints.fetch import fetch_checkpoint

    from test_faults import MIRROR_ID, MIRROR_REVISION, entry, stage_snapshot

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.chdir(tmp_path)
    directory, config, tensors = checkpoints["pico"]
    model = dataclasses.replace(entry(), hidden_size=48, vocab_size=V, num_layers=2, tied_head=False)
    cache = model.cache_dir(MIRROR_REVISION)
    stage_snapshot(cache, MIRROR_ID, MIRROR_REVISION,
                   {name: (directory / name).read_bytes() for name in ("config.json", "model.safetensors")})
    fetch_checkpoint(model, MIRROR_REVISION, cache)
    lm = load_causal_lm(model, MIRROR_REVISION, dtype="float64")
    batch = ids(1)
    with torch.no_grad():
        logits = lm(batch).logits[0]
    reference = pico_forward(config, tensors, batch[0])
    assert type(lm).__name__ == "LlamaForCausalLM" and float((logits - reference).abs().max()) < tolerance(reference)
