"""Benchmark: the start-up of each workflow rule's job, this checkout against an older commit.

    python benchmarks/startup.py --old 90d9ab2                 # every rule of the default run
    python benchmarks/startup.py --old 90d9ab2 --repeats 7 compute_checkpoint_metric analyse_checkpoint
    python benchmarks/startup.py --loading                     # from_pretrained vs from_config, in one process
    python benchmarks/startup.py --old 90d9ab2 --jobs          # whole single jobs, old against new

A job of a `script:` rule is a fresh interpreter that runs Snakemake's preamble (it unpickles
the job's `snakemake` object: `import snakemake.iocontainers`), then the script's top-level
imports, then its main. This times, per script, a fresh `python` that does the first two
(runpy of the script without running main), for HEAD's scripts and --old's (a `git archive`
of that commit), interleaved (old, new, old, new, ...) so that both see the same load;
printed: the median seconds of each and their ratio, and which heavy libraries each loads
before main (a library imported inside main, e.g. lm-eval in evaluate_checkpoint, is not
counted: it is the job's own cost). `--loading` splits a first `from_pretrained` of a toy
GPT-NeoX into the import of its modeling code (lazy in transformers) and the call itself,
beside `from_config` on the meta device + `load_state_dict(assign=True)`. `--jobs` times
whole jobs, start-up and work: analyse_checkpoint (loss cache, no weights metric) of a tiny
saved GPT-NeoX (d=16, 2 layers) and compute_checkpoint_metric (loss) of its cache, each in a
fresh interpreter given the object Snakemake's preamble would unpickle.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "lm_eval", "scipy", "matplotlib", "pandas", "h5py", "jsonschema", "datasets")
# The default run's jobs per rule (issue 35) first, then the rest of workflow/scripts.
DEFAULT_RULES = ("compute_checkpoint_metric", "analyse_checkpoint", "evaluate_checkpoint", "train_rank_head",
                 "render_table", "plot_figure", "tabulate_metric")


def job_start(tree: Path, script: str) -> tuple[float, str]:
    """Seconds of a fresh interpreter running the preamble's import and `script`'s imports;
    the heavy libraries then loaded (a lazy module not yet used does not count)."""
    path = tree / "workflow" / "scripts" / f"{script}.py"
    code = (
        "import sys, runpy, pickle, snakemake.iocontainers; from snakemake.logging import logger;"
        f"sys.path.insert(0, {str(path.parent)!r}); runpy.run_path({str(path)!r}, run_name='job');"
        f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules and type(sys.modules[m]).__name__ != '_LazyModule'))"
    )
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tree)
    seconds = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(f"{script} in {tree} failed to import:\n{done.stderr[-2000:]}")
    return seconds, done.stdout.strip()


def old_tree(commit: str, into: Path) -> Path:
    data = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "src", "workflow"], check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        archive.extractall(into, filter="data")
    return into


def compare(old: str, scripts: list[str], repeats: int) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        trees = {"old": old_tree(old, Path(scratch)), "new": ROOT}
        print(f"{'rule script':28s} {'old s':>7s} {'new s':>7s} {'new/old':>8s}  libraries before main: old -> new")
        for script in scripts:
            seconds = {"old": [], "new": []}
            loaded = {}
            for _ in range(repeats):
                for side, tree in trees.items():
                    value, loaded[side] = job_start(tree, script)
                    seconds[side].append(value)
            old_s, new_s = statistics.median(seconds["old"]), statistics.median(seconds["new"])
            print(f"{script:28s} {old_s:7.2f} {new_s:7.2f} {new_s / old_s:8.2f}  {loaded['old'] or '-'} -> {loaded['new'] or '-'}",
                  flush=True)
        bare = statistics.median(job_start_bare() for _ in range(repeats))
        print(f"{'(bare interpreter)':28s} {bare:7.2f}")


def job_start_bare() -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return time.perf_counter() - start


LOADING = r"""
import sys, time
start = time.perf_counter()
import torch, transformers
from transformers import AutoConfig, AutoModelForCausalLM
imported = time.perf_counter()
path = sys.argv[1]
if sys.argv[2] == "from_pretrained":
    lm = AutoModelForCausalLM.from_pretrained(path, dtype="auto", output_loading_info=True, use_safetensors=True)
    first = time.perf_counter()
    AutoModelForCausalLM.from_pretrained(path, dtype="auto", output_loading_info=True, use_safetensors=True)
else:
    from safetensors.torch import load_file
    config = AutoConfig.from_pretrained(path)
    with torch.device("meta"):
        lm = AutoModelForCausalLM.from_config(config)
    lm.load_state_dict(load_file(f"{path}/model.safetensors"), strict=False, assign=True)
    first = time.perf_counter()
    with torch.device("meta"):
        lm = AutoModelForCausalLM.from_config(config)
    lm.load_state_dict(load_file(f"{path}/model.safetensors"), strict=False, assign=True)
