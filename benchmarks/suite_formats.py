"""Check: tiny checkpoints written by DataDecide's and Pico's own code, loaded through lmsat, compute what that code computes.

lmsat converts hf_olmo (ai2-olmo; OLMo 1, DataDecide) and pico_decoder (pico-train; Pico)
checkpoints at load time to transformers classes of the same maths (lmsat.checkpoints.formats). This
builds tiny random models with the suites' real code, saves them as those suites did
(`save_pretrained`), loads each through lmsat.checkpoints.loading.load_causal_lm, and prints the largest
difference of logits and hidden states against the original code's forward, in float64 and
float32. Two interpreters, since that code is not lmsat's dependency and is not committed
(measured: docs/paper.md, "What each suite can answer"):

    # a scratch venv with the suites' code (ai2-olmo 0.6.0 from PyPI; pico-train from GitHub),
    # torch being the CPU wheel docs/install.md installs (here it was lmsat's own, through a .pth file)
    python3 -m venv /tmp/fmt-venv
    /tmp/fmt-venv/bin/pip install torch "transformers==4.48.3" "datasets==3.6.0" omegaconf boto3 rich \
        google-cloud-storage importlib_resources
    /tmp/fmt-venv/bin/pip install --no-deps ai2-olmo==0.6.0 ai2-olmo-core==0.1.0 cached_path
    git clone https://github.com/pico-lm/pico-train /tmp/pico-train   # read at f0bfdf437c515b2a5cb4ef368ca594efeb6fb2ba

    /tmp/fmt-venv/bin/python benchmarks/suite_formats.py make --out /tmp/formats --pico-train /tmp/pico-train
    .venv/bin/python benchmarks/suite_formats.py check --out /tmp/formats

`make` writes, per variant, the checkpoint (config.json, model.safetensors) and
reference.pt (token ids, and the original code's logits and hidden states in float64 and
float32); `check` loads each checkpoint through lmsat and compares. Variants:

  olmo-rms        DataDecide's architecture (OLMo ladder: RMSNorm with weights, eps 1e-6, SwiGLU,
                  RoPE, no bias, untied head), rope_full_precision as trained (True)
  olmo-rms-f64    the same with rope_full_precision=False: OLMo then applies RoPE in the input's
                  dtype, as transformers does, so float64 differences are float64 rounding only
  olmo-rms-gqa    the same with grouped-query attention (n_kv_heads 2 of 4) and rope_theta 5e5
  olmo-ln         OLMo 1's architecture (non-parametric LayerNorm, tied head) with clip_qkv,
                  -> OlmoForCausalLM
  pico            Pico's decoder (RMSNorm, interleaved RoPE, GQA 6/2, SwiGLU, untied head)

Where the original code itself computes in float32 inside a float64 model (OLMo's RoPE with
rope_full_precision, Pico's RMSNorm and RoPE and its float32 logits, transformers' norms
and RoPE tables), the float64 difference is float32 rounding, not a different formula: the
printed `f32 eps` column says how many float32 epsilons (2^-24 relative to the largest
logit) it is.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

SEQ, BATCH, VOCAB_ROWS, SEED = 24, 2, 96, 0


def _randomise(model, scale_embedding: float = 0.05) -> None:
    """Norm weights away from 1 and embeddings small (so eps matters), for a check that can fail."""
    import torch

    gen = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(1 + 0.3 * torch.randn(p.shape, generator=gen))
            elif "wte" in name or "embedding_proj" in name and "de_" not in name:
                p.copy_(scale_embedding * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / p.shape[1] ** 0.5)


def _olmo(out: Path, name: str, **overrides) -> None:
    import torch
    from hf_olmo import OLMoConfig, OLMoForCausalLM
    from olmo.config import ModelConfig
    from olmo.model import OLMo

    # scripts/ladder.py of allenai/OLMo's DataDecide branch (MODEL_CONFIG_150M), shrunk
    settings = dict(d_model=32, n_heads=4, n_layers=2, mlp_ratio=8, weight_tying=False, alibi=False, rope=True,
                    flash_attention=False, attention_dropout=0.0, attention_layer_norm=False, include_bias=False,
                    layer_norm_type="rms", layer_norm_with_affine=True, layer_norm_eps=1e-6, bias_for_layer_norm=False,
                    attention_layer_norm_with_affine=False, activation_type="swiglu", residual_dropout=0.0,
                    embedding_dropout=0.0, max_sequence_length=64, vocab_size=90, embedding_size=VOCAB_ROWS,
                    eos_token_id=89, pad_token_id=1, init_device="cpu", init_fn="normal", init_std=0.02)
    settings.update(overrides)
    torch.manual_seed(SEED)
    core = OLMo(ModelConfig(**settings)).eval()
    _randomise(core)
    hf = OLMoForCausalLM(OLMoConfig(**settings), model=core).eval()
    hf.save_pretrained(out / name)
    ids = torch.randint(0, 90, (BATCH, SEQ), generator=torch.Generator().manual_seed(SEED + 1))
    reference = {"ids": ids}
    for dtype in (torch.float64, torch.float32):
        core.to(dtype)
        with torch.no_grad():
            result = core(ids, output_hidden_states=True)
        key = str(dtype).removeprefix("torch.")
        reference[f"logits_{key}"] = result.logits.double()
        reference[f"hidden_{key}"] = [h.double() for h in result.hidden_states]
    torch.save(reference, out / name / "reference.pt")


def _pico(out: Path, pico_train: Path) -> None:
    import torch

    spec = importlib.util.spec_from_file_location("pico_decoder", pico_train / "src" / "model" / "pico_decoder.py")
    pico = importlib.util.module_from_spec(spec)
    sys.modules["pico_decoder"] = pico
    spec.loader.exec_module(pico)
    # src/config/model_config.py's fields, shrunk (12 heads of 4 kv heads in the suite: 6 of 2 here)
    config = pico.PicoDecoderHFConfig(d_model=48, n_layers=2, vocab_size=VOCAB_ROWS, batch_size=4, max_seq_len=64,
                                      attention_n_heads=6, attention_n_kv_heads=2, activation_hidden_dim=96,
                                      norm_eps=1e-6, position_emb_theta=10000.0)
    torch.manual_seed(SEED)
    hf = pico.PicoDecoderHF(config).eval()
    _randomise(hf)
    hf.save_pretrained(out / "pico")
    ids = torch.randint(0, VOCAB_ROWS, (BATCH, SEQ), generator=torch.Generator().manual_seed(SEED + 1))
    reference = {"ids": ids}
    decoder = hf.pico_decoder
    for dtype in (torch.float64, torch.float32):
        for parameter in hf.parameters():  # not hf.to(dtype): it would cast RoPE's complex64 table to real
            parameter.data = parameter.data.to(dtype)
        hidden = []  # as transformers counts them: the embedding, each block's output, the last one normed
        hooks = [decoder.embedding_proj.register_forward_hook(lambda m, i, o: hidden.append(o))]
        hooks += [block.register_forward_hook(lambda m, i, o: hidden.append(o[0])) for block in decoder.layers]
        hooks.append(decoder.output_norm.register_forward_hook(lambda m, i, o: hidden.append(o)))
        with torch.no_grad():
            logits = hf(ids).logits
        for hook in hooks:
            hook.remove()
        hidden = hidden[:-2] + hidden[-1:]
        key = str(dtype).removeprefix("torch.")
        reference[f"logits_{key}"] = logits.double()
        reference[f"hidden_{key}"] = [h.double() for h in hidden]
    torch.save(reference, out / "pico" / "reference.pt")


def make(out: Path, pico_train: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    _olmo(out, "olmo-rms")
    _olmo(out, "olmo-rms-f64", rope_full_precision=False)
    _olmo(out, "olmo-rms-gqa", n_kv_heads=2, rope_theta=500_000)
    # OLMo 1 (allenai/OLMo-1B's config: default LayerNorm without affine, tied head), with clip_qkv
    _olmo(out, "olmo-ln", layer_norm_type="default", layer_norm_with_affine=False, layer_norm_eps=1e-5,
          weight_tying=True, clip_qkv=1.5)
    _pico(out, pico_train)
    print(f"wrote {', '.join(sorted(p.name for p in out.iterdir()))} under {out}")


def check(out: Path) -> int:
    import torch

    from lmsat.checkpoints.loading import load_causal_lm
    from lmsat.standalone.analyse import checkpoint_entry

    rows, worst = [], {}
    print(f"{'variant':<14} {'loaded as':<18} {'dtype':<8} {'max |dlogit|':>13} {'f32 eps':>8} {'max |dhidden|':>14}")
    for directory in sorted(p for p in out.iterdir() if (p / "reference.pt").is_file()):
        reference = torch.load(directory / "reference.pt")
        stored = json.loads((directory / "config.json").read_text())["model_type"]
        entry = checkpoint_entry(directory)
        for dtype in ("float64", "float32"):
            lm = load_causal_lm(entry, directory.name, dtype=dtype)
            with torch.no_grad():
                result = lm(reference["ids"], output_hidden_states=True)
            logits = result.logits.double()
            want = reference[f"logits_{dtype}"]
            d_logit = float((logits - want).abs().max())
            scale = float(want.abs().max())
            d_hidden = max(float((h.double() - w).abs().max()) for h, w in zip(result.hidden_states, reference[f"hidden_{dtype}"]))
            eps32 = d_logit / (scale * 2.0 ** -24)
            print(f"{directory.name:<14} {stored + '->' + lm.config.model_type:<18} {dtype:<8} {d_logit:13.3e} "
                  f"{eps32:8.2f} {d_hidden:14.3e}")
            rows.append(dict(variant=directory.name, dtype=dtype, max_abs_logit_diff=d_logit, max_abs_logit=scale,
                             max_abs_hidden_diff=d_hidden, native=type(lm).__name__))
            worst[dtype] = max(worst.get(dtype, 0.0), eps32)
    (out / "report.json").write_text(json.dumps(rows, indent=1))
    print(f"largest difference, in float32 epsilons of the largest logit: {worst}; report in {out / 'report.json'}")
    # a wrong conversion (swapped gate/up, q/k order, RoPE pairing, eps, theta) moves logits by
    # a large fraction of their scale: thousands of float32 epsilons
    return 0 if all(v < 64 for v in worst.values()) else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    made = sub.add_parser("make", help="build and save the tiny checkpoints with the suites' code (scratch venv)")
    made.add_argument("--out", type=Path, required=True)
    made.add_argument("--pico-train", type=Path, required=True, help="a clone of pico-lm/pico-train")
    checked = sub.add_parser("check", help="load them through lmsat and compare (lmsat's venv)")
    checked.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if args.command == "make":
        make(args.out, args.pico_train)
        return 0
    return check(args.out)


if __name__ == "__main__":
    sys.exit(main())
