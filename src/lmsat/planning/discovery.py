"""Local training runs found on disk: the offline defaults of a config, the revisions a run folder
holds (`revisions: {discover: ...}`), the architecture read from their config.json."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

from lmsat.checkpoints import trainer_runs
from lmsat.checkpoints.loading import context_length as context_length  # lmsat init reads a checkpoint's context
from lmsat.core.names import PATH_NAME_PATTERN as PATH_NAME_PATTERN  # the schema's pattern of names
from lmsat.core.names import checkpoint_path
from lmsat.errors import ConfigError
from lmsat.planning.model_entries import expand_revisions

# ---------------------------------------------------------------- your own training run
# A local run folder (`source: local`, `id: <folder>`) is read at planning: its checkpoints
# are discovered (`revisions: {discover: "checkpoint-*"}`), and width, depth, vocabulary and
# tied head come from their config.json (given values are checked against it). Honest
# defaults for a plan without hub or toy models keep it offline (lmsat.checkpoints.trainer_runs; lmsat init).

ARCHITECTURE_KEYS = ("hidden_size", "num_layers", "vocab_size", "tied_head")


def offline_defaults(config: dict) -> dict:
    """`config` (as given, before validation) with the defaults that only make sense for hub
    or toy models turned off where the suites have none of them: the paper's lm-eval tasks
    (their datasets are on the hub) and the toy language's ground-truth check. A value the
    config gives is kept."""
    suites = config.get("suites") if isinstance(config, dict) else None
    if not isinstance(suites, dict):
        return config  # validation reports it
    sources = {
        model.get("source", "hub")
        for suite in suites.values()
        if isinstance(suite, dict) and suite.get("source") != "published"
        for model in (suite.get("models") or [])
        if isinstance(model, dict)
    }
    published = any(isinstance(s, dict) and s.get("source") == "published" for s in suites.values())
    if not sources and not published:
        return config
    config = copy.deepcopy(config)
    if "hub" not in sources and "tasks" not in (config.get("evaluation") or {}):
        config["evaluation"] = {**(config.get("evaluation") or {}), "tasks": []}
    if "toy" not in sources:
        ngrams = dict(config.get("ngrams") or {})
        truth = dict(ngrams.get("ground_truth") or {})
        if "sample_sizes" not in truth:
            config["ngrams"] = {**ngrams, "ground_truth": {**truth, "sample_sizes": []}}
    return config


def resolve_local_runs(config: dict) -> dict:
    """`config` (validated) with every local model's discovered revisions listed and its
    architecture filled from the checkpoints' config.json (or checked against it); a hub or
    toy model must state its hidden size. ConfigError naming the key and the fix."""
    config = copy.deepcopy(config)
    for suite_name, suite in config["suites"].items():
        for index, model in enumerate(suite["models"]):
            key = f"suites.{suite_name}.models[{index}]"
            if model.get("revisions"):
                spec, spec_key = model["revisions"], f"{key}.revisions"
            else:
                spec, spec_key = suite["revisions"], f"suites.{suite_name}.revisions"
            if model["source"] != "local":
                if spec["discover"]:
                    raise ConfigError(
                        f"{spec_key}.discover", f"model {model['name']} is a {model['source']} model; discover "
                        "finds checkpoint directories in a local run folder",
                        "set the model's source: local and id: its run folder, or list its revisions in `list`",
                    )
                if not model["hidden_size"]:
                    raise ConfigError(
                        f"{key}.hidden_size", f"{model['source']} model {model['name']} has no hidden size",
                        "set it (config.json's hidden_size); only a local model's is read at planning",
                    )
                continue
            if spec["discover"]:
                model["revisions"] = _discovered(spec, spec_key, model, key)
                spec, spec_key = model["revisions"], f"{key}.revisions"
            revisions, _ = expand_revisions(spec, suite, config, spec_key)
            _fill_architecture(model, key, [checkpoint_path(model["id"], r) for r in revisions])
    return config


def steps_per_epoch(models) -> dict[str, float]:
    """model -> optimizer steps per epoch of its training data, for each local model whose
    checkpoints' trainer_state.json records it (lmsat.checkpoints.trainer_runs.steps_per_epoch;
    the latest checkpoint that does): past one epoch the data repeat, and a held-out loss that
    climbs is then likely overfitting (lmsat.products.saturation_tables.implausible_notes).
    models: the plan's entries (lmsat.core.plan.ModelEntry)."""
    found = {}
    for name, entry in models.items():
        if entry.source != "local":
            continue
        for revision in sorted(entry.revisions, key=entry.step, reverse=True):
            value = trainer_runs.steps_per_epoch(Path(entry.id) / revision)
            if value:
                found[name] = value
                break
    return found


