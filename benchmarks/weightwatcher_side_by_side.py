"""Benchmark: lmsat's weight diagnostics against WeightWatcher itself, on the same matrices,
side by side in one run: per-layer agreement and the time ratio.

WeightWatcher goes into an environment of its own, never into lmsat's dependencies or lock:

    python3 -m venv /tmp/ww
    /tmp/ww/bin/pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
    /tmp/ww/bin/pip install weightwatcher==0.7.7       # brings powerlaw, scikit-learn, pandas
    .venv/bin/python benchmarks/weightwatcher_side_by_side.py --ww-python /tmp/ww/bin/python
    .venv/bin/python benchmarks/weightwatcher_side_by_side.py --ww-python /tmp/ww/bin/python --quick   # the toy only

Models (the same weights for both):
  * toy: a toy-suite GPT-NeoX (d = 128, 2 layers), the default run's trained final checkpoint
    when --run-dir holds one (results/default/toy/hub), else randomly initialised;
  * pythia-160m-shaped: GPT-NeoX with Pythia-160m's shapes (d = 768, 12 layers, 3072-wide MLP,
    a 50,304 x 768 head, 50,277 rows kept as lmsat keeps them), randomly initialised
    (transformers' init, normal(0, 0.02)), in float16 as Pythia's checkpoints are stored and
    as the checkpoint job loads them (WeightWatcher gets the same values as float32; it
    computes in float64 either way).

Each model's matrices (every nn.Linear of every block, then the head) are written once to an
.npz. lmsat (this interpreter) runs lmsat.degeneration.weight_diagnostics.matrix_diagnostics on each; the
WeightWatcher interpreter loads the same arrays into torch nn.Linear modules (no embeddings,
so WeightWatcher's layer filters see exactly these matrices) and runs
`WeightWatcher(model).analyze(mp_fit=True, max_N=...)`: its default fit (powerlaw via its
WWFit, xmin by least KS distance, no xmax, W not normalised) plus the MP fit that gives
mp_softrank; max_N is raised above the head's rows, as WeightWatcher's default (50,000)
would skip Pythia's head. Its plain `analyze()` (no MP fit) is timed too. Both get the same
thread count (torch and the BLAS libraries' environment variables) and are timed around
the analysis only (imports and loading excluded), in CPU seconds of each process (robust to
other processes on a shared machine) and wall seconds.

Agreement: per column, the largest relative difference over the layers, against a stated
tolerance; every layer outside it is listed with both values.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
if __name__ == "__main__":  # the BLAS pools read these when numpy loads: set them first, as for WeightWatcher's process
    _threads = sys.argv[sys.argv.index("--threads") + 1] if "--threads" in sys.argv else "1"
    os.environ.update({variable: _threads for variable in THREAD_VARIABLES})

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

# lmsat column -> (WeightWatcher's details column, relative tolerance, why)
COMPARED = {
    "alpha": ("alpha", 1e-6, "the same fit on eigenvalues that agree to ~1e-12 relative (float64 Gram vs float64 SVD)"),
    "alpha_sigma": ("sigma", 1e-6, "(alpha - 1) / sqrt(n_tail)"),
    "alpha_D": ("D", 1e-6, "the KS distance of the chosen xmin"),
    "alpha_xmin": ("xmin", 1e-9, "an eigenvalue"),
    "alpha_n": ("num_pl_spikes", 0, "a count: the same xmin"),
    "alpha_weighted": ("alpha_weighted", 1e-6, "alpha log10(lambda_max)"),
    "stable_rank": ("stable_rank", 1e-9, "sum(lambda) / lambda_max"),
    "lambda_max": ("lambda_max", 1e-9, "the largest eigenvalue"),
    "mp_softrank": ("mp_softrank", 1e-4, "the same least-squares fit (grid, then Nelder-Mead to 1e-4)"),
    "mp_sigma": ("sigma_mp", 1e-4, "the fitted MP scale"),
    "frobenius_norm": ("norm", 1e-9, "WeightWatcher's norm is ||W||_F^2: compared squared"),
    "spectral_norm": ("spectral_norm", 1e-9, "WeightWatcher's spectral_norm is lambda_max = ||W||_2^2: compared squared"),
}
SQUARED = {"frobenius_norm", "spectral_norm"}

WW_SCRIPT = r"""
import json, logging, os, sys, time
import numpy as np, torch
torch.set_num_threads(int(os.environ["BENCH_THREADS"]))
import weightwatcher
logging.getLogger("weightwatcher").setLevel(logging.ERROR)
arrays = np.load(sys.argv[1])
names = json.loads(str(arrays["names"]))
modules = torch.nn.ModuleList()
for i in range(len(names)):
    w = torch.from_numpy(arrays[f"m{i}"])
    linear = torch.nn.Linear(w.shape[1], w.shape[0], bias=False)
    with torch.no_grad():
        linear.weight.copy_(w)
    modules.append(linear)
