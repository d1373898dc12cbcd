"""Benchmark: what lmsat.callbacks.SaturationCallback costs a training run.

    python benchmarks/callback_overhead.py                      # 200 steps, a save every 2 (1%)
    python benchmarks/callback_overhead.py --steps 400 --width 128 --batch 16 --n-tokens 50000

Trains the same GPT-NeoX (seed 0, real transformers.Trainer, CPU) twice AT ONCE, each in its
own process with one thread: without the callback and with it (default sample size, the
defaults of `lmsat analyse --text`: 50,000 tokens, sequences capped at the model's context),
both saving a checkpoint every 1% of the steps (--save-every, in steps). Both runs share the
machine's noise. Printed: each run's wall seconds, the callback's seconds per evaluation,
and the wall ratio watched / plain (issue 33's goal: <= 1.03 at the default sample size).

The ratio is a property of the run, not of the callback: each evaluation is one forward of
the sample (plus the cache write and the metrics), so the ratio is about
1 + t_eval / (save_every x t_step). A run whose steps are small next to the sample (a tiny
model on a few thousand tokens a step, as here) pays more; a run of 1M-token steps pays less.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORDS = "the a cat dog sat ran on under mat rug big small red blue and then it was very".split()


def write_text(path: Path, n_lines: int, seed: int) -> Path:
    import numpy as np

    rng = np.random.default_rng(seed)
    lines = []
    for _ in range(n_lines):
        word, words = int(rng.integers(len(WORDS))), []
        for _ in range(int(rng.integers(4, 15))):
            words.append(WORDS[word])
            word = (word * 3 + int(rng.integers(0, 3))) % len(WORDS)
        lines.append(" ".join(words))
    path.write_text("\n".join(lines) + "\n")
    return path


def worker(args) -> None:
    """One training run (`--worker plain|watched`); prints {"wall": s, "evaluations": n, "eval_seconds": s}."""
    sys.path.insert(0, str(ROOT / "src"))
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM, PreTrainedTokenizerFast, Trainer, TrainingArguments, default_data_collator

    torch.set_num_threads(1)
    scratch = Path(args.scratch)
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    core.train([str(scratch / "train.txt")], trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                                                   initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    ids = [i for line in (scratch / "train.txt").read_text().splitlines() for i in tokenizer(line)["input_ids"] + [0]]
    n = len(ids) // args.seq
    data = torch.tensor(ids[: n * args.seq]).view(n, args.seq)
    dataset = [{"input_ids": row, "labels": row} for row in data]
    torch.manual_seed(0)
    config = GPTNeoXConfig(vocab_size=len(tokenizer) + 4, hidden_size=args.width, num_hidden_layers=args.layers,
                           num_attention_heads=4, intermediate_size=4 * args.width, max_position_embeddings=args.context,
                           tie_word_embeddings=False)
    callbacks = []
    if args.worker == "watched":
        from lmsat.callbacks import SaturationCallback

        callbacks.append(SaturationCallback(text=scratch / "eval.txt", n_tokens=args.n_tokens))
        original = callbacks[0].evaluate
        spent = []

        def timed(*a, **k):
            tick = time.perf_counter()
            result = original(*a, **k)
            spent.append(time.perf_counter() - tick)
            return result

        callbacks[0].evaluate = timed
    training = TrainingArguments(
        output_dir=str(scratch / args.worker), max_steps=args.steps, save_steps=args.save_every, per_device_train_batch_size=args.batch,
        learning_rate=1e-3, report_to="none", use_cpu=True, seed=0, dataloader_num_workers=0, disable_tqdm=True,
        save_strategy="steps", logging_steps=10**9, save_total_limit=2,
    )
    trainer = Trainer(model=GPTNeoXForCausalLM(config), args=training, train_dataset=dataset, processing_class=tokenizer,
                      data_collator=default_data_collator, callbacks=callbacks)
    tick = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - tick
    evaluations = spent if callbacks else []
    print(json.dumps({"wall": wall, "evaluations": len(evaluations), "eval_seconds": sum(evaluations)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--save-every", type=int, help="steps between saves (default: 1%% of --steps)")
    parser.add_argument("--batch", type=int, default=16, help="sequences per step")
    parser.add_argument("--seq", type=int, default=64, help="tokens per training sequence")
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--context", type=int, default=128, help="max_position_embeddings")
    parser.add_argument("--n-tokens", type=int, default=50000, help="eval sample tokens (default: lmsat analyse's)")
    parser.add_argument("--keep", type=Path, help="keep the runs here (default: a temporary directory)")
    parser.add_argument("--worker", choices=("plain", "watched"), help=argparse.SUPPRESS)
    parser.add_argument("--scratch", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    args.save_every = args.save_every or max(1, args.steps // 100)
    with tempfile.TemporaryDirectory(prefix="lmsat-callback-") as tmp:
        scratch = args.keep or Path(tmp)
        scratch.mkdir(parents=True, exist_ok=True)
        write_text(scratch / "train.txt", 20000, seed=0)
        write_text(scratch / "eval.txt", 40000, seed=1)  # enough text for a 50k-token sample
        forwarded = [str(v) for key in ("steps", "save_every", "batch", "seq", "width", "layers", "context", "n_tokens")
                     for v in (f"--{key.replace('_', '-')}", getattr(args, key))]
        runs = {kind: subprocess.Popen([sys.executable, __file__, *forwarded, "--worker", kind, "--scratch", str(scratch)],
                                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                for kind in ("plain", "watched")}  # at once: both see the same load
        results = {}
        for kind, process in runs.items():
            out, _ = process.communicate()
            if process.returncode:
                raise SystemExit(f"the {kind} run failed (rc {process.returncode}); rerun with --keep DIR to look")
            results[kind] = json.loads(out.strip().splitlines()[-1])
    plain, watched = results["plain"], results["watched"]
    print(f"{args.steps} steps of {args.batch} x {args.seq} tokens (d={args.width}, {args.layers} layers), a save every "
          f"{args.save_every} steps; eval sample {args.n_tokens} tokens")
    print(f"plain    wall {plain['wall']:.1f} s")
    print(f"watched  wall {watched['wall']:.1f} s, {watched['evaluations']} evaluations, "
          f"{watched['eval_seconds'] / max(watched['evaluations'], 1):.2f} s each")
    print(f"ratio watched / plain: {watched['wall'] / plain['wall']:.3f} (goal <= 1.03)")


if __name__ == "__main__":
    main()
