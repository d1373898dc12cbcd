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
    python benchmarks/dag.py --against 8a5a1a7 --plans paper --profiles none --repeats 5

--against COMMIT plans the same configs with a clone of this repository at COMMIT (its own
workflow, library and config files), each dry run of this checkout at the same time as the
commit's (one process each, so that both share the machine's load), and prints both medians
and the ratios this / COMMIT. CPU seconds (the process's user + system time) move less with
other load than wall seconds do; both are printed.
"""

from __future__ import annotations

import argparse
import copy
import os
import re
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


def paper_config(copies: int, subsample: int, name: str = "pythia", root: Path = ROOT) -> dict:
    """`root`'s config/{name}.yaml with every metric (`metrics: null`: every metric `root`
    registers) and `copies` renamed copies of each model."""
    config = yaml.safe_load((root / "config" / f"{name}.yaml").read_text())
    config["metrics"] = None
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


def clone(commit: str, into: Path) -> Path:
    """A clone of this repository at `commit` (committed code only)."""
    subprocess.run(["git", "clone", "-q", "--no-checkout", str(ROOT), str(into)], check=True)
    subprocess.run(["git", "-C", str(into), "checkout", "-q", commit], check=True)
    return into


def start(root: Path, configfile: Path, workdir: Path, profile: str | None) -> tuple[subprocess.Popen, Path, float]:
    """`snakemake -n` of the plan with `root`'s workflow, started; its output goes to a file."""
    command = SNAKEMAKE + ["-n", "--quiet", "rules", "-s", str(root / "Snakefile"), "--configfile", str(configfile)]
    if profile:
        command += ["--profile", str(root / "profiles" / profile)]
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / "dry-run.log"
    with log.open("w") as out:
        process = subprocess.Popen(command, cwd=workdir, stdout=out, stderr=subprocess.STDOUT,
                                   env=dict(os.environ, HF_HUB_OFFLINE="1"))
    return process, log, time.perf_counter()


def finish(process: subprocess.Popen, log: Path, started: float, what: str) -> tuple[float, float, str]:
    """Wall and CPU seconds (user + system, of the process and its children) of a started dry
    run, and its output."""
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    output = log.read_text()
    if process.returncode != 0:
        sys.exit(f"dry run of {what} failed:\n{output[-3000:]}")
    return wall, usage.ru_utime + usage.ru_stime, output


def dry_run(configfile: Path, workdir: Path, profile: str | None, root: Path = ROOT) -> tuple[float, float, str]:
    """Wall and CPU seconds of one `snakemake -n` of the plan, and its output."""
    return finish(*start(root, configfile, workdir, profile), what=configfile.name)


def side_by_side(plans: dict, workdir: Path, profile: str | None) -> dict[str, tuple[float, float, str]]:
    """One dry run of each side's plan (side -> (root, configfile)), all at once."""
    started = {side: start(root, path, workdir / side, profile) for side, (root, path) in plans.items()}
    return {side: finish(*run, what=f"{plans[side][1].name} ({side})") for side, run in started.items()}


def job_counts(output: str) -> dict[str, int]:
    """The first 'Job stats' table of a dry run: jobs per rule (and 'total')."""
    table = output.split("Job stats:", 1)[1].split("\n\n", 1)[0]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10 revisions per model, 1 repeat")
    parser.add_argument("--repeats", type=int, default=None, help="dry runs per plan (default 3, quick 1)")
    parser.add_argument("--config", default="pythia", help="config/<name>.yaml to plan (default pythia)")
    parser.add_argument("--against", metavar="COMMIT", help="also plan with a clone at COMMIT, side by side")
    parser.add_argument("--plans", choices=("paper", "2x", "both"), default="both", help="the 1x plan, the 2x plan or both")
    parser.add_argument("--profiles", choices=("none", "slurm", "both"), default="both",
                        help="without a profile, with profiles/slurm, or both")
    args = parser.parse_args()
    repeats = args.repeats or (1 if args.quick else 3)
    subsample = 10 if args.quick else 0
    labels = [(label, copies) for label, copies in (("paper", 1), ("2x", 2)) if args.plans in (label, "both")]
    profiles = [profile for profile in (None, "slurm") if args.profiles in (profile or "none", "both")]

    with tempfile.TemporaryDirectory(prefix="lmsat-dag-") as scratch:
        scratch = Path(scratch)
        roots = {"this": ROOT}
        if args.against:
            roots[args.against] = clone(args.against, scratch / "against")
        plans = {}
        for side, root in roots.items():
            for label, copies in labels:
                path = scratch / f"{label}-{side}.yaml"
                path.write_text(yaml.safe_dump(paper_config(copies, subsample, args.config, root), sort_keys=False))
                plans[side, label] = (root, path)

        rows, counts = [], {}
        for profile in profiles:
            for label, _ in labels:
                runs = [side_by_side({side: plans[side, label] for side in roots}, scratch / f"run{i}", profile)
                        for i in range(repeats)]
                row = [label, profile or "-"]
                for side in roots:
                    counts[side, label, profile] = job_counts(runs[0][side][2])
                    row.append((counts[side, label, profile]["total"], statistics.median(r[side][0] for r in runs),
                                statistics.median(r[side][1] for r in runs)))
                rows.append(row)

    models = sum(len(suite["models"]) for suite in paper_config(1, 0, args.config)["suites"].values())
    print(f"dry-run planning cost ({'quick: 10 revisions/model, ' if args.quick else ''}{repeats} repeat(s), median)")
    revisions = "~10 revisions each" if args.quick else "all revisions"
    print(f"  plan: config/{args.config}.yaml, {models} models, {revisions}, metrics {sorted(METRICS)}")
    print(f"{'plan':>6} {'profile':>8} {'jobs':>7} {'wall s':>8} {'cpu s':>7} {'ms/job':>7}"
          + (f"   {args.against + ':':>9} {'jobs':>7} {'wall s':>8} {'cpu s':>7}   this/{args.against}: wall, cpu"
             if args.against else ""))
    for label, profile, (jobs, wall, cpu), *against in rows:
        line = f"{label:>6} {profile:>8} {jobs:>7} {wall:8.1f} {cpu:7.1f} {1000 * cpu / jobs:7.2f}"
        if against:
            (old_jobs, old_wall, old_cpu), = against
            line += f"   {'':>9} {old_jobs:>7} {old_wall:8.1f} {old_cpu:7.1f}   {wall / old_wall:.3f}, {cpu / old_cpu:.3f}"
        print(line)
    if len(labels) == 2:
        for profile in profiles:
            one, two = ([r for r in rows if r[0] == plan and r[1] == (profile or "-")][0][2] for plan in ("paper", "2x"))
            print(f"2x/1x ({profile or '-':>5}): jobs {two[0] / one[0]:.2f}, wall {two[1] / one[1]:.2f}, "
                  f"cpu {two[2] / one[2]:.2f}  (2.00 = linear)")
    label, profile = labels[0][0], profiles[-1]
    print(f"\njobs per rule of the plan (config/{args.config}.yaml {label}, every metric), -n"
          f"{' --profile profiles/' + profile if profile else ''}:")
    for rule, n in counts["this", label, profile].items():
        print(f"  {rule:<32} {n:>6}")


if __name__ == "__main__":
    main()