max_n = max([50000] + [max(arrays[f"m{i}"].shape) + 1 for i in range(len(names))])  # its default, or above the head
watcher = weightwatcher.WeightWatcher(model=modules)
start, cpu = time.perf_counter(), time.process_time()
plain = watcher.analyze(max_N=max_n)
seconds_plain, cpu_plain = time.perf_counter() - start, time.process_time() - cpu
start, cpu = time.perf_counter(), time.process_time()
details = watcher.analyze(mp_fit=True, max_N=max_n)
seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
details.to_csv(sys.argv[2], index=False)
json.dump({"seconds": seconds, "seconds_plain": seconds_plain, "cpu": cpu, "cpu_plain": cpu_plain,
           "version": weightwatcher.__version__, "rows": len(details)}, open(sys.argv[3], "w"))
"""


def toy_checkpoint(run_dir: Path | None):
    """The default run's final toy-d128 checkpoint if there is one, else a random toy-shaped model."""
    import torch
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    hub = (run_dir or ROOT) / "results" / "default" / "toy" / "hub" / "models--lmsat-toy--toy-d128"
    refs = sorted((hub / "refs").glob("step*"), key=lambda p: int(p.name[4:])) if hub.is_dir() else []
    if refs:
        snapshot = hub / "snapshots" / refs[-1].read_text().strip()
        return GPTNeoXForCausalLM.from_pretrained(snapshot, dtype=torch.float32), f"trained toy-d128 at {refs[-1].name}"
    torch.manual_seed(0)
    config = GPTNeoXConfig(vocab_size=520, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                           intermediate_size=512, max_position_embeddings=64, tie_word_embeddings=False)
    return GPTNeoXForCausalLM(config), "toy-d128-shaped, randomly initialised (no default run found)"


def pythia_160m_shaped():
    """Pythia-160m's shapes in float16, the dtype its checkpoints are stored (and the checkpoint job loads) in."""
    import torch
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    torch.manual_seed(0)
    config = GPTNeoXConfig(vocab_size=50304, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                           intermediate_size=3072, max_position_embeddings=2048, rotary_pct=0.25,
                           tie_word_embeddings=False)
    return GPTNeoXForCausalLM(config).half(), "pythia-160m-shaped, randomly initialised, float16"


def matrices(model, head_rows: int | None) -> list[tuple[str, object]]:
    """(name, weight as stored: a torch tensor in the model's dtype) of every matrix lmsat analyses."""
    from lmsat.degeneration.weight_diagnostics import linear_weights

    return [(f"{layer}.{name}", w.clone()) for name, layer, w in linear_weights(model, head_rows)]


def ours(mats, threads: int) -> tuple[list[dict], float, float]:
    """lmsat's diagnostics of every matrix as the checkpoint job computes them, on the stored
    dtype: (rows, wall seconds, CPU seconds)."""
    import torch

    from lmsat.degeneration.weight_diagnostics import matrix_diagnostics

    torch.set_num_threads(threads)
    matrix_diagnostics(mats[0][1][:64, :32])  # imports (scipy.optimize) outside the timing
    start, cpu = time.perf_counter(), time.process_time()
    rows = [matrix_diagnostics(w, name) for name, w in mats]
    return rows, time.perf_counter() - start, time.process_time() - cpu


def weightwatcher(mats, ww_python: str, threads: int, scratch: Path) -> tuple[list[dict], dict]:
    import csv

    npz, out, meta = scratch / "mats.npz", scratch / "ww.csv", scratch / "ww.json"
    arrays = {f"m{i}": w.float().numpy() for i, (_, w) in enumerate(mats)}  # the stored values, as float32
    np.savez(npz, names=json.dumps([n for n, _ in mats]), **arrays)
    env = {**os.environ, "BENCH_THREADS": str(threads), **{v: str(threads) for v in THREAD_VARIABLES}}
    subprocess.run([ww_python, "-c", WW_SCRIPT, str(npz), str(out), str(meta)], check=True, env=env,
                   stdout=subprocess.DEVNULL)  # WW prints "SMALL N PL FIT" per small layer
    with open(out, newline="") as handle:
        rows = list(csv.DictReader(handle))
    return rows, json.loads(meta.read_text())



