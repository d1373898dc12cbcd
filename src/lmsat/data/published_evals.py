"""EleutherAI's published lm-eval results of the Pythia checkpoints, as reference data.

EleutherAI publishes, in its public repository https://github.com/EleutherAI/pythia
(Apache-2.0), one lm-eval JSON per model, checkpoint and setting:
`evals/pythia-v1/<model>/zero-shot/<size>_step<N>.json` (27 steps) and
`evals/pythia-v1/<model>/five-shot/<size>-5shot_step<N>.json` (15 steps), for Pythia 70m to
12b and the deduped twins, written by the harness before its 0.4 rewrite (metrics keyed by
bare names, `ppl` for perplexity, task versions 0). The tasks other than MMLU, BLiMP and
CrowS-Pairs are kept in the packaged `pythia_published_evals.csv`, whose header says which
commit they were read from:

    python -m lmsat.data.published_evals GIT_DIR [COMMIT]   # rebuild the CSV from a clone of EleutherAI/pythia

A run's own lm-eval results of a Pythia model are shown beside them (`compare`): same model
(by name), step, task, metric and number of shots, both values, their difference and both
harness versions, and whether the checkpoint's weights are bit-identical to another
revision's (identical_weights.csv: such a checkpoint is broken upstream, whatever its evals
say).

The packaged CSV is read only through `published_evals`, which checks it whole before any
number is used: every line a row of COLUMNS with a finite value in its metric's range and a
finite standard error, no row twice, every model of PUBLISHED_MODELS at each step the record
promises (PROMISED_STEPS: 27 zero-shot, 15 five-shot), each step with all CELLS, and the
file's SHA-256 the pinned CSV_SHA256. Anything else is a PublishedRecordError naming the
file, the line and the model.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import re
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pandas as pd

from lmsat.errors import PublishedRecordError

CSV_NAME = "pythia_published_evals.csv"
REPOSITORY = "https://github.com/EleutherAI/pythia"
LICENSE = "Apache-2.0 (the repository's LICENSE)"
HARNESS = "lm-evaluation-harness before 0.4 (EleutherAI's published JSONs)"
MODEL_DIR = re.compile(r"^pythia-(70m|160m|410m|1b|1\.4b|2\.8b|6\.9b|12b)(-deduped)?$")
SHOTS = {"zero-shot": 0, "five-shot": 5}
SETTING = {shots: name for name, shots in SHOTS.items()}
FILE_STEP = re.compile(r"_step(\d+)\.json$")
SKIPPED_TASKS = ("hendrycksTest-", "blimp_", "crows_pairs")  # 57 MMLU, 67 BLiMP, 22 CrowS-Pairs subtasks
METRIC_NAMES = {"ppl": "perplexity"}  # the old harness's name -> today's
COLUMNS = ["model", "shots", "step", "task", "metric", "value", "stderr", "task_version"]

# What the record holds at the commit its header names (EleutherAI/pythia evals/pythia-v1):
# these 15 models (no zero-shot files of plain pythia-1b), zero-shot at 27 steps and
# five-shot at 15, every step scored on the same 14 task/metric cells. A file cut at a line
# end, or with rows removed, is told apart from the record by these, not by its verdicts.
PUBLISHED_MODELS = tuple(f"pythia-{size}{twin}" for size in ("70m", "160m", "410m", "1b", "1.4b", "2.8b", "6.9b", "12b")
                         for twin in ("", "-deduped") if (size, twin) != ("1b", ""))
ZERO_SHOT_STEPS = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000, 3000, *range(13000, 143001, 10000))
FIVE_SHOT_STEPS = (3000, *range(13000, 143001, 10000))
PROMISED_STEPS = {0: ZERO_SHOT_STEPS, 5: FIVE_SHOT_STEPS}
CELLS = tuple((task, metric) for task, metrics in (
    ("arc_challenge", ("acc", "acc_norm")), ("arc_easy", ("acc", "acc_norm")), ("lambada_openai", ("acc", "perplexity")),
    ("logiqa", ("acc", "acc_norm")), ("piqa", ("acc", "acc_norm")), ("sciq", ("acc", "acc_norm")),
    ("winogrande", ("acc",)), ("wsc", ("acc",))) for metric in metrics)
# SHA-256 of the packaged CSV's text (newlines as "\n"), pinned: an edit the checks of form
# cannot see (a value changed to another plausible one) is refused too. After a rebuild,
# `python -m lmsat.data.published_evals` prints the new value to pin here.
CSV_SHA256 = "5256578bfa34af4e606ba56180c7b07540096bdcb51e294d5aff1e53d2952048"
_MODELS, _CELLS = frozenset(PUBLISHED_MODELS), frozenset(CELLS)
_PROMISED = {shots: frozenset(steps) for shots, steps in PROMISED_STEPS.items()}
RESTORE = (f"restore the file lmsat ships (`git checkout -- src/lmsat/data/{CSV_NAME}` in a clone of lmsat, or reinstall "
           "lmsat), or rebuild it from a clone of EleutherAI/pythia: python -m lmsat.data.published_evals GIT_DIR COMMIT")


def rows_of(results: dict, model: str, shots: int, step: int) -> list[dict]:
    """The rows of one published JSON (its parsed dict): one per kept task and metric."""
    rows = []
    versions = results.get("versions", {})
    for task, metrics in sorted(results["results"].items()):
        if task.startswith(SKIPPED_TASKS):
            continue
        for metric, value in sorted(metrics.items()):
            if metric.endswith("_stderr"):
                continue
            rows.append(dict(model=model, shots=shots, step=step, task=task, metric=METRIC_NAMES.get(metric, metric),
                             value=value, stderr=metrics.get(f"{metric}_stderr", math.nan),
                             task_version=versions.get(task, "")))
    return rows


def published_files(git_dir: Path, commit: str) -> list[tuple[str, str, int, int]]:
    """(path, model, shots, step) of every published JSON at `commit` of a pythia clone."""
    listing = subprocess.run(["git", "--git-dir", str(git_dir), "ls-tree", "-r", "--name-only", commit, "evals/pythia-v1"],
                             capture_output=True, text=True, check=True).stdout.split()
    files = []
    for path in listing:
        parts = path.split("/")
        if len(parts) != 5 or not MODEL_DIR.match(parts[2]) or parts[3] not in SHOTS:
            continue
        if step := FILE_STEP.search(parts[4]):
            files.append((path, parts[2], SHOTS[parts[3]], int(step.group(1))))
    return files


def read_published(git_dir: Path, commit: str, path: str) -> dict:
    text = subprocess.run(["git", "--git-dir", str(git_dir), "show", f"{commit}:{path}"], capture_output=True,
                          text=True, check=True).stdout
    return json.loads(text)


def build_table(git_dir: Path, commit: str) -> pd.DataFrame:
    rows = []
    for path, model, shots, step in published_files(git_dir, commit):
        rows.extend(rows_of(read_published(git_dir, commit, path), model, shots, step))
    table = pd.DataFrame(rows, columns=COLUMNS)
    return table.sort_values(["model", "shots", "step", "task", "metric"], kind="stable").reset_index(drop=True)


def header(commit: str) -> str:
    return (f"# EleutherAI's published lm-eval results of Pythia (evals/pythia-v1/<model>/{{zero-shot,five-shot}}/*.json)\n"
            f"# source: {REPOSITORY} at commit {commit}\n# license: {LICENSE}\n"
            f"# harness: {HARNESS}; metric ppl renamed perplexity; MMLU, BLiMP, CrowS-Pairs left out\n"
            "# rebuilt by: python -m lmsat.data.published_evals GIT_DIR COMMIT\n")


def write_csv(table: pd.DataFrame, commit: str, path: Path) -> None:
    Path(path).write_text(header(commit) + table.to_csv(index=False, float_format="%.17g"), encoding="utf-8")


def packaged_csv() -> Path:
    """The CSV shipped inside the lmsat package."""
    return Path(str(resources.files("lmsat.data").joinpath(CSV_NAME)))


def _text(path: Path) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise PublishedRecordError(f"{path}: the published record is unreadable ({error}). Fix: {RESTORE}") from None


def _commit(path: Path, text: str) -> str:
    """The EleutherAI/pythia commit the record's header says its rows were read from."""
    found = re.search(r"^# source: .* at commit ([0-9a-f]{40})$", text, re.M)
    if not found:
        raise PublishedRecordError(f"{path}: the published record has no header line `# source: {REPOSITORY} at "
                                   f"commit <40 hex digits>` (the commit its rows were read from). Fix: {RESTORE}")
    return found.group(1)


