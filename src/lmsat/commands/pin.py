"""`lmsat pin-revisions`: write the pins files a config cites (lmsat.checkpoints.pins), from the commits of
each model's branch. Run it where the hub is reachable; planning then reads the files offline.

    python -m lmsat pin-revisions --configfile config/pico.yaml
    python -m lmsat pin-revisions --configfile config/pico.yaml --models pico-decoder-tiny
    GIT_LFS_SKIP_SMUDGE=1 git clone -b pico-decoder-tiny-1 https://huggingface.co/pico-lm/pico-decoder-tiny
    python -m lmsat pin-revisions --configfile config/pico.yaml --clone pico-decoder-tiny=pico-decoder-tiny

For every hub model whose revisions spec sets `pins`, the commits of its `branch` (newest
first) whose title matches `commit_regex` are pinned, one per step, and its pins file is
written whole (a file already there is replaced: the branch is the record).
"""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path

from lmsat.checkpoints import pins
from lmsat.errors import ConfigError, FetchError

REPO = Path(__file__).resolve().parents[3]  # src/lmsat/commands/pin.py -> the repository
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--configfile", required=True, help="the config whose pins files to write")
    parser.add_argument("--models", nargs="+", default=[], metavar="MODEL", help="only these models (default: all)")
    parser.add_argument("--clone", action="append", default=[], metavar="MODEL=DIR",
                        help="read MODEL's branch from a git clone of its repository instead of the hub (repeatable)")


def pinned_models(config: dict) -> list[tuple[str, str, dict, str]]:
    """(model name, hub id, revisions spec, its config key) of every model whose spec sets `pins`."""
    found = []
    for suite_name, suite in config["suites"].items():
        if suite["source"] == "published":
            continue
        for index, model in enumerate(suite["models"]):
            own = bool(model.get("revisions"))
            spec = model["revisions"] if own else suite["revisions"]
            if not spec["pins"]:
                continue
            key = f"suites.{suite_name}.models[{index}].revisions" if own else f"suites.{suite_name}.revisions"
            if model["source"] != "hub":
                raise ConfigError(f"{key}.pins", f"model {model['name']} is a {model['source']} model",
                                  "pins are commits of a hub repository: use them on hub models only")
            model_id = model["id"] or f"{suite['hub_org']}/{model['name']}"
            found.append((model["name"], model_id, spec, key))
    return found


def clones(items: list[str]) -> dict[str, Path]:
    parsed = {}
    for item in items:
        name, sep, directory = item.partition("=")
        if not sep or not name or not directory:
            raise ConfigError("--clone", f"{item!r} is not MODEL=DIR", "e.g. --clone pico-decoder-tiny=./pico-decoder-tiny")
        parsed[name] = Path(directory)
    return parsed


def pin_model(name: str, model_id: str, spec: dict, key: str, clone: Path | None) -> tuple[Path, dict]:
    """Write `name`'s pins file; (its path, step -> (commit, title))."""
    branch = spec["branch"].format(model=name)
    if not branch:
        raise ConfigError(f"{key}.branch", f"model {model_id} has pins but no branch to list", 'set it, e.g. branch: "{model}-1"')
    if clone is not None:
        commits, where = pins.clone_commits(clone, branch), f"git clone {clone}"
    else:
        try:
            commits, where = pins.hub_commits(model_id, branch), "the hub (huggingface_hub list_repo_commits)"
        except Exception as error:  # offline, unknown repository or branch: the hub's own words
            raise FetchError(f"cannot list the commits of branch {branch} of {model_id}: {type(error).__name__}: "
                             f"{error}. Fix: check {key}.branch and the network, or read a git clone with "
                             f"--clone {name}=DIR") from error
    found = pins.steps_of_commits(commits, spec["commit_regex"])
    if not found:
        titles = "; ".join(title for _, title in commits[:3]) or "none"
        raise ConfigError(f"{key}.commit_regex", f"no commit of branch {branch} of {model_id} ({len(commits)} commits; "
                          f"newest titles: {titles}) matches {spec['commit_regex']!r}",
                          "set commit_regex to the title of the commits that upload a checkpoint, step in its first group")
    today = datetime.date.today().isoformat()
    provenance = (f"branch {branch}, commits titled {spec['commit_regex']!r} (newest per step), read from {where} "
                  f"on {today}")
    path = pins.pins_path(spec, name)
    pins.write_pins(path, model_id, found, provenance)
    return path, found


def run(args: argparse.Namespace) -> int:
    from lmsat.planning.config_files import load_yaml, validate_config

    config = validate_config(load_yaml(args.configfile), load_yaml(SCHEMA))
    models = pinned_models(config)
    unknown = [m for m in args.models if m not in {name for name, *_ in models}]
    if unknown or not models:
        raise ConfigError("--models" if models else "suites", f"{args.configfile} has no model with pins named "
                          f"{unknown or 'at all'}", f"pin one of: {', '.join(n for n, *_ in models) or 'none'}")
    from_clones = clones(args.clone)
    for name, model_id, spec, key in models:
        if args.models and name not in args.models:
            continue
        with pins.relative_to(Path(args.configfile).resolve().parent):  # where planning reads it
            path, found = pin_model(name, model_id, spec, key, from_clones.get(name))
        steps = list(found)
        print(f"{name}: {len(found)} commits pinned in {path} (steps {steps[0]} .. {steps[-1]})")
    return 0