def compare(mats, mine: list[dict], theirs: list[dict]) -> tuple[list[str], list[str]]:
    """(a line per column: largest relative difference and its tolerance, the differences beyond it)."""
    if len(theirs) != len(mine):
        raise SystemExit(f"WeightWatcher analysed {len(theirs)} of the {len(mine)} matrices")
    for (name, w), row in zip(mats, theirs):
        if (int(float(row["N"])), int(float(row["M"]))) != (max(w.shape), min(w.shape)):
            raise SystemExit(f"{name}: WeightWatcher's N, M {row['N']}, {row['M']} are not its shape {w.shape}")
    lines, outside = [], []
    for column, (theirs_column, tolerance, why) in COMPARED.items():
        worst = 0.0
        for (name, _), mine_row, row in zip(mats, mine, theirs):
            a = float(mine_row[column]) ** (2 if column in SQUARED else 1)
            b = float(row[theirs_column]) if row.get(theirs_column, "") != "" else float("nan")
            if np.isnan(a) and (np.isnan(b) or b == -1):  # WeightWatcher's -1: not computed
                continue
            difference = abs(a - b) / max(abs(b), 1e-300)
            worst = max(worst, difference)
            if not difference <= tolerance:
                outside.append(f"  {name} {column}: lmsat {a:.10g}, WeightWatcher {b:.10g} (rel. difference {difference:.2e})")
        lines.append(f"  {column:15s} vs {theirs_column:15s} max rel. diff {worst:9.2e}  tolerance {tolerance:g}  ({why})")
    return lines, outside


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ww-python", required=True, help="the python of an environment with weightwatcher installed")
    parser.add_argument("--threads", type=int, default=1, help="threads for both (default 1)")
    parser.add_argument("--run-dir", type=Path, help="a directory holding a default run's results/ (its trained toy-d128)")
    parser.add_argument("--quick", action="store_true", help="the toy only")
    parser.add_argument("--repeats", type=int, default=1, help="alternated runs of both per model; medians (default 1)")
    args = parser.parse_args(argv)
    models = [toy_checkpoint(args.run_dir)] + ([] if args.quick else [pythia_160m_shaped()])
    summary = []
    with tempfile.TemporaryDirectory(prefix="ww-bench-") as scratch:
        for (model, label), head_rows in zip(models, (None, 50277)):
            mats = matrices(model, head_rows)
            del model
            runs = []
            for _ in range(args.repeats):  # alternated, so a change of the machine's load hits both
                theirs, meta = weightwatcher(mats, args.ww_python, args.threads, Path(scratch))
                mine, seconds, cpu = ours(mats, args.threads)
                runs.append((meta, seconds, cpu))
            meta = {k: float(np.median([m[k] for m, _, _ in runs])) if k not in ("version", "rows") else runs[0][0][k]
                    for k in runs[0][0]}
            seconds, cpu = float(np.median([r[1] for r in runs])), float(np.median([r[2] for r in runs]))
            lines, outside = compare(mats, mine, theirs)
            print(f"\n{label}: {len(mats)} matrices (every block's nn.Linear and the head, {mats[-1][1].shape[0]} x "
                  f"{mats[-1][1].shape[1]}), {args.threads} thread(s), median of {args.repeats} alternated run(s)")
            print(f"  CPU seconds: lmsat {cpu:.2f}; WeightWatcher {meta['version']} analyze(mp_fit=True) {meta['cpu']:.2f} "
                  f"({meta['cpu'] / cpu:.1f}x lmsat's), plain analyze() {meta['cpu_plain']:.2f} ({meta['cpu_plain'] / cpu:.1f}x)")
            print(f"  wall seconds: lmsat {seconds:.2f}; WeightWatcher analyze(mp_fit=True) {meta['seconds']:.2f} "
                  f"({meta['seconds'] / seconds:.1f}x), plain analyze() {meta['seconds_plain']:.2f} "
                  f"({meta['seconds_plain'] / seconds:.1f}x)")
            print("  agreement, per column (lmsat computes every column of both tables in its time):")
            print("\n".join(lines))
            print(f"  outside the tolerance: {len(outside)} of {len(mats) * len(COMPARED)} values")
            print("\n".join(outside[:40]))
            summary.append((label, len(mats), cpu, meta["cpu"], meta["cpu_plain"], seconds, meta["seconds"],
                            meta["seconds_plain"], len(outside)))
    print("\n| model | matrices | lmsat CPU s | WeightWatcher mp_fit=True CPU s | ratio | WeightWatcher plain CPU s | ratio "
          "| wall ratios (mp_fit, plain) | values outside tolerance |")
    print("|---|---|---|---|---|---|---|---|---|")
    for label, n, c, ww, plain, s, ww_s, plain_s, bad in summary:
        print(f"| {label} | {n} | {c:.2f} | {ww:.2f} | {ww / c:.1f}x | {plain:.2f} | {plain / c:.1f}x "
              f"| {ww_s / s:.1f}x, {plain_s / s:.1f}x | {bad} |")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "src"))
    main()
