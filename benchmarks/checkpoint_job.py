"""Benchmark: the per-checkpoint job (rule analyse_checkpoint) against its physical limit.

    python benchmarks/checkpoint_job.py --shape 1.4b --device cuda              # the issue's figure
    python benchmarks/checkpoint_job.py --shape 1.4b --device cuda --dtype float32
    python benchmarks/checkpoint_job.py --shape 1.4b --device cpu --weights-only --compare-old
    python benchmarks/checkpoint_job.py --shape 14m --device cpu                # quick check
    python benchmarks/checkpoint_job.py --shape 160m --device cpu --dtype float32 --without gradient_bottleneck

Builds a random GPT-NeoX of the Pythia shape (N(0, 0.02) weights, layer norms 1), saves it
as float16 safetensors (as Pythia's checkpoints are stored), then, side by side in one run,
each in a fresh process:

  job     workflow/scripts/analyse_checkpoint.py's main() on it (the rule's own code path,
          config/pythia.yaml's extraction settings unless overridden), which returns the
          seconds of its phases: load, weight analyses, cast, forward, cache write, ...;
          import = the process's wall time before main() (interpreter, torch, the script).
  limit   what no job can avoid, each measured alone: starting Python with torch imported
          (and CUDA initialised), reading the checkpoint's bytes from disk (page cache as
          warm as for the job), one bare forward of the sample in the job's dtype (batches
          of batch_size, every position's logits as the model's forward gives them, no
          hidden states kept, synced), writing the cache's bytes.
  weights the job's weight analyses alone, after their own load, synced after each metric
          (which costs what); --weights-only runs just these (and old, with --compare-old).
  old     --compare-old: the weight analyses of commit d5aea3a (head_spectrum +
          attention_arrays on the float32 CPU model, today's code before this change), in a
          process importing that commit's lmsat (git archive), beside the job's weight
          analyses (hashes included) timed the same way on the same device.

  peers   --peers: WeightWatcher's SVD of the head and IsoScore over the cache's layers, each
          beside ours on the same data (import them from PYTHONPATH; absent ones are named).
  without --without METRIC: the job once more without that weights metric (e.g. the gradient
          bottleneck, which reads the cache after the forward), its ratio beside the job's:
          what the metric costs, measured in the same run.

The job runs every registered weights metric (lmsat.products.metrics, reads="weights"), or those of
--weight-metrics.

On the lent GPU machine (no jsonschema there, which lmsat.planning imports), carry a
jsonschema wheel and its pure-Python dependencies, or put them on PYTHONPATH.

Ratios printed: job / limit (target <= 2 on a GPU), extraction / (bare forward + write)
(target <= 1.2), weight analyses / job (target < 5%), old / new weight analyses (target
>= 10 on a CPU). Speed is only compared within one run: timings of another run differ.
Host peak RSS and CUDA peak memory of the job are printed beside rule analyse_checkpoint's
mem_mb estimate for the shape.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OLD_COMMIT = "d5aea3a"

# Pythia shapes (hidden size, layers, heads, vocabulary rows incl. padding); d_ff = 4 d.
SHAPES = {
    "14m": (128, 6, 4, 50304),
    "70m": (512, 6, 8, 50304),
    "160m": (768, 12, 12, 50304),
    "410m": (1024, 24, 16, 50304),
    "1.4b": (2048, 24, 16, 50304),
    "2.8b": (2560, 32, 32, 50304),
    "6.9b": (4096, 32, 32, 50432),
    "12b": (5120, 36, 40, 50688),
}


def build_checkpoint(shape: str, directory: Path) -> Path:
    """A random Pythia-shaped GPT-NeoX saved as float16 safetensors; reused if there."""
    import torch
    from safetensors.torch import save_file
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    path = directory / f"pythia-{shape}" / "step0"
    if (path / "model.safetensors").exists():
        return path
    d, layers, heads, vocab = SHAPES[shape]
    config = GPTNeoXConfig(
        vocab_size=vocab, hidden_size=d, num_hidden_layers=layers, num_attention_heads=heads,
        intermediate_size=4 * d, max_position_embeddings=2048, rotary_pct=0.25, rotary_emb_base=10000,
        use_parallel_residual=True, tie_word_embeddings=False, bos_token_id=0, eos_token_id=0,
    )
    config.dtype = "float16"
    with torch.device("meta"):
        names = {k: (tuple(v.shape), k.endswith("norm.weight") or "layernorm.weight" in k or k.endswith("ln_f.weight"))
                 for k, v in GPTNeoXForCausalLM(config).state_dict().items()}
    generator = torch.Generator().manual_seed(0)
    tensors = {}
    for name, (size, is_norm_weight) in names.items():
        if is_norm_weight:
            tensors[name] = torch.ones(size, dtype=torch.float16)
        elif name.endswith("bias"):
            tensors[name] = torch.zeros(size, dtype=torch.float16)
        else:
            tensors[name] = (torch.randn(size, generator=generator) * 0.02).to(torch.float16)
    path.mkdir(parents=True, exist_ok=True)
    tensors["embed_out.weight"] = tensors.pop("lm_head.weight", tensors.get("embed_out.weight"))  # Pythia's file key
    save_file(tensors, path / "model.safetensors", metadata={"format": "pt"})
    config.save_pretrained(path)
    return path


def n_parameters(shape: str) -> int:
    d, layers, _, vocab = SHAPES[shape]
    return 2 * vocab * d + layers * 12 * d * d


def run_child(*args: str, env: dict | None = None) -> tuple[dict, float]:
    """Run this file in a fresh process with `args`; -> (its JSON result, wall seconds)."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, __file__, "--child", *args], capture_output=True, text=True, env=env, check=False
    )
    wall = time.perf_counter() - start
    if done.returncode:
        raise RuntimeError(f"child {args[0]} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1]), wall


# --- children (each in its own process) ---------------------------------------------------


def child_peers(checkpoint: str, cache: str, args) -> dict:
    """WeightWatcher's SVD of the head and IsoScore of the last layer, beside ours, each timed
    on the same data (peers from PYTHONPATH, e.g. `pip install --target DIR --no-deps
    weightwatcher IsoScore powerlaw`; absent ones are reported, not run)."""
    import h5py
    import numpy as np
    import torch
    from safetensors import safe_open

    from lmsat.data.hidden_states import open_cache
    from lmsat.degeneration.spectra import singular_values
    from lmsat.products.metrics import METRICS

    with safe_open(str(Path(checkpoint) / "model.safetensors"), "pt") as f:
        key = "embed_out.weight" if "embed_out.weight" in f.keys() else "lm_head.weight"
        head = f.get_tensor(key)  # (V, d) float16, as stored
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    result = {}
    device_head = head.to(args.device)
    sync()
    start = time.perf_counter()
    ours = singular_values(device_head)
    result["ours_spectrum"] = time.perf_counter() - start
    try:
        from weightwatcher.RMT_Util import svd_vals
    except ImportError as error:
        result["weightwatcher"] = f"not installed ({error})"
    else:
        matrix = head.float().numpy()
        start = time.perf_counter()
        theirs = np.sort(np.asarray(svd_vals(matrix, method="accurate"), dtype=np.float64))[::-1]
        result["weightwatcher_spectrum"] = time.perf_counter() - start
        result["weightwatcher_max_rel_diff"] = float(np.max(np.abs(theirs[: ours.size] - ours) / ours))
    start = time.perf_counter()
    with open_cache(cache) as f:
        ours_anisotropy = METRICS["anisotropy"].compute(f)
    result["ours_anisotropy"] = time.perf_counter() - start
    result["ours_anisotropy_last"] = ours_anisotropy["anisotropy_last"]
    try:
        from IsoScore.IsoScore import IsoScore
    except ImportError as error:
        result["isoscore"] = f"not installed ({error})"
    else:
        with h5py.File(cache, "r") as f:
            last, layers = f["hidden"][...].astype(np.float64), f["layers"][...].astype(np.float64)
        start = time.perf_counter()
        scores = [float(IsoScore(layer)) for layer in layers[:-1]] + [float(IsoScore(last))]
        result["isoscore_all_layers"] = time.perf_counter() - start
        result["isoscore_last"] = scores[-1]
    return result


def child_start(device: str) -> dict:
    import torch

    if device == "cuda":
        torch.zeros(1, device="cuda")
        torch.cuda.synchronize()
    return {}


def weights_metrics() -> list[str]:
    """Every registered weights metric (lmsat.products.metrics), in registry order."""
    from lmsat.products.metrics import METRICS

    return [name for name, metric in METRICS.items() if metric.reads == "weights"]


def _job_namespace(checkpoint: Path, out: Path, sample: Path, args) -> object:
    from types import SimpleNamespace  # as Snakemake's job object, without snakemake (absent on GPU nodes)

    d = SHAPES[args.shape][0]
    revision = checkpoint.name
    entry = dict(
        name=f"pythia-{args.shape}", suite="bench", source="local", id=str(checkpoint.parent), hidden_size=d,
        vocab_size=SHAPES[args.shape][3], n_params=0, tokenizer="none", tokens_per_step=0,
        revisions=(revision,), steps=(0,), allow_pickle=False, trust_remote_code=False, key="bench", num_layers=0,
    )
    return SimpleNamespace(
        input=SimpleNamespace(sample=str(sample)),
        output=SimpleNamespace(**{k: str(out / f"{k}.h5") for k in ("cache", *args.weight_metrics)}),
        log=[str(out / "job.log")],
        wildcards=SimpleNamespace(model=entry["name"], revision=revision),
        params=SimpleNamespace(
            model=entry,
            record=dict(suite="bench", model=entry["name"], revision=revision, step=0, tokens=0),
            tokenizer={},
            drop_padding_rows=False,  # no Pythia tokenizer offline: every head row enters the SVD
            weight_metrics=list(args.weight_metrics),
            extraction=args.extraction,
            seed=0,
        ),
        threads=args.threads,  # operational settings reach a job as Snakemake's, not as params
        config=dict(device=args.device),
    )


def child_job(checkpoint: str, out: str, sample: str, args) -> dict:
    start = time.perf_counter()
    import importlib.util

    import torch

    spec = importlib.util.spec_from_file_location("analyse_checkpoint", ROOT / "workflow/scripts/analyse_checkpoint.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    if args.device == "cuda":
        torch.zeros(1, device="cuda")
    imported = time.perf_counter() - start
    seconds = script.main(_job_namespace(Path(checkpoint), Path(out), Path(sample), args))
    result = dict(seconds, import_in_process=imported, rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    if args.device == "cuda":
        result["cuda_peak_mb"] = torch.cuda.max_memory_allocated() / 2**20
    return result


def child_weights(checkpoint: str, args) -> dict:
    """The job's weight analyses (hashes resolved) on the job's device, from the job's load."""
    from concurrent.futures import ThreadPoolExecutor
    from types import SimpleNamespace

    import torch

    from lmsat.checkpoints.loading import load_causal_lm
    from lmsat.core.plan import ModelEntry

    ns = _job_namespace(Path(checkpoint), Path(tempfile.gettempdir()), Path("unused"), args)
    spec = __import__("importlib.util").util.spec_from_file_location("s", ROOT / "workflow/scripts/analyse_checkpoint.py")
    script = __import__("importlib.util").util.module_from_spec(spec)
    spec.loader.exec_module(script)
    entry = ModelEntry(**ns.params.model)
    lm = load_causal_lm(entry, Path(checkpoint).name, dtype="auto", device=args.device)
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    sync()
    start, per_metric, analysed = time.perf_counter(), {}, {}
    with ThreadPoolExecutor(max_workers=2) as pool:
        for metric in ns.params.weight_metrics:  # one at a time, synced: which one costs what
            metric_start = time.perf_counter()
            analysed |= script.analyse_weights(lm, entry, "step0", SimpleNamespace(**{**vars(ns.params), "weight_metrics": [metric]}), pool)
            sync()
            per_metric[metric] = time.perf_counter() - metric_start
        analyses = time.perf_counter() - start
        spectrum, attention = analysed.get("spectra"), analysed.get("attention")
        hashes = [spectrum[k].result() for k in ("head_sha256", "embedding_sha256")] if spectrum else [""]
    total = time.perf_counter() - start
    return dict(analyses=analyses, with_hashes=total, per_metric=per_metric,
                s1=float(spectrum["singular_values"][0]) if spectrum else float("nan"), hash=hashes[0][:12],
                qk_s1=float(attention["arrays"]["qk/singular_values"][0, 0, 0]) if attention else float("nan"))


def child_old_weights(checkpoint: str, args) -> dict:
    """Commit d5aea3a's weight analyses: float32 CPU model, head_spectrum + attention_arrays."""
    import lmsat
    from lmsat.checkpoints.loading import load_causal_lm
    from lmsat.core.plan import ModelEntry
    from lmsat.degeneration.weight_files import attention_arrays, head_spectrum

    ns = _job_namespace(Path(checkpoint), Path(tempfile.gettempdir()), Path("unused"), args)
    lm = load_causal_lm(ModelEntry(**ns.params.model), Path(checkpoint).name, dtype="float32", device="cpu")
    start = time.perf_counter()
    spectrum = head_spectrum(lm, None, False)
    arrays, _ = attention_arrays(lm)
    return dict(with_hashes=time.perf_counter() - start, s1=float(spectrum["singular_values"][0]),
                qk_s1=float(arrays["qk/singular_values"][0, 0, 0]), lmsat=str(Path(lmsat.__file__).parent))


def child_forward(checkpoint: str, args) -> dict:
    """One bare forward of the sample in the job's dtype on the job's device (synced)."""
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.extraction["dtype"])
    device_map = None if args.device == "cpu" else args.device
    lm = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=dtype, device_map=device_map).eval()
    tokens = np.random.default_rng(0).integers(0, 50277, size=(args.sequences, args.seq_len))
    ids = torch.as_tensor(tokens, dtype=torch.long, device=args.device)
    batch = args.extraction["batch_size"]
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    with torch.no_grad():
        lm(ids[:1, :16], use_cache=False)  # kernels loaded, as in the job's first batch
        sync()
        start = time.perf_counter()
        for b in range(0, ids.shape[0], batch):
            lm(ids[b : b + batch], use_cache=False)  # the model's own forward: every position's logits
        sync()
    return dict(forward=time.perf_counter() - start)


# --- parent --------------------------------------------------------------------------------


def read_bytes(path: Path) -> float:
    start, buffer = time.perf_counter(), bytearray(64 << 20)
    with open(path, "rb", buffering=0) as handle:
        while handle.readinto(buffer):
            pass
    return time.perf_counter() - start


def write_bytes(n_bytes: int, directory: Path) -> float:
    block = os.urandom(1 << 20) * 64  # 64 MiB
    start = time.perf_counter()
    with open(directory / "bytes.bin", "wb", buffering=0) as handle:
        left = n_bytes
        while left > 0:
            left -= handle.write(memoryview(block)[: min(left, len(block))])
    seconds = time.perf_counter() - start
    (directory / "bytes.bin").unlink()
    return seconds


def old_source(directory: Path) -> Path:
    """Commit d5aea3a's src/ (git archive), for the --compare-old process; where the tree has
    no git history (a GPU machine's copy), the one benchmarks/gpu_checks.sh wheels unpacked."""
    carried = ROOT / ".whl" / f"lmsat-{OLD_COMMIT}" / "src"
    if (carried / "lmsat").exists():
        return carried
    target = directory / f"lmsat-{OLD_COMMIT}"
    if not (target / "src" / "lmsat").exists():
        target.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", OLD_COMMIT, "src"], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
    return target / "src"


def mem_mb_estimate(shape: str, args) -> int:
    """rule analyse_checkpoint's mem_mb at attempt 1 (workflow/rules/common.smk: checkpoint_job_mem_mb)."""
    forward_bytes = 4 if args.extraction["dtype"] == "float32" else 2
    if args.device == "cuda":
        weights_mb = 0.25 * 2 * n_parameters(shape) / 1e6
    else:
        weights_mb = 1.2 * max(2, forward_bytes) * n_parameters(shape) / 1e6
    return int(args.base_mb + weights_mb)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=SHAPES, default="14m")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), help="forward dtype (default: config/pythia.yaml's)")
    parser.add_argument("--storage-dtype", choices=("float32", "float16"))
    parser.add_argument("--sequences", type=int, help="sample sequences (default: config/pythia.yaml's 25)")
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--compare-old", action="store_true", help=f"also time commit {OLD_COMMIT}'s weight analyses")
    parser.add_argument("--weights-only", action="store_true",
                        help="skip the job and its limit: time the weight analyses alone, per metric (+ --compare-old)")
    parser.add_argument("--peers", action="store_true", help="also time WeightWatcher and IsoScore (if importable)")
    parser.add_argument("--weight-metrics", nargs="+", metavar="METRIC", help="the job's weights metrics (default: all)")
    parser.add_argument("--without", metavar="METRIC", help="also run the job without this weights metric, side by side")
    parser.add_argument("--workdir", type=Path, help="where checkpoints are built and kept (default: a temp dir)")
    parser.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="CPU threads of every child (torch and BLAS); 1 is robust on a shared machine")
    parser.add_argument("--base-mb", type=int, default=8000)
    parser.add_argument("--child", nargs="*", help=argparse.SUPPRESS)
    parser.add_argument("--args-json", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        # as Snakemake runs the rule's script: its directory on sys.path (for `import _lmsat_src`)
        sys.path.insert(0, str(ROOT / "workflow" / "scripts"))
        vars(args).update(json.loads(args.args_json))
        kind, *rest = args.child
        result = {"start": lambda: child_start(args.device), "job": lambda: child_job(*rest, args),
                  "weights": lambda: child_weights(*rest, args), "old": lambda: child_old_weights(*rest, args),
                  "forward": lambda: child_forward(*rest, args), "peers": lambda: child_peers(*rest, args)}[kind]()
        print(json.dumps(result))
        return
    sys.path.insert(0, str(ROOT / "src"))
    from lmsat.data.corpus import write_sample
    from lmsat.planning.config_files import load_yaml

    args.weight_metrics = args.weight_metrics or weights_metrics()
    if args.without and args.without not in args.weight_metrics:
        parser.error(f"--without {args.without}: not among the job's weights metrics {args.weight_metrics}")
    extraction = dict(load_yaml(ROOT / "config" / "pythia.yaml")["extraction"])
    extraction.update({k: v for k, v in (("dtype", args.dtype), ("storage_dtype", args.storage_dtype)) if v})
    if args.sequences is None:  # config/pythia.yaml's sample: 50,000 tokens in 2048-token sequences -> 25
        sample_config = load_yaml(ROOT / "config" / "pythia.yaml")["sample"]
        args.sequences = -(-sample_config["n_tokens"] // sample_config["seq_len"])
    args.extraction = extraction
    common = dict(extraction=extraction, shape=args.shape, device=args.device, sequences=args.sequences,
                  seq_len=args.seq_len, threads=args.threads)
    shared = json.dumps(dict(common, weight_metrics=args.weight_metrics))
    threads = {k: str(args.threads) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
    env = dict(os.environ, **threads, PYTHONPATH=f"{ROOT / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="checkpoint_job_"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"shape {args.shape} ({n_parameters(args.shape) / 1e9:.2f} B parameters), device {args.device}, "
          f"forward {extraction['dtype']}, storage {extraction['storage_dtype']}, sample {args.sequences} x {args.seq_len}, "
          f"batch {extraction['batch_size']}, chunk {extraction['chunk_sequences']}, layer_sample {extraction['layer_sample']}")
    start = time.perf_counter()
    checkpoint = build_checkpoint(args.shape, workdir)
    print(f"built {checkpoint} in {time.perf_counter() - start:.1f} s")

    sample = workdir / f"sample-{args.sequences}x{args.seq_len}.h5"
    if not sample.exists():
        import numpy as np

        tokens = np.random.default_rng(0).integers(0, 50277, size=(args.sequences, args.seq_len))
        write_sample(sample, tokens, np.arange(args.sequences) * args.seq_len, {"corpus": "random"})
    out = Path(tempfile.mkdtemp(prefix="job_", dir=workdir))
    child = lambda *a, **k: run_child(*a, "--args-json", shared, **k)  # noqa: E731

    if args.weights_only:
        args.peers = False  # the peers read the job's cache
        return time_weights(args, child, checkpoint, workdir, env)
    _, start_python = child("start", env=env)
    read = read_bytes(checkpoint / "model.safetensors")
    forward, _ = child("forward", str(checkpoint), env=env)
    job, job_wall = child("job", str(checkpoint), str(out), str(sample), env=env)
    if args.without:  # the same job without one metric, right after (the same load on a shared machine)
        fewer = json.dumps(dict(common, weight_metrics=[m for m in args.weight_metrics if m != args.without]))
        out_without = Path(tempfile.mkdtemp(prefix="job_without_", dir=workdir))
        job_without, wall_without = run_child("job", str(checkpoint), str(out_without), str(sample), "--args-json", fewer,
                                              env=env)
    import h5py

    with h5py.File(out / "cache.h5", "r") as f:
        cache_bytes = sum(f[k].id.get_storage_size() for k in f)
    write = write_bytes(cache_bytes, workdir)
    limit = start_python + read + forward["forward"] + write
    job_import = job_wall - sum(v for k, v in job.items() if k in PHASES)

    print(f"\n{'phase':<34}{'job s':>9}   limit part")
    rows = [("import (python, torch, script)", job_import, f"start python + torch {start_python:.2f} s"),
            ("load (safetensors -> device)", job["load"], f"read {cache_size(checkpoint)} {read:.2f} s"),
            ("weight analyses (hashes pending)", job["weights"], ""),
            ("cast to forward dtype", job["cast"], ""),
            ("forward (+ losses, gathers, copy)", job["forward"], f"bare forward {forward['forward']:.2f} s"),
            ("cache write", job["cache_write"], f"write {cache_bytes / 1e6:.0f} MB {write:.2f} s"),
            ("extraction other", job["extract_other"], ""),
            ("weights metrics on the cache", job["weights_finish"], ""),
            ("weights files (+ hash wait)", job["weights_write"], "")]
    print(f"weights metrics: {', '.join(args.weight_metrics)}")
    for name, seconds, note in rows:
        print(f"{name:<34}{seconds:>9.2f}   {note}")
    print(f"{'whole job (process wall)':<34}{job_wall:>9.2f}   limit {limit:.2f} s")
    if args.without:
        print(f"\nwithout {args.without}: whole job {wall_without:.2f} s, its weight analyses {job_without['weights']:.2f} s, "
              f"on the cache {job_without['weights_finish']:.2f} s, forward {job_without['forward']:.2f} s")
        print(f"ratio job / limit without {args.without}    {wall_without / limit:6.2f}")
        print(f"ratio job / limit with it                  {job_wall / limit:6.2f}   "
              f"({args.without}: {job_wall - wall_without:+.2f} s of job wall)")
    extraction_s = job["forward"] + job["cache_write"] + job["extract_other"]
    print(f"\nratio job / limit                         {job_wall / limit:6.2f}   (target <= 2 on a GPU)")
    print(f"ratio extraction / (bare forward + write) {extraction_s / (forward['forward'] + write):6.2f}   (target <= 1.2)")
    print(f"weight analyses / job                     {100 * job['weights'] / job_wall:5.1f} %  (target < 5 %)")
    if job["weights_finish"]:  # both phases in one process: robust to the load of a shared machine drifting
        print(f"weights metrics on the cache / the job's forward {job['weights_finish'] / job['forward']:6.2f}")
    estimate = mem_mb_estimate(args.shape, args)
    memory = f"host peak RSS {job['rss_mb']:.0f} MB (mem_mb estimate {estimate} MB incl. base {args.base_mb})"
    if "cuda_peak_mb" in job:
        memory += f", CUDA peak allocated {job['cuda_peak_mb']:.0f} MB"
    print(memory)

    if args.peers:
        peers, _ = child("peers", str(checkpoint), str(out / "cache.h5"), env=env)
        print("\npeers, same data (head as stored; the job's cache):")
        print(f"  head spectrum, ours on {args.device} (float64 Gram):     {peers['ours_spectrum']:8.2f} s")
        if "weightwatcher_spectrum" in peers:
            print(f"  head spectrum, WeightWatcher svd_vals accurate: {peers['weightwatcher_spectrum']:8.2f} s"
                  f"   (max relative difference to ours {peers['weightwatcher_max_rel_diff']:.1e};"
                  " its default describe() skips a head of > 50,000 rows)")
        else:
            print(f"  WeightWatcher: {peers['weightwatcher']}")
        print(f"  anisotropy, ours (every layer + last over all tokens): {peers['ours_anisotropy']:8.2f} s"
              f"   (A last {peers['ours_anisotropy_last']:.4f})")
        if "isoscore_all_layers" in peers:
            print(f"  IsoScore (every layer + last over all tokens):        {peers['isoscore_all_layers']:8.2f} s"
                  f"   (IsoScore last {peers['isoscore_last']:.4f}: another quantity, isotropy in [0, 1])")
        else:
            print(f"  IsoScore: {peers['isoscore']}")

    time_weights(args, child, checkpoint, workdir, env)


def time_weights(args, child, checkpoint: Path, workdir: Path, env: dict) -> None:
    """The job's weight analyses alone, per metric; with --compare-old, commit d5aea3a's
    beside them, each in a fresh process after its own load."""
    before, _ = child("weights", str(checkpoint), env=env)  # new before and after old: drift of a shared machine shows
    per_metric = ", ".join(f"{name} {seconds:.2f} s" for name, seconds in before["per_metric"].items())
    print(f"\nweight analyses alone on {args.device}, synced after each metric: {per_metric}; "
          f"+ hash wait {before['with_hashes'] - before['analyses']:.2f} s")
    if not args.compare_old:
        return
    old_env = dict(env, PYTHONPATH=str(old_source(workdir)))
    old, _ = child("old", str(checkpoint), env=old_env)
    after, _ = child("weights", str(checkpoint), env=env)
    new = max(before, after, key=lambda r: r["with_hashes"])  # the slower of the two, to be conservative
    print(f"\nnew weight analyses before / after the old ones: {before['with_hashes']:.2f} s / {after['with_hashes']:.2f} s")
    print("weight analyses, head spectrum + attention + both hashes, each after its own load:")
    print(f"  old ({OLD_COMMIT}, float32 model on the CPU, numpy float64 QR): {old['with_hashes']:8.2f} s   ({old['lmsat']})")
    print(f"  new ({args.device}, checkpoint dtype, torch float64 Grams):       {new['with_hashes']:8.2f} s"
          f"   (analyses {new['analyses']:.2f} s + hash wait)")
    print(f"  ratio old / new {old['with_hashes'] / new['with_hashes']:.1f}x   (target >= 10 on a CPU at 1.4b)")
    print(f"  same numbers: head s_1 {old['s1']:.6g} vs {new['s1']:.6g}, qk s_1 {old['qk_s1']:.6g} vs {new['qk_s1']:.6g}")




PHASES = ("load", "weights", "cast", "forward", "cache_write", "extract_other", "weights_finish", "weights_write")


def cache_size(checkpoint: Path) -> str:
    return f"{(checkpoint / 'model.safetensors').stat().st_size / 1e9:.2f} GB"


if __name__ == "__main__":
    main()
