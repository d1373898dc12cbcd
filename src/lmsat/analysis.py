"""One checkpoint outside the workflow, through the workflow's own functions.

    from lmsat import analyse_checkpoint, read_sample
    tokens, sample = read_sample("results/default/samples/synthetic/toy.h5")  # the run's eval sample
    report = analyse_checkpoint("runs/mine/checkpoint-400", tokens, sample)
    report["anisotropy"]["anisotropy_last"], report["loss"]["loss"]

The steps are rule analyse_checkpoint's (workflow/scripts/analyse_checkpoint.py): the
checkpoint loads once in its own dtype through the job's loader (lmsat.models.load_causal_lm),
the weights metrics of lmsat.metrics run on it, it is cast to the forward dtype and the
sample goes through lmsat.cache.extract_to_cache into a temporary cache, which the cache
metrics of lmsat.metrics read as rule compute_checkpoint_metric does. Same checkpoint, same
sample, same settings (`run_settings`: a run's config or the schema's defaults): same numbers.

`text_sample` builds a sample from text files exactly as rule sample_eval_tokens does
(lmsat.corpus.build_sample, corpus type text_files, the config's `sample` and `seed`); a
sample of other text (or of other settings) is another sample, and its numbers differ from
the pipeline's (anisotropy most of all).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np

from lmsat.config import WEIGHT_FILES, ModelEntry, load_yaml, validate_config

SCHEMA = Path(__file__).resolve().parents[2] / "workflow" / "schemas" / "config.schema.yaml"
SETTING_KEYS = ("sample", "extraction", "seed", "spectra")  # what decides a checkpoint's numbers
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")


class AnalyseError(ValueError):
    """A checkpoint, revision, tokenizer or sample that analyse cannot use; names the fix."""


def _schema() -> dict:
    if not SCHEMA.is_file():
        raise AnalyseError(f"the config schema {SCHEMA} is missing: lmsat is not installed from its repository")
    return load_yaml(SCHEMA)


def run_settings(config_path: str | Path | None = None) -> dict:
    """The settings that decide one checkpoint's numbers, {sample, extraction, seed, spectra}:
    a run's config file's (defaults filled as the workflow fills them) or, with no file, the
    schema's defaults (workflow/schemas/config.schema.yaml)."""
    schema = _schema()
    config = load_yaml(config_path) if config_path else {}
    part = {"$defs": schema.get("$defs", {}), "type": "object",
            "properties": {k: schema["properties"][k] for k in SETTING_KEYS}}
    return validate_config({k: config[k] for k in SETTING_KEYS if k in config}, part)


def resolve_checkpoint(path: str | Path, revision: str | None = None) -> Path:
    """The directory holding one checkpoint's config.json and weights.

    `path` itself; with `revision`, the sub-directory `path/revision` (a trainer's
    checkpoint-N, step-N, ...) or, in a Hugging Face hub cache (`models--org--name`, the toy
    suite's results/<run>/toy/hub/...), the snapshot that refs/<revision> names.
    """
    path = Path(path)
    if not path.is_dir():
        raise AnalyseError(f"checkpoint {path} is not a directory. Fix: give a directory saved with save_pretrained")
    if revision is not None:
        ref = path / "refs" / revision
        if (path / revision).is_dir():
            path = path / revision
        elif ref.is_file() and (path / "snapshots" / ref.read_text().strip()).is_dir():
            path = path / "snapshots" / ref.read_text().strip()
        else:
            found = sorted(p.name for p in path.iterdir() if (p / "config.json").is_file())
            if (path / "refs").is_dir():
                found += sorted(p.name for p in (path / "refs").iterdir())
            raise AnalyseError(
                f"revision {revision!r} is not in {path} (found: {', '.join(found) or 'no checkpoints'}). "
                "Fix: pass one of these to --revision"
            )
    if not (path / "config.json").is_file():
        inside = sorted(p.name for p in path.iterdir() if (p / "config.json").is_file())
        hint = f"; its sub-directories {', '.join(inside[:5])} are checkpoints: pass one with --revision" if inside else ""
        raise AnalyseError(f"{path} has no config.json, so it is no checkpoint{hint}. Fix: point at a save_pretrained directory")
    if not any((path / name).is_file() for name in WEIGHT_FILES):
        raise AnalyseError(f"{path} has no {' or '.join(WEIGHT_FILES)}. Fix: save the weights with save_pretrained (safetensors)")
    return path


