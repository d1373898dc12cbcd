"""The default run's numbers under every numeric variant this CPU can make, and their spread:
the measurement behind tests/golden_tables.py TOLERANCES.

A variant is what changes a float's last bits without changing the science: the number of
threads (reduction order), torch's kernel ISA (ATEN_CPU_CAPABILITY), MKL's code branch
(MKL_CBWR) and oneDNN's ISA (ONEDNN_MAX_CPU_ISA). Each variant runs the default config
through Snakemake in its own directory, the variables in the jobs' environment (Snakemake's
local jobs inherit it; each run first prints what torch reports under it).

    python benchmarks/numeric_variants.py weights DIR [VARIANT ...]
        trains toy-d16 only (about 1 CPU-minute a variant) and prints, per variant, how far
        its published weights are from the first variant's (largest relative difference
        of a tensor, per checkpoint), and its final train loss: which variants differ at all
    python benchmarks/numeric_variants.py tables DIR [VARIANT ...]
        makes every recorded table (tests/data/default_tables) per variant (the whole
        default run but its report, about 10 CPU-minutes a variant) and prints each float
        column's largest spread against the recording and between the variants, beside its
        tolerance
    python benchmarks/numeric_variants.py spread DIR [VARIANT ...]
        the table of `tables` for the runs already under DIR

Runs go two at a time (`--parallel`, default 2), each with one core and at nice 19, so a
shared machine stays usable; a variant with n threads gets n cores. A finished variant is
not rerun (Snakemake finds nothing to do).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import golden_tables  # noqa: E402

# name -> (threads, environment); "base" is this CPU's own choice of every kernel, 1 thread
VARIANTS: dict[str, tuple[int, dict[str, str]]] = {
    "base": (1, {}),
    "threads2": (2, {}),
    "threads4": (4, {}),
    "aten-avx2": (1, {"ATEN_CPU_CAPABILITY": "avx2"}),
    "aten-avx512": (1, {"ATEN_CPU_CAPABILITY": "avx512"}),
    "aten-default": (1, {"ATEN_CPU_CAPABILITY": "default"}),
    "mkl-compatible": (1, {"MKL_CBWR": "COMPATIBLE"}),
    "mkl-sse4_2": (1, {"MKL_CBWR": "SSE4_2"}),
    "mkl-avx2": (1, {"MKL_CBWR": "AVX2"}),
    "onednn-avx2": (1, {"ONEDNN_MAX_CPU_ISA": "AVX2"}),
}
TABLES = sorted(p.name for p in golden_tables.RECORDED.iterdir() if p.name != golden_tables.MADE_WITH.name)


def check_env(variant: str) -> str:
    """What a job's torch reports under the variant: kernel ISA, MKL branch, threads."""
    threads, env = VARIANTS[variant]
    code = (
        "import os, torch; torch.set_num_threads(%d); print(torch.backends.cpu.get_cpu_capability(),"
        " os.environ.get('MKL_CBWR', '-'), os.environ.get('ONEDNN_MAX_CPU_ISA', '-'), torch.get_num_threads())" % threads
    )
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def snakemake(variant: str, directory: Path, targets: list[str]) -> float:
    """Run the default config for `targets` in `directory/variant`; seconds taken."""
    threads, env = VARIANTS[variant]
    workdir = directory / variant
    workdir.mkdir(parents=True, exist_ok=True)
    command = [
        "nice", "-n", "19", sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(workdir),
        "--configfile", str(ROOT / "config" / "config.yaml"), "--config", f"threads={threads}", "--cores", str(threads),
        *targets,
    ]  # fmt: skip
    started = time.perf_counter()
    with open(workdir / "snakemake.log", "w") as log:
        result = subprocess.run(
            command, stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, **env, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"},
        )  # fmt: skip
    if result.returncode:
        sys.exit(f"{variant}: snakemake failed, see {workdir / 'snakemake.log'}")
    return time.perf_counter() - started


