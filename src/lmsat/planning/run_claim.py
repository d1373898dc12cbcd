"""The run claim (results/<run>/run_config.json): a run directory belongs to one result config, and
a config that would overwrite another's finished outputs is refused, unless replace_results."""

from __future__ import annotations

import json
from pathlib import Path

from lmsat.checkpoints.loading import context_length as context_length  # lmsat init reads a checkpoint's context
from lmsat.core.names import PATH_NAME_PATTERN as PATH_NAME_PATTERN  # the schema's pattern of names
from lmsat.errors import ConfigError
from lmsat.planning.config_files import config_sha256

# The record of the result config that made a run's finished outputs (results/<run>/...):
# written when a run starts executing, compared by every planning into the same directory.
RUN_CLAIM = "run_config.json"
# What a user may place in a run directory by hand before its first run (a hub checkpoint
# staged by hand, data staged on another machine): inputs, not evidence of a finished run.
INPUT_DIRS = ("weights", "staged")
# Result-config keys whose change is no conflict: they add to a run, never change what its
# finished outputs mean (more metrics plan more files, never other ones).
ADDITIVE_KEYS = ("metrics", "run")
# Lists of what to plan, each item's outputs its own: an item added or left out changes none
# of the others' (a corpus's `files`, by contrast, make one sample: a change is a conflict).
SELECTION_LISTS = ("evaluation.tasks", "evaluation.models", "bottleneck.models", "bottleneck.ranks",
                   "ngrams.corpora", "ngrams.tokenizers", "ngrams.ground_truth.sample_sizes",
                   "figures.anisotropy_suites")


def claim_differences(recorded, current, key: str = "") -> list[tuple[str, object, object]]:
    """[(dotted key, recorded value, current value)] of the result-config values that differ,
    ADDITIVE_KEYS left out; a key only one side has is no difference (a key a later lmsat
    added keeps its default's meaning, the behaviour of the lmsat that made the record), nor
    a model (by name), a checkpoint or an item of SELECTION_LISTS only one side lists: they
    add outputs, not change them."""
    if key in SELECTION_LISTS:
        return []
    named = (isinstance(recorded, list) and isinstance(current, list)
             and all(isinstance(x, dict) and "name" in x for x in recorded + current))
    if named:  # models by name: one added or left out changes no other model's outputs
        recorded, current = ({x["name"]: x for x in side} for side in (recorded, current))
    if key.endswith(".revisions") and all(isinstance(x, dict) and x.get("list") for x in (recorded, current)):
        # discovered or listed checkpoints: a new one (a run still training) is added, not changed
        steps = [dict(zip(x["list"], x.get("steps") or [None] * len(x["list"]))) for x in (recorded, current)]
        return [(f"{key}.steps[{name!r}]", steps[0][name], steps[1][name])
                for name in sorted(set(steps[0]) & set(steps[1])) if steps[0][name] != steps[1][name]]
    if isinstance(recorded, dict) and isinstance(current, dict):
        found = []
        for name in sorted(set(recorded) & set(current)):
            if not key and name in ADDITIVE_KEYS:
                continue
            found += claim_differences(recorded[name], current[name], f"{key}.{name}" if key else name)
        return found
    same = json.dumps(recorded, sort_keys=True, default=str) == json.dumps(current, sort_keys=True, default=str)
    return [] if same else [(key, recorded, current)]


