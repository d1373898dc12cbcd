"""Downstream zero-shot evaluation with the LM Evaluation Harness (Godey et al. 2024, Table 1).

Metrics are lm-eval's own: this module only loads the checkpoint, runs
`lm_eval.simple_evaluate`, turns the result into a JSON-able dict, and builds the paper's
Table 1 from such dicts. Offline tasks over the synthetic language are written as lm-eval
task YAMLs (`dataset_path: json`) into a directory passed as `include_path`.

    names = write_offline_tasks("results/tasks", docs, n_docs=200, n_choices=4, seed=0)
    out = run_lmeval("EleutherAI/pythia-160m", "step143000", ["lambada_openai", "wikitext"],
                     batch_size=8, limit=None, device="cuda", dtype="float32")
    table = make_table1([{"model": "pythia-160m", "checkpoint": "final", "results": out}, ...])
    write_table(table, "results/table1.md")          # also .tex; CSV: lmsat.products.table_files.write_csv(table.reset_index(), ...)

storycloze_2016 needs data that is only handed out on request: `run_lmeval` raises
`ManualDownloadRequired` before loading anything, and `write_storycloze_task` turns the
downloaded CSVs into a task that replaces lm-eval's (which datasets >= 4 cannot load).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
from collections import Counter
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np
import yaml

from lmsat.runtime.progress import ThrottledLog

log = logging.getLogger(__name__)

# Tasks whose data must be fetched by hand: lm-eval dataset_path -> how to get it.
MANUAL_DOWNLOADS = {
    "LSDSem/story_cloze": (
        "Story Cloze 2016 is distributed only on request: fill the form at "
        "https://cs.rochester.edu/nlp/rocstories/ and download "
        "'cloze_test_val__spring2016 - cloze_test_ALL_val.csv' and "
        "'cloze_test_test__spring2016 - cloze_test_ALL_test.csv' into one directory DIR; then "
        "call lmsat.saturation.downstream.write_storycloze_task(TASK_DIR, DIR) and pass "
        "include_path=TASK_DIR (lm-eval's own config would need dataset_kwargs.data_dir=DIR, "
        "but its loader script no longer runs with datasets >= 4)"
    ),
}
STORYCLOZE_2016_FILES = {  # split -> file name of the manual download
    "validation": "cloze_test_val__spring2016 - cloze_test_ALL_val.csv",
    "test": "cloze_test_test__spring2016 - cloze_test_ALL_test.csv",
}
OFFLINE_TASKS = ("synthetic_ppl", "synthetic_mc")


class ManualDownloadRequired(ValueError):
    """A requested task needs data that must be downloaded by hand; `.tasks` names them."""

    def __init__(self, missing: dict[str, str]):
        self.tasks = sorted(missing)
        super().__init__("; ".join(f"task {task}: {why}" for task, why in sorted(missing.items())))


class EmptyRequestError(ValueError):
    """A scored request whose context or continuation encodes to no tokens (lm-eval itself
    stops on a bare AssertionError); the message names the tasks, their data and the text."""


@dataclass(frozen=True)
class MetricSpec:
    task: str  # lm-eval task name
    metric: str  # lm-eval metric name; the result key is "<metric>,<filter>"
    label: str  # column header without its arrow, as in the paper
    higher_is_better: bool  # arrow in the header: True -> up
    scale: float = 1.0  # factor applied in the table (accuracies are shown in %)
    decimals: int = 1  # digits after the point in Markdown/LaTeX
    filter: str = "none"  # lm-eval filter name (the part after the comma)

    @property
    def header(self) -> str:
        return f"{self.label} {'↑' if self.higher_is_better else '↓'}"


# What Table 1 reports per task (add tasks here); lm-eval computes every value.
METRICS: dict[str, tuple[MetricSpec, ...]] = {
    "lambada_openai": (
        MetricSpec("lambada_openai", "perplexity", "Lambada (ppl.)", False, decimals=1),
        MetricSpec("lambada_openai", "acc", "Lambada", True, scale=100.0),
    ),
    "storycloze_2016": (MetricSpec("storycloze_2016", "acc", "StoryCloze", True, scale=100.0),),
    "wikitext": (MetricSpec("wikitext", "word_perplexity", "WikiText (ppl.)", False, decimals=2),),
    "sciq": (MetricSpec("sciq", "acc", "SciQ", True, scale=100.0),),
    "arc_easy": (MetricSpec("arc_easy", "acc", "ARC-e", True, scale=100.0),),
    "synthetic_ppl": (MetricSpec("synthetic_ppl", "word_perplexity", "Synthetic (ppl.)", False, decimals=2),),
    "synthetic_mc": (MetricSpec("synthetic_mc", "acc", "Synthetic last word", True, scale=100.0),),
}
TABLE1_TASKS = ("lambada_openai", "storycloze_2016", "wikitext", "sciq", "arc_easy")
CHECKPOINT_ORDER = ("best", "final")  # row order within a model; other kinds follow


# ---------------------------------------------------------------- offline task files


TASK_HEADER = "# Written by lmsat.saturation.downstream from lmsat/tasks/"


def _beside(path: Path, out_dir: Path) -> str:
    """`path` relative to out_dir where it lies inside it (the run's own files: a copied or
    moved run directory reads its own), else absolute (files the user keeps elsewhere)."""
    path, out_dir = path.resolve(), out_dir.resolve()
    return str(path.relative_to(out_dir)) if path.is_relative_to(out_dir) else str(path)


def _fill_template(name: str, data_files: dict[str, Path], out_dir: Path) -> Path:
    """Load the packaged template `name`, point it at data_files, write out_dir/<name>.yaml.
    Paths inside out_dir are written relative to it; run_lmeval resolves them where the
    YAML is when it runs (located_tasks)."""
    template = resources.files("lmsat.tasks").joinpath(f"{name}.yaml.in").read_text()
    config = yaml.safe_load(template)
    config["dataset_kwargs"]["data_files"] = {split: _beside(path, out_dir) for split, path in data_files.items()}
    # datasets' Arrow cache: the job's own, deleted after it (located_tasks), never shared
    config["dataset_kwargs"]["cache_dir"] = "hf_datasets_cache"
    path = out_dir / f"{name}.yaml"
    header = f"{TASK_HEADER}{name}.yaml.in; do not edit.\n"
    path.write_text(header + yaml.safe_dump(config, sort_keys=False, allow_unicode=True))
    return path


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")


def write_offline_tasks(out_dir, docs: list[str], n_docs: int, n_choices: int, seed: int,
                        context_words: int = 0) -> list[str]:
    """Write the synthetic_ppl and synthetic_mc tasks (JSONL data + YAML) into out_dir.

    docs: space-separated word documents; n_docs of them (with >= 2 words) are drawn with
    `seed`. synthetic_ppl scores each whole document (lm-eval's rolling windows fit any
    context); synthetic_mc asks for its last word among n_choices words, the n_choices - 1
    distractors drawn by unigram frequency over all of `docs` (so that a model must use the
    context, not word frequency, to win), after the `context_words` words before it (0: all
    of them). With the models' context in tokens as `context_words` and a token per word (the
    toy tokenizer, lmsat.toy.suite.build_tokenizer), context and answer fit the model: lm-eval
    scores them as they are, where it would cut a longer context from the left, with a warning
    per item. Returns the task names, to pass with include_path=out_dir.
    """
    if n_choices < 2:
        raise ValueError(f"n_choices={n_choices}: a multiple-choice task needs at least 2 choices")
    if n_docs < 1:
        raise ValueError(f"n_docs={n_docs}: need at least one document")
    if context_words < 0:
        raise ValueError(f"context_words={context_words}: a number of words, or 0 for the whole document")
    words_per_doc = [doc.split() for doc in docs]
    eligible = [i for i, words in enumerate(words_per_doc) if len(words) >= 2]
    if len(eligible) < n_docs:
        raise ValueError(
            f"docs: only {len(eligible)} of {len(docs)} documents have >= 2 words, n_docs={n_docs} "
            "requested; pass more documents or lower n_docs"
        )
    counts = Counter(word for words in words_per_doc for word in words)
    vocabulary = np.array(sorted(counts))
    if len(vocabulary) < n_choices:
        raise ValueError(
            f"docs: only {len(vocabulary)} distinct words, fewer than n_choices={n_choices}; lower n_choices"
        )
    frequency = np.array([counts[word] for word in vocabulary], dtype=np.float64)
    position = {word: i for i, word in enumerate(vocabulary)}

    rng = np.random.default_rng(seed)
    chosen = rng.permutation(eligible)[:n_docs]
    ppl_rows, mc_rows = [], []
    for index in chosen:
        words = words_per_doc[index]
        ppl_rows.append({"text": " ".join(words)})
        target = words[-1]
        weights = frequency.copy()
        weights[position[target]] = 0.0
        distractors = rng.choice(vocabulary, size=n_choices - 1, replace=False, p=weights / weights.sum())
        choices = [target, *distractors.tolist()]
        order = rng.permutation(n_choices)
        mc_rows.append(
            {
                "context": " ".join(words[:-1][-context_words:] if context_words else words[:-1]),
                "choices": [choices[i] for i in order],
                "gold": int(np.flatnonzero(order == 0)[0]),
            }
        )

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, rows in zip(OFFLINE_TASKS, (ppl_rows, mc_rows)):
        data = out_dir / f"{name}.jsonl"
        _write_jsonl(data, rows)
        _fill_template(name, {"test": data}, out_dir)
    return list(OFFLINE_TASKS)


def write_storycloze_task(out_dir, data_dir) -> str:
    """Write a storycloze_2016 task reading the manually downloaded CSVs in data_dir.

    With include_path=out_dir it replaces lm-eval's storycloze_2016 (same prompt, choices
    and metric). Raises ManualDownloadRequired if the CSVs are not in data_dir.
    """
    data_dir = Path(data_dir)
    files = {split: data_dir / name for split, name in STORYCLOZE_2016_FILES.items()}
    absent = [str(path) for path in files.values() if not path.is_file()]
    if absent:
        raise ManualDownloadRequired(
            {"storycloze_2016": f"missing {absent}. " + MANUAL_DOWNLOADS["LSDSem/story_cloze"]}
        )
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    _fill_template("storycloze_2016", files, out_dir)
    return "storycloze_2016"


# ---------------------------------------------------------------- running lm-eval


def _located(kwargs: dict, task_dir: Path, scratch: Path) -> dict:
    """dataset_kwargs with relative data_files resolved against task_dir, and a relative
    cache_dir (datasets' Arrow cache, which records the absolute paths it read) in scratch."""
    def at(path, root):
        return str(root / path) if isinstance(path, str) and not os.path.isabs(path) else path

    kwargs = dict(kwargs)
    files = kwargs.get("data_files")
    if isinstance(files, dict):
        kwargs["data_files"] = {split: at(path, task_dir) for split, path in files.items()}
    elif files is not None:
        kwargs["data_files"] = at(files, task_dir)
    if "cache_dir" in kwargs:
        kwargs["cache_dir"] = at(kwargs["cache_dir"], scratch)
    return kwargs


@contextlib.contextmanager
def located_tasks(include_path):
    """include_path with the task YAMLs lmsat wrote (TASK_HEADER) pointed at their data where
    they are now: their relative paths are resolved against the YAML's directory into copies
    in a temporary directory, which also holds datasets' cache and is removed afterwards (so
    a run directory, copied or moved, is read, never written, and holds no absolute path).
    Yields (include_path to pass to lm-eval, {task: dataset_kwargs as written}). Directories
    holding other YAMLs pass unchanged."""
    import tempfile

    if not include_path:
        yield include_path, {}
        return
    dirs = [include_path] if isinstance(include_path, (str, os.PathLike)) else list(include_path)
    written = {}
    with tempfile.TemporaryDirectory(prefix="lmsat-tasks-") as tmp:
        located = []
        for i, directory in enumerate(dirs):
            directory = Path(directory).resolve()
            yamls = sorted(directory.glob("*.yaml"))
            if not yamls or not all(p.read_text(encoding="utf-8").startswith(TASK_HEADER) for p in yamls):
                located.append(str(directory))
                continue
            copy_dir = Path(tmp) / str(i)
            copy_dir.mkdir()
            for path in yamls:
                config = yaml.safe_load(path.read_text(encoding="utf-8"))
                written[config["task"]] = config.get("dataset_kwargs") or {}
                config["dataset_kwargs"] = _located(written[config["task"]], directory, copy_dir)
                (copy_dir / path.name).write_text(yaml.safe_dump(config, sort_keys=False, allow_unicode=True))
            located.append(str(copy_dir))
        yield (located[0] if isinstance(include_path, (str, os.PathLike)) else located), written


def task_manager(tasks: list[str], include_path):
    """A TaskManager that knows `tasks`; skips indexing lm-eval's ~15k built-in YAMLs (~10 s)
    when include_path alone defines them all."""
    from lm_eval.tasks import TaskManager

    if include_path:
        local = TaskManager(include_path=include_path, include_defaults=False)
        if all(task in local.all_tasks for task in tasks):
            return local
    return TaskManager(include_path=include_path)


def manual_download_missing(tasks: list[str], task_manager) -> dict[str, str]:
    """{task: what to do} for the requested tasks (or tasks of a requested tag) whose
    manual-download data is not configured, read from task_manager's index of configs."""
    import datasets
    from packaging.version import Version

    scripts_unsupported = Version(datasets.__version__) >= Version("4.0.0")
    leaves = []
    for task in tasks:  # a tag (e.g. "storycloze") stands for its tasks; groups are not expanded
        # TaskManager.task_index (public) maps names to entries with kind/cfg/tags since
        # lm-eval 0.4.12, our lower bound; kind is compared by name, its enum is private
        entry = task_manager.task_index.get(task)
        is_tag = entry is not None and getattr(entry.kind, "name", "") == "TAG"
        leaves += sorted(entry.tags) if is_tag else [task]
    missing = {}
    for task in leaves:
        entry = task_manager.task_index.get(task)
        config = (entry.cfg if entry is not None else None) or {}
        how = MANUAL_DOWNLOADS.get(config.get("dataset_path"))
        if how is None:
            continue
        data_dir = (config.get("dataset_kwargs") or {}).get("data_dir")
        if not data_dir:
            missing[task] = f"its data must be downloaded by hand and no data_dir is configured. {how}"
        elif scripts_unsupported:
            missing[task] = (
                f"data_dir={data_dir!r} is set, but dataset {config['dataset_path']} is a loader script, "
                f"which datasets {datasets.__version__} cannot run. {how}"
            )
    return missing


def check_tasks(tasks: list[str], task_manager) -> None:
    unknown = [task for task in tasks if task not in task_manager.all_tasks]
    if unknown:
        raise ValueError(
            f"tasks: unknown lm-eval task(s) {unknown}; check the names, or write their YAMLs into a "
            "directory passed as include_path (write_offline_tasks for the synthetic ones)"
        )
    missing = manual_download_missing(tasks, task_manager)
    if missing:
        raise ManualDownloadRequired(missing)
    for task in tasks:
        entry = task_manager.task_index[task]
        data_files = ((entry.cfg or {}).get("dataset_kwargs") or {}).get("data_files") or {}
        paths = data_files.values() if isinstance(data_files, dict) else [data_files]
        for path in paths:
            if isinstance(path, str) and os.path.isabs(path) and not os.path.exists(path):
                raise ValueError(f"task {task} ({entry.yaml_path}): data file {path} does not exist; rewrite the task")


def _load_model_and_tokenizer(model_name_or_path, revision, tokenizer, *, cache_dir, local_files_only, dtype, device):
    import torch
    import transformers
    from packaging.version import Version

    hub = dict(cache_dir=cache_dir, local_files_only=local_files_only)
    if isinstance(model_name_or_path, (str, os.PathLike)):
        dtype_key = "dtype" if Version(transformers.__version__) >= Version("4.56") else "torch_dtype"
        torch_dtype = dtype if (dtype == "auto" or isinstance(dtype, torch.dtype)) else getattr(torch, dtype)
        from lmsat.checkpoints.formats import from_pretrained
        from lmsat.checkpoints.validation import CONFIG_FIX, load_report_problems, transformers_log_to_job_log

        try:
            with transformers_log_to_job_log():  # its load report into the job's log; hf_olmo, Pico converted
                model, loading_info = from_pretrained(
                    str(model_name_or_path), revision=revision, **{dtype_key: torch_dtype}, **hub,
                    output_loading_info=True, ignore_mismatched_sizes=True,
                )
        except (OSError, ValueError) as error:
            raise ValueError(
                f"cannot load model {str(model_name_or_path)!r} at revision {revision!r} "
                f"(cache_dir={cache_dir}, local_files_only={local_files_only}): {error}"
            ) from error
        problems = load_report_problems(loading_info)
        if problems:  # never evaluate a checkpoint transformers completed at random
            raise ValueError(
                f"model {str(model_name_or_path)!r} at revision {revision!r} does not match its config.json: "
                f"{problems}. Fix: {CONFIG_FIX}, or fetch or save the checkpoint again"
            )
        model = model.to(device)
    else:
        model = model_name_or_path  # an already built model (e.g. with a swapped head), used as is
    if tokenizer is None or isinstance(tokenizer, (str, os.PathLike)):
        if tokenizer is None and not isinstance(model_name_or_path, (str, os.PathLike)):
            raise ValueError("tokenizer: required when model_name_or_path is a model object")
        source = str(model_name_or_path if tokenizer is None else tokenizer)
        # the model's revision applies only to a tokenizer stored with the model
        kwargs = dict(hub, revision=revision) if tokenizer is None else hub
        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(source, **kwargs)
        except (OSError, ValueError) as error:
            raise ValueError(f"cannot load tokenizer {source!r}: {error}") from error
    return model.eval(), tokenizer


def _task_data(tasks: list[str], task_manager) -> str:
    """Where the documents of `tasks` come from (data files, else the dataset), for errors."""
    where = []
    for task in tasks:
        entry = task_manager.task_index.get(task)
        config = (getattr(entry, "cfg", None) or {}) if entry is not None else {}
        files = (config.get("dataset_kwargs") or {}).get("data_files") or config.get("dataset_path") or "?"
        files = list(files.values()) if isinstance(files, dict) else files
        where.append(f"{task} ({', '.join(map(str, files)) if isinstance(files, list) else files})")
    return "; ".join(where)


def _checked_lm(hflm_class, describe):
    """HFLM that refuses, by name, a request lm-eval would stop on with a bare AssertionError."""

    class CheckedHFLM(hflm_class):
        def _loglikelihood_tokens(self, requests, *args, **kwargs):
            for key, context_enc, continuation_enc in requests:
                if key is None:  # a rolling window of a perplexity document: tokens already
                    continue
                context, continuation = key
                for part, text, tokens in (("context", context, context_enc), ("continuation", continuation, continuation_enc)):
                    if len(tokens) == 0:
                        raise EmptyRequestError(
                            f"lm-eval task(s) {describe()}: a request's {part} {text[:80]!r} encodes to no tokens "
                            f"(context {context[:80]!r}, continuation {continuation[:80]!r}); lm-eval would stop on "
                            "a bare AssertionError. Fix: give every document a non-empty context and non-empty "
                            "choices (after the target delimiter) in the task's data, or drop the task"
                        )
            return super()._loglikelihood_tokens(requests, *args, **kwargs)

    return CheckedHFLM


def _simple_evaluate(lm, tasks, num_fewshot, batch_size, device, limit, bootstrap_iters, task_manager) -> dict:
    import lm_eval

    return lm_eval.simple_evaluate(
        model=lm,
        tasks=tasks,
        num_fewshot=num_fewshot,
        batch_size=batch_size,
        device=device,
        limit=limit,
        bootstrap_iters=bootstrap_iters,
        task_manager=task_manager,
        log_samples=False,
    )


def run_lmeval(
    model_name_or_path,
    revision: str,
    tasks,
    *,
    batch_size: int | str,
    limit: int | float | None,
    device: str,
    dtype: str = "float32",
    cache_dir: str | None = None,
    local_files_only: bool = False,
    include_path=None,
    num_fewshot: int = 0,
    tokenizer=None,
    bootstrap_iters: int = 100_000,
) -> dict:
    """Evaluate one checkpoint on lm-eval `tasks`; returns lm-eval's results as a JSON-able dict.

    model_name_or_path: hub id or local directory (loaded at `revision`, honouring
    cache_dir and local_files_only), or a model object (then `tokenizer` is required).
    tokenizer: None (the model's, same revision), a path/hub id, or a tokenizer object.
    include_path: directory or list of directories with extra task YAMLs.
    limit: documents per task (int) or fraction (float); None = all.
    bootstrap_iters: lm-eval's resamples for the stderr of perplexity-type metrics.
    The dict holds lm-eval's "results", "versions", "n-shot", "higher_is_better",
    "n-samples", "configs" and "config" (no per-sample logs), plus "lmsat" (the request).
    Raises ManualDownloadRequired (before loading the model) for tasks such as
    storycloze_2016 whose data must be downloaded by hand.
    """
    tasks = [tasks] if isinstance(tasks, str) else list(tasks)
    if not tasks:
        raise ValueError("tasks: empty; name at least one lm-eval task")
    with located_tasks(include_path) as (located, written):
        results = _run_lmeval(
            model_name_or_path, revision, tasks, batch_size=batch_size, limit=limit, device=device, dtype=dtype,
            cache_dir=cache_dir, local_files_only=local_files_only, include_path=located, num_fewshot=num_fewshot,
            tokenizer=tokenizer, bootstrap_iters=bootstrap_iters,
        )
    # the record keeps the task's paths as written (relative to its YAML), not where they were read
    for task, kwargs in written.items():
        if task in results.get("configs", {}):
            results["configs"][task]["dataset_kwargs"] = kwargs
    return results


def _run_lmeval(model_name_or_path, revision, tasks, *, batch_size, limit, device, dtype, cache_dir,
                local_files_only, include_path, num_fewshot, tokenizer, bootstrap_iters) -> dict:
    from lm_eval.models.huggingface import HFLM
    from lm_eval.utils import handle_non_serializable

    manager = task_manager(tasks, include_path)
    check_tasks(tasks, manager)

    # Loaded here, not by HFLM(pretrained=<name>): HFLM forwards cache_dir/local_files_only to
    # the model only, not to its AutoConfig/AutoTokenizer calls, so a private hub cache (the
    # toy suite's) would be missed. HFLM gets the objects; lm-eval still computes everything.
    model, tokenizer = _load_model_and_tokenizer(
        model_name_or_path, revision, tokenizer,
        cache_dir=cache_dir, local_files_only=local_files_only, dtype=dtype, device=device,
    )
    describe = lambda: _task_data(tasks, manager)  # noqa: E731 (only when an error is raised)
    lm = _checked_lm(HFLM, describe)(pretrained=model, tokenizer=tokenizer, revision=revision, batch_size=batch_size)
    try:
        # lm-eval draws tqdm bars on stderr (requests done, rate, time left): into the job's
        # log, one line a minute (lmsat.runtime.progress.ThrottledLog)
        with contextlib.redirect_stderr(ThrottledLog(log)):
            results = _simple_evaluate(lm, tasks, num_fewshot, batch_size, device, limit, bootstrap_iters, manager)
    except AssertionError as error:  # lm-eval's sanity checks carry no message
        raise EmptyRequestError(
            f"lm-eval stopped on an assertion ({error!r}) while scoring task(s) {describe()} of "
            f"{model_name_or_path} at {revision}: usually a document whose context or choices encode to no "
            "tokens, or a continuation longer than the model's context. Fix: correct those documents in the "
            "task's data, or drop the task"
        ) from error
    results.pop("samples", None)
    results["lmsat"] = {
        "model": str(model_name_or_path) if isinstance(model_name_or_path, (str, os.PathLike)) else type(model).__name__,
        "revision": revision,
        "tasks": tasks,
        "limit": limit,
        "num_fewshot": num_fewshot,
        "dtype": str(dtype),
        "device": device,
    }
    # dtypes, numpy scalars and sets become JSON types (the caller caches this as JSON)
    return json.loads(json.dumps(results, default=handle_non_serializable))


# ---------------------------------------------------------------- Table 1


def metric_value(results: dict, spec: MetricSpec) -> float:
    """The value of spec's metric in a run_lmeval dict, scaled for the table; nan if absent."""
    value = results.get("results", {}).get(spec.task, {}).get(f"{spec.metric},{spec.filter}")
    return float(value) * spec.scale if isinstance(value, (int, float)) else math.nan