def run_all(directory: Path, variants: list[str], targets: list[str], parallel: int) -> None:
    for variant in variants:
        print(f"{variant}: jobs see {check_env(variant)}", flush=True)
    with ThreadPoolExecutor(parallel) as pool:
        for variant, seconds in zip(variants, pool.map(lambda v: snakemake(v, directory, targets), variants)):
            print(f"{variant}: {seconds:.0f} s", flush=True)


def final_weights(workdir: Path, model: str) -> dict[str, dict]:
    """revision -> {tensor name: array} of a trained toy model's published checkpoints."""
    from safetensors.numpy import load_file

    hub = workdir / f"results/default/toy/hub/models--lmsat-toy--{model}"
    out = {}
    for ref in sorted((hub / "refs").iterdir(), key=lambda p: int(p.name.removeprefix("step"))):
        out[ref.name] = load_file(hub / "snapshots" / ref.read_text().strip() / "model.safetensors")
    return out


def weight_tables(workdir: Path, model: str) -> dict[tuple[str, str], float]:
    """The attention_lowrank and singular_entropy values of a toy model's published
    checkpoints, computed by the library functions the pipeline's checkpoint job calls:
    (table, column, revision, layer, head, kind) -> value."""
    import torch
    from transformers import GPTNeoXForCausalLM
    from transformers.utils import logging

    logging.disable_progress_bar()

    from lmsat.degeneration.attention import attention_lowrank
    from lmsat.degeneration.spectra import effective_rank, singular_entropy, singular_values, stable_rank

    hub = workdir / f"results/default/toy/hub/models--lmsat-toy--{model}"
    n_valid = len(json.loads((workdir / "results/default/toy/tokenizer/tokenizer.json").read_text())["model"]["vocab"])
    out = {}
    for ref in (hub / "refs").iterdir():
        lm = GPTNeoXForCausalLM.from_pretrained(hub / "snapshots" / ref.read_text().strip(), torch_dtype=torch.float32)
        for record in attention_lowrank(lm):
            for column, value in record.as_row().items():
                if column in ("effective_rank", "stable_rank", "nuclear_norm", "nuclear_ratio", "balance_gap"):
                    out["attention_lowrank", column, ref.name, str(record.layer), str(record.head), record.kind] = value
        s = singular_values(lm.get_output_embeddings().weight.detach(), n_valid_rows=n_valid)
        head = dict(sigma_max=float(s[0]), singular_entropy_sigma=singular_entropy(s, 1),
                    singular_entropy_sigma2=singular_entropy(s, 2), effective_rank=effective_rank(s),
                    stable_rank=stable_rank(s))  # fmt: skip
        for column, value in head.items():
            out["singular_entropy", column, ref.name, "", "", ""] = value
        out.update(peer_tables(lm, ref.name, n_valid))
    out.update(similarity_tables(workdir, hub, model))
    return out


def peer_tables(lm, revision: str, n_valid: int) -> dict:
    """weight_alpha and weight_sparsity values of one checkpoint, as the checkpoint job
    computes them: (table, column, revision, layer, matrix, "") -> value."""
    from lmsat.degeneration.weight_diagnostics import ALPHA_COLUMNS, SPARSITY_COLUMNS, model_diagnostics

    arrays = model_diagnostics(lm, revision, n_valid)
    out = {}
    for table, columns in (("weight_alpha", ALPHA_COLUMNS), ("weight_sparsity", SPARSITY_COLUMNS)):
        for i, (layer, name) in enumerate(zip(arrays["layer"], arrays["name"])):
            for column in columns:
                out[table, column, revision, str(layer), name, ""] = float(arrays[column][i])
    return out


