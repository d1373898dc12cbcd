"""One checkpoint outside the workflow, through the workflow's own functions.

    from lmsat import analyse_checkpoint
    from lmsat import read_sample
    tokens, sample = read_sample("results/default/samples/synthetic/toy.h5")  # the run's eval sample
    report = analyse_checkpoint("runs/mine/checkpoint-400", tokens, sample)
    report["anisotropy"]["anisotropy_last"], report["loss"]["loss"]

The steps are rule analyse_checkpoint's (workflow/scripts/analyse_checkpoint.py): the
checkpoint loads once in its own dtype through the job's loader (lmsat.checkpoints.loading.load_causal_lm),
the weights metrics of lmsat.products.metrics run on it, it is cast to the forward dtype and the
sample goes through lmsat.data.hidden_states.extract_to_cache into a temporary cache, which the cache
metrics of lmsat.products.metrics read as rule compute_checkpoint_metric does. Same checkpoint, same
sample, same settings (`run_settings`: a run's config or the schema's defaults): same numbers.

`text_sample` builds a sample from text files exactly as rule sample_eval_tokens does
(lmsat.data.corpus.build_sample, corpus type text_files, the config's `sample` and `seed`); a
sample of other text (or of other settings) is another sample, and its numbers differ from
the pipeline's (anisotropy most of all).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np

from lmsat.core.names import checkpoint_path
from lmsat.core.plan import ModelEntry
from lmsat.planning.config_files import load_yaml, validate_config
from lmsat.planning.model_entries import WEIGHT_FILES

SCHEMA = Path(__file__).resolve().parents[3] / "workflow" / "schemas" / "config.schema.yaml"
SETTING_KEYS = ("sample", "extraction", "seed", "spectra")  # what decides a checkpoint's numbers
TEXT_CORPUS = "text"  # the corpus name of a sample of text files (as `lmsat init` names it in a config)
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
    """The directory holding one checkpoint's config.json and weights, or another trainer's
    saved step (a folder or file: lmsat.checkpoints.trainer_layouts, docs/trainers.md).

    `path` itself; with `revision`, the sub-directory `path/revision` (a trainer's
    checkpoint-N, step-N, ...) or, in a Hugging Face hub cache (`models--org--name`, the toy
    suite's results/<run>/toy/hub/...), the snapshot that refs/<revision> names.
    """
    from lmsat.checkpoints.trainer_runs import layout

    path = Path(path)
    if revision is not None and path.is_dir() and layout(checkpoint_path(path, revision)) not in (None, "transformers"):
        path, revision = checkpoint_path(path, revision), None
    if layout(path) not in (None, "transformers"):  # another trainer's saved step: read (and checked) at load
        return path
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
        inside = sorted(p.name for p in path.iterdir() if (p / "config.json").is_file() or layout(p) is not None)
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
    """A config['tokenizers'] entry for a tokenizer directory (lmsat.checkpoints.loading.load_tokenizer)."""
    return {"source": "local", "id": str(directory)}


def text_sample(files: list, tokenizer_dir: Path, out_path: str | Path, settings: dict) -> tuple[np.ndarray, dict]:
    """The eval sample of text files, built as rule sample_eval_tokens builds it. -> tokens
    (n_seq, seq_len), attributes (sha256, corpus, tokenizer, seed, pool_tokens, ...)

    `settings`: run_settings(...); the corpus is a `text_files` corpus named "text" with the
    schema's defaults (.txt one document per line, .jsonl its "text" field).
    """
    from lmsat.checkpoints.loading import load_tokenizer
    from lmsat.data.corpus import build_sample, read_sample

    for name in files:
        if not Path(name).is_file():
            raise AnalyseError(f"--text {name}: no such file")
    schema = _schema()
    corpus_schema = {"$defs": schema.get("$defs", {}), "type": "object",
                     "properties": {"corpora": schema["properties"]["corpora"]}}
    corpus = validate_config({"corpora": {TEXT_CORPUS: {"type": "text_files", "files": [str(f) for f in files]}}},
                             corpus_schema)["corpora"][TEXT_CORPUS]
    tokenizer = load_tokenizer(tokenizer_spec(tokenizer_dir), str(tokenizer_dir))
    build_sample(corpus, TEXT_CORPUS, tokenizer, str(tokenizer_dir), settings["sample"], settings["seed"], out_path)
    return read_sample(out_path)


ANALYSE_OPTIONS = {"n_tokens": "--n-tokens {}", "seq_len": "--seq-len {}"}  # how `lmsat analyse` sets them


def sample_settings(settings: dict, model_config: dict, files, tokenizer_dir: Path, *, seq_len: int | None = None,
                    n_tokens: int | None = None, config: str | Path | None = None, where: str = "the model",
                    options: dict = ANALYSE_OPTIONS):
    """The settings a text sample of `files` is built with for a model whose config.json is
    `model_config`, tokenized by the tokenizer in `tokenizer_dir`. -> (settings: `settings`
    (run_settings(...)) with its sample's corpus, n_tokens and seq_len set, the chosen
    lmsat.data.corpus.SampleSize, whose describe() says what was chosen and why).

    Given `seq_len` / `n_tokens` are taken; with `config` (the run config `settings` come
    from) its sample.seq_len and sample.n_tokens are; what is neither is chosen by
    lmsat.data.corpus.text_sample_size, the rule `lmsat init` writes into a run's config. So
    `lmsat analyse --text`, lmsat.SaturationCallback and a run of `lmsat init`'s
    config build the same sample of the same text. A value the text or the model cannot
    serve is an AnalyseError naming it as the user sets it (`options`: "n_tokens" and
    "seq_len" -> the option's spelling with {} for its value; a config's value is named
    as its key in that file)."""
    from lmsat.checkpoints.loading import context_length, load_tokenizer
    from lmsat.data.corpus import CorpusError, text_sample_size

    options = dict(options)
    if config is not None:
        sample = settings["sample"]
        for key, given in (("n_tokens", n_tokens), ("seq_len", seq_len)):
            if given is None:  # the config's value: named as its key there, and the option that overrides it
                escaped = f"{config} ({options[key].format('N')} overrides it)".replace("{", "{{").replace("}", "}}")
                options[key] = f"sample.{key}: {{}} in {escaped}"
        n_tokens = sample["n_tokens"] if n_tokens is None else n_tokens
        seq_len = sample["seq_len"] if seq_len is None else seq_len
    tokenizer = load_tokenizer(tokenizer_spec(tokenizer_dir), str(tokenizer_dir))
    try:
        size = text_sample_size([Path(f) for f in files], tokenizer, context_length(model_config), n_tokens=n_tokens,
                                seq_len=seq_len, pool_factor=settings["sample"]["pool_factor"], options=options,
                                model=where)
    except CorpusError as error:
        raise AnalyseError(str(error)) from None
    sample = {**settings["sample"], "corpus": TEXT_CORPUS, "n_tokens": size.n_tokens, "seq_len": size.seq_len}
    return {**settings, "sample": sample}, size


def checkpoint_config(checkpoint: Path) -> dict:
    """The checkpoint's config.json as a dict; another trainer's saved step: the config of the
    transformers model it loads as (its architecture read from the run's own file)."""
    from lmsat.checkpoints.trainer_runs import layout, read_config

    if layout(checkpoint) not in (None, "transformers"):
        return read_config(checkpoint)
    try:
        return json.loads((checkpoint / "config.json").read_text())
    except ValueError as error:
        raise AnalyseError(f"{checkpoint / 'config.json'} is not valid JSON ({error}). Fix: save the model again") from None


def checkpoint_entry(checkpoint: Path, tokenizer: str = "") -> ModelEntry:
    """A local ModelEntry for one checkpoint directory (lmsat.checkpoints.loading.load_causal_lm checks the
    loaded model against it), its sizes read from config.json (another trainer's saved step:
    from the config it loads as)."""
    config = checkpoint_config(checkpoint)
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
    """Scalars of the head spectrum (lmsat.products.metrics 'spectra'), as the spectra tables compute
    them: singular entropy KL(p || uniform) with p ~ s and p ~ s^2 (Fig. 5), effective and
    stable rank, s_1."""
    from lmsat.degeneration.spectra import effective_rank, singular_entropy, stable_rank

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
    from lmsat.degeneration.weight_files import ATTENTION_KINDS, ATTENTION_SCALARS

    arrays = result["arrays"]  # "{kind}/{name}": (n_layers, n_heads)
    summary = {"shape": {k: int(v) for k, v in result["shape"].items()}}
    for kind in ATTENTION_KINDS:
        summary[kind] = {
            name: {"median": float(np.median(arrays[f"{kind}/{name}"])),
                   "median_per_layer": np.median(arrays[f"{kind}/{name}"], axis=1).tolist()}
            for name in ATTENTION_SCALARS
        }
    return summary


def diagnostics_summary(arrays: dict) -> dict:
    """Scalars of the weight diagnostics (lmsat.products.metrics 'weight_diagnostics'): the LM head's
    own and each column's median over the blocks' matrices (NaN entries, documented by their
    status, left out)."""
    from lmsat.degeneration.weight_diagnostics import HEAD

    head = np.asarray(arrays["name"]) == HEAD
    summary = {"matrices": int(head.size), "not_ok": int((np.asarray(arrays["status"]) != "ok").sum())}
    for column in ("alpha", "alpha_sigma", "alpha_D", "stable_rank", "mp_softrank", "per", "gini", "hoyer",
                   "condition_number"):
        summary[f"head_{column}"] = float(arrays[column][head][0]) if head.any() else float("nan")
    for column in ("alpha", "stable_rank", "mp_softrank", "per", "gini", "hoyer", "condition_number"):
        values = arrays[column][~head]
        summary[f"median_{column}"] = float(np.median(values[~np.isnan(values)])) if (~np.isnan(values)).any() else float("nan")
    return summary


def gradient_summary(result: dict) -> dict:
    """Scalars of the gradient bottleneck (lmsat.bottleneck.gradient.summarize), as its table has them."""
    from lmsat.bottleneck.gradient import summarize

    return summarize(result)


SUMMARIES = {"spectra": spectrum_summary, "attention": attention_summary,
             "weight_diagnostics": diagnostics_summary,
             "gradient_bottleneck": gradient_summary}  # weights metric -> its scalars


def analyse_checkpoint(checkpoint, tokens: np.ndarray | None, sample: dict | None, *, settings: dict | None = None,
                       metrics=None, tokenizer_dir: Path | None = None, device: str = "cpu", threads: int | None = None) -> dict:
    """Every asked metric of lmsat.products.metrics for one checkpoint directory, as the workflow
    computes it. tokens: the eval sample (n_seq, seq_len), sample: its attributes (sha256);
    both may be None when only weights metrics are asked.

    -> {metric: its record's values (cache metrics) or summary (spectra, attention)}.
    `settings` (run_settings(...)): extraction, seed and spectra.drop_padding_rows as the
    run's; `tokenizer_dir`: the tokenizer whose size marks the head's padding rows (None:
    every row is kept).
    """
    import torch

    from lmsat.checkpoints.loading import check_sequence_length, check_token_ids, load_causal_lm
    from lmsat.data.hidden_states import ExtractionSettings, extract_to_cache, open_cache
    from lmsat.products.metrics import METRICS, WeightsJob, finish_weights

    checkpoint = Path(checkpoint)
    settings = settings or run_settings()
    metrics = list(metrics or [m for m in METRICS if METRICS[m].reads != "cache_pairs"])
    unknown = [m for m in metrics if m not in METRICS]
    if unknown:
        raise AnalyseError(f"unknown metrics {unknown}. Fix: choose among {', '.join(METRICS)}")
    pairs = [m for m in metrics if METRICS[m].reads == "cache_pairs"]
    if pairs:
        raise AnalyseError(f"metrics {pairs} compare a checkpoint with others (its final and previous ones), and "
                           "analyse reads one. Fix: leave them out, or run the workflow (`lmsat init` + snakemake)")
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
