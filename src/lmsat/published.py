"""EleutherAI's published lm-eval results of the Pythia checkpoints, as reference data.

EleutherAI publishes, in its public repository https://github.com/EleutherAI/pythia
(Apache-2.0), one lm-eval JSON per model, checkpoint and setting:
`evals/pythia-v1/<model>/zero-shot/<size>_step<N>.json` (27 steps) and
`evals/pythia-v1/<model>/five-shot/<size>-5shot_step<N>.json` (15 steps), for Pythia 70m to
12b and the deduped twins, written by the harness before its 0.4 rewrite (metrics keyed by
bare names, `ppl` for perplexity, task versions 0). The tasks other than MMLU, BLiMP and
CrowS-Pairs are kept in the packaged `pythia_published_evals.csv`, whose header says which
commit they were read from:

    python -m lmsat.published GIT_DIR [COMMIT]   # rebuild the CSV from a clone of EleutherAI/pythia

A run's own lm-eval results of a Pythia model are shown beside them (`compare`): same model
(by name), step, task, metric and number of shots, both values, their difference and both
harness versions, and whether the checkpoint's weights are bit-identical to another
revision's (identical_weights.csv: such a checkpoint is broken upstream, whatever its evals
say).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pandas as pd

CSV_NAME = "pythia_published_evals.csv"
REPOSITORY = "https://github.com/EleutherAI/pythia"
LICENSE = "Apache-2.0 (the repository's LICENSE)"
HARNESS = "lm-evaluation-harness before 0.4 (EleutherAI's published JSONs)"
MODEL_DIR = re.compile(r"^pythia-(70m|160m|410m|1b|1\.4b|2\.8b|6\.9b|12b)(-deduped)?$")
SHOTS = {"zero-shot": 0, "five-shot": 5}
FILE_STEP = re.compile(r"_step(\d+)\.json$")
SKIPPED_TASKS = ("hendrycksTest-", "blimp_", "crows_pairs")  # 57 MMLU, 67 BLiMP, 22 CrowS-Pairs subtasks
METRIC_NAMES = {"ppl": "perplexity"}  # the old harness's name -> today's
COLUMNS = ["model", "shots", "step", "task", "metric", "value", "stderr", "task_version"]


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
            "# rebuilt by: python -m lmsat.published GIT_DIR COMMIT\n")


def write_csv(table: pd.DataFrame, commit: str, path: Path) -> None:
    Path(path).write_text(header(commit) + table.to_csv(index=False, float_format="%.17g"), encoding="utf-8")


def source() -> dict:
    """The packaged CSV's provenance (its header lines): source, commit, license, harness."""
    text = resources.files("lmsat").joinpath(CSV_NAME).read_text(encoding="utf-8")
    commit = re.search(r"at commit ([0-9a-f]{40})", text).group(1)
    return dict(repository=REPOSITORY, commit=commit, license=LICENSE, harness=HARNESS)


def packaged_sha256() -> str:
    """The sha256 of the packaged CSV's bytes: what a job that reads it depends on, the same
    wherever lmsat lies (this checkout, a copy of it, a module's clone, an install)."""
    return hashlib.sha256(resources.files("lmsat").joinpath(CSV_NAME).read_bytes()).hexdigest()


def published_evals() -> pd.DataFrame:
    """The packaged table (COLUMNS), one row per model, shots, step, task and metric."""
    with resources.files("lmsat").joinpath(CSV_NAME).open(encoding="utf-8") as handle:
        return pd.read_csv(handle, comment="#")


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
        print("usage: python -m lmsat.published GIT_DIR [COMMIT]", file=sys.stderr)
        return 2
    git_dir = Path(argv[0])
    commit = argv[1] if len(argv) > 1 else subprocess.run(
        ["git", "--git-dir", str(git_dir), "rev-parse", "HEAD"], capture_output=True, text=True, check=True,
    ).stdout.strip()
    table = build_table(git_dir, commit)
    out = Path(__file__).with_name(CSV_NAME)
    write_csv(table, commit, out)
    print(f"{out}: {len(table):,} rows from {table.groupby(['model', 'shots', 'step']).ngroups:,} files at {commit}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
