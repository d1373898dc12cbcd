"""Measure the default toy suite: wall time and held-out loss of each width along training.

Checks the three properties the toy suite is tuned for: (a) each model's held-out loss
falls along training, (b) wider models end lower (d16 > d32 > d64 > d128), (c) every loss
stays above the language's entropy rate. Training runs on ONE CPU thread, as in the pipeline.

    python benchmarks/toy_suite.py            # the defaults
    python benchmarks/toy_suite.py --quick    # 1/5 of the steps and data, < 1 minute
    python benchmarks/toy_suite.py --steps 800 --batch 16 --lr 3e-3 --widths 16 32 64 128
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from lmsat.core.schedules import toy_steps
from lmsat.toy.language import LanguageSpec, build_language, write_corpus
from lmsat.toy.suite import (
    ToyModelSpec,
    TrainSpec,
    build_tokenizer,
    evaluate_loss,
    tokenize_corpus,
    train_toy_model,
)


def softmax_floor(lang, d: int, iters: int = 600, lr: float = 0.05) -> float:
    """Lowest loss of ANY model whose logits are rank d: min over A (C, d), W (V, d) of
    sum_c pi_c CE(P_c, softmax(A_c W^T)), fitted to the exact distributions (full-batch Adam).
    A model of hidden size d with an untied, bias-free head is bounded below by it."""
    P = torch.tensor(lang.transitions.toarray())  # (C, V)
    pi = torch.tensor(lang.stationary)[:, None]  # (C, 1)
    gen = torch.Generator().manual_seed(0)
    A = (0.1 * torch.randn(P.shape[0], d, generator=gen, dtype=torch.float64)).requires_grad_()
    W = (0.1 * torch.randn(P.shape[1], d, generator=gen, dtype=torch.float64)).requires_grad_()
    opt = torch.optim.Adam([A, W], lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, iters)
    for _ in range(iters):
        loss = -(pi * P * torch.log_softmax(A @ W.T, dim=1)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    return loss.item()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1/5 of the steps and data")
    parser.add_argument("--widths", type=int, nargs="+", default=[16, 32, 64, 128])
    parser.add_argument("--steps", type=int, default=TrainSpec.max_steps)
    parser.add_argument("--batch", type=int, default=TrainSpec.batch_size)
    parser.add_argument("--lr", type=float, default=TrainSpec.lr, help="default: per width")
    parser.add_argument("--seq-len", type=int, default=ToyModelSpec.seq_len)
    parser.add_argument("--vocab", type=int, default=LanguageSpec.vocab_size)
    parser.add_argument("--groups", type=int, default=LanguageSpec.groups)
    parser.add_argument("--support", type=int, default=LanguageSpec.support)
    parser.add_argument("--zipf", type=float, default=LanguageSpec.zipf_exponent)
    parser.add_argument("--train-tokens", type=int, default=2_000_000)
    parser.add_argument("--eval-tokens", type=int, default=32_768)
    parser.add_argument("--floors", action="store_true", help="also fit rank-d softmax floors")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.quick:
        args.train_tokens = min(args.train_tokens, 400_000)

    t0 = time.perf_counter()
    lang = build_language(
        LanguageSpec(
            vocab_size=args.vocab, groups=args.groups, support=args.support, zipf_exponent=args.zipf
        )
    )
    tokenizer = build_tokenizer(lang.words)
    with tempfile.TemporaryDirectory() as tmp:
        stats = write_corpus(lang, Path(tmp) / "train.txt", args.train_tokens, 256, seed=1)
        train = tokenize_corpus(tokenizer, Path(tmp) / "train.txt")
    held_out, held_nll = lang.sample(args.eval_tokens, np.random.default_rng(2))
    print(f"language {lang.spec}: built + corpus in {time.perf_counter() - t0:.1f} s")
    print(
        f"entropy rate {lang.entropy_rate:.4f} nats; held-out true nll {held_nll.mean():.4f}; "
        f"corpus {stats}"
    )

    steps = max(10, args.steps // 5) if args.quick else args.steps
    train_spec = TrainSpec(max_steps=steps, batch_size=args.batch, lr=args.lr)
    schedule = toy_steps(steps)
    print(f"train {train_spec}\nschedule {schedule}")
    finals, total_wall, total_cpu = {}, 0.0, 0.0
    for d in args.widths:
        model_spec = ToyModelSpec(hidden_size=d, vocab_size=len(tokenizer), seq_len=args.seq_len)
        losses, eval_wall, eval_cpu = {}, 0.0, 0.0

        def on_checkpoint(step, model):
            nonlocal eval_wall, eval_cpu
            wall, cpu = time.perf_counter(), time.process_time()
            losses[step] = evaluate_loss(model, held_out, model_spec.seq_len)
            eval_wall += time.perf_counter() - wall
            eval_cpu += time.process_time() - cpu

        wall, cpu = time.perf_counter(), time.process_time()
        train_toy_model(train, model_spec, train_spec, schedule, on_checkpoint)
        wall = time.perf_counter() - wall - eval_wall
        cpu = time.process_time() - cpu - eval_cpu
        total_wall += wall
        total_cpu += cpu
        finals[d] = losses[steps]
        decreasing = all(losses[a] > losses[b] for a, b in zip(schedule[3:], schedule[4:]))
        shown = " ".join(f"{s}:{losses[s]:.3f}" for s in schedule)
        print(
            f"d={d:4d} train {wall:5.1f} s wall, {cpu:5.1f} s cpu; held-out loss by step {shown}"
            f" (decreasing after step {schedule[3]}: {decreasing})"
        )
    ordered = all(finals[a] > finals[b] for a, b in zip(args.widths, args.widths[1:]))
    above = all(v > lang.entropy_rate for v in finals.values())
    print(
        f"total train time {total_wall:.1f} s wall, {total_cpu:.1f} s cpu (1 thread); final "
        + ", ".join(f"d{d} {v:.3f}" for d, v in finals.items())
        + f"; gap to entropy rate d{args.widths[0]} {finals[args.widths[0]] - lang.entropy_rate:.3f}"
        + f", d{args.widths[-1]} {finals[args.widths[-1]] - lang.entropy_rate:.3f}"
    )
    print(f"strictly ordered by width: {ordered}; all above entropy rate: {above}")
    if args.floors:
        floors = {d: softmax_floor(lang, d) for d in args.widths}
        print(
            "rank-d softmax floors (best possible loss with rank-d logits): "
            + ", ".join(f"d{d} {v:.3f} (+{v - lang.entropy_rate:.3f})" for d, v in floors.items())
        )


if __name__ == "__main__":
    main()
