"""Search the toy suite for saturation: narrow models whose held-out loss rises late, wide ones not.

Each *setting* is a language (lmsat.toy.language.LanguageSpec) plus a training recipe
(lmsat.toy.suite.TrainSpec / ToyModelSpec). For every setting x seed x width it trains one toy
GPT-NeoX on FRESH data (independent stationary chains of the language, consumed once in
order: TrainSpec(windows="sequential"), so a rise cannot come from repeated data), evaluates
the held-out loss at evenly spaced checkpoints on a fixed fresh sample of the language
(--eval-tokens tokens, the same for every run of a language), and records

    best step, final step, (final - best) / SE,  SE = per-token loss std / sqrt(n tokens)

A run *saturates* when best step < final step and (final - best) / SE > 3. A setting
reproduces the paper's picture when every seed of its narrowest widths saturates and no seed
of its widest width does. One JSON line per finished run goes to --out; a restart skips the
runs already there, so the search can run in the background and be stopped at any time:

    nohup python benchmarks/saturation_study.py --out results/saturation_study.jsonl &
    python benchmarks/saturation_study.py --list                     # the settings
    python benchmarks/saturation_study.py --settings base wd1 --seeds 0 --widths 8 64
    python benchmarks/saturation_study.py --summary --out results/saturation_study.jsonl
    python benchmarks/saturation_study.py --time     # seconds per run of `base`, per width

Training runs on ONE CPU thread (torch.set_num_threads(1)), as in the pipeline.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from lmsat.toy.language import LanguageSpec, build_language
from lmsat.toy.suite import ToyModelSpec, TrainSpec, train_toy_model

Z_SATURATED = 3.0  # final - best in standard errors above which a run saturates

# The base setting: a 256-word order-2 language with 4 groups (C = 1024 contexts, true
# matrix rank 256) and Pythia's recipe at the toy scale; every other setting changes a few
# knobs of it. Language knobs: vocab, order, groups, support, zipf. Model/recipe knobs:
# seq_len, layers, tied, steps, batch, lr_scale (x lmsat.toy.suite.default_lr(d)), wd,
# min_lr (cosine floor / peak), warmup.
BASE = dict(
    vocab=256, order=2, groups=4, support=32, zipf=1.1,
    seq_len=32, layers=2, tied=False,
    steps=1000, batch=16, lr_scale=1.0, wd=0.1, min_lr=0.1, warmup=0.01,
)  # fmt: skip
EASY = dict(vocab=128, groups=1, steps=2000)  # C = V = 128 contexts: d=8 reaches its floor
CONV = dict(vocab=128, groups=1, batch=128, steps=1000, layers=1)
SETTINGS = {
    # an easy language (a bigram chain, rank 128) trained long enough that the narrow models
    # converge to their rank-d floor: saturation can only show after convergence
    "easy": EASY,
    "easy-wd1": {**EASY, "wd": 1.0},
    "easy-wd3": {**EASY, "wd": 3.0},
    "easy-constlr": {**EASY, "min_lr": 1.0},
    "easy-lr3x": {**EASY, "lr_scale": 3.0},
    "easy-lr3x-wd1": {**EASY, "lr_scale": 3.0, "wd": 1.0},
    "easy-tied": {**EASY, "tied": True},
    "easy-tied-wd1": {**EASY, "tied": True, "wd": 1.0},
    "easy-zipf2": {**EASY, "zipf": 2.0},
    "easy-support8": {**EASY, "support": 8},
    "easy-vocab64": {**EASY, "vocab": 64},
    "easy-layers1": {**EASY, "layers": 1},
    "easy-batch64": {**EASY, "batch": 64, "steps": 1000},
    "easy-steps5k": {**EASY, "steps": 5000},
    # the easy language, 1 layer (enough for a bigram chain), 8x the batch: 4M fresh tokens
    # in 1000 steps, so that d=8 gets
    # close to its rank-8 floor (3.14 nats vs entropy rate 2.79) well before the end
    "conv": CONV,
    "conv-wd1": {**CONV, "wd": 1.0},
    "conv-wd3": {**CONV, "wd": 3.0},
    "conv-wd10": {**CONV, "wd": 10.0},
    "conv-constlr": {**CONV, "min_lr": 1.0},
    "conv-constlr-wd1": {**CONV, "min_lr": 1.0, "wd": 1.0},
    "conv-lr3x": {**CONV, "lr_scale": 3.0},
    "conv-lr3x-wd1": {**CONV, "lr_scale": 3.0, "wd": 1.0},
    "conv-tied": {**CONV, "tied": True},
    "conv-tied-wd1": {**CONV, "tied": True, "wd": 1.0},
    "conv-vocab64": {**CONV, "vocab": 64},
    "conv-vocab64-wd1": {**CONV, "vocab": 64, "wd": 1.0},
    "conv-zipf2": {**CONV, "zipf": 2.0},
    "conv-zipf2-wd1": {**CONV, "zipf": 2.0, "wd": 1.0},
    "conv-support8": {**CONV, "support": 8},
    "conv-steps3k": {**CONV, "steps": 3000},
    # the longest run (41 M fresh tokens): does a model sitting at its floor drift uphill?
    "conv-steps10k": {**CONV, "steps": 10000},
    # one knob at a time from the base language (256 words x 4 groups, rank 256)
    "base": {},
    # the recipe: longer training, larger/smaller steps, constant LR, more weight decay
    "steps3k": dict(steps=3000),
    "lr3x": dict(lr_scale=3.0),
    "lr0.3x": dict(lr_scale=0.3),
    "constlr": dict(min_lr=1.0),
    "constlr-lr3x": dict(min_lr=1.0, lr_scale=3.0),
    "wd0": dict(wd=0.0),
    "wd1": dict(wd=1.0),
    "wd1-steps3k": dict(wd=1.0, steps=3000),
    "wd3": dict(wd=3.0),
    "batch64": dict(batch=64, steps=500),
    "batch4": dict(batch=4, steps=3000),
    "warmup10": dict(warmup=0.1),
    # the model: tied head (the head is the embedding), one or four layers, longer context
    "tied": dict(tied=True),
    "tied-wd1": dict(tied=True, wd=1.0),
    "tied-steps3k": dict(tied=True, steps=3000),
    "layers1": dict(layers=1),
    "layers4": dict(layers=4),
    "seq64": dict(seq_len=64, batch=8),
    # the language: rank (vocab), contexts (groups, order), entropy (support, zipf)
    "vocab128": dict(vocab=128),
    "vocab512": dict(vocab=512),
    "vocab1024": dict(vocab=1024, support=64),
    "groups1": dict(groups=1),
    "groups16": dict(groups=16),
    "order3": dict(order=3, groups=4),
    "support8": dict(support=8),
    "support128": dict(support=128),
    "zipf0.5": dict(zipf=0.5),
    "zipf2": dict(zipf=2.0),
    "zipf2-support128": dict(zipf=2.0, support=128),
    # combinations aimed at a bottleneck that bites late: a high-rank, low-entropy language
    "vocab512-zipf2": dict(vocab=512, zipf=2.0),
    "vocab512-steps3k": dict(vocab=512, steps=3000),
    "vocab512-wd1": dict(vocab=512, wd=1.0),
    "vocab512-tied": dict(vocab=512, tied=True),
    "zipf2-wd1": dict(zipf=2.0, wd=1.0),
    "zipf2-steps3k": dict(zipf=2.0, steps=3000),
    "zipf2-tied": dict(zipf=2.0, tied=True),
    "groups16-steps3k": dict(groups=16, steps=3000),
}


def setting_params(name: str, extra: dict | None = None) -> dict:
    return {**BASE, **SETTINGS.get(name, {}), **(extra or {})}


def language_spec(p: dict) -> LanguageSpec:
    return LanguageSpec(
        vocab_size=p["vocab"], order=p["order"], groups=p["groups"], support=p["support"],
        zipf_exponent=p["zipf"],
    )  # fmt: skip


_LANGS: dict = {}


def language_facts(spec: LanguageSpec, eval_tokens: int, seq_len: int):
    """(language, facts, held-out windows (n, T + 1)); cached per (spec, T)."""
    key = (spec, eval_tokens, seq_len)
    if key not in _LANGS:
        lang = build_language(spec)
        n_chains = -(-eval_tokens // seq_len)
        windows, nll = lang.sample_chains(n_chains, seq_len + 1, np.random.default_rng(10_000))
        P = lang.transitions.toarray()  # (C, V)
        facts = dict(
            n_contexts=spec.n_contexts,
            rank=int(np.linalg.matrix_rank(P)),
            entropy_rate=lang.entropy_rate,
            heldout_true_nll=float(nll[:, 1:].mean()),
        )
        _LANGS.clear()  # one language in memory at a time
        _LANGS[key] = (lang, facts, windows.astype(np.int64))
    return _LANGS[key]


@torch.no_grad()
def token_losses(model, windows: np.ndarray, batch_size: int = 256) -> np.ndarray:
    """Per-token next-token loss of windows[:, 1:] given windows[:, :-1]; (n * T,) float64."""
    out = []
    for lo in range(0, len(windows), batch_size):
        w = torch.as_tensor(windows[lo : lo + batch_size])  # (b, T + 1)
        logits = model(input_ids=w[:, :-1]).logits  # (b, T, V_padded)
        loss = F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1), reduction="none"
        )
        out.append(loss.double().numpy())
    return np.concatenate(out)


def run_one(name: str, p: dict, seed: int, width: int, args) -> dict:
    spec = language_spec(p)
    lang, facts, held_out = language_facts(spec, args.eval_tokens, p["seq_len"])
    window = p["seq_len"] + 1
    n_train = p["steps"] * p["batch"]  # windows, each an independent stationary chain
    rng = np.random.default_rng([seed, 1])  # training data: per seed, never the eval sample's
    train, _ = lang.sample_chains(n_train, window, rng)
    model_spec = ToyModelSpec(
        hidden_size=width, vocab_size=spec.vocab_size + 2, num_layers=p["layers"],
        seq_len=p["seq_len"], tied_head=p["tied"],
    )  # fmt: skip
    train_spec = TrainSpec(
        max_steps=p["steps"], batch_size=p["batch"], seed=seed, weight_decay=p["wd"],
        lr=p["lr_scale"] * TrainSpec().peak_lr(width), min_lr_ratio=p["min_lr"],
        warmup_fraction=p["warmup"], windows="sequential",
    )  # fmt: skip
    n = args.n_checkpoints
    schedule = sorted({round(i * p["steps"] / n) for i in range(1, n + 1)})  # even, to the end
    losses, ses = {}, {}

    def on_checkpoint(step, model):
        tl = token_losses(model, held_out)
        losses[step] = float(tl.mean())
        ses[step] = float(tl.std() / math.sqrt(len(tl)))

    t0 = time.perf_counter()
    train_toy_model(train.reshape(-1), model_spec, train_spec, schedule, on_checkpoint)
    wall = time.perf_counter() - t0
    final = p["steps"]
    best = min(losses, key=losses.get)
    z = (losses[final] - losses[best]) / ses[final]
    return dict(
        setting=name, seed=seed, width=width, params=p, **facts,
        train_tokens=n_train * window, eval_tokens=int(held_out[:, 1:].size),
        steps=list(losses), losses=list(losses.values()), se=ses[final],
        best_step=best, final_step=final, best_loss=losses[best], final_loss=losses[final],
        z=z, saturated=bool(best < final and z > Z_SATURATED), wall_s=wall,
    )  # fmt: skip


def read_done(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def summarize(records: list[dict], widths_order=None) -> str:
    """Markdown table: one row per setting x width, per seed best/final step and z."""
    by = {}
    for r in records:
        by.setdefault((r["setting"], r["width"]), []).append(r)
    names = list(dict.fromkeys(r["setting"] for r in records))
    lines = [
        "| setting | rank | H (nats) | d | final loss | per seed: best step / final step, (final-best)/SE | saturated seeds |",
        "|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for name in names:
        for width in sorted({w for (n, w) in by if n == name}):
            rs = sorted(by[(name, width)], key=lambda r: r["seed"])
            cells = "; ".join(f"{r['best_step']}/{r['final_step']}, {r['z']:+.1f}" for r in rs)
            final = np.mean([r["final_loss"] for r in rs])
            sat = sum(r["saturated"] for r in rs)
            lines.append(
                f"| {name} | {rs[0]['rank']} | {rs[0]['entropy_rate']:.3f} | {width} | "
                f"{final:.3f} | {cells} | {sat}/{len(rs)} |"
            )
    return "\n".join(lines)


def verdict(records: list[dict]) -> list[str]:
    """Settings whose narrowest widths saturate in every seed and whose widest never does."""
    out = []
    for name in dict.fromkeys(r["setting"] for r in records):
        rs = [r for r in records if r["setting"] == name]
        widths = sorted({r["width"] for r in rs})
        seeds = {r["seed"] for r in rs}
        if len(widths) < 2 or len(seeds) < 3:
            continue
        narrow = [r for r in rs if r["width"] == widths[0]]
        wide = [r for r in rs if r["width"] == widths[-1]]
        if all(r["saturated"] for r in narrow) and not any(r["saturated"] for r in wide):
            out.append(name)
    return out


def export_loss_table(records: list[dict], setting: str, seed: int, path: Path) -> None:
    """A loss.csv-like table (suite, model, revision, step, tokens, loss, loss_sem) of one
    setting x seed, every width a model toy-d{width}: the input of lmsat.products.saturation_tables.loss_table."""
    rows = []
    for r in sorted(records, key=lambda r: r["width"]):
        if (r["setting"], r["seed"]) != (setting, seed):
            continue
        tokens_per_step = r["params"]["batch"] * r["params"]["seq_len"]
        for step, loss in zip(r["steps"], r["losses"]):
            rows.append(
                f"toy,toy-d{r['width']},step{step},{step},{step * tokens_per_step},{loss!r},{r['se']!r}"
            )
    if not rows:
        raise SystemExit(f"no records of setting {setting} seed {seed}")
    header = f"# benchmarks/saturation_study.py --export {setting} {seed}: held-out loss by checkpoint"
    path.write_text("\n".join([header, "suite,model,revision,step,tokens,loss,loss_sem", *rows]) + "\n")


def language_table(names: list[str], widths: list[int]) -> str:
    """Markdown table of the languages searched: contexts, rank, entropy rate, and the rank-d
    softmax floor (toy_suite.softmax_floor: the lowest loss of any rank-d logits) per width."""
    from toy_suite import softmax_floor  # benchmarks/ is on sys.path when run as a script

    seen = {}
    for name in names:
        seen.setdefault(language_spec(setting_params(name)), []).append(name)
    head = "| V | k | G | s | a | contexts | rank | H (nats) | " + " | ".join(
        f"floor d={d}" for d in widths
    )
    lines = [head + " | settings |", "|" + "---|" * (9 + len(widths))]
    for spec, names in seen.items():
        lang = build_language(spec)
        rank = int(np.linalg.matrix_rank(lang.transitions.toarray()))
        floors = " | ".join(f"{softmax_floor(lang, d):.3f}" for d in widths)
        lines.append(
            f"| {spec.vocab_size} | {spec.order} | {spec.groups} | {spec.support} | "
            f"{spec.zipf_exponent} | {spec.n_contexts} | {rank} | {lang.entropy_rate:.3f} | "
            f"{floors} | {', '.join(dict.fromkeys(names))} |"
        )
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("results/saturation_study.jsonl"))
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), help="names, see --list")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--widths", type=int, nargs="+", default=[8, 64])
    parser.add_argument("--eval-tokens", type=int, default=32_768)
    parser.add_argument("--n-checkpoints", type=int, default=12, help="evenly spaced")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="override knobs of every setting (e.g. steps=300)")  # fmt: skip
    parser.add_argument("--setting-major", action="store_true",
                        help="all seeds of a setting before the next (default: seed-major)")  # fmt: skip
    parser.add_argument("--list", action="store_true", help="print the settings and exit")
    parser.add_argument("--summary", action="store_true", help="print the table of --out")
    parser.add_argument("--export", nargs=3, metavar=("SETTING", "SEED", "CSV"),
                        help="write one setting x seed of --out as a loss table")  # fmt: skip
    parser.add_argument("--languages", action="store_true",
                        help="print the languages of --settings: rank, entropy, rank-d floors")  # fmt: skip
    parser.add_argument("--time", action="store_true", help="time one run per width of base")
    args = parser.parse_args()
    torch.set_num_threads(1)
    extra = {}
    for item in args.set:
        key, value = item.split("=", 1)
        extra[key] = type(BASE[key])(json.loads(value))
    if args.list:
        for name in SETTINGS:
            print(f"{name:20s} {setting_params(name, extra)}")
        return
    if args.export:
        setting, seed, path = args.export
        export_loss_table(read_done(args.out), setting, int(seed), Path(path))
        return
    if args.languages:
        print(language_table(args.settings, args.widths))
        return
    if args.summary:
        records = read_done(args.out)
        print(summarize(records))
        print(f"\nsaturating settings (narrowest all seeds, widest none): {verdict(records)}")
        rises = sorted((r for r in records if r["best_step"] < r["final_step"]), key=lambda r: -r["z"])
        print(
            f"runs with best before final: {len(rises)} of {len(records)}; largest rises: "
            + ", ".join(f"{r['setting']} seed {r['seed']} d={r['width']} {r['z']:+.1f} SE" for r in rises[:8])
        )
        print(f"runs {len(records)}, train wall {sum(r['wall_s'] for r in records) / 60:.1f} min")
        return
    if args.time:
        for width in args.widths:
            r = run_one("base", setting_params("base", extra), 0, width, args)
            print(f"d={width}: {r['wall_s']:.1f} s, final {r['final_loss']:.3f} z {r['z']:+.1f}")
        return

    done = {(r["setting"], r["seed"], r["width"]) for r in read_done(args.out)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    if args.setting_major:  # every finished setting has all its seeds
        order = [(name, seed) for name in args.settings for seed in args.seeds]
    else:  # seed-major: a stopped search still covers every setting
        order = [(name, seed) for seed in args.seeds for name in args.settings]
    for name, seed in order:
        p = setting_params(name, extra)
        for width in args.widths:
            if (name, seed, width) in done:
                continue
            r = run_one(name, p, seed, width, args)
            with args.out.open("a") as f:
                f.write(json.dumps(r) + "\n")
            print(
                f"[{(time.perf_counter() - t_start) / 60:6.1f} min] {name} seed {seed} "
                f"d={width}: best {r['best_step']}/{r['final_step']} final "
                f"{r['final_loss']:.3f} z {r['z']:+.1f} ({r['wall_s']:.0f} s)",
                flush=True,
            )


if __name__ == "__main__":
    main()