def source(path: Path | None = None) -> dict:
    """The packaged CSV's provenance (its header lines): source, commit, license, harness."""
    path = path or packaged_csv()
    return dict(repository=REPOSITORY, commit=_commit(path, _text(path)), license=LICENSE, harness=HARNESS)


def packaged_sha256() -> str:
    """The sha256 of the packaged CSV's bytes: what a job that reads it depends on, the same
    wherever lmsat lies (this checkout, a copy of it, a module's clone, an install)."""
    return hashlib.sha256(packaged_csv().read_bytes()).hexdigest()


def published_evals(path: Path | None = None, sha256: str | None = CSV_SHA256) -> pd.DataFrame:
    """The packaged table (COLUMNS), one row per model, shots, step, task and metric, from a
    file checked whole: the one whose SHA-256 is `sha256` (the shipped file), or one that
    read_record accepts (`sha256` None: a rebuilt record); else a PublishedRecordError."""
    path = Path(path or packaged_csv())
    text = _text(path)
    _commit(path, text)
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    if sha256 is not None and digest == sha256:  # the shipped file, which read_record accepts (tests/test_published.py)
        return pd.read_csv(io.StringIO(text), comment="#")  # 10x faster than the check: planning reads it
    table = read_record(path, text)  # what is wrong, by line and model
    if sha256 is not None:
        raise PublishedRecordError(
            f"{path}: the published record holds every model, step and cell it promises, but its SHA-256 is "
            f"{digest}, not the {sha256} of the file lmsat ships: it was edited (a value, or a line of its header). Fix: {RESTORE}; "
            "a file rebuilt on purpose: pin the digest `python -m lmsat.data.published_evals` printed in "
            "lmsat.data.published_evals.CSV_SHA256")
    return table