def similarity_tables(workdir: Path, hub: Path, model: str) -> dict:
    """representation_similarity values of every checkpoint, from caches extracted here with
    the default run's sample and extraction settings: (table, measure, revision, layer,
    reference, "") -> value."""
    import tempfile

    import torch
    from transformers import GPTNeoXForCausalLM

    from lmsat.data.corpus import read_sample
    from lmsat.data.hidden_states import ExtractionSettings, extract_to_cache, open_cache
    from lmsat.degeneration.similarity import layer_similarities
    from lmsat.planning.config_files import load_yaml

    extraction = load_yaml(ROOT / "config" / "config.yaml")["extraction"]
    settings = ExtractionSettings(batch_size=extraction["batch_size"], chunk_sequences=extraction["chunk_sequences"],
                                  layer_sample=extraction["layer_sample"], seed=0)
    tokens, _ = read_sample(workdir / "results/default/samples/synthetic/toy.h5")
    refs = sorted((hub / "refs").iterdir(), key=lambda p: int(p.name.removeprefix("step")))
    layers = {}
    with tempfile.TemporaryDirectory() as scratch:
        for ref in refs:
            lm = GPTNeoXForCausalLM.from_pretrained(hub / "snapshots" / ref.read_text().strip(), torch_dtype=torch.float32)
            path = Path(scratch) / f"{ref.name}.h5"
            extract_to_cache(lm, tokens, path, identity=dict(model=model, revision=ref.name), settings=settings)
            with open_cache(path) as cache:
                layers[ref.name] = cache["layers"][...]
    out = {}
    names = [ref.name for ref in refs]
    for i, revision in enumerate(names):
        for reference, other in (("final", names[-1]), ("previous", names[i - 1] if i else None)):
            if other is None:
                continue
            for measure, values in layer_similarities(layers[revision], {reference: layers[other]})[reference].items():
                for layer, value in enumerate(values):
                    out["representation_similarity", measure, revision, str(layer), reference, ""] = value
    return out


def recorded_values(model: str) -> dict[tuple, float]:
    """The recording's values in weight_tables' keys, for `model`."""
    import csv

    out = {}
    for table in ("attention_lowrank", "singular_entropy", *PEER_TABLES):
        with open(golden_tables.RECORDED / f"{table}.csv", encoding="utf-8") as f:
            for row in csv.DictReader(f):
                if row["model"] != model:
                    continue
                if table in PEER_TABLES:  # (revision, layer, matrix or reference)
                    key = (row["revision"], row["layer"], row.get("matrix", row.get("reference", "")), "")
                else:
                    key = (row["revision"], row.get("layer", ""), row.get("head", ""), row.get("kind", ""))
                for column, value in row.items():
                    if (table, column) in COLUMNS:
                        out[(table, column, *key)] = float(value)
                        if column == "balance_gap":
                            out["terms", column, *key] = golden_tables.balance_gap_terms(row)
    return out


COLUMNS = {("attention_lowrank", c) for c in ("effective_rank", "stable_rank", "nuclear_norm", "nuclear_ratio", "balance_gap")}
COLUMNS |= {
    ("singular_entropy", c) for c in ("sigma_max", "singular_entropy_sigma", "singular_entropy_sigma2", "effective_rank", "stable_rank")
}
# the peers' measures (weight diagnostics, representation similarity): their spread per column, and how
# often a discontinuous choice (the alpha fit's xmin: alpha_n) differs from the recording's
PEER_TABLES = ("weight_alpha", "weight_sparsity", "representation_similarity")
PEER_COLUMNS = {
    "weight_alpha": ("alpha", "alpha_sigma", "alpha_D", "alpha_D_margin", "alpha_xmin", "alpha_n", "alpha_weighted",
                     "stable_rank", "mp_softrank", "mp_sigma", "lambda_max"),
    "weight_sparsity": ("per", "gini", "hoyer", "condition_number", "frobenius_norm", "spectral_norm", "nuclear_norm",
                        "max_abs"),
    "representation_similarity": ("cka", "cka_debiased", "svcca", "pwcca"),
}
COLUMNS |= {(table, column) for table, columns in PEER_COLUMNS.items() for column in columns}


