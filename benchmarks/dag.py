"""Planning cost at scale: dry-run time of the paper's plan and of twice that plan.

The paper's plan is config/pythia.yaml with every registered metric (10 Pythia models x 154
revisions x each metric, plus whatever the workflow adds per checkpoint); the 2x plan adds
a copy of each model under another name (20 models). Each plan is planned with
`snakemake -n` (no cluster, no hub) without a profile and with profiles/slurm (which adds
job groups), in a scratch directory; the benchmark prints median wall and CPU seconds,
the 2x/1x ratios (2.0 = linear growth) and the jobs per rule of the paper plan under
profiles/slurm. Target: the paper plan in under 30 s, growing no worse than linearly.

    python benchmarks/dag.py              # 3 repeats of each plan (several minutes)
    python benchmarks/dag.py --quick      # 10 revisions per model, 1 repeat (< 1 minute)
    python benchmarks/dag.py --repeats 5
    python benchmarks/dag.py --config paper   # config/paper.yaml (Pythia + GPT-2, OPT, Gemma, Llama-2)
"""

from __future__ import annotations

import argparse
import copy
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from lmsat.products.metrics import METRICS

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]


def paper_config(copies: int, subsample: int, name: str = "pythia") -> dict:
    """config/{name}.yaml with every metric and `copies` renamed copies of each model."""
    config = yaml.safe_load((ROOT / "config" / f"{name}.yaml").read_text())
    config["metrics"] = sorted(METRICS)
    for suite in config["suites"].values():
        originals = suite["models"]
        suite["models"] = [
            {**copy.deepcopy(m), "name": m["name"] + (f"-copy{i}" if i else ""),
             "id": m.get("id") or f"{suite.get('hub_org') or 'EleutherAI'}/{m['name']}"}
            for i in range(copies)
            for m in originals
        ]
        if subsample:
            suite["revisions"] = {**suite.get("revisions", {}), "subsample": subsample}
    return config


def dry_run(configfile: Path, workdir: Path, profile: str | None) -> tuple[float, float, str]:
    """Wall and CPU seconds of one `snakemake -n` of the plan, and its output."""
    command = SNAKEMAKE + ["-n", "--quiet", "rules", "-s", str(ROOT / "Snakefile"), "--configfile", str(configfile)]
    if profile:
        command += ["--profile", str(ROOT / "profiles" / profile)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    clock = time.perf_counter()
    result = subprocess.run(command, cwd=workdir, capture_output=True, text=True)
    wall = time.perf_counter() - clock
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        sys.exit(f"dry run of {configfile.name} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, result.stdout + result.stderr


def job_counts(output: str) -> dict[str, int]:
    """The first 'Job stats' table of a dry run: jobs per rule (and 'total')."""
    table = output.split("Job stats:", 1)[1].split("\n\n", 1)[0]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10 revisions per model, 1 repeat")
    parser.add_argument("--repeats", type=int, default=None, help="dry runs per plan (default 3, quick 1)")
    parser.add_argument("--config", default="pythia", help="config/<name>.yaml to plan (default pythia)")
    args = parser.parse_args()
    repeats = args.repeats or (1 if args.quick else 3)
    subsample = 10 if args.quick else 0

    with tempfile.TemporaryDirectory(prefix="lmsat-dag-") as scratch:
        scratch = Path(scratch)
        plans = {}
        for label, copies in (("paper", 1), ("2x", 2)):
            path = scratch / f"{label}.yaml"
            path.write_text(yaml.safe_dump(paper_config(copies, subsample, args.config), sort_keys=False))
            plans[label] = path

        rows, counts = [], {}
        for profile in (None, "slurm"):
            for label, path in plans.items():
                runs = [dry_run(path, scratch, profile) for _ in range(repeats)]
                wall = statistics.median(r[0] for r in runs)
                cpu = statistics.median(r[1] for r in runs)
                counts[label, profile] = job_counts(runs[0][2])
                rows.append((label, profile or "-", counts[label, profile]["total"], wall, cpu))

    models = sum(len(suite["models"]) for suite in paper_config(1, 0, args.config)["suites"].values())
    print(f"dry-run planning cost ({'quick: 10 revisions/model, ' if args.quick else ''}{repeats} repeat(s), median)")
    revisions = "~10 revisions each" if args.quick else "all revisions"
    print(f"  plan: config/{args.config}.yaml, {models} models, {revisions}, metrics {sorted(METRICS)}")
    print(f"{'plan':>6} {'profile':>8} {'jobs':>7} {'wall s':>8} {'cpu s':>7} {'ms/job':>7}")
    for label, profile, jobs, wall, cpu in rows:
        print(f"{label:>6} {profile:>8} {jobs:>7} {wall:8.1f} {cpu:7.1f} {1000 * cpu / jobs:7.2f}")
    for profile in ("-", "slurm"):
        (one,), (two,) = ([r for r in rows if r[0] == plan and r[1] == profile] for plan in ("paper", "2x"))
        print(
            f"2x/1x ({profile:>5}): jobs {two[2] / one[2]:.2f}, wall {two[3] / one[3]:.2f}, cpu {two[4] / one[4]:.2f}"
            "  (2.00 = linear)"
        )
    print(f"\njobs per rule of the plan (config/{args.config}.yaml, every metric), -n --profile profiles/slurm:")
    for rule, n in counts["paper", "slurm"].items():
        print(f"  {rule:<32} {n:>6}")


if __name__ == "__main__":
    main()
