"""Slices of a plan (`select`: some models, revisions or sections) and the run directory each
writes under, and the run named after its config file."""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path

from lmsat.checkpoints.loading import context_length as context_length  # lmsat init reads a checkpoint's context
from lmsat.core import schedules
from lmsat.core.names import PATH_NAME_PATTERN as PATH_NAME_PATTERN  # the schema's pattern of names
from lmsat.core.names import check_path_name
from lmsat.errors import ConfigError
from lmsat.planning.model_entries import expand_revisions


def run_of_config_file(path, default_config) -> str:
    """The run a config file names when it sets no `run:`: its stem (config/pythia.yaml ->
    pythia), except the workflow's own default config (`default_config`), whose run is
    `default`. Shipped configs set no `run:`, so an edited copy under another name writes
    under a directory of its own, never over the run it was copied from."""
    if Path(path).resolve() == Path(default_config).resolve():
        return "default"
    return Path(path).stem


def slice_run(run: str, chosen: dict) -> str:
    """The run directory of a slice of `run`: `<run>-<8 hex digits>`, a hash of the
    selection. A slice's tables, figures and toy models differ from the full run's (fewer
    rows, other settings beside `select` on the command line), so it gets a directory of
    its own instead of overwriting the full run's; the same selection finds its directory
    again and resumes there."""
    digest = hashlib.sha256(json.dumps(chosen, sort_keys=True).encode()).hexdigest()[:8]
    return check_path_name("run", f"{run}-{digest}", "run name")


def select(config: dict) -> dict:
    """`config` cut to `select.models` and `select.revisions` (validated, defaults filled):
    suites keep the selected models (a suite left with none is dropped), each model's
    revisions become the selected ones it has (as an explicit list), and bottleneck.models
    and evaluation.models keep the selected models."""
    chosen = config["select"]
    if not chosen["models"] and not chosen["revisions"]:
        return config
    config = copy.deepcopy(config)
    names = [m["name"] for suite in config["suites"].values() for m in suite["models"]]
    for i, name in enumerate(chosen["models"]):
        if name not in names:
            raise ConfigError(f"select.models[{i}]", f"unknown model {name!r}", f"use one of: {', '.join(names)}")
    keep = set(chosen["models"] or names)
    for suite_name in list(config["suites"]):
        suite = config["suites"][suite_name]
        suite["models"] = [m for m in suite["models"] if m["name"] in keep]
        if not suite["models"]:
            del config["suites"][suite_name]
    for section in ("bottleneck", "evaluation"):
        listed = config[section]["models"]
        config[section]["models"] = [m for m in listed if m in keep]
        if section == "evaluation" and listed and not config[section]["models"]:
            config[section]["tasks"] = []  # the listed models are not selected: no Table 1
    if chosen["revisions"]:
        found = set()
        for suite_name, suite in config["suites"].items():
            for model in suite["models"]:
                key = f"suites.{suite_name}.models[name={model['name']}]"
                spec = model.get("revisions") or suite["revisions"]
                missing, pinned = {}, None
                if model.get("source", "hub") == "hub":
                    model_id = model.get("id") or f"{suite.get('hub_org')}/{model['name']}"
                    missing, pinned = schedules.missing_weights(model_id), (model["name"], model_id)
                own = dict(suite, tokens_per_step=model.get("tokens_per_step") or suite["tokens_per_step"])
                revisions, steps = expand_revisions(spec, own, config, f"{key}.revisions", missing, pinned)
                kept = [(r, s) for r, s in zip(revisions, steps) if r in chosen["revisions"]]
                if not kept:
                    raise ConfigError(
                        "select.revisions", f"model {model['name']} has none of {chosen['revisions']}",
                        f"pick revisions it has (e.g. {revisions[0]}, {revisions[-1]}) or deselect it in select.models",
                    )
                found.update(r for r, _ in kept)
                model["revisions"] = dict(spec, schedule="list", list=[r for r, _ in kept], subsample=0,
                                          steps=[] if spec["pins"] else [s for _, s in kept])  # pins give the steps
        missing = [r for r in chosen["revisions"] if r not in found]
        if missing:
            raise ConfigError("select.revisions", f"no selected model has revisions {missing}", "check their names")
    return config