def _number(text: str, kind: type, what: str):
    try:
        return kind(text)
    except ValueError:
        comma = " (a decimal comma? the record writes decimals with '.')" if "," in text else ""
        raise ValueError(f"{what} {text!r} is not a{'n integer' if kind is int else ' number'}{comma}") from None


def _row(fields: list[str]) -> dict:
    """One line's fields as a row of COLUMNS; ValueError saying what is wrong with it."""
    if len(fields) != len(COLUMNS):
        raise ValueError(f"it holds {len(fields)} fields, not the {len(COLUMNS)} of {','.join(COLUMNS)} (a line cut "
                         "short or joined to another, or a decimal comma: the record writes decimals with '.')")
    model, shots, step, task, metric, value, stderr, version = fields
    if model not in _MODELS:
        raise ValueError(f"model {model!r} is not one of the record's ({', '.join(PUBLISHED_MODELS)})")
    shots, step = _number(shots, int, "shots"), _number(step, int, "step")
    if shots not in PROMISED_STEPS:
        raise ValueError(f"shots {shots} is neither 0 nor 5")
    if step not in _PROMISED[shots]:
        raise ValueError(f"step {step} is not one of the record's {len(PROMISED_STEPS[shots])} {SETTING[shots]} steps")
    if (task, metric) not in _CELLS:
        raise ValueError(f"{task} {metric} is not one of the record's task/metric cells")
    value, stderr = _number(value, float, "value"), _number(stderr, float, "stderr")
    low, high = (1.0, math.inf) if metric == "perplexity" else (0.0, 1.0)  # a perplexity is exp(loss >= 0)
    if not low <= value <= high:  # NaN fails too
        raise ValueError(f"{task} {metric} is {value!r}, outside [{low:g}, {high:g}]")
    if not 0 <= stderr < math.inf:
        raise ValueError(f"the standard error of {task} {metric} is {stderr!r}, not a finite number >= 0")
    return dict(model=model, shots=shots, step=step, task=task, metric=metric, value=value, stderr=stderr,
                task_version=int(version) if version.isdigit() else version)