def find_tokenizer(checkpoint: Path, tokenizer: str | Path | None = None) -> Path | None:
    """The tokenizer directory: `tokenizer` if given, else the checkpoint's own directory or
    the one above it (trainers save it in both), else None."""
    if tokenizer is not None:
        if not any((Path(tokenizer) / name).is_file() for name in TOKENIZER_FILES):
            raise AnalyseError(f"--tokenizer {tokenizer} holds no tokenizer ({', '.join(TOKENIZER_FILES)})")
        return Path(tokenizer)
    for place in (checkpoint, checkpoint.parent):
        if any((place / name).is_file() for name in TOKENIZER_FILES):
            return place
    return None


def tokenizer_spec(directory: Path) -> dict:
    """A config['tokenizers'] entry for a tokenizer directory (lmsat.models.load_tokenizer)."""
    return {"source": "local", "id": str(directory)}


def text_sample(files: list, tokenizer_dir: Path, out_path: str | Path, settings: dict) -> tuple[np.ndarray, dict]:
    """The eval sample of text files, built as rule sample_eval_tokens builds it. -> tokens
    (n_seq, seq_len), attributes (sha256, corpus, tokenizer, seed, pool_tokens, ...)

    `settings`: run_settings(...); the corpus is a `text_files` corpus named "text" with the
    schema's defaults (.txt one document per line, .jsonl its "text" field).
    """
    from lmsat.corpus import build_sample, read_sample
    from lmsat.models import load_tokenizer

    for name in files:
        if not Path(name).is_file():
            raise AnalyseError(f"--text {name}: no such file")
    schema = _schema()
    corpus_schema = {"$defs": schema.get("$defs", {}), "type": "object",
                     "properties": {"corpora": schema["properties"]["corpora"]}}
    corpus = validate_config({"corpora": {"text": {"type": "text_files", "files": [str(f) for f in files]}}},
                             corpus_schema)["corpora"]["text"]
    tokenizer = load_tokenizer(tokenizer_spec(tokenizer_dir), str(tokenizer_dir))
    build_sample(corpus, "text", tokenizer, str(tokenizer_dir), settings["sample"], settings["seed"], out_path)
    return read_sample(out_path)


def sample_settings(settings: dict, model_config: dict, *, seq_len: int | None = None, n_tokens: int | None = None,
                    from_config: bool = False, where: str = "the model") -> tuple[dict, str | None]:
    """The sample settings a text sample is built with for a model whose config.json is
    `model_config`: `settings` (run_settings(...)) with `seq_len` / `n_tokens` when given;
    otherwise, unless the settings come from a run's config (`from_config`), the run
    default's sequence length capped at the model's context. -> (settings, a note saying
    what was capped, or None). An asked `seq_len` past the context is an AnalyseError
    (positions past it give wrong losses without an error).

    `lmsat analyse --text` and lmsat.callbacks.SaturationCallback pick their samples here,
    so the two build the same sample of the same text."""
    from lmsat.models import context_length

    settings = {**settings, "sample": dict(settings["sample"])}
    found = context_length(model_config)
    note = None
    if seq_len is not None:
        if seq_len < 2:
            raise AnalyseError(f"a sequence length of {seq_len} tokens predicts nothing. Fix: --seq-len 2 or more")
        if found and seq_len > found[1]:
            raise AnalyseError(
                f"--seq-len {seq_len} exceeds the context of {where} ({found[0]}={found[1]}): positions past it "
                f"would give wrong losses, without an error. Fix: --seq-len {found[1]} or less"
            )
        settings["sample"]["seq_len"] = int(seq_len)
    elif not from_config and found and settings["sample"]["seq_len"] > found[1]:
        note = (f"sample.seq_len {settings['sample']['seq_len']} (the run default) capped at the context of {where}: "
                f"{found[1]} ({found[0]}); --seq-len N chooses another")
        settings["sample"]["seq_len"] = found[1]
    if n_tokens is not None:
        if n_tokens < 1:
            raise AnalyseError(f"--n-tokens {n_tokens}: a sample needs at least one token. Fix: --n-tokens 1 or more")
        settings["sample"]["n_tokens"] = int(n_tokens)
    return settings, note