def _discovered(spec: dict, spec_key: str, model: dict, key: str) -> dict:
    """The model's revisions spec with the checkpoints `discover` finds as its explicit list."""
    pattern, folder = spec["discover"], Path(model["id"])
    if spec["list"] or spec["schedule"] != "list":
        raise ConfigError(f"{spec_key}.discover", "set together with `list` or a `schedule`", "keep one of them")
    if not folder.is_dir():
        raise ConfigError(f"{key}.id", f"run folder {folder!s} does not exist (discover: {pattern!r})",
                          "set the model's id to the folder that holds its checkpoint directories")
    try:
        re.compile(spec["step_regex"])
    except re.error as error:
        raise ConfigError(f"{spec_key}.step_regex", f"{spec['step_regex']!r} is not a regular expression ({error})",
                          f"use the default {trainer_runs.DEFAULT_STEP_REGEX!r}") from None
    found = trainer_runs.discover(folder, pattern, spec["step_regex"], model["allow_pickle"])
    if found.unparsed:
        suggestion = trainer_runs.suggest_step_regex(found.unparsed[0])
        raise ConfigError(
            f"{spec_key}.step_regex", f"{spec['step_regex']!r} reads no training step from {', '.join(found.unparsed[:3])} "
            f"(found by discover: {pattern!r} in {folder})",
            f"set step_regex: '{suggestion}' (its first group is the step)" if suggestion else "list the steps in `steps`",
        )
    mixed = trainer_runs.mixed_layouts(found)
    if mixed:  # two trainers' formats in one folder: which one is the run is the user's to say
        listed = "; ".join(f"{kind}: {', '.join(names[:3])}" for kind, names in sorted(mixed.items()))
        raise ConfigError(f"{spec_key}.discover", f"{pattern!r} finds the saved steps of {len(mixed)} formats in {folder} "
                          f"({listed})", "move each format's checkpoints into a run folder of its own (one model each)")
    if not found.revisions:
        others = sorted(p.name for p in folder.iterdir() if trainer_runs.is_checkpoint(p, model["allow_pickle"]))
        seen = f"; checkpoint directories there: {', '.join(others[:5])}" if others else "; it holds no checkpoint directory"
        if found.incomplete:
            seen += f"; matched but without config.json and safetensors weights (yet): {', '.join(found.incomplete[:5])}"
        glob = next((g for g in trainer_runs.TRAINER_GLOBS if others and any(Path(o).match(g) for o in others)), "")
        raise ConfigError(
            f"{spec_key}.discover", f"{pattern!r} matches no checkpoint in {folder}{seen}",
            f"use discover: '{glob}'" if glob else "point the model's id at the folder that holds the checkpoint directories",
        )
    conflicts = trainer_runs.step_conflicts(folder, found.revisions)
    if conflicts:  # a renamed or copied checkpoint: its losses would be drawn at the wrong step
        name, step, recorded = conflicts[0]
        raise ConfigError(
            f"{spec_key}.discover", f"{folder / name} is step {step} by its name (step_regex {spec['step_regex']!r}), but "
            f"its trainer_state.json says global_step {recorded}" + (f" ({len(conflicts)} such checkpoints)" if len(conflicts) > 1 else ""),
            "rename the folder after its global_step if the trainer state is right; if the name is right, put that "
            "checkpoint's own trainer_state.json there (or remove the copied one)",
        )
    return dict(spec, discover="", list=[name for name, _ in found.revisions], steps=[step for _, step in found.revisions])


def _fill_architecture(model: dict, key: str, directories: list[Path]) -> None:
    """Fill `model`'s hidden_size, num_layers, vocab_size and tied_head from its checkpoints'
    config.json, or check the values it gives; every checkpoint must state the same ones."""
    from lmsat.errors import ModelLoadError

    stated: dict = {}
    for directory in directories:
        path = directory / "config.json"
        if trainer_runs.layout(directory) not in (None, "transformers"):  # another trainer's saved step
            path = directory
            try:
                found = trainer_runs.architecture(trainer_runs.read_config(directory))
            except ModelLoadError as error:  # its architecture file missing, or not converted: named there
                raise ConfigError(f"{key}.id", str(error), "see the message") from None
        elif not path.is_file():
            continue  # models reports the missing file
        else:
            try:
                found = trainer_runs.architecture(json.loads(path.read_text()))
            except ValueError as error:
                raise ConfigError(f"{key}.id", f"{path} is unreadable ({error})", "save the checkpoint again") from None
        for field, value in found.items():
            if field in stated and stated[field][0] != value:
                raise ConfigError(
                    f"{key}.id", f"{stated[field][1]} states {field}={stated[field][0]} but {path} states {value}",
                    "a model's revisions are checkpoints of one model: give the other run a model entry of its own",
                )
            stated.setdefault(field, (value, path))
    for field in ARCHITECTURE_KEYS:
        if field not in stated:
            continue
        value, path = stated[field]
        given = model[field]
        if given in (0, None):
            model[field] = value
        elif given != value:
            raise ConfigError(
                f"{key}.{field}", f"{field}={given} in the config, but {path} states {value}",
                f"set {field}: {value}, or leave it out to read it from config.json",
            )
    if not model["hidden_size"]:
        raise ConfigError(f"{key}.hidden_size", f"no config.json of model {model['name']} states a hidden size",
                          "set hidden_size")