def read_record(path: Path, text: str) -> pd.DataFrame:
    """The rows of a published-record CSV (`text`, read from `path`) as COLUMNS, after checking
    each line (_row), that no row is there twice, and that every model of PUBLISHED_MODELS has
    every promised step with every cell; PublishedRecordError naming file, line and model."""
    def damaged(line: int, model: str, problem: str) -> PublishedRecordError:
        who = f" (model {model})" if model else ""
        return PublishedRecordError(f"{path}, line {line}{who}: {problem}. Fix: {RESTORE}")

    rows, seen, header = [], {}, None
    lines = text.splitlines()
    if text and not text.endswith("\n"):  # a number cut short can still read as a number
        raise damaged(len(lines), lines[-1].partition(",")[0], f"the last line has no line end: the file was cut "
                      f"mid-line ({lines[-1][-60:]!r})")
    # one record per line (QUOTE_NONE): a stray quote never joins lines, so every error names its own line
    for number, (line, fields) in enumerate(zip(lines, csv.reader(lines, quoting=csv.QUOTE_NONE)), 1):
        if header is None and line.startswith("#"):
            continue
        if header is None:
            if fields != COLUMNS:
                raise damaged(number, "", f"the published record's header should be {','.join(COLUMNS)}, not {line[:80]!r}")
            header = number
            continue
        try:
            row = _row(fields)
        except ValueError as error:
            raise damaged(number, fields[0] if fields else "", str(error)) from None
        key = (row["model"], row["shots"], row["step"], row["task"], row["metric"])
        if key in seen:
            raise damaged(number, row["model"], f"{SETTING[row['shots']]} step {row['step']} {row['task']} {row['metric']} "
                          f"is there twice (also line {seen[key]})")
        seen[key] = number
        rows.append(row)
    if header is None:
        raise damaged(len(lines), "", f"the published record has no header line {','.join(COLUMNS)} and no rows")
    for model in PUBLISHED_MODELS:
        for shots, promised in PROMISED_STEPS.items():
            missing = [(step, task, metric) for step in promised for task, metric in CELLS
                       if (model, shots, step, task, metric) not in seen]
            if missing:
                steps = sorted({step for step, _, _ in missing})
                whole = [s for s in steps if all((model, shots, s, t, m) not in seen for t, m in CELLS)]
                parts = [f"{len(whole)} of its {len(promised)} promised {SETTING[shots]} steps are missing "
                         f"({', '.join(map(str, whole))})"] if whole else []
                cut = [(s, t, m) for s, t, m in missing if s not in whole]
                if cut:
                    partial = ", ".join(map(str, sorted({s for s, _, _ in cut})))
                    parts.append(f"{len(cut)} cell(s) of its {SETTING[shots]} step(s) {partial} "
                                 f"are missing ({', '.join(f'step {s} {t} {m}' for s, t, m in cut[:4])}"
                                 f"{', ...' if len(cut) > 4 else ''})")
                raise damaged(len(lines), model, f"{'; '.join(parts)}; the file ends at line {len(lines)} (cut, or rows removed)")
    return pd.DataFrame(rows, columns=COLUMNS)


# ---------------------------------------------------------------- beside a run's own results

COMPARISON_COLUMNS = ["model", "revision", "step", "checkpoint", "task", "metric", "shots", "measured", "published",
                      "difference", "published_stderr", "harness", "published_harness", "identical_weights"]


def own_rows(records) -> list[dict]:
    """One row per (model, checkpoint kind, revision, task, metric) of a run's lm-eval records
    (evaluate_checkpoint's JSONs: model, checkpoint, revision, task, results = run_lmeval's dict)."""
    rows = []
    for record in records:
        results = record.get("results") or {}
        harness = f"lm-eval {results.get('lm_eval_version', '?')}"
        shots = (results.get("lmsat") or {}).get("num_fewshot", 0)
        for task, metrics in (results.get("results") or {}).items():
            version = (results.get("versions") or {}).get(task, "")
            for key, value in metrics.items():
                metric, _, _ = key.partition(",")
                if metric.endswith("_stderr") or not isinstance(value, (int, float)) or isinstance(value, bool):
                    continue
                rows.append(dict(model=record["model"], revision=record["revision"], checkpoint=record["checkpoint"],
                                 task=task, metric=metric, shots=int(shots or 0), measured=float(value),
                                 harness=f"{harness} (task version {version})"))
    return rows


