"""Benchmark (issue 52): the default run through an S3 bucket against the default run on the
local disk, side by side on this machine.

    python benchmarks/storage_run.py                     # one pair, --cores 1 each
    python benchmarks/storage_run.py --repeats 3 --bound 1.20
    python benchmarks/storage_run.py --configfile my.yaml   # another config (copied into both checkouts)

Copies this working tree twice (the files git tracks or would, as tests/test_storage.py's
storage_clone), starts moto's S3 server in this process (tests/s3_server.py says why moto),
then runs the default config in both copies AT ONCE, each with --cores (default 1), so both
share the machine's noise: `snakemake --profile profiles/local` in one, and in the other the
same with `--default-storage-provider s3 --default-storage-prefix s3://lmsat-bench/<n>
--storage-s3-endpoint-url ...`: the local executor (its warm interpreter forks the jobs in
both), every input downloaded from the bucket into .snakemake/storage/ before its job and
every output uploaded after it. Printed per pair and as medians over --repeats: each run's
wall seconds and the ratio storage / local, the bucket's object count and bytes (how much it
moved), and the CPU seconds the S3 server (moto, threads of this process) took on the same
cores, which a cloud's storage service would not. Snakemake's records of a storage run's jobs
take the bucket objects' times, so there is no per-rule split; where the time goes is a
profile of the storage run's main process (py-spy; docs/cluster.md).

Target (issue 52): median wall ratio <= 1.20 (--bound).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "benchmarks")]

from default_run import wait_for_all  # noqa: E402 (benchmarks/ and tests/ on sys.path first)

from s3_server import S3Server  # noqa: E402
from test_storage import storage_clone  # noqa: E402

BUCKET = "lmsat-bench"


def start_run(checkout: Path, cores: int, extra: list[str], env: dict) -> tuple[subprocess.Popen, float]:
    log = open(checkout / "benchmark_run.log", "w")
    command = [sys.executable, "-m", "snakemake", "--profile", "profiles/local", "--cores", str(cores), *extra]
    return subprocess.Popen(command, cwd=checkout, stdout=log, stderr=subprocess.STDOUT, env=env), time.perf_counter()


def one_pair(scratch: Path, server: S3Server, cores: int, index: int, configfile: Path | None = None) -> dict:
    checkouts = {}
    for name in ("local", "storage"):
        (scratch / name).mkdir(parents=True)
        checkouts[name] = storage_clone(scratch / name)
        if configfile:
            (checkouts[name] / "config" / "config.yaml").write_text(configfile.read_text())
    env = {**os.environ, **server.environment(), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    storage = ["--default-storage-provider", "s3", "--default-storage-prefix", f"s3://{BUCKET}/pair{index}",
               "--storage-s3-endpoint-url", server.endpoint]
    server_cpu = time.process_time()  # moto's threads: the server's requests, on this machine's cores
    runs = {"local": start_run(checkouts["local"], cores, [], env),
            "storage": start_run(checkouts["storage"], cores, storage, env)}
    walls = wait_for_all(runs, checkouts)
    server_cpu = time.process_time() - server_cpu
    objects = server.keys(BUCKET, f"pair{index}/")
    warm_log = checkouts["storage"] / "logs" / "default" / "warm_interpreter.log"
    text = warm_log.read_text() if warm_log.exists() else ""
    forked = len(re.findall(r"\bjob \d+ \S+: exit ", text))  # jobs the warm interpreter forked (lmsat.runtime.warm)
    return dict(walls=walls, objects=len(objects), bytes=sum(objects.values()), forked=forked, server_cpu=server_cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cores", type=int, default=1, help="cores of each run (both run at once)")
    parser.add_argument("--repeats", type=int, default=1, help="pairs of runs, one after another (medians over them)")
    parser.add_argument("--bound", type=float, default=1.20, help="the median wall ratio storage / local to meet (issue 52: 1.20)")
    parser.add_argument("--keep", type=Path, help="work in this directory and keep it (default: a temporary one)")
    parser.add_argument("--configfile", type=Path, help="run this config instead of config/config.yaml (its run: default)")
    args = parser.parse_args()
    scratch = args.keep or Path(tempfile.mkdtemp(prefix="lmsat-storage-run-"))
    server = S3Server().start()
    server.make_bucket(BUCKET)
    pairs = []
    try:
        for index in range(args.repeats):
            pair = one_pair(scratch / f"pair{index}", server, args.cores, index, args.configfile)
            pairs.append(pair)
            walls = pair["walls"]
            print(f"pair {index}: wall local {walls['local']:.1f} s, storage {walls['storage']:.1f} s, "
                  f"ratio {walls['storage'] / walls['local']:.3f}; bucket {pair['objects']} objects, "
                  f"{pair['bytes'] / 1e6:.1f} MB; jobs forked by the storage run's warm interpreter: {pair['forked']}; "
                  f"CPU of the S3 server (moto, in this process, on the runs' machine): {pair['server_cpu']:.1f} s",
                  flush=True)
    finally:
        server.stop()
    wall = {name: statistics.median(p["walls"][name] for p in pairs) for name in ("local", "storage")}
    server_cpu = statistics.median(p["server_cpu"] for p in pairs)
    print(f"\n{args.configfile or 'default'} run, storage (s3, moto on 127.0.0.1) vs local disk, side by side, --cores {args.cores} each, "
          f"medians over {len(pairs)} pair(s)")
    print(f"{'':28s} {'storage s':>10s} {'local s':>9s} {'ratio':>7s}")
    print(f"{'wall':28s} {wall['storage']:10.1f} {wall['local']:9.1f} {wall['storage'] / wall['local']:7.3f}")
    # Snakemake's benchmark records of a storage run's jobs take the bucket objects' times: no per-rule split
    print(f"the storage run took {wall['storage'] - wall['local']:.1f} s longer; the S3 server's own CPU on the same "
          f"cores: {server_cpu:.1f} s (a cloud's storage service runs elsewhere); where the rest goes: docs/cluster.md")
    ratio = wall["storage"] / wall["local"]
    print(f"bound: median wall ratio {ratio:.3f} <= {args.bound:.2f}: {'met' if ratio <= args.bound else 'NOT met'}")


if __name__ == "__main__":
    main()
