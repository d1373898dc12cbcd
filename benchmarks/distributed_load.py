"""Benchmark: loading one step of a distributed checkpoint against the same weights saved with save_pretrained.

Issue 51's target: reading an OLMo-core step (a torch.distributed.checkpoint folder holding
the model's tensors and twice as much optimizer state) through lmsat.load_saved_step reads
the model's tensors only, and its peak memory and load time are each at most 1.2x those of
loading the same weights from save_pretrained safetensors through the same loader (the
workflow's: lmsat.checkpoints.loading.load_causal_lm, every check included).

A Llama-like OLMo-core model of about 160M parameters (d 768, 12 blocks, vocabulary 50304,
untied head; float32: 0.65 GB of weights, 1.3 GB of AdamW moments beside them) is written
once with torch's own dcp.save (the writer torchtitan and OLMo-core call) and with
save_pretrained; then each load runs in a fresh process, in alternation, ROUNDS times (files
warm in the page cache for both), and the medians are printed side by side with their
ratios. Peak memory is the loading process's peak resident set (VmHWM: mapped file pages
count as they are touched; not ru_maxrss, which a child inherits from its parent across
exec), load time the wall clock of the load alone (the modules both loads use, the model's
class included, imported before it).

    .venv/bin/python benchmarks/distributed_load.py --out /tmp/dcp-bench            # ~2.7 GB of disk
    .venv/bin/python benchmarks/distributed_load.py --out /tmp/dcp-bench --rounds 5 --threads 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
D, LAYERS, HEADS, HIDDEN, VOCAB = 768, 12, 12, 2048, 50304


def olmo_core_config() -> dict:
    norm = {"name": "rms", "eps": 1e-5, "bias": False, "_CLASS_": "olmo_core.nn.layer_norm.LayerNormConfig"}
    return {"model": {
        "d_model": D, "vocab_size": VOCAB, "n_layers": LAYERS, "name": "default", "tie_word_embeddings": False,
        "block": {"name": "default", "layer_norm": norm,
                  "sequence_mixer": {"name": "default", "n_heads": HEADS, "bias": False, "type": "attention",
                                     "rope": {"name": "default", "theta": 500000, "partial_rotary_factor": 1.0}},
                  "feed_forward": {"hidden_size": HIDDEN, "name": "default", "bias": False, "activation": "silu"}},
        "lm_head": {"name": "default", "layer_norm": norm, "bias": False}}, "train_module": {"max_sequence_length": 2048}}


def make(out: Path) -> None:
    """stepN/ (model_and_optim/ by torch's dcp.save, config.json) and checkpoint-N/ (save_pretrained) of the same weights."""
    import torch
    import torch.distributed.checkpoint as dcp

    import lmsat

    step = out / "step1000"
    if (step / "model_and_optim" / ".metadata").is_file() and (out / "checkpoint-1000" / "model.safetensors").is_file():
        return
    generator = torch.Generator().manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, generator=generator) / shape[-1] ** 0.5

    model = {"embeddings.weight": torch.randn(VOCAB, D, generator=generator), "lm_head.norm.weight": torch.ones(D),
             "lm_head.w_out.weight": rand(VOCAB, D)}
    for i in range(LAYERS):
        b = f"blocks.{i}."
        model.update({b + "attention.w_q.weight": rand(D, D), b + "attention.w_k.weight": rand(D, D),
                      b + "attention.w_v.weight": rand(D, D), b + "attention.w_out.weight": rand(D, D),
                      b + "attention_norm.weight": torch.ones(D), b + "feed_forward_norm.weight": torch.ones(D),
                      b + "feed_forward.w1.weight": rand(HIDDEN, D), b + "feed_forward.w2.weight": rand(D, HIDDEN),
                      b + "feed_forward.w3.weight": rand(HIDDEN, D)})
    optimizer = {f"state.{k}.{moment}": torch.randn(v.shape, generator=generator) * 1e-3
                 for k, v in model.items() for moment in ("exp_avg", "exp_avg_sq")}
    dcp.save({"model": model, "optim": optimizer}, checkpoint_id=str(step / "model_and_optim"))
    (step / "config.json").write_text(json.dumps(olmo_core_config()))
    del optimizer
    lmsat.load_saved_step(step).save_pretrained(out / "checkpoint-1000")  # the same weights, as safetensors
    print(f"wrote {step} and {out / 'checkpoint-1000'}", file=sys.stderr)


CHILD = """
import json, sys, time, torch
torch.set_num_threads({threads})
import transformers, lmsat
from transformers import LlamaForCausalLM  # the class both load as: imports paid before the clock starts
from lmsat.checkpoints import distributed, distributed_families, formats, loading, trainer_layouts, validation
start = time.perf_counter()
lm = lmsat.load_saved_step({path!r})
seconds = time.perf_counter() - start
n = sum(p.numel() for p in lm.parameters())
peak = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps(dict(seconds=seconds, peak_mb=peak / 1024, params=n)))
"""


def load_once(path: Path, threads: int) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD.format(path=str(path), threads=threads)], capture_output=True,
                          text=True, env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"})
    if done.returncode:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def read_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    make(args.out)
    paths = {"distributed (OLMo-core step)": args.out / "step1000", "save_pretrained safetensors": args.out / "checkpoint-1000"}
    for path in paths.values():  # warm the page cache for both (in blocks: this process's own peak stays small)
        for file in path.rglob("*"):
            if file.is_file():
                with open(file, "rb") as handle:
                    while handle.read(2**24):
                        pass
    results = {name: [] for name in paths}
    for _ in range(args.rounds):
        for name, path in paths.items():
            results[name].append(load_once(path, args.threads))
    medians = {name: {k: statistics.median(r[k] for r in rows) for k in ("seconds", "peak_mb")} for name, rows in results.items()}
    params = results[next(iter(paths))][0]["params"]
    print(f"model: {params / 1e6:.1f}M parameters (float32: {params * 4 / 2**20:.0f} MiB); files: distributed "
          f"{read_bytes(paths['distributed (OLMo-core step)']) / 2**20:.0f} MiB (optimizer included), safetensors "
          f"{read_bytes(paths['save_pretrained safetensors']) / 2**20:.0f} MiB; {args.rounds} rounds, {args.threads} thread(s)")
    print(f"{'load':32} {'median s':>9} {'peak MiB':>9}   (each round: s / MiB)")
    for name, rows in results.items():
        each = ", ".join(f"{r['seconds']:.2f}/{r['peak_mb']:.0f}" for r in rows)
        print(f"{name:32} {medians[name]['seconds']:9.2f} {medians[name]['peak_mb']:9.0f}   ({each})")
    ours, theirs = medians["distributed (OLMo-core step)"], medians["save_pretrained safetensors"]
    time_ratio, memory_ratio = ours["seconds"] / theirs["seconds"], ours["peak_mb"] / theirs["peak_mb"]
    paired = statistics.median(a["seconds"] / b["seconds"] for a, b in zip(*results.values()))  # robust to a drifting load
    print(f"ratio distributed / safetensors: load time {time_ratio:.2f}x (median of the rounds' paired ratios {paired:.2f}x), "
          f"peak memory {memory_ratio:.2f}x (target: each <= 1.2x)")
    return 0 if time_ratio <= 1.2 and memory_ratio <= 1.2 else 1


if __name__ == "__main__":
    sys.exit(main())
