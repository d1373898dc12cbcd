"""Benchmark: the whole default run of this checkout against an older commit, side by side.

    python benchmarks/default_run.py --old 90d9ab2          # issue 35: the run before the warm interpreter
    python benchmarks/default_run.py --old 8f97160 --bound 1.10   # issue 22: the run before the checks
    python benchmarks/default_run.py --old 8f97160 --cores 1 --keep /tmp/pair

Clones this repository twice into a scratch directory (HEAD, or --new, and --old, each
`git clone` + checkout: committed code only), then runs `snakemake --profile profiles/local`
on the default config in both AT ONCE, each with --cores (default 1), so the two runs share
the machine's noise: another process slowing the machine slows both. Printed: each run's
wall seconds, the sum of its jobs' seconds (Snakemake's metadata: start to end of every
job), per rule, and the ratios new / old. A ratio is only meaningful within one run of this
script; a run on a busy machine is noisier, not biased, as long as both see the same load.

Bounds (--bound): issue 22's new / old wall <= 1.10 (the checksums, range checks, strict
loading and fingerprints cost the default run at most 10%, `--old 8f97160 --bound 1.10`);
issue 35's <= 0.60 (the default run in about half the time, `--old 90d9ab2`, the default).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def clone(commit: str, into: Path) -> Path:
    subprocess.run(["git", "clone", "-q", str(ROOT), str(into)], check=True)
    subprocess.run(["git", "-C", str(into), "checkout", "-q", commit], check=True)
    return into


def start_run(checkout: Path, cores: int) -> tuple[subprocess.Popen, float]:
    log = open(checkout / "benchmark_run.log", "w")
    command = [sys.executable, "-m", "snakemake", "--profile", "profiles/local", "--cores", str(cores)]
    return subprocess.Popen(command, cwd=checkout, stdout=log, stderr=subprocess.STDOUT), time.perf_counter()


def job_seconds(checkout: Path) -> dict[str, float]:
    """Rule -> the sum of its jobs' seconds, from .snakemake/metadata (one record per output;
    a job with several outputs is counted once, by its job hash)."""
    jobs = {}
    for path in (checkout / ".snakemake" / "metadata").iterdir():
        try:
            record = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue
        if record.get("starttime") and record.get("endtime"):
            key = (record["rule"], record["job_hash"]) if record.get("job_hash") is not None else path.name
            jobs[key] = (record["rule"], record["endtime"] - record["starttime"])
    per_rule = defaultdict(float)
    for rule, seconds in jobs.values():
        per_rule[rule] += seconds
    return dict(per_rule)


def wait_for_all(runs: dict[str, tuple[subprocess.Popen, float]], checkouts: dict[str, Path]) -> dict[str, float]:
    """{name: wall seconds} of runs started side by side; each run's wall ends when it does, not
    when the other does. Exits naming the log of a run that failed."""
    walls = {}
    while len(walls) < len(runs):
        for name, (process, started) in runs.items():
            if name not in walls and process.poll() is not None:
                if process.returncode != 0:
                    sys.exit(f"the {name} run failed: see {checkouts[name] / 'benchmark_run.log'}")
                walls[name] = time.perf_counter() - started
        time.sleep(1)
    return walls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", required=True, help="the commit to compare with (e.g. 8f97160)")
    parser.add_argument("--new", default="HEAD", help="the commit measured (default: HEAD)")
    parser.add_argument("--cores", type=int, default=1, help="cores of each run (both run at once)")
    parser.add_argument("--bound", type=float, default=0.60, help="the wall ratio new / old to meet (issue 35: 0.60)")
    parser.add_argument("--keep", type=Path, help="clone into this directory and keep it (default: a temporary one)")
    args = parser.parse_args()
    scratch = args.keep or Path(tempfile.mkdtemp(prefix="lmsat-default-run-"))
    scratch.mkdir(parents=True, exist_ok=True)
    checkouts = {"new": clone(args.new, scratch / "new"), "old": clone(args.old, scratch / "old")}
    runs = {name: start_run(path, args.cores) for name, path in checkouts.items()}
    walls = wait_for_all(runs, checkouts)
    seconds = {name: job_seconds(path) for name, path in checkouts.items()}
    print(f"default run, new {args.new} vs old {args.old}, side by side, --cores {args.cores} each")
    print(f"{'rule':28s} {'new s':>9s} {'old s':>9s} {'new/old':>8s}")
    for rule in sorted(set(seconds["new"]) | set(seconds["old"]), key=lambda r: -seconds["old"].get(r, 0)):
        new, old = seconds["new"].get(rule, 0.0), seconds["old"].get(rule, 0.0)
        print(f"{rule:28s} {new:9.1f} {old:9.1f} {new / old if old else float('nan'):8.3f}")
    total_new, total_old = sum(seconds["new"].values()), sum(seconds["old"].values())
    print(f"{'jobs, summed':28s} {total_new:9.1f} {total_old:9.1f} {total_new / total_old:8.3f}")
    print(f"{'wall':28s} {walls['new']:9.1f} {walls['old']:9.1f} {walls['new'] / walls['old']:8.3f}")
    print(f"bound: wall ratio <= {args.bound:.2f}: {'met' if walls['new'] / walls['old'] <= args.bound else 'NOT met'}")


if __name__ == "__main__":
    main()
