"""The trainers that save one pickle per step: nanoGPT, nanochat, litgpt, Lightning.

Each file is read with torch.load(weights_only=True, mmap=True) (lmsat.checkpoints.pickles):
no code of it runs, and the optimizer's tensors beside the model's stay on disk. The
architecture comes from the run's own record (read in each trainer's code: nanoGPT's
model.py/train.py, nanochat's gpt.py/checkpoint_manager.py of 2025, litgpt 0.5.13,
lightning 2.6.6):

    trainer    saved step                         architecture from              loaded as
    nanoGPT    ckpt.pt (one per eval: docs)       its `model_args`               GPT2LMHeadModel
    nanochat   model_NNNNNN.pt                    meta_NNNNNN.json model_config  NanoChatForCausalLM
    litgpt     step-NNNNNNNN/lit_model.pth        model_config.yaml beside       LlamaForCausalLM or GPTNeoXForCausalLM
    Lightning  *.ckpt (state_dict, global_step)   a transformers config.json     the module's transformers class
                                                  beside (or in its hparams)

The maths each map keeps: nanoGPT's GPT is GPT-2's (exact GELU: activation "gelu"; its
nn.Linear weights (out, in) are transposed into GPT-2's Conv1D (in, out); a model without
biases gets zero biases; `_orig_mod.` (torch.compile's prefix) is dropped; its causal-mask
buffer `attn.bias` is not a weight). nanochat's 2025 GPT is transformers' NanoChat class:
its padded vocabulary rows are cropped (nanochat crops its logits to vocab_size), and its
parameter-free RMSNorm's eps is float32's machine epsilon (F.rms_norm's default on a float32
input; nanochat trains in bfloat16, where it is bfloat16's). litgpt's fused qkv is [q of
every head; k; v]: split for Llama, and interleaved per head for GPT-NeoX's query_key_value.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from lmsat.checkpoints.native_models import (
    LLAMA_NAMES,
    SavedStep,
    TrainerConfigMissing,
    UnsupportedArchitecture,
    check_fields,
    gpt2_config,
    gpt_neox_config,
    llama_config,
    nanochat_config,
    positive_ints,
    refuse,
)

CONFIG_FIX = "pass the architecture: lmsat.load_saved_step(path, config=...)"
COMPILED = "_orig_mod."  # torch.compile's prefix on every key


def _pickle_step(fmt: str, path: Path, load, *, native, stored, sources, convert, architecture_file: Path,
                 step: int | None) -> SavedStep:
    """A SavedStep whose tensors `load()` returns ({stored name: tensor}, mmap'd: bytes read when used)."""
    from lmsat.checkpoints.distributed import dtype_name

    def index():
        return {k: (dtype_name(t.dtype), tuple(t.shape)) for k, t in load().items()}

    def read():
        tensors = load()
        return {k: tensors[k] for k in stored if k in tensors}

    return SavedStep(fmt, path, native, stored, sources, convert, index, read, (path,), architecture_file, step)


def _cached(function):
    """`function()` computed once (a pickle read once per saved step)."""
    found: list = []

    def once():
        if not found:
            found.append(function())
        return found[0]

    return once


def _tensors_only(state, path: Path, what: str) -> dict:
    import torch

    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise UnsupportedArchitecture(f"{path}: its {what} is no mapping of tensor names to tensors")
    return state


# ---------------------------------------------------------------- nanoGPT

NANOGPT_MAPPED = ("n_layer", "n_head", "n_embd", "block_size", "bias", "vocab_size")


def nanogpt(path: Path, config: dict | None = None) -> SavedStep:
    """nanoGPT's `ckpt.pt` ({model, model_args, iter_num, optimizer, ...}), as GPT2LMHeadModel."""
    import torch

    from lmsat.checkpoints.pickles import load_torch_file

    where = f"nanoGPT checkpoint {path}"
    saved = _cached(lambda: load_torch_file(path, what="a nanoGPT checkpoint"))
    if not isinstance(saved(), dict) or "model" not in saved():
        raise UnsupportedArchitecture(f"{where} holds no 'model' state dict (nanoGPT's train.py saves {{model, "
                                      "model_args, iter_num, ...}})")
    args = config if config is not None else saved().get("model_args")
    if not isinstance(args, dict):
        raise TrainerConfigMissing(f"{where} holds no 'model_args' (nanoGPT's train.py saves them beside the model), so "
                                   f"its architecture is unknown. Fix: {CONFIG_FIX}")
    problems = check_fields(args, "model_args", mapped=NANOGPT_MAPPED, inert=("dropout",))
    d, n_heads, layers, context, vocab = (args.get(k) for k in ("n_embd", "n_head", "n_layer", "block_size", "vocab_size"))
    problems += positive_ints(dict(n_embd=d, n_head=n_heads, n_layer=layers, block_size=context, vocab_size=vocab))
    if not problems and d % n_heads:
        problems.append(f"n_embd={d} not divisible by n_head={n_heads}")
    if problems:
        raise refuse(where, "nanoGPT", problems)
    bias = bool(args.get("bias", True))
    native = gpt2_config(vocab=vocab, d=d, layers=layers, heads=n_heads, context=context)

    def load():
        state = _tensors_only(saved()["model"], path, "'model'")
        return {k.removeprefix(COMPILED): v for k, v in state.items()}

    stored: dict[str, tuple[int, ...]] = {"transformer.wte.weight": (vocab, d), "transformer.wpe.weight": (context, d),
                                          "transformer.ln_f.weight": (d,), "lm_head.weight": (vocab, d)}
    sources = {"transformer.wte.weight": "transformer.wte.weight", "transformer.wpe.weight": "transformer.wpe.weight",
               "transformer.ln_f.weight": "transformer.ln_f.weight"}
    linear = {"attn.c_attn": (3 * d, d), "attn.c_proj": (d, d), "mlp.c_fc": (4 * d, d), "mlp.c_proj": (d, 4 * d)}
    for i in range(layers):
        block = f"transformer.h.{i}."
        for name, shape in linear.items():
            stored[f"{block}{name}.weight"] = shape
            sources[f"{block}{name}.weight"] = f"{block}{name}.weight"
            if bias:
                stored[f"{block}{name}.bias"] = shape[:1]
                sources[f"{block}{name}.bias"] = f"{block}{name}.bias"
        for norm in ("ln_1", "ln_2"):
            stored[f"{block}{norm}.weight"] = (d,)
            sources[f"{block}{norm}.weight"] = f"{block}{norm}.weight"
            if bias:
                stored[f"{block}{norm}.bias"] = (d,)
                sources[f"{block}{norm}.bias"] = f"{block}{norm}.bias"
    if bias:
        stored["transformer.ln_f.bias"] = (d,)
        sources["transformer.ln_f.bias"] = "transformer.ln_f.bias"

    def convert(tensors: dict) -> dict:
        head, embedding = tensors["lm_head.weight"], tensors["transformer.wte.weight"]
        if head.data_ptr() != embedding.data_ptr() and not torch.equal(head, embedding):
            raise UnsupportedArchitecture(f"{where}: lm_head.weight differs from transformer.wte.weight, but nanoGPT's "
                                          "GPT (and GPT2LMHeadModel) ties them: not nanoGPT's model")
        state = {}
        for native_name, source in sources.items():
            tensor = tensors[source]
            # nn.Linear (out, in) -> GPT-2's Conv1D (in, out)
            state[native_name] = tensor.t().contiguous() if source.endswith(tuple(f"{n}.weight" for n in linear)) else tensor
        if not bias:  # GPT2LMHeadModel always has biases: zeros compute nanoGPT's bias-free model
            for name, shape in linear.items():
                for i in range(layers):
                    state[f"transformer.h.{i}.{name}.bias"] = torch.zeros(shape[0], dtype=embedding.dtype)
            for i in range(layers):
                for norm in ("ln_1", "ln_2"):
                    state[f"transformer.h.{i}.{norm}.bias"] = torch.zeros(d, dtype=embedding.dtype)
            state["transformer.ln_f.bias"] = torch.zeros(d, dtype=embedding.dtype)
        return state

    iter_num = saved().get("iter_num")
    step = int(iter_num) if isinstance(iter_num, int) else None
    return _pickle_step("nanogpt", path, load, native=native, stored=stored, sources=sources, convert=convert,
                        architecture_file=path, step=step)


# ---------------------------------------------------------------- nanochat

NANOCHAT_MAPPED = ("sequence_len", "vocab_size", "n_layer", "n_head", "n_kv_head", "n_embd")
# what nanochat's GPT gained from 2026-01 (per-layer residual scalars, value embeddings,
# sliding windows, smear and backout): no transformers class computes it
NANOCHAT_LATER = re.compile(r"^(resid_lambdas|x0_lambdas|value_embeds\.|smear_|backout_lambda)|\.ve_gate\.")
NANOCHAT_SOFTCAP = 15.0  # nanochat's gpt.py of 2025: logits = 15 tanh(logits / 15)
NANOCHAT_THETA = 10_000.0  # its RoPE base of 2025
FLOAT32_EPS = 1.1920928955078125e-07  # torch.finfo(torch.float32).eps: F.rms_norm's eps on a float32 input


def nanochat_meta(path: Path) -> Path:
    """meta_NNNNNN.json beside nanochat's model_NNNNNN.pt."""
    return path.with_name(path.name.replace("model_", "meta_", 1)).with_suffix(".json")


def nanochat(path: Path, config: dict | None = None) -> SavedStep:
    """nanochat's `model_NNNNNN.pt` (a state dict) with `meta_NNNNNN.json`, as NanoChatForCausalLM."""
    from lmsat.checkpoints.pickles import load_torch_file

    where = f"nanochat checkpoint {path}"
    meta_path = nanochat_meta(path)
    meta: dict = {}
    if config is None:
        if not meta_path.is_file():
            raise TrainerConfigMissing(f"{where}: no {meta_path.name} beside it (nanochat's checkpoint_manager saves the "
                                       f"model_config there), so its architecture is unknown. Fix: copy it there, or {CONFIG_FIX}")
        try:
            meta = json.loads(meta_path.read_text())
        except (OSError, ValueError) as error:
            raise TrainerConfigMissing(f"{where}: {meta_path} is unreadable ({error})") from None
        config = meta.get("model_config") if isinstance(meta, dict) else None
        if not isinstance(config, dict):
            raise TrainerConfigMissing(f"{where}: {meta_path} has no model_config. Fix: {CONFIG_FIX}")
    problems = check_fields(config, "model_config", mapped=NANOCHAT_MAPPED, required={"window_pattern": ("L",)},
                            defaults={"window_pattern": "L"})
    d, n_heads, layers, context, vocab = (config.get(k) for k in ("n_embd", "n_head", "n_layer", "sequence_len", "vocab_size"))
    n_kv = config.get("n_kv_head", n_heads)
    problems += positive_ints(dict(n_embd=d, n_head=n_heads, n_kv_head=n_kv, n_layer=layers, sequence_len=context,
                                   vocab_size=vocab))
    if not problems and (d % n_heads or n_heads % n_kv or (d // n_heads) % 2):
        problems.append(f"n_embd={d}, n_head={n_heads}, n_kv_head={n_kv}")
    load = _cached(lambda: {k.removeprefix(COMPILED): v for k, v in _tensors_only(
        load_torch_file(path, what="a nanochat model"), path, "state dict").items()})
    later = sorted(k for k in load() if NANOCHAT_LATER.search(k))
    if later:
        problems.append(f"tensor(s) {', '.join(later[:6])}{' and more' if len(later) > 6 else ''}: nanochat's GPT of 2026 "
                        "(per-layer residual scalars, value embeddings, smear, backout), which no transformers class "
                        "computes (transformers' NanoChatForCausalLM is nanochat's 2025 GPT)")
    if problems:
        raise refuse(where, "nanochat", problems)
    d_head = d // n_heads
    rows = tuple(load()["transformer.wte.weight"].shape)[0] if "transformer.wte.weight" in load() else vocab
    native = nanochat_config(vocab=vocab, d=d, layers=layers, heads=n_heads, kv_heads=n_kv, context=context,
                             eps=FLOAT32_EPS, theta=NANOCHAT_THETA, softcap=NANOCHAT_SOFTCAP)
    stored = {"transformer.wte.weight": (rows, d), "lm_head.weight": (rows, d)}
    sources = {"model.embed_tokens.weight": "transformer.wte.weight", "lm_head.weight": "lm_head.weight"}
    roles = {"self_attn.q_proj": ("attn.c_q", (n_heads * d_head, d)), "self_attn.k_proj": ("attn.c_k", (n_kv * d_head, d)),
             "self_attn.v_proj": ("attn.c_v", (n_kv * d_head, d)), "self_attn.o_proj": ("attn.c_proj", (d, d)),
             "mlp.fc1": ("mlp.c_fc", (4 * d, d)), "mlp.fc2": ("mlp.c_proj", (d, 4 * d))}
    for i in range(layers):
        for native_name, (name, shape) in roles.items():
            stored[f"transformer.h.{i}.{name}.weight"] = shape
            sources[f"model.layers.{i}.{native_name}.weight"] = f"transformer.h.{i}.{name}.weight"

    def convert(tensors: dict) -> dict:
        state = {native_name: tensors[source] for native_name, source in sources.items()}
        for name in ("model.embed_tokens.weight", "lm_head.weight"):  # padded rows: never an input, cropped from the logits
            state[name] = state[name][:vocab]
        return state

    step = meta.get("step") if isinstance(meta.get("step"), int) else None
    return _pickle_step("nanochat", path, load, native=native, stored=stored, sources=sources, convert=convert,
                        architecture_file=meta_path, step=step)


# ---------------------------------------------------------------- litgpt

LITGPT_INERT = ("name", "hf_config", "padding_multiple", "vocab_size", "norm_qk_type", "n_expert_per_token",
                "moe_intermediate_size", "first_k_dense_replace", "n_shared_expert", "n_expert_groups", "n_topk_groups",
                "n_topk_scores_per_group", "norm_topk_prob", "routed_scaling_factor")
LITGPT_MAPPED = ("n_embd", "n_layer", "n_head", "n_query_groups", "head_size", "intermediate_size", "padded_vocab_size",
                 "block_size", "norm_eps", "rope_base", "rotary_percentage", "parallel_residual", "gelu_approximate",
                 "norm_class_name", "mlp_class_name", "bias")
LITGPT_REQUIRED = {  # every other value changes the maths in a way neither conversion maps
    "attn_bias": (False,), "lm_head_bias": (False,), "shared_attention_norm": (False,), "norm_1": (True,),
    "norm_2": (True,), "post_attention_norm": (False,), "post_mlp_norm": (False,), "norm_qk": (False,),
    "rope_condense_ratio": (1,), "rope_adjustments": (None,), "rope_indices": (None,), "rope_interleave": (False,),
    "rope_local_base_freq": (None,), "scale_embeddings": (False,), "attention_logit_softcapping": (None,),
    "final_logit_softcapping": (None,), "attention_scores_scalar": (None,), "sliding_window_size": (None,),
    "sliding_window_indices": (None,), "n_expert": (0,), "latent_attention": (None,),
}
LITGPT_FAMILIES = {  # (norm_class_name, mlp_class_name, bias) -> target
    ("RMSNorm", "LLaMAMLP", False): "llama",
    ("LayerNorm", "GptNeoxMLP", True): "gpt_neox",
}


def litgpt(step_dir: Path, config: dict | None = None) -> SavedStep:
    """litgpt's `step-NNNNNNNN/` (lit_model.pth, model_config.yaml): Llama-family configs as
    LlamaForCausalLM, Pythia-family (GPT-NeoX) configs as GPTNeoXForCausalLM."""
    import yaml

    from lmsat.checkpoints.pickles import load_torch_file

    where = f"litgpt checkpoint {step_dir}"
    config_path, weights = step_dir / "model_config.yaml", step_dir / "lit_model.pth"
    if config is None:
        if not config_path.is_file():
            raise TrainerConfigMissing(f"{where} has no model_config.yaml (litgpt saves it beside lit_model.pth), so its "
                                       f"architecture is unknown. Fix: copy the run's model_config.yaml there, or {CONFIG_FIX}")
        try:
            config = yaml.safe_load(config_path.read_text())
        except (OSError, yaml.YAMLError) as error:
            raise TrainerConfigMissing(f"{where}: {config_path} is unreadable ({error})") from None
        if not isinstance(config, dict):
            raise TrainerConfigMissing(f"{where}: {config_path} holds no mapping")
    problems = check_fields(config, "model_config", mapped=LITGPT_MAPPED, inert=LITGPT_INERT, required=LITGPT_REQUIRED)
    family = LITGPT_FAMILIES.get((config.get("norm_class_name"), config.get("mlp_class_name"), config.get("bias")))
    if family is None:
        problems.append(f"norm_class_name={config.get('norm_class_name')!r}, mlp_class_name={config.get('mlp_class_name')!r}, "
                        f"bias={config.get('bias')!r} (converted: RMSNorm, LLaMAMLP, no bias -> LlamaForCausalLM; "
                        "LayerNorm, GptNeoxMLP, bias -> GPTNeoXForCausalLM)")
    d, layers, n_heads = config.get("n_embd"), config.get("n_layer"), config.get("n_head")
    n_kv, hs, hidden = config.get("n_query_groups", n_heads), config.get("head_size"), config.get("intermediate_size")
    vocab, context = config.get("padded_vocab_size"), config.get("block_size")
    problems += positive_ints(dict(n_embd=d, n_layer=layers, n_head=n_heads, n_query_groups=n_kv, head_size=hs,
                                   intermediate_size=hidden, padded_vocab_size=vocab, block_size=context))
    if not problems:
        if n_heads % n_kv:
            problems.append(f"n_query_groups={n_kv} does not divide n_head={n_heads}")
        if family == "llama" and config.get("rotary_percentage") != 1.0:
            problems.append(f"rotary_percentage={config.get('rotary_percentage')} with LLaMAMLP (converted: 1.0)")
        if family == "gpt_neox" and (n_kv != n_heads or hs * n_heads != d):
            problems.append(f"n_query_groups={n_kv}, head_size={hs} (GPT-NeoX: one kv head per head, head_size = n_embd / n_head)")
        if family == "gpt_neox" and config.get("gelu_approximate", "none") not in ("none", "tanh"):
            problems.append(f"gelu_approximate={config.get('gelu_approximate')!r}")
    if problems:
        raise refuse(where, "litgpt", problems)

    def load():
        saved = load_torch_file(weights, what="a litgpt checkpoint")
        state = saved.get("model") if isinstance(saved, dict) and isinstance(saved.get("model"), dict) else saved
        return {k.removeprefix(COMPILED): v for k, v in _tensors_only(state, weights, "model").items()}

    load = _cached(load)
    qkv_rows = (n_heads + 2 * n_kv) * hs
    if family == "llama":
        native = llama_config(vocab=vocab, d=d, layers=layers, heads=n_heads, kv_heads=n_kv, intermediate=hidden,
                              eps=config["norm_eps"], theta=config.get("rope_base", 10000), context=context, tied=False,
                              head_dim=hs)
        names = {"embed": "transformer.wte.weight", "norm": "transformer.ln_f.weight", "head": "lm_head.weight"}
        roles = {"o": ("attn.proj.weight", (d, n_heads * hs)), "gate": ("mlp.fc_1.weight", (hidden, d)),
                 "up": ("mlp.fc_2.weight", (hidden, d)), "down": ("mlp.proj.weight", (d, hidden)),
                 "input_norm": ("norm_1.weight", (d,)), "post_attention_norm": ("norm_2.weight", (d,))}
        stored = {"transformer.wte.weight": (vocab, d), "transformer.ln_f.weight": (d,), "lm_head.weight": (vocab, d)}
        sources = {LLAMA_NAMES[role]: name for role, name in names.items()}
        for i in range(layers):
            stored[f"transformer.h.{i}.attn.qkv.weight"] = (qkv_rows, d)
            for role in "qkv":
                sources[LLAMA_NAMES[role].format(i=i)] = f"transformer.h.{i}.attn.qkv.weight"
            for role, (name, shape) in roles.items():
                stored[f"transformer.h.{i}.{name}"] = shape
                sources[LLAMA_NAMES[role].format(i=i)] = f"transformer.h.{i}.{name}"

        def convert(tensors: dict) -> dict:
            state = {n: tensors[s] for n, s in sources.items() if not s.endswith("attn.qkv.weight")}
            for i in range(layers):
                q, k, v = tensors[f"transformer.h.{i}.attn.qkv.weight"].split([n_heads * hs, n_kv * hs, n_kv * hs])
                state.update({LLAMA_NAMES["q"].format(i=i): q, LLAMA_NAMES["k"].format(i=i): k,
                              LLAMA_NAMES["v"].format(i=i): v})
            return state
    else:
        native = gpt_neox_config(vocab=vocab, d=d, layers=layers, heads=n_heads, intermediate=hidden,
                                 eps=config["norm_eps"], theta=config.get("rope_base", 10000),
                                 rotary_pct=config["rotary_percentage"], context=context,
                                 parallel=bool(config["parallel_residual"]), tied=False,
                                 activation="gelu" if config.get("gelu_approximate", "none") == "none" else "gelu_pytorch_tanh")
        stored = {"transformer.wte.weight": (vocab, d), "transformer.ln_f.weight": (d,), "transformer.ln_f.bias": (d,),
                  "lm_head.weight": (vocab, d)}
        sources = {"gpt_neox.embed_in.weight": "transformer.wte.weight", "lm_head.weight": "lm_head.weight",
                   "gpt_neox.final_layer_norm.weight": "transformer.ln_f.weight",
                   "gpt_neox.final_layer_norm.bias": "transformer.ln_f.bias"}
        roles = {"input_layernorm": ("norm_1", (d,)), "post_attention_layernorm": ("norm_2", (d,)),
                 "attention.query_key_value": ("attn.qkv", (qkv_rows, d)), "attention.dense": ("attn.proj", (d, d)),
                 "mlp.dense_h_to_4h": ("mlp.fc", (hidden, d)), "mlp.dense_4h_to_h": ("mlp.proj", (d, hidden))}
        for i in range(layers):
            for native_name, (name, shape) in roles.items():
                for kind in ("weight", "bias"):
                    stored[f"transformer.h.{i}.{name}.{kind}"] = shape if kind == "weight" else shape[:1]
                    sources[f"gpt_neox.layers.{i}.{native_name}.{kind}"] = f"transformer.h.{i}.{name}.{kind}"

        def convert(tensors: dict) -> dict:
            state = {n: tensors[s] for n, s in sources.items()}
            for i in range(layers):  # [q of every head; k; v] -> per head [q; k; v] (GPT-NeoX's query_key_value)
                for kind in ("weight", "bias"):
                    name = f"gpt_neox.layers.{i}.attention.query_key_value.{kind}"
                    w = state[name]
                    state[name] = w.reshape(3, n_heads, hs, -1).transpose(0, 1).reshape(w.shape)
            return state

    return _pickle_step("litgpt", step_dir, load, native=native, stored=stored, sources=sources, convert=convert,
                        architecture_file=config_path, step=_digits(step_dir.name))


def _digits(name: str) -> int | None:
    match = re.search(r"(\d+)(?!.*\d)", name)
    return int(match.group(1)) if match else None


# ---------------------------------------------------------------- Lightning


def lightning_config_file(path: Path) -> Path | None:
    """A transformers config.json beside a Lightning checkpoint: in its folder or up to two
    folders above (lightning_logs/version_N/checkpoints/)."""
    for folder in (path.parent, path.parent.parent, path.parent.parent.parent):
        candidate = folder / "config.json"
        if candidate.is_file():
            return candidate
    return None


def lightning(path: Path, config: dict | None = None, prefix: str | None = None) -> SavedStep:
    """A Lightning `.ckpt` whose LightningModule holds a transformers model: its `state_dict`
    under the module's attribute prefix (found, or given), the transformers config read from a
    config.json beside it or the module's saved hyperparameters."""
    import torch
    import transformers

    from lmsat.checkpoints.pickles import load_torch_file

    where = f"Lightning checkpoint {path}"
    if path.is_dir():
        raise UnsupportedArchitecture(f"{where} is a folder (a sharded Lightning checkpoint: FSDP or DeepSpeed), a "
                                      "layout lmsat has no key map for. Fix: save unsharded (state_dict_type='full') "
                                      "or consolidate it into one .ckpt first")
    saved = _cached(lambda: load_torch_file(path, what="a Lightning checkpoint",
                                            fix="save hyperparameters as plain values (a config as config.to_dict())"))
    if not isinstance(saved(), dict) or not isinstance(saved().get("state_dict"), dict):
        raise UnsupportedArchitecture(f"{where} holds no 'state_dict' (a Lightning .ckpt has one)")
    config_path = lightning_config_file(path)
    if config is None and config_path is not None:
        config = json.loads(config_path.read_text())
    if config is None:
        hparams = saved().get("hyper_parameters") or {}
        found = [v for v in (hparams.values() if isinstance(hparams, dict) else ()) if isinstance(v, dict) and "model_type" in v]
        if len(found) == 1:
            config, config_path = found[0], path
    if config is None:
        raise TrainerConfigMissing(
            f"{where}: no transformers config.json beside it (in {path.parent} or the two folders above) and none in its "
            "hyper_parameters, so the architecture of the model its module holds is unknown. Fix: save it beside the "
            f"checkpoints (model.config.save_pretrained('{path.parent}')), or {CONFIG_FIX}")
    try:
        native = transformers.AutoConfig.for_model(**config)
    except (ValueError, KeyError, TypeError) as error:
        raise UnsupportedArchitecture(f"{where}: its config (from {config_path}) is no transformers config ({error})") from None
    model_class = transformers.AutoModelForCausalLM._model_mapping.get(type(native), None)
    if model_class is None:
        raise UnsupportedArchitecture(f"{where}: transformers has no causal LM class for model_type {native.model_type!r}")
    native.architectures = [model_class.__name__]
    with torch.device("meta"):
        expected = {k: tuple(v.shape) for k, v in model_class(native).state_dict().items()}
    state = _tensors_only(saved()["state_dict"], path, "'state_dict'")
    keys = [k.removeprefix(COMPILED) for k in state]
    if prefix is None:
        candidates = {k[: len(k) - len(name)] for k in keys for name in expected if k.endswith(name) and
                      (len(k) == len(name) or k[len(k) - len(name) - 1] == ".")}
        fitting = sorted(p for p in candidates if all(p + name in set(keys) for name in expected))
        if len(fitting) != 1:
            shown = ", ".join(keys[:4])
            raise UnsupportedArchitecture(
                f"{where}: {'no' if not fitting else 'more than one'} key prefix of its state_dict holds every tensor of a "
                f"{model_class.__name__} ({', '.join(repr(p) for p in fitting) or 'keys: ' + shown}). Fix: pass the module's "
                "attribute prefix: lmsat.load_saved_step(path, prefix='model.')")
        prefix = fitting[0]
    stored = {prefix + name: shape for name, shape in expected.items()}
    sources = {name: prefix + name for name in expected}

    def load():
        return {k.removeprefix(COMPILED): v for k, v in saved()["state_dict"].items()
                if k.removeprefix(COMPILED).startswith(prefix)}

    def convert(tensors: dict) -> dict:
        return {name: tensors[source] for name, source in sources.items()}

    step = saved().get("global_step")
    return _pickle_step("lightning", path, load, native=native, stored=stored, sources=sources, convert=convert,
                        architecture_file=config_path, step=step if isinstance(step, int) else None)