def checkpoint_entry(checkpoint: Path, tokenizer: str = "") -> ModelEntry:
    """A local ModelEntry for one checkpoint directory (lmsat.models.load_causal_lm checks the
    loaded model against it), its sizes read from config.json."""
    try:
        config = json.loads((checkpoint / "config.json").read_text())
    except ValueError as error:
        raise AnalyseError(f"{checkpoint / 'config.json'} is not valid JSON ({error}). Fix: save the model again") from None
    text = config.get("text_config", config)
    hidden_size = text.get("hidden_size", text.get("n_embd", text.get("d_model")))
    if not hidden_size:
        raise AnalyseError(f"{checkpoint / 'config.json'} states no hidden_size. Fix: save the model with save_pretrained")
    return ModelEntry(
        name=checkpoint.name, suite="analyse", source="local", id=str(checkpoint.parent), hidden_size=int(hidden_size),
        vocab_size=0, n_params=0, tokenizer=tokenizer, tokens_per_step=0, revisions=(checkpoint.name,), steps=(0,),
        allow_pickle=False, trust_remote_code=False, key=f"checkpoint {checkpoint}",
    )


def spectrum_summary(spectrum: dict) -> dict:
    """Scalars of the head spectrum (lmsat.metrics 'spectra'), as the spectra tables compute
    them: singular entropy KL(p || uniform) with p ~ s and p ~ s^2 (Fig. 5), effective and
    stable rank, s_1."""
    from lmsat.spectra import effective_rank, singular_entropy, stable_rank

    s = np.asarray(spectrum["singular_values"])  # (min(n_valid_rows, d),) descending
    return {
        "singular_entropy_sigma": singular_entropy(s, power=1),
        "singular_entropy_sigma2": singular_entropy(s, power=2),
        "effective_rank": effective_rank(s),
        "stable_rank": stable_rank(s),
        "s1": float(s[0]),
        "n_rows": spectrum["n_rows"],
        "n_valid_rows": spectrum["n_valid_rows"],
        "tokenizer_size": spectrum.get("tokenizer_size"),
        "head_dtype": spectrum["head_dtype"],
    }


def attention_summary(result: dict) -> dict:
    """Per kind (qk: W_Q^T W_K, vo: W_O W_V), each scalar's median over heads per layer
    (as the attention figure draws them) and over every head. # per layer: (n_layers,)"""
    from lmsat.degeneration import ATTENTION_KINDS, ATTENTION_SCALARS

    arrays = result["arrays"]  # "{kind}/{name}": (n_layers, n_heads)
    summary = {"shape": {k: int(v) for k, v in result["shape"].items()}}
    for kind in ATTENTION_KINDS:
        summary[kind] = {
            name: {"median": float(np.median(arrays[f"{kind}/{name}"])),
                   "median_per_layer": np.median(arrays[f"{kind}/{name}"], axis=1).tolist()}
            for name in ATTENTION_SCALARS
        }
    return summary


def gradient_summary(result: dict) -> dict:
    """Scalars of the gradient bottleneck (lmsat.gradient_bottleneck.summarize), as its table has them."""
    from lmsat.gradient_bottleneck import summarize

    return summarize(result)


SUMMARIES = {"spectra": spectrum_summary, "attention": attention_summary,
             "gradient_bottleneck": gradient_summary}  # weights metric -> its scalars