def weights(directory: Path, variants: list[str], parallel: int, model: str = "toy-d16") -> None:
    """Train `model` alone per variant; print how far its weights and their tables are from
    the first variant's and from the recording."""
    run_all(directory, variants, [f"results/default/toy/models/{model}.json", "results/default/samples/synthetic/toy.h5"],
            parallel)
    import numpy as np

    first = final_weights(directory / variants[0], model)
    recorded = recorded_values(model)
    made = {}
    for variant in variants:
        other = final_weights(directory / variant, model)
        history = json.loads((directory / variant / f"results/default/toy/models/{model}.json").read_text())["history"]
        parts = []
        for revision, tensors in first.items():
            rel = max(
                float(np.abs(other[revision][k].astype(np.float64) - t).max() / max(np.abs(t).max(), 1e-30)) for k, t in tensors.items()
            )
            parts.append(f"{revision} {rel:.1e}")
        print(f"{variant} vs {variants[0]}: final train loss {history[-1]['loss']:.7f}; max |dW|/max|W| " + ", ".join(parts))
        made[variant] = weight_tables(directory / variant, model)
    attention = [c for t, c in sorted(COLUMNS) if t == "attention_lowrank"]
    print(f"\n{model} against the recording, largest over all 9 checkpoints and heads (relative unless marked)")
    names = ["gap abs", "gap rel", "gap/terms", *(c[:9] for c in attention if c != "balance_gap"), "head spec"]
    print(f"{'variant':16s} " + " ".join(f"{name:>9s}" for name in names))
    for v in variants:

        def rel(table, column, v=v):
            keys = [k for k in recorded if k[:2] == (table, column)]
            return max(abs(made[v][k] - recorded[k]) / abs(recorded[k]) for k in keys)

        gap = [k for k in recorded if k[:2] == ("attention_lowrank", "balance_gap")]
        cells = [
            max(abs(made[v][k] - recorded[k]) for k in gap),
            rel("attention_lowrank", "balance_gap"),
            max(abs(made[v][k] - recorded[k]) / recorded[("terms", *k[1:])] for k in gap),
            *(rel("attention_lowrank", c) for c in attention if c != "balance_gap"),
            max(rel(t, c) for t, c in COLUMNS if t == "singular_entropy"),
        ]
        print(f"{v:16s} " + " ".join(f"{x:9.2e}" for x in cells))
    print(f"\n{model}, per column: largest |diff| (and relative) against the recording, over the variants and all 9 checkpoints")
    print(f"{'table.column':42s} {'abs':>9s} {'rel':>9s}  {'between variants (abs, rel)':>19s}  tolerance")
    for table, column in sorted(COLUMNS):
        keys = [k for k in recorded if k[:2] == (table, column) and math.isfinite(recorded[k])]  # NaN: documented empty
        if not keys:
            continue
        vs_rec = [(abs(made[v][k] - recorded[k]), abs(made[v][k] - recorded[k]) / max(abs(recorded[k]), 1e-300))
                  for v in variants for k in keys]
        between = [
            (abs(made[v][k] - made[w][k]), abs(made[v][k] - made[w][k]) / max(abs(recorded[k]), 1e-300))
            for v in variants
            for w in variants
            for k in keys
        ]
        tol = golden_tables.tolerance_of(table, column)
        cells = [max(a for a, _ in vs_rec), max(r for _, r in vs_rec), max(a for a, _ in between), max(r for _, r in between)]
        bound = f"atol {tol.atol:g} rtol {tol.rtol:g}{' of its terms' if tol.terms else ''}" if tol else "(int: exact)"
        print(f"{table + '.' + column:42s} " + " ".join(f"{x:9.2e}" for x in cells) + f"  {bound}")  # fmt: skip
        if column == "balance_gap":
            terms = [recorded[("terms", *k[1:])] for k in keys]
            against = max(abs(made[v][k] - recorded[k]) / t for v in variants for k, t in zip(keys, terms))
            among = max(abs(made[v][k] - made[w][k]) / t for v in variants for w in variants for k, t in zip(keys, terms))
            print(f"{'  ... / its terms (balance_gap_terms)':42s} {against:9.2e} {'':9s}  {'':9s} {among:9.2e}")
    flips = {v: [k for k in recorded if k[:2] == ("weight_alpha", "alpha_n") and made[v][k] != recorded[k]] for v in variants}
    print(f"\n{model}: matrices whose alpha fit chose another xmin than the recording's (alpha_n differs), per variant: "
          + ", ".join(f"{v} {len(keys)}" for v, keys in flips.items())
          + f" of {sum(1 for k in recorded if k[:2] == ('weight_alpha', 'alpha_n'))}")


