"""Which dtype should the checkpoint job's forward run in? Error of each against float32.

    snakemake --cores 1 results/toy/models/toy-d128.json        # the toy suite's widest model
    python benchmarks/dtype_policy.py                            # toy-d128, final revision, CPU
    python benchmarks/dtype_policy.py --device cuda              # + TF32 (GPU only)
    python benchmarks/dtype_policy.py --device cuda --pythia-shape 1.4b   # random Pythia-shaped

Each dtype's forward goes through the job's own extraction (lmsat.data.hidden_states.extract_to_cache,
float32 storage so only the forward's rounding shows), on the same tokens; the float32
cache is the reference. Printed per dtype: the per-token loss difference (mean and max
|dL|, and the difference of the mean loss, relative), the anisotropy difference (max over
layers of |dA| on the layer subsample, and the last layer's over all tokens, via
lmsat.products.metrics' anisotropy), and the forward time. TF32 = float32 storage with TensorFloat-32
matmuls (torch.backends.cuda.matmul.allow_tf32), which exists only on NVIDIA GPUs.
The toy model is trained (results/toy/hub, built by the pipeline); the Pythia-shaped one is
random-initialised (no trained Pythia is reachable offline), so its numbers are a lower
bound on what trained weights, with larger activations, would show.
"""

from __future__ import annotations

import argparse
import copy
import sys
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from lmsat.data.hidden_states import ExtractionSettings, extract_to_cache  # noqa: E402
from lmsat.products.metrics import METRICS  # noqa: E402


def toy_model_and_tokens(name: str, sequences: int, seq_len: int):
    """The default run's trained toy model `name` at its final revision, with the run's
    tokenizer and eval text from the run's directory, loaded by the job's loader."""
    import os
    from dataclasses import replace

    from lmsat.checkpoints.loading import ModelLoadError, load_causal_lm, load_tokenizer
    from lmsat.planning.config_files import load_yaml
    from lmsat.planning.load import load_plan

    os.chdir(ROOT)  # the run's paths are relative to the repository
    plan = load_plan(load_yaml("config/config.yaml"), "workflow/schemas/config.schema.yaml")
    if name not in plan.models:
        raise SystemExit(f"{name} is not a model of config/config.yaml: use one of {', '.join(plan.models)}")
    # where the default run's files are, as workflow/rules/common.smk lays them out
    run = f"results/{plan.run}"
    entry = replace(plan.models[name], hub_cache=f"{run}/toy/hub")
    revision = entry.revisions[-1]
    try:
        model = load_causal_lm(entry, revision, dtype="float32")
    except ModelLoadError as error:
        raise SystemExit(f"{error}\nbuild it first: `snakemake --cores 1 {run}/toy/models/{name}.json`") from None
    tokenizer = load_tokenizer(dict(plan.config["tokenizers"][entry.tokenizer], id=f"{run}/toy/tokenizer"), entry.tokenizer)
    corpus = plan.config["corpora"][plan.config["sample"]["corpus"]]
    text = Path(f"{run}/corpora/synthetic/{corpus['split']}.txt").read_text()
    ids = np.asarray(tokenizer(text[: 40 * sequences * seq_len])["input_ids"], dtype=np.int64)
    if ids.size < sequences * seq_len:
        raise SystemExit(f"eval text has only {ids.size} tokens; ask for fewer")
    return model, ids[: sequences * seq_len].reshape(sequences, seq_len), f"{name}@{revision} (trained)"


def pythia_model_and_tokens(shape: str, sequences: int, seq_len: int, workdir: Path):
    from transformers import AutoModelForCausalLM

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from checkpoint_job import build_checkpoint

    path = build_checkpoint(shape, workdir)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    tokens = np.random.default_rng(0).integers(0, 50277, size=(sequences, seq_len))
    return model, tokens, f"pythia-{shape} shape (random init)"


def run(model, tokens, dtype: str, device: str, directory: Path, settings: dict):
    torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    torch.backends.cudnn.allow_tf32 = dtype == "tf32"
    # a copy: casting in place would hand the next dtype weights rounded by this one
    model = copy.deepcopy(model).to(device=device, dtype=torch.float32 if dtype == "tf32" else getattr(torch, dtype))
    path = directory / f"{dtype}.h5"
    config = ExtractionSettings(**settings, dtype="float32" if dtype == "tf32" else dtype, storage_dtype="float32")
    start = time.perf_counter()
    extract_to_cache(model, tokens, path, identity=dict(model="m", revision="r"), settings=config, device=device)
    seconds = time.perf_counter() - start
    with h5py.File(path, "r") as f:
        loss = f["loss"][...].astype(np.float64)
        anisotropy = METRICS["anisotropy"].compute(f)
    return loss, anisotropy, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="toy-d128", help="toy model (default: the widest)")
    parser.add_argument("--pythia-shape", help="use a random Pythia-shaped model instead (e.g. 1.4b)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--sequences", type=int, default=64)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "lmsat-dtype-policy")
    args = parser.parse_args()
    torch.manual_seed(0)
    if args.pythia_shape:
        model, tokens, what = pythia_model_and_tokens(args.pythia_shape, args.sequences, args.seq_len, args.workdir)
    else:
        model, tokens, what = toy_model_and_tokens(args.model, args.sequences, args.seq_len)
    model.eval()
    dtypes = ["float32", "bfloat16", "float16"] + (["tf32"] if args.device == "cuda" else [])
    settings = dict(batch_size=8, chunk_sequences=16, layer_sample=4096, seed=0)
    print(f"{what}, {tokens.shape[0]} x {tokens.shape[1]} tokens, device {args.device}"
          + ("" if args.device == "cuda" else " (TF32 is GPU-only: not measured)"))
    with tempfile.TemporaryDirectory() as tmp:
        results = {dtype: run(model, tokens, dtype, args.device, Path(tmp), settings) for dtype in dtypes}
    loss_ref, aniso_ref, _ = results["float32"]
    print(f"float32 reference: mean loss {loss_ref.mean():.5f} nats, anisotropy last layer {aniso_ref['anisotropy_last']:.5f}")
    print(f"{'dtype':<10}{'mean|dL|':>11}{'max|dL|':>11}{'d mean L':>12}{'max|dA| layers':>16}{'|dA| last':>11}{'forward s':>11}")
    for dtype, (loss, aniso, seconds) in results.items():
        d_loss = np.abs(loss - loss_ref)
        d_layers = np.abs(np.asarray(aniso["anisotropy_layers"]) - np.asarray(aniso_ref["anisotropy_layers"]))
        d_last = abs(aniso["anisotropy_last"] - aniso_ref["anisotropy_last"])
        relative = (loss.mean() - loss_ref.mean()) / loss_ref.mean()
        print(f"{dtype:<10}{d_loss.mean():>11.2e}{d_loss.max():>11.2e}{relative:>+12.1e}{d_layers.max():>16.2e}"
              f"{d_last:>11.2e}{seconds:>11.2f}")


if __name__ == "__main__":
    main()
