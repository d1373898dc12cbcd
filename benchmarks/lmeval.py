"""Overhead of lmsat.saturation.downstream.run_lmeval (+ the JSON caching the workflow adds) over a bare
lm_eval.simple_evaluate call, on the same tiny saved GPT-NeoX and the offline synthetic tasks.

    python benchmarks/lmeval.py [--quick]

Both sides build a TaskManager over the task directory only, load the checkpoint from
disk, evaluate, and write the results as JSON; runs alternate (after one warm-up each) and
the medians are compared. Target: ratio < 1.05.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import lm_eval
import numpy as np
import tokenizers
import torch
from lm_eval.models.huggingface import HFLM
from lm_eval.tasks import TaskManager
from lm_eval.utils import handle_non_serializable
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import WhitespaceSplit
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM, PreTrainedTokenizerFast

from lmsat.saturation.downstream import run_lmeval, write_offline_tasks

EOS = "<|endoftext|>"


def build(root: Path, n_words: int, n_docs: int, doc_words: int, hidden: int, layers: int) -> tuple[Path, Path]:
    words = [f"w{i}" for i in range(n_words)]
    rng = np.random.default_rng(0)
    docs = [" ".join(rng.choice(words, size=doc_words)) for _ in range(n_docs)]
    vocab = {word: i for i, word in enumerate(words + [EOS, "<unk>"])}
    backend = tokenizers.Tokenizer(WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = WhitespaceSplit()
    backend.add_special_tokens([EOS, "<unk>"])
    model_dir, task_dir = root / "model", root / "tasks"
    PreTrainedTokenizerFast(tokenizer_object=backend, eos_token=EOS, bos_token=EOS, unk_token="<unk>").save_pretrained(model_dir)
    torch.manual_seed(0)
    config = GPTNeoXConfig(
        vocab_size=len(vocab), hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=4,
        intermediate_size=4 * hidden, max_position_embeddings=512,
    )
    GPTNeoXForCausalLM(config).save_pretrained(model_dir)
    write_offline_tasks(task_dir, docs, n_docs=n_docs, n_choices=4, seed=0)
    return model_dir, task_dir


def ours(model_dir: Path, task_dir: Path, out: Path, batch_size: int) -> None:
    results = run_lmeval(
        str(model_dir), "main", ["synthetic_ppl", "synthetic_mc"], batch_size=batch_size, limit=None,
        device="cpu", dtype="float32", local_files_only=True, include_path=str(task_dir),
    )
    out.write_text(json.dumps(results))


def direct(model_dir: Path, task_dir: Path, out: Path, batch_size: int) -> None:
    manager = TaskManager(include_path=str(task_dir), include_defaults=False)
    lm = HFLM(pretrained=str(model_dir), batch_size=batch_size, device="cpu", dtype="float32")
    results = lm_eval.simple_evaluate(
        model=lm, tasks=["synthetic_ppl", "synthetic_mc"], num_fewshot=0, limit=None,
        task_manager=manager, log_samples=False,
    )
    results.pop("samples", None)
    out.write_text(json.dumps(results, default=handle_non_serializable))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small model and data, 3 repeats (< 1 min)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.quick:
        sizes, repeats = dict(n_words=200, n_docs=32, doc_words=64, hidden=32, layers=2), 3
    else:
        sizes, repeats = dict(n_words=2000, n_docs=200, doc_words=256, hidden=128, layers=4), 7
    import logging

    logging.disable(logging.WARNING)  # lm-eval's per-run warnings would drown the table
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model_dir, task_dir = build(root, **sizes)
        candidates = {"run_lmeval + json": ours, "simple_evaluate + json": direct}
        times: dict[str, list[float]] = {name: [] for name in candidates}
        for repeat in range(repeats + 1):  # repeat 0 warms both up and is discarded
            order = list(candidates) if repeat % 2 == 0 else list(reversed(candidates))
            for name in order:
                start = time.perf_counter()
                candidates[name](model_dir, task_dir, root / "out.json", batch_size=8)
                if repeat > 0:
                    times[name].append(time.perf_counter() - start)
    print(f"sizes={sizes} repeats={repeats} torch threads=1")
    medians = {name: statistics.median(values) for name, values in times.items()}
    for name, values in times.items():
        print(f"{name:28s} median {medians[name]:7.3f} s   runs {' '.join(f'{v:.3f}' for v in values)}")
    ratio = medians["run_lmeval + json"] / medians["simple_evaluate + json"]
    print(f"ratio run_lmeval / simple_evaluate = {ratio:.3f} (overhead {100 * (ratio - 1):+.1f}%, target < +5%)")


if __name__ == "__main__":
    main()
