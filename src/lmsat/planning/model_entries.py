"""Each model of a validated config as a ModelEntry: its source, its revisions (listed, generated
from a schedule, pinned to commits, or discovered) and steps, its weight files; models by size."""

from __future__ import annotations

import os
import re
from pathlib import Path

from lmsat.checkpoints import pins, trainer_runs
from lmsat.checkpoints.loading import check_context
from lmsat.checkpoints.loading import context_length as context_length  # lmsat init reads a checkpoint's context
from lmsat.core import schedules
from lmsat.core.names import PATH_NAME_PATTERN as PATH_NAME_PATTERN  # the schema's pattern of names
from lmsat.core.names import check_path_name, checkpoint_path
from lmsat.core.plan import ModelEntry
from lmsat.errors import ConfigError, ModelLoadError

TOY_ORG = "lmsat-toy"
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json")
PICKLE_FILES = ("pytorch_model.bin", "pytorch_model.bin.index.json")


def file_kind(path) -> str:
    """What is at `path`, in words ("a regular file", "a directory", "a FIFO", "a character
    device", "missing", ...), so a wrong corpus file is not reported as missing."""
    import stat

    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "missing (it does not exist)"
    except OSError as error:
        return f"unreadable ({error.strerror})"
    kinds = [
        (stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
    ]
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def _check_revision_spec(spec: dict, key: str) -> None:
    """The parts of a revisions spec that would fail as raw Python errors while planning."""
    if spec["subsample"] == 1:
        raise ConfigError(
            f"{key}.subsample", "1 cannot be honoured: the first and last revisions are always kept",
            "use 0 (all revisions) or at least 2",
        )
    if spec["pins"] and (spec["schedule"] != "list" or spec["discover"]):
        raise ConfigError(f"{key}.pins", f"set together with {'discover' if spec['discover'] else 'a schedule'}: "
                          "a pins file lists the revisions itself", "keep one of them")
    if spec["pins"] and spec["steps"]:
        raise ConfigError(f"{key}.steps", "set together with `pins`, whose rows give each revision's step",
                          "remove steps (a `list` beside pins keeps the pinned revisions it names)")
    if spec["branch"] and not spec["pins"]:
        raise ConfigError(f"{key}.branch", "names the branch whose commits are pinned, but no `pins` file is set",
                          "set pins: (e.g. config/pins/{model}.csv) and write it with python -m lmsat pin-revisions")
    if spec["schedule"] != "list" or spec["pins"]:
        try:
            schedules.render_revision(spec["template"], 0, 1)
        except (KeyError, IndexError, ValueError, AttributeError) as error:
            raise ConfigError(
                f"{key}.template", f"{spec['template']!r} cannot be formatted ({type(error).__name__}: {error})",
                "use only the fields {step} and {tokens_b}, with braces balanced",
            ) from None
    elif not spec["steps"]:
        try:
            groups = re.compile(spec["step_regex"]).groups
        except re.error as error:
            raise ConfigError(f"{key}.step_regex", f"{spec['step_regex']!r} is not a regular expression ({error})",
                              "fix the expression, e.g. 'step[-_]?(\\d+)'") from None
        if groups < 1:
            raise ConfigError(f"{key}.step_regex", f"{spec['step_regex']!r} has no group",
                              "put the training step's digits in the first group, e.g. 'ckpt_(\\d+)'")


def planned_around(models: dict) -> list[str]:
    """A note per hub revision the plan leaves out because it holds no weights upstream
    (lmsat.core.schedules.missing_weights: a generated schedule plans around it; a list naming it
    was refused), so that `lmsat plan` and the planning log say why a step is absent."""
    notes = []
    for name, model in models.items():
        if model.source != "hub":
            continue
        for revision, issue in schedules.missing_weights(model.id).items():
            if revision not in model.revisions:
                notes.append(f"model {name} ({model.id}): revision {revision} holds no weights upstream ({issue}); "
                             "the plan leaves it out")
    return notes


def _pinned(spec: dict, suite: dict, spec_key: str, pinned: tuple[str, str] | None) -> dict[str, tuple[int, str]]:
    """revision name -> (step, commit) of a spec's pins file (lmsat.checkpoints.pins) for `pinned`, the
    (model name, hub id) it is read for; a `list` beside it keeps the revisions it names."""
    if pinned is None:
        raise ConfigError(f"{spec_key}.pins", "pins are commits of a hub repository", "use them on hub models only")
    name, model_id = pinned
    table = {}
    for pin in pins.read_pins(pins.pins_path(spec, name), model_id, f"{spec_key}.pins"):
        revision = schedules.render_revision(spec["template"], pin.step, suite["tokens_per_step"])
        check_path_name(f"{spec_key}.template", revision, "revision name")
        table[revision] = (pin.step, pin.commit)
    if spec["list"]:
        unpinned = [r for r in spec["list"] if r not in table]
        if unpinned:
            raise ConfigError(f"{spec_key}.list", f"revisions {unpinned} of model {name} are not in its pins file "
                              f"{pins.pins_path(spec, name)}", f"list pinned ones (e.g. {next(iter(table))}) or pin them anew")
        table = {r: table[r] for r in spec["list"]}
    return table


def expand_revisions(spec: dict, suite: dict, config: dict, spec_key: str, missing: dict[str, str] | None = None,
               pinned: tuple[str, str] | None = None):
    """(revisions, steps) of a revisions spec, in training order and subsampled. `missing`
    (revision -> the issue reporting it, lmsat.core.schedules.missing_weights): revisions without
    weights upstream, left out of a generated schedule before subsampling; an explicit list
    naming one is refused. `pinned`: the (model name, hub id) whose pins file a spec with
    `pins` reads."""
    _check_revision_spec(spec, spec_key)
    missing = missing or {}
    schedule = spec["schedule"]
    if spec["pins"]:
        table = _pinned(spec, suite, spec_key, pinned)
        names, steps = list(table), [step for step, _ in table.values()]
    elif schedule == "pythia":
        steps = schedules.pythia_steps()
    elif schedule == "toy":
        steps = schedules.toy_steps(config["toy"]["max_steps"], base=config["toy"]["log_base"])
    else:
        steps = None
    if steps is not None:
        names = [schedules.render_revision(spec["template"], s, suite["tokens_per_step"]) for s in steps]
        for name in names:
            check_path_name(f"{spec_key}.template", name, "revision name")
        kept = [i for i, name in enumerate(names) if name not in missing]  # planned around
        names, steps = [names[i] for i in kept], [steps[i] for i in kept]
    else:
        names = list(spec["list"])
        if not names:
            raise ConfigError(f"{spec_key}.list", "no revisions", "list revision names or set `schedule`")
        for i, name in enumerate(names):
            check_path_name(f"{spec_key}.list[{i}]", name, "revision name")
            if name in missing:
                raise ConfigError(
                    f"{spec_key}.list[{i}]", f"revision {name!r} has no weights upstream ({missing[name]})",
                    "remove it from the list (a `schedule` leaves such revisions out by itself)",
                )
        if spec["steps"]:  # names without a step in them, e.g. `main`
            if len(spec["steps"]) != len(names):
                raise ConfigError(
                    f"{spec_key}.steps",
                    f"{len(spec['steps'])} steps for {len(names)} revisions",
                    "give one step per revision of `list`, in the same order",
                )
            steps = list(spec["steps"])
        else:
            try:
                steps = [schedules.parse_step(name, spec["step_regex"]) for name in names]
            except ValueError as error:
                suggestion = _step_regex_suggestion(names, spec["step_regex"])
                raise ConfigError(
                    f"{spec_key}.step_regex", str(error),
                    (f"set step_regex: '{suggestion}', or " if suggestion else "")
                    + "make its first group match the training step's digits, or list the steps in `steps`",
                ) from None
    if len(set(names)) != len(names):
        raise ConfigError(spec_key, "duplicate revision names", "list each revision once")
    order = sorted(range(len(names)), key=lambda i: steps[i])
    pairs = schedules.log_subsample([(names[i], steps[i]) for i in order], spec["subsample"], key=lambda p: p[1])
    return tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)