def spread(directory: Path, variants: list[str]) -> None:
    """Per float column: the largest |made - recorded| (absolute, relative) over the
    variants, the largest between two variants, and the tolerance."""
    import csv

    made = {v: directory / v / "results/default/tables" for v in variants}
    rows = {}
    for v, tables in made.items():
        for key, (absolute, relative) in golden_tables.spreads(golden_tables.RECORDED, tables).items():
            a, r, _, _ = rows.get(key, (0.0, 0.0, 0.0, 0.0))
            rows[key] = (max(a, absolute), max(r, relative), 0.0, 0.0)
    for i, v in enumerate(variants):
        for w in variants[i + 1 :]:
            for key, (absolute, relative) in golden_tables.spreads(made[v], made[w]).items():
                a, r, ba, br = rows[key]
                rows[key] = (a, r, max(ba, absolute), max(br, relative))
    print(f"{'table.column':48s} {'vs recorded':>19s} {'between variants (abs, rel)':>19s}  tolerance")
    for (table, column), (a, r, ba, br) in sorted(rows.items()):
        tol = golden_tables.tolerance_of(table, column)
        bound = f"atol {tol.atol:g} rtol {tol.rtol:g}{' of its terms' if tol.terms else ''}" if tol else "none"
        print(f"{table + '.' + column:48s} {a:9.2e} {r:9.2e} {ba:9.2e} {br:9.2e}  {bound}")
    # balance_gap relative to its terms (the quantity its tolerance is set on)
    with open(golden_tables.RECORDED / "attention_lowrank.csv", encoding="utf-8") as f:
        recorded = list(csv.DictReader(f))
    worst = 0.0
    for v, tables in made.items():
        with open(tables / "attention_lowrank.csv", encoding="utf-8") as f:
            for row, other in zip(recorded, csv.DictReader(f)):
                worst = max(worst, abs(float(other["balance_gap"]) - float(row["balance_gap"])) / golden_tables.balance_gap_terms(row))
    print(f"attention_lowrank.balance_gap |diff| / its terms' size (golden_tables.balance_gap_terms), largest vs recorded: {worst:.2e}")
    failing = {v: len(golden_tables.compare_tables(t)) for v, t in made.items()}
    print("differences outside the tolerances, per variant:", failing)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["weights", "tables", "spread"])
    parser.add_argument("directory", type=Path)
    parser.add_argument("variants", nargs="*", default=list(VARIANTS), help=f"some of {', '.join(VARIANTS)} (default: all)")
    parser.add_argument("--parallel", type=int, default=2, help="variants run at once (default 2)")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.variants) - set(VARIANTS))
    if unknown:
        parser.error(f"unknown variants {unknown}; known: {', '.join(VARIANTS)}")
    if args.command == "weights":
        weights(args.directory, args.variants, args.parallel)
    else:
        if args.command == "tables":
            run_all(args.directory, args.variants, [f"results/default/tables/{name}" for name in TABLES], args.parallel)
        spread(args.directory, args.variants)


if __name__ == "__main__":
    main()