def step_of(revision: str) -> int | None:
    found = re.fullmatch(r"step(\d+)", str(revision))
    return int(found.group(1)) if found else None


def flagged_revisions(identical: pd.DataFrame | None) -> dict[tuple[str, str], str]:
    """(model, revision) -> 'head' / 'embedding' / 'head; embedding' for the identical_weights table."""
    flags: dict = {}
    if identical is None:
        return flags
    for row in identical.itertuples():
        key = (row.model, row.revision)
        flags[key] = "; ".join(sorted(set(filter(None, flags.get(key, "").split("; "))) | {str(row.tensor)}))
    return flags


def compare(records, published: pd.DataFrame, checkpoints: pd.DataFrame,
            identical: pd.DataFrame | None = None) -> pd.DataFrame:
    """The published evaluations of the run's Pythia checkpoints, beside its own lm-eval results.

    records: the run's lm-eval records (own_rows); checkpoints: (model, revision) of the run
    with `checkpoint` (best / final / '') - the published rows of those with a step
    (stepN revisions of models named as a published Pythia) are kept, each beside the run's
    value of the same task, metric and shots where the run has one (difference = measured -
    published); own results with no published counterpart are left out (nothing to compare).
    identical_weights: the tensor(s) of the revision that are bit-identical to another
    revision's, '' if none.
    """
    own = pd.DataFrame(own_rows(records), columns=["model", "revision", "checkpoint", "task", "metric", "shots",
                                                   "measured", "harness"])
    flags = flagged_revisions(identical)
    source_harness = "lm-eval < 0.4"  # HARNESS, as short as the run's "lm-eval 0.4.x"
    rows = []
    kinds = {(r.model, r.revision): r.checkpoint for r in checkpoints.itertuples()}
    for (model, revision), kind in kinds.items():
        step = step_of(revision)
        if step is None:
            continue
        found = published[(published["model"] == model) & (published["step"] == step)]
        for pub in found.itertuples():
            match = own[(own["model"] == model) & (own["revision"] == revision) & (own["task"] == pub.task)
                        & (own["metric"] == pub.metric) & (own["shots"] == pub.shots)]
            measured = float(match["measured"].iloc[0]) if len(match) else math.nan
            rows.append(dict(
                model=model, revision=revision, step=step, checkpoint=kind, task=pub.task, metric=pub.metric,
                shots=int(pub.shots), measured=measured, published=float(pub.value),
                difference=measured - float(pub.value), published_stderr=float(pub.stderr),
                harness=match["harness"].iloc[0] if len(match) else "",
                published_harness=f"{source_harness} (task version {pub.task_version})",
                identical_weights=flags.get((model, revision), ""),
            ))
    return pd.DataFrame(rows, columns=COMPARISON_COLUMNS)


def main(argv: list[str]) -> int:
    if not argv or len(argv) > 2:
        print("usage: python -m lmsat.data.published_evals GIT_DIR [COMMIT]", file=sys.stderr)
        return 2
    git_dir = Path(argv[0])
    commit = argv[1] if len(argv) > 1 else subprocess.run(
        ["git", "--git-dir", str(git_dir), "rev-parse", "HEAD"], capture_output=True, text=True, check=True,
    ).stdout.strip()
    table = build_table(git_dir, commit)
    out = Path(__file__).with_name(CSV_NAME)
    write_csv(table, commit, out)
    published_evals(out, sha256=None)  # what it promises: models, steps, cells (a PublishedRecordError otherwise)
    digest = hashlib.sha256(out.read_text(encoding="utf-8").encode("utf-8")).hexdigest()
    print(f"{out}: {len(table):,} rows from {table.groupby(['model', 'shots', 'step']).ngroups:,} files at {commit}; "
          f"sha256 {digest}" + ("" if digest == CSV_SHA256 else " (pin it: lmsat.data.published_evals.CSV_SHA256)"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