def _step_regex_suggestion(names: list[str], step_regex: str) -> str:
    """A step_regex for the first of `names` that `step_regex` does not read (or '')."""
    for name in names:
        try:
            schedules.parse_step(name, step_regex)
        except ValueError:
            return trainer_runs.suggest_step_regex(name)
    return ""


def _check_local_weights(directory: Path, allow_pickle: bool, key: str) -> None:
    if trainer_runs.layout(directory) not in (None, "transformers"):  # another trainer's saved step: read at load
        return
    if not directory.is_dir():
        raise ConfigError(key, f"local model directory {directory} does not exist", "fix the path or build it first")
    if not (directory / "config.json").is_file():
        raise ConfigError(key, f"{directory} has no config.json", "point to a save_pretrained directory")
    accepted = WEIGHT_FILES + (PICKLE_FILES if allow_pickle else ())
    if not any((directory / name).is_file() for name in accepted):
        pickles = any((directory / name).is_file() for name in PICKLE_FILES)
        fix = "set allow_pickle: true for this model if you trust it" if pickles else "save weights with save_pretrained"
        raise ConfigError(key, f"{directory} has no {' or '.join(accepted)}", fix)


def model_entries(config: dict) -> dict[str, ModelEntry]:
    models: dict[str, ModelEntry] = {}
    for suite_name, suite in config["suites"].items():
        check_path_name(f"suites.{suite_name}", suite_name, "suite name")
        for index, model in enumerate(suite["models"]):
            key = f"suites.{suite_name}.models[{index}]"
            name = check_path_name(f"{key}.name", model["name"], "model name")
            if name in models:
                raise ConfigError(f"{key}.name", f"model name {name!r} is used twice", "give every model a unique name")
            tokenizer = model["tokenizer"] or suite["tokenizer"]
            if tokenizer not in config["tokenizers"]:
                raise ConfigError(
                    f"{key}.tokenizer",
                    f"tokenizer {tokenizer!r} is not defined",
                    f"add it under `tokenizers` (defined: {', '.join(config['tokenizers']) or 'none'})",
                )
            source = model["source"]
            model_id = model["id"]
            if source == "toy":
                model_id = f"{TOY_ORG}/{name}"
            elif source == "hub" and not model_id:
                if not suite["hub_org"]:
                    raise ConfigError(f"{key}.id", "no hub id", "set `id` or the suite's `hub_org`")
                model_id = f"{suite['hub_org']}/{name}"
            elif source == "local" and not model_id:
                raise ConfigError(f"{key}.id", "a local model needs its directory", "set `id` to the directory")
            if model.get("revisions"):
                spec, spec_key = model["revisions"], f"{key}.revisions"
            else:
                spec, spec_key = suite["revisions"], f"suites.{suite_name}.revisions"
            tokens_per_step = model["tokens_per_step"] or suite["tokens_per_step"]
            own = dict(suite, tokens_per_step=tokens_per_step)  # the suite as this model was trained (its names' T)
            missing = schedules.missing_weights(model_id) if source == "hub" else {}
            pinned = (name, model_id) if source == "hub" else None
            revisions, steps = expand_revisions(spec, own, config, spec_key, missing, pinned)
            commits = ()
            if spec["pins"]:  # checkpoints that are commits on a branch, not branches
                table = _pinned(spec, own, spec_key, pinned)
                commits = tuple(table[r][1] for r in revisions)
            if source == "local":
                for revision in revisions:
                    _check_local_weights(checkpoint_path(model_id, revision), model["allow_pickle"], f"{key}.id")
                first = checkpoint_path(model_id, revisions[0])
                config_json = first / "config.json" if trainer_runs.layout(first) == "transformers" else first
                try:
                    model_config = trainer_runs.read_config(first)
                except (OSError, ValueError, ModelLoadError) as error:
                    raise ConfigError(f"{key}.id", f"{config_json} is unreadable ({error})", "save the model again") from None
                check_context(config["sample"]["seq_len"], model_config, f"model {name} ({config_json})")
            elif source == "toy":  # the toy suite's models are built with a context of toy.seq_len
                check_context(
                    config["sample"]["seq_len"], {"max_position_embeddings": config["toy"]["seq_len"]},
                    f"toy model {name}, built with toy.seq_len",
                )
            models[name] = ModelEntry(
                name=name,
                suite=suite_name,
                source=source,
                id=model_id,
                hidden_size=model["hidden_size"],
                vocab_size=model["vocab_size"],
                n_params=model["n_params"],
                num_layers=model["num_layers"],
                tokenizer=tokenizer,
                tokens_per_step=tokens_per_step,
                revisions=revisions,
                steps=steps,
                allow_pickle=model["allow_pickle"],
                trust_remote_code=model["trust_remote_code"],
                # By name, not index: the entry reaches jobs as a param, so an index would make
                # inserting or reordering models rerun every later model's jobs.
                key=f"suites.{suite_name}.models[name={name}]",
                gated=suite["gated"],
                tied_head=model["tied_head"],
                commits=commits,
            )
    return models


def by_size(models: dict[str, ModelEntry]) -> dict[str, ModelEntry]:
    """`models` ordered suite by suite (in config order), smallest first within a suite:
    the order of every table's rows and every figure's panels and legends."""
    suites = list(dict.fromkeys(m.suite for m in models.values()))
    ordered = sorted(models.values(), key=lambda m: (suites.index(m.suite), m.size))
    return {m.name: m for m in ordered}