def analyse_checkpoint(checkpoint, tokens: np.ndarray | None, sample: dict | None, *, settings: dict | None = None,
                       metrics=None, tokenizer_dir: Path | None = None, device: str = "cpu", threads: int | None = None) -> dict:
    """Every asked metric of lmsat.metrics for one checkpoint directory, as the workflow
    computes it. tokens: the eval sample (n_seq, seq_len), sample: its attributes (sha256);
    both may be None when only weights metrics are asked.

    -> {metric: its record's values (cache metrics) or summary (spectra, attention)}.
    `settings` (run_settings(...)): extraction, seed and spectra.drop_padding_rows as the
    run's; `tokenizer_dir`: the tokenizer whose size marks the head's padding rows (None:
    every row is kept).
    """
    import torch

    from lmsat.cache import ExtractionSettings, extract_to_cache, open_cache
    from lmsat.metrics import METRICS, WeightsJob, finish_weights
    from lmsat.models import check_sequence_length, check_token_ids, load_causal_lm

    checkpoint = Path(checkpoint)
    settings = settings or run_settings()
    metrics = list(metrics or METRICS)
    unknown = [m for m in metrics if m not in METRICS]
    if unknown:
        raise AnalyseError(f"unknown metrics {unknown}. Fix: choose among {', '.join(METRICS)}")
    cache_metrics = [m for m in metrics if METRICS[m].reads == "cache"]
    reads_sample = cache_metrics + [m for m in metrics if METRICS[m].finish is not None]
    if reads_sample and tokens is None:
        raise AnalyseError(f"metrics {reads_sample} read a token sample. Fix: pass --sample H5 or --text FILE")
    if threads:
        torch.set_num_threads(threads)
    entry = checkpoint_entry(checkpoint, tokenizer=str(tokenizer_dir or ""))
    lm = load_causal_lm(entry, checkpoint.name, dtype="auto", device=device)  # the stored dtype, as the job
    if tokens is not None:
        check_sequence_length(lm, entry, checkpoint.name, tokens.shape[1])
        # as rule analyse_checkpoint: ids past the vocabulary are refused before the forward
        check_token_ids(lm, entry, checkpoint.name, tokens,
                        f"the sample ({sample.get('tokenizer') or 'its tokenizer'}'s ids)" if sample else "the sample",
                        "analyse it with the tokenizer the model was trained with (--tokenizer DIR, and --text, or a "
                        "--sample built with that tokenizer), or fix the checkpoint's vocabulary")
    drop = settings["spectra"]["drop_padding_rows"] and tokenizer_dir is not None
    job = WeightsJob(model=entry.name, tokenizer=str(tokenizer_dir or ""),
                     tokenizer_spec=tokenizer_spec(tokenizer_dir) if tokenizer_dir else {}, drop_padding_rows=drop)
    report, pending = {}, {}
    for name in metrics:
        if METRICS[name].reads == "weights":
            result = METRICS[name].compute(lm, job)
            if METRICS[name].finish is not None:
                pending[name] = result  # finished on the cache below
            else:
                report[name] = SUMMARIES.get(name, lambda values: values)(result)
    if not cache_metrics and not pending:
        return report
    extraction = settings["extraction"]
    extraction_settings = ExtractionSettings(
        **{k: extraction[k] for k in ("batch_size", "chunk_sequences", "dtype", "storage_dtype", "layer_sample")},
        seed=settings["seed"],
    )
    lm = lm.to(dtype=getattr(torch, extraction_settings.dtype))
    identity = dict(model=entry.name, revision=checkpoint.name, model_id=entry.id, sample_sha256=sample["sha256"])
    with tempfile.TemporaryDirectory(prefix="lmsat-analyse-") as scratch:
        path = Path(scratch) / "cache.h5"
        extract_to_cache(lm, tokens, path, identity=identity, settings=extraction_settings, device=device)
        with open_cache(path, expect=dict(sample_sha256=sample["sha256"])) as cache:
            for name, result in finish_weights(pending, cache, tokens).items():
                report[name] = SUMMARIES.get(name, lambda values: values)(result)
            for name in cache_metrics:
                report[name] = METRICS[name].compute(cache)
    return {name: report[name] for name in metrics}
