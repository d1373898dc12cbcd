"""How far the gradient bottleneck's table moves under the numeric variants: the measurement
behind its tolerances in tests/golden_tables.py.

    python benchmarks/numeric_variants.py weights VARIANTS base threads2 aten-default ...
    python benchmarks/gradient_sensitivity.py WORKDIR --variants VARIANTS   # the real spread
    python benchmarks/gradient_sensitivity.py WORKDIR [--spread 6.5e-3] [--draws 2]  # a bound

--variants: toy-d16 trained under each numeric variant of this CPU (numeric_variants.py
weights: threads, kernel ISAs, MKL branches), each checkpoint's gradient row recomputed on
WORKDIR's eval sample (the same synthetic sample in every variant), against the recorded
table (tests/data/default_tables) and between the variants: the spread the tolerances are
set from. Without it, a bound:

WORKDIR: the working directory of a finished default run (results/default/ in it). The
numeric variants of a CPU (threads, kernel ISAs, MKL branches: benchmarks/numeric_variants.py)
change the trained toy weights by at most 6.5e-3 of a tensor's largest value (the largest
difference between any two variants, toy-d16 after 800 steps, tests/golden_tables.py); the
analysis of given weights by far less (threads: 1.5e-8 on a cosine). So for every toy
checkpoint of the run this perturbs every weight by uniform noise in +-spread x max|W| of
its tensor (every element at up to the largest measured difference: a bound, not a typical
variant), sends the run's eval sample through the pipeline's own extraction and measure
(lmsat.monitor, the callback's path: the same functions as rule analyse_checkpoint), and
prints per column of gradient_bottleneck.csv the largest |change| over checkpoints and
draws, and the unperturbed recomputation against the run's own table (this CPU's analysis
against the recording's), beside the column's tolerance and its smallest change between a
model's step 0 and final checkpoint (a change of the science it must stay below).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

COLUMNS = (
    "energy_kept", "energy_kept_sem", "norm_kept", "norm_kept_sem", "energy_kept_pooled", "energy_kept_pooled_sem",
    "energy_kept_frequent", "energy_kept_frequent_sem", "energy_kept_rare", "energy_kept_rare_sem",
    "norm_kept_frequent", "norm_kept_frequent_sem", "norm_kept_rare", "norm_kept_rare_sem",
    "energy_kept_q05", "energy_kept_q25", "energy_kept_q50", "energy_kept_q75", "energy_kept_q95",
    "norm_kept_q05", "norm_kept_q25", "norm_kept_q50", "norm_kept_q75", "norm_kept_q95",
)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--spread", type=float, default=6.5e-3, help="largest |dW| / max|W| of a tensor (numeric variants)")
    parser.add_argument("--draws", type=int, default=2, help="perturbations per checkpoint")
    parser.add_argument("--variants", type=Path, help="a numeric_variants.py weights directory: the real spread")
    args = parser.parse_args()
    if args.variants:
        return variants(args.workdir, args.variants)

    import numpy as np
    import pandas as pd
    import torch
    from transformers import GPTNeoXForCausalLM
    from transformers.utils import logging

    from lmsat.standalone.analyse import run_settings
    from lmsat.standalone.monitor import load_sample, monitor

    import golden_tables

    logging.disable_progress_bar()
    torch.set_num_threads(1)
    results = args.workdir / "results" / "default"
    table = pd.read_csv(results / "tables" / "gradient_bottleneck.csv")
    sample = load_sample(results / "samples" / "synthetic" / "toy.h5")
    settings = run_settings(ROOT / "config" / "config.yaml")
    tokenizer = results / "toy" / "tokenizer"
    generator = torch.Generator().manual_seed(0)
    changes, recomputed = {c: [] for c in COLUMNS}, {c: [] for c in COLUMNS}
    for row in table.to_dict("records"):
        hub = results / "toy" / "hub" / f"models--lmsat-toy--{row['model']}"
        snapshot = hub / "snapshots" / (hub / "refs" / row["revision"]).read_text().strip()
        lm = GPTNeoXForCausalLM.from_pretrained(snapshot, dtype=torch.float32).eval()
        base = monitor(lm, sample, settings=settings, metrics=("gradient_bottleneck",), tokenizer_dir=tokenizer,
                       name=row["model"], revision=row["revision"])["gradient_bottleneck"]
        for column in COLUMNS:
            recomputed[column].append(abs(base[column] - row[column]))
        for _ in range(args.draws):
            moved = GPTNeoXForCausalLM.from_pretrained(snapshot, dtype=torch.float32).eval()
            with torch.no_grad():
                for tensor in moved.state_dict().values():
                    if tensor.is_floating_point() and tensor.numel():
                        noise = torch.rand(tensor.shape, generator=generator, dtype=tensor.dtype) * 2 - 1
                        tensor.add_(noise * args.spread * tensor.abs().max())
            found = monitor(moved, sample, settings=settings, metrics=("gradient_bottleneck",), tokenizer_dir=tokenizer,
                            name=row["model"], revision=row["revision"])["gradient_bottleneck"]
            for column in COLUMNS:
                changes[column].append(abs(found[column] - base[column]))
        print(f"{row['model']}@{row['revision']}: energy_kept {base['energy_kept']:.6g} (table {row['energy_kept']:.6g})",
              flush=True)
    first = table.groupby("model").head(1).set_index("model")
    final = table[table["is_final"]].set_index("model")
    print(f"\n{len(table)} checkpoints x {args.draws} perturbations of +-{args.spread:g} max|W| per tensor")
    print(f"{'column':26s} {'perturbed':>10s} {'recomputed':>10s} {'tolerance':>10s} {'x perturbed':>11s} "
          f"{'step0->final, smallest':>23s}")
    for column in COLUMNS:
        tolerance = golden_tables.tolerance_of("gradient_bottleneck", column)
        bound = tolerance.atol if tolerance else float("nan")
        science = float((final[column] - first[column]).abs().min())
        worst = max(changes[column])
        print(f"{column:26s} {worst:10.2e} {max(recomputed[column]):10.2e} {bound:10.2e} {bound / worst:11.1f} "
              f"{science:12.2e} ({science / bound:.0f} tol)")
    print("largest relative change of energy_kept:",
          f"{max(c / v for c, v in zip(changes['energy_kept'], np.repeat(table['energy_kept'], args.draws))):.2e}")


def row_of(snapshot: Path, sample, settings, tokenizer: Path, model: str, revision: str) -> dict:
    """The gradient row of one checkpoint directory, through lmsat.monitor (float32, 1 thread)."""
    import torch
    from transformers import GPTNeoXForCausalLM

    from lmsat.standalone.monitor import monitor

    lm = GPTNeoXForCausalLM.from_pretrained(snapshot, dtype=torch.float32).eval()
    return monitor(lm, sample, settings=settings, metrics=("gradient_bottleneck",), tokenizer_dir=tokenizer, name=model,
                   revision=revision)["gradient_bottleneck"]


def variants(workdir: Path, directory: Path, model: str = "toy-d16") -> None:
    """Per column: the largest |made - recorded| over the variants and checkpoints of `model`,
    the largest between two variants, and the tolerance."""
    import pandas as pd
    import torch
    from transformers.utils import logging

    from lmsat.standalone.analyse import run_settings
    from lmsat.standalone.monitor import load_sample

    import golden_tables

    logging.disable_progress_bar()
    torch.set_num_threads(1)
    results = workdir / "results" / "default"
    sample = load_sample(results / "samples" / "synthetic" / "toy.h5")
    settings = run_settings(ROOT / "config" / "config.yaml")
    tokenizer = results / "toy" / "tokenizer"
    recorded = pd.read_csv(golden_tables.RECORDED / "gradient_bottleneck.csv")
    recorded = recorded[recorded["model"] == model].set_index("revision")
    made = {}
    for variant in sorted(p.name for p in directory.iterdir() if (p / "results/default/toy/hub").is_dir()):
        hub = directory / variant / f"results/default/toy/hub/models--lmsat-toy--{model}"
        made[variant] = {}
        for ref in (hub / "refs").iterdir():
            made[variant][ref.name] = row_of(hub / "snapshots" / ref.read_text().strip(), sample, settings, tokenizer,
                                             model, ref.name)
        worst = max(abs(made[variant][r]["energy_kept"] - recorded.loc[r, "energy_kept"]) for r in made[variant])
        print(f"{variant}: energy_kept largest |made - recorded| {worst:.2e}", flush=True)
    names = list(made)
    print(f"\n{model}, {len(names)} variants ({', '.join(names)}) x {len(recorded)} checkpoints")
    print(f"{'column':26s} {'vs recorded':>11s} {'relative':>9s} {'between':>9s}  tolerance  {'x measured':>10s}  SE, smallest")
    for column in COLUMNS:
        against = [abs(made[v][r][column] - recorded.loc[r, column]) for v in names for r in made[v]]
        between = [abs(made[v][r][column] - made[w][r][column]) for v in names for w in names for r in made[v]]
        relative = max(abs(made[v][r][column] - recorded.loc[r, column]) / abs(recorded.loc[r, column])
                       for v in names for r in made[v])
        tolerance = golden_tables.tolerance_of("gradient_bottleneck", column)
        bound = tolerance.atol if tolerance else float("nan")
        se_column = f"{column}_sem"  # the smallest SE of a mean (quantiles and SEs have none)
        se = float(recorded[se_column].min()) if se_column in recorded else float("nan")
        print(f"{column:26s} {max(against):11.2e} {relative:9.2e} {max(between):9.2e}  {bound:9.2e}  "
              f"{bound / max(max(against), 1e-300):10.0f}  {se:9.2e}")


if __name__ == "__main__":
    main()