print(f"{imported - start:.3f} {first - imported:.3f} {time.perf_counter() - first:.3f}")
"""


def loading(repeats: int) -> None:
    import torch
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    with tempfile.TemporaryDirectory() as scratch:
        torch.manual_seed(0)
        config = GPTNeoXConfig(vocab_size=512, hidden_size=128, num_hidden_layers=4, num_attention_heads=4,
                               intermediate_size=512, max_position_embeddings=256, tie_word_embeddings=False)
        GPTNeoXForCausalLM(config).save_pretrained(scratch)
        print("toy GPT-NeoX d=128, 4 layers, V=512; seconds: import torch+transformers, first load (with the "
              "lazy import of the modeling code), second load (the call alone); medians of", repeats)
        for how in ("from_pretrained", "from_config"):
            runs = []
            for _ in range(repeats):
                out = subprocess.run([sys.executable, "-c", LOADING, scratch, how], check=True, capture_output=True,
                                     text=True, env={**os.environ, "TRANSFORMERS_VERBOSITY": "error"}).stdout
                runs.append([float(x) for x in out.split()[-3:]])
            medians = [statistics.median(column) for column in zip(*runs)]
            print(f"  {how:16s} import {medians[0]:.3f}  first {medians[1]:.3f}  second {medians[2]:.3f}", flush=True)


JOB = r"""
import json, sys, runpy, pickle, snakemake.iocontainers
from types import SimpleNamespace
from snakemake.iocontainers import Namedlist
script, spec = sys.argv[1], json.loads(sys.argv[2])
namespace = lambda d: SimpleNamespace(**d)
job = SimpleNamespace(input=Namedlist(fromdict=spec["input"]), output=Namedlist(fromdict=spec["output"]), log=spec["log"],
                      wildcards=namespace(spec["wildcards"]), params=namespace(spec["params"]), threads=1,
                      config={"device": "cpu"})
sys.path.insert(0, str(__import__("pathlib").Path(script).parent))
runpy.run_path(script, run_name="job")["main"](job)
"""


def jobs(old: str, repeats: int) -> None:
    import numpy as np
    import torch
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    sys.path.insert(0, str(ROOT / "src"))
    from lmsat.core.plan import ModelEntry
    from lmsat.data.corpus import write_sample

    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        trees = {"old": old_tree(old, scratch / "old"), "new": ROOT}
        torch.manual_seed(0)
        config = GPTNeoXConfig(vocab_size=40, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                               intermediate_size=32, max_position_embeddings=64, tie_word_embeddings=False)
        GPTNeoXForCausalLM(config).eval().save_pretrained(scratch / "model" / "step1")
        tokens = np.random.default_rng(0).integers(0, 40, size=(8, 32))
        sample = scratch / "sample.h5"
        write_sample(sample, tokens, np.arange(len(tokens)) * tokens.shape[1], {"corpus": "words"})
        entry = ModelEntry(name="tiny", suite="s", source="local", id=str(scratch / "model"), hidden_size=16, vocab_size=40,
                           n_params=0, tokenizer="words", tokens_per_step=1, revisions=("step1",), steps=(1,),
                           allow_pickle=False, trust_remote_code=False, key="suites.s.models[name=tiny]")
        record = dict(suite="s", model="tiny", revision="step1", step=1, tokens=1)
        wildcards = dict(model="tiny", revision="step1", metric="loss")

        def analyse(out: Path) -> dict:
            return dict(input={"sample": str(sample)}, output={"cache": str(out / "step1.h5")}, log=[str(out / "a.log")],
                        wildcards=wildcards, params=dict(
                            model=entry.__dict__, record=record, tokenizer={}, drop_padding_rows=False, seed=0,
                            extraction=dict(batch_size=2, chunk_sequences=2, dtype="float32", storage_dtype="float32",
                                            layer_sample=16), weight_metrics=[]))

        def metric(cache: Path, out: Path) -> dict:
            return dict(input={"sample": str(sample), "cache": str(cache)}, output={"json": str(out / "loss.json")},
                        log=[str(out / "m.log")], wildcards=wildcards, params=dict(record=record))

        def timed(tree: Path, script: str, spec: dict) -> float:
            start = time.perf_counter()
            done = subprocess.run([sys.executable, "-c", JOB, str(tree / "workflow" / "scripts" / f"{script}.py"),
                                   json.dumps(spec, default=list)], capture_output=True, text=True, cwd=tree)
            if done.returncode:
                raise SystemExit(f"{script} in {tree} failed:\n{done.stderr[-3000:]}")
            return time.perf_counter() - start

        print(f"{'job':28s} {'old s':>7s} {'new s':>7s} {'new/old':>8s}  (medians of {repeats}, interleaved)")
        seconds = {(side, rule): [] for side in trees for rule in ("analyse_checkpoint", "compute_checkpoint_metric")}
        for rep in range(repeats):
            for side, tree in trees.items():
                out = scratch / "runs" / f"{side}{rep}"
                seconds[side, "analyse_checkpoint"].append(timed(tree, "analyse_checkpoint", analyse(out)))
                seconds[side, "compute_checkpoint_metric"].append(
                    timed(tree, "compute_checkpoint_metric", metric(out / "step1.h5", out)))
        for rule in ("analyse_checkpoint", "compute_checkpoint_metric"):
            old_s, new_s = (statistics.median(seconds[side, rule]) for side in ("old", "new"))
            print(f"{rule:28s} {old_s:7.2f} {new_s:7.2f} {new_s / old_s:8.2f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scripts", nargs="*", help="workflow/scripts names (default: the default run's big rules, then all)")
    parser.add_argument("--old", help="the commit to compare with (e.g. 90d9ab2)")
    parser.add_argument("--repeats", type=int, default=5, help="fresh interpreters per script and side (default 5)")
    parser.add_argument("--loading", action="store_true", help="time from_pretrained against from_config instead")
    parser.add_argument("--jobs", action="store_true", help="time whole analyse and cache-metric jobs, old against new")
    args = parser.parse_args()
    if args.loading:
        return loading(args.repeats)
    if not args.old:
        parser.error("--old COMMIT is required (or --loading)")
    if args.jobs:
        return jobs(args.old, args.repeats)
    everything = sorted(p.stem for p in (ROOT / "workflow" / "scripts").glob("*.py") if not p.stem.startswith("_"))
    scripts = args.scripts or [*DEFAULT_RULES, *(s for s in everything if s not in DEFAULT_RULES)]
    compare(args.old, scripts, args.repeats)


if __name__ == "__main__":
    main()