def check_run_claim(run_dir, result: dict, sources: str, replace: bool, claimed: bool = True) -> None:
    """ConfigError before anything is planned into `run_dir` (results/<run>/) when its
    finished outputs came from another result config than `result` (lmsat.planning.config_files.result_config
    of this plan; `sources`: its config files, in words): what differs, both configs, and
    the two fixes. `replace` (config key replace_results) lets the plan replace them.

    Finished outputs without a readable claim are refused too: a claim truncated, emptied or
    not lmsat's record protects nothing, and a deleted one is a pass only when the config hash
    every table records (its provenance columns) is this plan's. `claimed` False: runs here
    write no claim (lmsat as a `module`), so a missing one is no evidence."""
    path = Path(run_dir) / RUN_CLAIM
    if replace:
        return
    claim = {path, path.with_name(path.name + ".tmp")}  # the claim, and write_run_claim's temporary file
    outputs = (p for p in Path(run_dir).rglob("*") if p not in claim and p.is_file())
    first = next(outputs, None)
    if first is None:
        return  # claimed, but nothing finished there yet: nothing to lose

    def finished() -> str:  # counted only for a refusal: planning a big run walks no tree
        return f"{1 + sum(1 for _ in outputs)} files, e.g. {first.relative_to(run_dir)}"
    override = ("or, to plan this config over them (replacing what it changes), set replace_results: true "
                "(e.g. --config replace_results=true)")
    if not path.exists():
        # No claim: only what a run of some config made is evidence of one, not the checkpoints
        # and staged data a user puts there by hand before the first run (weights/, staged/).
        made = [p for p in Path(run_dir).rglob("*") if p.relative_to(run_dir).parts[0] not in INPUT_DIRS
                and p not in claim and p.is_file()]
        if claimed and made:
            found = f"{len(made)} files, e.g. {made[0].relative_to(run_dir)}"
            _check_unclaimed_outputs(Path(run_dir), result, sources, found, override)
        return
    try:
        record = json.loads(path.read_text())
        recorded = record["result_config"]
        if not isinstance(recorded, dict):
            raise TypeError(f"result_config is a {type(recorded).__name__}")
    except (OSError, ValueError, KeyError, TypeError) as error:
        why = {KeyError: f"no key {error}", json.JSONDecodeError: f"not JSON: {error}"}.get(type(error), str(error))
        raise ConfigError(
            "run",
            f"{path}, the claim of the finished outputs in {run_dir}/ ({finished()}), cannot be read "
            f"({why}: truncated, emptied or written by hand), so planning cannot tell whether this plan ({sources}) "
            "would replace them",
            f"put the claim back (from a backup or a copy of the run); or, if these outputs are this config's, delete "
            f"{path}: planning then checks them against the config hash their tables record; {override}",
        ) from None
    differences = claim_differences(recorded, result)
    if not differences:
        return
    shown = "; ".join(f"{key}: {json.dumps(old, default=str)[:80]} there, {json.dumps(new, default=str)[:80]} now"
                      for key, old, new in differences[:6])
    more = f" (and {len(differences) - 6} more)" if len(differences) > 6 else ""
    run = result.get("run") or Path(run_dir).name
    raise ConfigError(
        "run",
        f"{run_dir}/ holds the finished outputs of run {run!r} made by {record.get('sources') or 'another config'} "
        f"(recorded in {path}), and this plan ({sources}) would change what they mean: {shown}{more}; planning "
        "would replace that run's samples, caches and tables",
        "give this config another `run:` (a directory of its own), or, to replace the old results, set "
        "replace_results: true (e.g. --config replace_results=true)",
    )


def recorded_config_hashes(run_dir) -> dict[str, list[str]]:
    """config hash -> the tables of `run_dir` (results/<run>/tables/*.csv) whose provenance
    column `config_sha256` (lmsat.products.table_files.with_provenance) records it; read from each table's
    header and first row only (planning stays cheap)."""
    import csv

    found: dict[str, list[str]] = {}
    for table in sorted((Path(run_dir) / "tables").glob("*.csv")):
        try:
            with open(table, newline="") as handle:
                rows = csv.reader(handle)
                header, first = next(rows), next(rows)
            value = first[header.index("config_sha256")]
        except (OSError, StopIteration, ValueError, IndexError, UnicodeDecodeError, csv.Error):
            continue  # no rows, no provenance, or unreadable: no evidence either way
        found.setdefault(value, []).append(table.name)
    return found


def _check_unclaimed_outputs(run_dir: Path, result: dict, sources: str, finished: str, override: str) -> None:
    """A run directory with finished outputs and no claim (deleted, or from before claims):
    a pass only when its tables record this plan's config hash, and no other."""
    ours = config_sha256(result)
    made_by = recorded_config_hashes(run_dir)
    if set(made_by) == {ours}:
        return  # this config's outputs: the run's start writes the claim again
    if made_by:
        others = "; ".join(f"{h[:12]} in {', '.join(tables[:3])}{', ...' if len(tables) > 3 else ''}"
                           for h, tables in sorted(made_by.items()) if h != ours)
        evidence = f"its tables record another config (config_sha256 {others}; this plan's is {ours[:12]})"
    else:
        evidence = "no table there records the config hash that made it"
    raise ConfigError(
        "run",
        f"{run_dir}/ holds finished outputs ({finished}) but no claim "
        f"({run_dir / RUN_CLAIM} is missing), and {evidence}, so this plan ({sources}) could replace another "
        "config's samples, caches and tables",
        f"put {run_dir / RUN_CLAIM} back (from a backup or a copy of the run); or give this config another `run:` "
        f"(a directory of its own); {override}",
    )


def write_run_claim(run_dir, result: dict, sources: str) -> None:
    """Record `result` (the plan's result config) as the config of `run_dir`'s outputs."""
    path = Path(run_dir) / RUN_CLAIM
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"sources": sources, "config_sha256": config_sha256(result), "result_config": result},
                              indent=1, sort_keys=True, default=str))
    tmp.replace(path)
