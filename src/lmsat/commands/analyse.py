"""`lmsat analyse`: one checkpoint's metrics, computed as the pipeline computes them.

    python -m lmsat analyse runs/mine/checkpoint-400 --sample results/default/samples/synthetic/toy.h5
    python -m lmsat analyse runs/mine --revision checkpoint-400 --text data/eval.txt --json
    python -m lmsat analyse results/default/toy/hub/models--lmsat-toy--toy-d16 --revision step16 \\
        --sample results/default/samples/synthetic/toy.h5 --config config/config.yaml

--sample takes a run's eval sample (results/<run>/samples/<corpus>/<tokenizer>.h5), so the
numbers equal that run's for the checkpoint; --config takes the run's config for the
settings that decide them (extraction, seed, spectra; default: the schema's defaults).
--text builds a sample from text files as rule sample_eval_tokens does (same sample
settings): another sample, so other numbers than a run on another corpus. Without --config,
its size is the one `lmsat init` writes into a run's config for that text and model (and
SaturationCallback takes): sequences of 2048 tokens capped at the model's context, half the
text's windows, at most 50,000 tokens (lmsat.data.corpus.text_sample_size); it is printed, and
--seq-len and --n-tokens set it.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

SCALARS = {  # metric -> its headline values, in print order
    "loss": ("loss", "loss_sem", "n_tokens"),
    "anisotropy": ("anisotropy_last", "n_tokens", "zero_rows_last", "layer_sample"),
    "effective_rank": ("effective_rank", "effective_rank_centered", "singular_entropy", "n_tokens"),
    "spectra": ("singular_entropy_sigma", "singular_entropy_sigma2", "effective_rank", "stable_rank", "s1", "n_valid_rows", "n_rows"),
    "gradient_bottleneck": ("energy_kept", "energy_kept_sem", "norm_kept", "norm_kept_sem", "random_energy", "rank",
                            "vocab_rows", "n_tokens"),
}


def add_arguments(parser) -> None:
    parser.description = __doc__.split("\n\n")[0]
    parser.add_argument("checkpoint", help="a checkpoint directory (config.json + safetensors) or another trainer's saved step "
                        "(docs/trainers.md), or a folder of them with --revision")
    parser.add_argument("--revision", help="the sub-directory (checkpoint-N, step-N, ...) or hub-cache revision to analyse")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--sample", type=Path, help="a run's eval token sample (results/<run>/samples/...h5)")
    source.add_argument("--text", nargs="+", type=Path, metavar="FILE", help="text files (.txt: a document per line; .jsonl: 'text')")
    parser.add_argument("--tokenizer", type=Path, help="tokenizer directory (default: beside the checkpoint)")
    parser.add_argument("--config", type=Path, help="the run's config: its sample, extraction, seed and spectra settings")
    parser.add_argument("--metrics", nargs="+", metavar="METRIC", help=metrics_help())
    parser.add_argument("--device", default="cpu", help="cpu, cuda or auto (default: cpu)")
    parser.add_argument("--threads", type=int, help="CPU threads of torch")
    parser.add_argument("--save-sample", type=Path, help="with --text: keep the built sample at this path")
    parser.add_argument("--seq-len", type=int, help="with --text: tokens per sequence (default: the config's, or without "
                        "--config 2048 capped at the model's context, shorter for a short text, as `lmsat init` picks it)")
    parser.add_argument("--n-tokens", type=int, help="with --text: tokens in the sample (default: the config's, or without "
                        "--config half the text's windows, at most 50,000, as `lmsat init` picks it)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")


def metrics_help() -> str:
    """The --metrics help, from the registry (lmsat.products.metrics): every metric by name, and the default."""
    from lmsat.products.metrics import METRICS

    pairs = [name for name, metric in METRICS.items() if metric.reads == "cache_pairs"]
    return (f"registered metrics: {', '.join(METRICS)} (default: all of them"
            + (f" but {', '.join(pairs)}, which compare a checkpoint with others)" if pairs else ")"))


def run(args) -> int:
    import lmsat.runtime.offline  # noqa: F401 (first: nothing here reaches the network)

    from lmsat.checkpoints.loading import ModelLoadError, resolve_device
    from lmsat.data.corpus import CorpusError, read_sample
    from lmsat.data.hidden_states import CacheError
    from lmsat.errors import ConfigError
    from lmsat.standalone.analyse import (
        AnalyseError,
        analyse_checkpoint,
        checkpoint_config,
        find_tokenizer,
        resolve_checkpoint,
        run_settings,
        sample_settings,
        text_sample,
    )

    try:
        checkpoint = resolve_checkpoint(args.checkpoint, args.revision)
        settings = run_settings(args.config)
        tokenizer_dir = find_tokenizer(checkpoint, args.tokenizer)
        tokens = sample = None
        if not args.text and (args.seq_len is not None or args.n_tokens is not None):
            raise AnalyseError("--seq-len and --n-tokens set how a sample is built from --text. Fix: pass --text FILE, "
                               "or leave them out (a --sample is analysed as it was built)")
        with tempfile.TemporaryDirectory(prefix="lmsat-sample-") as scratch:
            if args.sample is not None:
                if not args.sample.is_file():
                    raise AnalyseError(f"--sample {args.sample}: no such file. Fix: give results/<run>/samples/<corpus>/<tokenizer>.h5")
                tokens, sample = read_sample(args.sample)
                origin = {"kind": "sample", "path": str(args.sample)}
            elif args.text:
                if tokenizer_dir is None:
                    raise AnalyseError(f"--text needs a tokenizer and none is beside {checkpoint}. Fix: pass --tokenizer DIR")
                settings, size = sample_settings(settings, checkpoint_config(checkpoint), args.text,
                                                 tokenizer_dir, seq_len=args.seq_len, n_tokens=args.n_tokens,
                                                 config=args.config, where=f"checkpoint {checkpoint}")
                print(f"lmsat analyse: {size.describe()}", file=sys.stderr)
                path = args.save_sample or Path(scratch) / "sample.h5"
                tokens, sample = text_sample(args.text, tokenizer_dir, path, settings)
                origin = {"kind": "text", "files": [str(f) for f in args.text], "saved": str(path) if args.save_sample else None,
                          "rule": "built as rule sample_eval_tokens builds the eval sample (lmsat.data.corpus.build_sample)",
                          "settings": {**settings["sample"], "seed": settings["seed"]}, "chosen": size.how}
            else:
                origin = None
            report = analyse_checkpoint(checkpoint, tokens, sample, settings=settings, metrics=args.metrics,
                                        tokenizer_dir=tokenizer_dir, device=resolve_device(args.device), threads=args.threads)
    except (AnalyseError, ConfigError, CorpusError, CacheError, ModelLoadError, ValueError) as error:
        if getattr(args, "debug", False):
            raise
        print(f"lmsat analyse: {type(error).__name__}: {error}", file=sys.stderr)
        return 2
    if origin is not None:
        origin.update(sha256=sample["sha256"], n_seq=int(tokens.shape[0]), seq_len=int(tokens.shape[1]),
                      **{k: _plain(sample[k]) for k in ("corpus", "tokenizer") if k in sample})
    output = {"checkpoint": str(checkpoint), "tokenizer": str(tokenizer_dir) if tokenizer_dir else None, "sample": origin,
              "settings": {"extraction": {k: v for k, v in settings["extraction"].items() if k not in ("mem_mb", "runtime")},
                           "seed": settings["seed"], "config": str(args.config) if args.config else "schema defaults"},
              "metrics": report}
    print(json.dumps(output, indent=1, default=_plain) if args.json else describe(output))
    return 0


def _plain(value):
    """JSON for numpy scalars and arrays."""
    return value.tolist() if hasattr(value, "tolist") else str(value)


def describe(output: dict) -> str:
    """The report as text: what was analysed on which sample, then each metric's values."""
    sample = output["sample"]
    lines = [f"checkpoint  {output['checkpoint']}", f"tokenizer   {output['tokenizer'] or 'none found (every head row kept)'}"]
    if sample is None:
        lines.append("sample      none (weights metrics only)")
    elif sample["kind"] == "sample":
        lines.append(f"sample      {sample['path']} ({sample['n_seq']} x {sample['seq_len']} tokens, sha256 {sample['sha256'][:12]})")
    else:
        lines.append(f"sample      built from {', '.join(sample['files'])} (corpus {sample['settings']['corpus']!r}): "
                     f"{sample['rule']}, settings {sample['settings']} ({sample['chosen']}); "
                     f"{sample['n_seq']} x {sample['seq_len']} tokens, sha256 {sample['sha256'][:12]}"
                     + (f", saved to {sample['saved']}" if sample["saved"] else " (not saved: --save-sample PATH keeps it)"))
        lines.append("            the sample a run draws from these files with these settings (lmsat init --text, "
                     "SaturationCallback(text=...)): the same sha256, so that run's numbers")
    lines.append(f"settings    {output['settings']}")
    for name, values in output["metrics"].items():
        lines.append(f"\n{name}")
        if name == "attention":
            for kind in ("qk", "vo"):
                medians = ", ".join(f"{k} {v['median']:.6g}" for k, v in values[kind].items())
                lines.append(f"  {kind} medians over heads: {medians}")
                per_layer = " ".join(f"{v:.4g}" for v in values[kind]["effective_rank"]["median_per_layer"])
                lines.append(f"  {kind} effective rank per layer: {per_layer}")
            continue
        for key in SCALARS.get(name, tuple(k for k, v in values.items() if not isinstance(v, (list, dict)))):
            lines.append(f"  {key:<26}{values[key]:.10g}" if isinstance(values[key], float) else f"  {key:<26}{values[key]}")
        if name == "anisotropy":
            lines.append("  per layer (0 = embeddings)  " + " ".join(f"{v:.6f}" for v in values["anisotropy_layers"]))
            if any(values["zero_rows_layers"]) or values["zero_rows_last"]:  # left out: a zero vector has no direction
                lines.append("  zero vectors left out       " + " ".join(map(str, values["zero_rows_layers"]))
                             + f" of {values['layer_sample']} per layer; {values['zero_rows_last']} of the last layer's")
    return "\n".join(lines)
