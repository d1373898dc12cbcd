"""Load and check a pipeline config up front, and expand it into models and checkpoints.

Every problem is reported before any job runs, as a ConfigError that names the config key
and says how to fix it. `workflow/rules/common.smk` calls `load_plan` once at DAG time;
nothing here touches the network.

    plan = load_plan(config, "workflow/schemas/config.schema.yaml")
    plan.models["pythia-160m"].revisions  # ('step0', 'step1', ..., 'step143000')
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

import jsonschema
import yaml

from lmsat import schedules

TOY_ORG = "lmsat-toy"
TOY_HUB_CACHE = "results/toy/hub"
TOY_TOKENIZER_DIR = "results/toy/tokenizer"
WEIGHTS_DIR = "results/weights"  # one hub cache per hub checkpoint (rule fetch_checkpoint)
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json")
PICKLE_FILES = ("pytorch_model.bin", "pytorch_model.bin.index.json")


class ConfigError(ValueError):
    """A config problem, with the offending key and the fix."""

    def __init__(self, key: str, problem: str, fix: str = ""):
        self.key = key
        message = f"config key '{key}': {problem}"
        if fix:
            message += f". Fix: {fix}"
        super().__init__(message)


@dataclass(frozen=True)
class ModelEntry:
    """One model of a suite, with its revisions resolved."""

    name: str  # short name used in paths
    suite: str  # suite it belongs to
    source: str  # hub | local | toy
    id: str  # hub id, or directory for local models
    hidden_size: int  # d, checked when the model is loaded
    vocab_size: int  # head rows incl. padding (0 = unknown)
    n_params: int  # for the scaling law (0 = count from the model)
    tokenizer: str  # key of config["tokenizers"]
    tokens_per_step: int  # training tokens per optimizer step
    revisions: tuple[str, ...]  # revision names, in training order
    steps: tuple[int, ...]  # training step of each revision
    allow_pickle: bool  # allow .bin weights
    trust_remote_code: bool  # run the repository's own code
    key: str  # config key of this model, by name (suites.s.models[name=x]), for error messages
    num_layers: int = 0  # transformer blocks, checked when loaded (0 = unknown; sizes jobs)

    def cache_dir(self, revision: str) -> str | None:
        """Hub cache holding `revision`: the toy suite's own, or the one that rule
        fetch_checkpoint fills for this hub checkpoint (None: a local directory)."""
        if self.source == "toy":
            return TOY_HUB_CACHE
        if self.source == "hub":
            return f"{WEIGHTS_DIR}/{self.name}/{revision}"
        return None

    def pretrained_source(self, revision: str, cache_dir: str | None = None) -> tuple[str, dict]:
        """(target, kwargs) for `from_pretrained(target, **kwargs)` to load `revision` offline:
        jobs never download weights (toy, local and fetched hub checkpoints are on disk).
        A local model's revision is a directory; a hub/toy model is its id at `revision` in
        its hub cache (`cache_dir` overrides it, e.g. the copy fetched for a best revision)."""
        if self.source == "local":
            return str(Path(self.id) / revision), dict(local_files_only=True)
        return self.id, dict(revision=revision, cache_dir=cache_dir or self.cache_dir(revision), local_files_only=True)

    def step(self, revision: str) -> int:
        return self.steps[self.revisions.index(revision)]

    @property
    def final_revision(self) -> str:
        return self.revisions[self.steps.index(max(self.steps))]

    @property
    def size(self) -> tuple[int, int, str]:
        """Sort key by size: non-embedding parameters (n_params when the config gives it, else
        12 L d^2 with L = num_layers, or a guessed max(6, d/64)), then d, then the name.
        Pythia's 1b and 1.4b share d = 2048 and differ by depth (16 vs 24 blocks)."""
        d = self.hidden_size
        blocks = self.n_params or int(12 * (self.num_layers or max(6, d / 64)) * d * d)
        return (blocks, d, self.name)


@dataclass(frozen=True)
class Plan:
    """The validated config (defaults filled) and the models it names."""

    config: dict
    models: dict[str, ModelEntry]

    def checkpoints(self) -> list[tuple[str, str]]:
        """Every (model, revision) pair, suite by suite, in training order."""
        return [(m.name, r) for m in self.models.values() for r in m.revisions]

    def sample_path(self, tokenizer: str) -> str:
        corpus = self.config["sample"]["corpus"]
        return f"results/samples/{corpus}/{tokenizer}.h5"


def config_sha256(config: dict) -> str:
    """SHA-256 of the validated config (defaults filled), independent of key order."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()


def load_yaml(path: str | Path) -> dict:
    with open(path) as handle:
        return yaml.safe_load(handle) or {}


def _with_defaults(validator_class):
    """A validator that fills `default` values while it validates (nested ones too)."""
    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, subschema in properties.items():
                if "default" in subschema and name not in instance:
                    instance[name] = copy.deepcopy(subschema["default"])
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": set_defaults})


def _key_of(path) -> str:
    key = ""
    for part in path:
        key += f"[{part}]" if isinstance(part, int) else (f".{part}" if key else str(part))
    return key or "<root>"


def _description(schema: dict, error: jsonschema.ValidationError) -> str:
    sub = error.schema if isinstance(error.schema, dict) else {}
    if "$ref" in sub:  # descriptions of $ref'd definitions live in $defs
        sub = schema["$defs"].get(sub["$ref"].rsplit("/", 1)[-1], sub)
    return sub.get("description", "")


_BOOLEANS = {"true": True, "false": False}


def _typed(text: str, types) -> object:
    """`text` as the first of the JSON-schema `types` it reads as; ValueError if none."""
    types = [types] if isinstance(types, str) else list(types)
    for kind in types:
        if kind == "integer" and re.fullmatch(r"[+-]?\d+", text.strip()):
            return int(text)
        if kind == "number":
            try:
                return int(text) if re.fullmatch(r"[+-]?\d+", text.strip()) else float(text)
            except ValueError:
                pass
        if kind == "boolean" and text.strip().lower() in _BOOLEANS:
            return _BOOLEANS[text.strip().lower()]
        if kind == "null" and text.strip().lower() in ("null", "none", "~"):
            return None
    raise ValueError(text)


def coerce_strings(config: dict, schema: dict) -> dict:
    """`config` with strings converted where the schema wants a number, integer or boolean.

    `snakemake --config key=VALUE` parses a nested VALUE (`select='{models: [a]}'`,
    `toy='{max_steps: 16}'`) with YAML's BaseLoader, which leaves every scalar a string, so
    `'16' is not of type 'integer'`; this gives such values their schema type. A string
    that reads as none of the wanted types is left for validation to report.
    """
    config = copy.deepcopy(config)
    validator = _with_defaults(jsonschema.Draft202012Validator)(schema)
    for _ in range(1000):  # each pass fixes at least one value
        changed = False
        for error in validator.iter_errors(copy.deepcopy(config)):
            if error.validator != "type" or not isinstance(error.instance, str):
                continue
            try:
                value = _typed(error.instance, error.validator_value)
            except ValueError:
                continue
            parent = config
            for part in list(error.path)[:-1]:
                parent = parent[part]
            if error.path:
                parent[list(error.path)[-1]] = value
                changed = True
        if not changed:
            return config
    return config


def validate_config(config: dict, schema: dict) -> dict:
    """A copy of `config` (strings of the command line typed, coerce_strings) with defaults
    filled; ConfigError on the first schema violation."""
    config = coerce_strings(config, schema)
    validator = _with_defaults(jsonschema.Draft202012Validator)(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: (len(e.path), list(map(str, e.path))))
    if errors:
        error = errors[0]
        if error.validator == "additionalProperties":
            allowed = sorted(error.schema.get("properties", {}))
            extra = re.findall(r"'([^']+)'", error.message.split("(")[-1])
            key = _key_of(list(error.path) + extra[:1])
            fix = f"remove or rename it; allowed keys here: {', '.join(allowed)}" if allowed else "remove it"
            raise ConfigError(key, "unknown key", fix)
        fix = _description(schema, error)
        raise ConfigError(_key_of(error.path), error.message, f"expected {fix}" if fix else "")
    return config


def _revisions(spec: dict, model: dict, suite: dict, config: dict, key: str):
    schedule = spec["schedule"]
    if schedule == "pythia":
        steps = schedules.pythia_steps()
    elif schedule == "toy":
        steps = schedules.toy_steps(config["toy"]["max_steps"], base=config["toy"]["log_base"])
    else:
        steps = None
    if steps is not None:
        names = [schedules.render_revision(spec["template"], s, suite["tokens_per_step"]) for s in steps]
    else:
        names = list(spec["list"])
        if not names:
            raise ConfigError(f"{key}.revisions.list", "no revisions", "list revision names or set `schedule`")
        if spec["steps"]:  # names without a step in them, e.g. `main`
            if len(spec["steps"]) != len(names):
                raise ConfigError(
                    f"{key}.revisions.steps",
                    f"{len(spec['steps'])} steps for {len(names)} revisions",
                    "give one step per revision of `list`, in the same order",
                )
            steps = list(spec["steps"])
        else:
            try:
                steps = [schedules.parse_step(name, spec["step_regex"]) for name in names]
            except ValueError as error:
                raise ConfigError(f"{key}.revisions.step_regex", f"{error}, or list their steps in `steps`") from None
    if len(set(names)) != len(names):
        raise ConfigError(f"{key}.revisions", "duplicate revision names", "list each revision once")
    order = sorted(range(len(names)), key=lambda i: steps[i])
    pairs = schedules.log_subsample([(names[i], steps[i]) for i in order], spec["subsample"], key=lambda p: p[1])
    return tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)


def _check_local_weights(directory: Path, allow_pickle: bool, key: str) -> None:
    if not directory.is_dir():
        raise ConfigError(key, f"local model directory {directory} does not exist", "fix the path or build it first")
    if not (directory / "config.json").is_file():
        raise ConfigError(key, f"{directory} has no config.json", "point to a save_pretrained directory")
    accepted = WEIGHT_FILES + (PICKLE_FILES if allow_pickle else ())
    if not any((directory / name).is_file() for name in accepted):
        pickles = any((directory / name).is_file() for name in PICKLE_FILES)
        fix = "set allow_pickle: true for this model if you trust it" if pickles else "save weights with save_pretrained"
        raise ConfigError(key, f"{directory} has no {' or '.join(accepted)}", fix)


def _models(config: dict) -> dict[str, ModelEntry]:
    models: dict[str, ModelEntry] = {}
    for suite_name, suite in config["suites"].items():
        for index, model in enumerate(suite["models"]):
            key = f"suites.{suite_name}.models[{index}]"
            name = model["name"]
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
            spec = model.get("revisions") or suite["revisions"]
            revisions, steps = _revisions(spec, model, suite, config, key)
            if source == "local":
                for revision in revisions:
                    _check_local_weights(Path(model_id) / revision, model["allow_pickle"], f"{key}.id")
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
                tokens_per_step=suite["tokens_per_step"],
                revisions=revisions,
                steps=steps,
                allow_pickle=model["allow_pickle"],
                trust_remote_code=model["trust_remote_code"],
                # By name, not index: the entry reaches jobs as a param, so an index would make
                # inserting or reordering models rerun every later model's jobs.
                key=f"suites.{suite_name}.models[name={name}]",
            )
    return models


def _check_references(config: dict, models: dict[str, ModelEntry]) -> None:
    corpus = config["sample"]["corpus"]
    if corpus not in config["corpora"]:
        raise ConfigError(
            "sample.corpus", f"corpus {corpus!r} is not defined", f"use one of: {', '.join(config['corpora']) or 'none'}"
        )
    for name, spec in config["corpora"].items():
        key = f"corpora.{name}"
        if spec["type"] == "hf" and not spec["path"]:
            raise ConfigError(f"{key}.path", "an hf corpus needs a dataset path", "set `path` (e.g. monology/pile-uncopyrighted)")
        if spec["type"] == "text_files":
            if not spec["files"]:
                raise ConfigError(f"{key}.files", "no files", "list local .txt or .jsonl files")
            for i, path in enumerate(spec["files"]):
                if not Path(path).is_file():
                    raise ConfigError(f"{key}.files[{i}]", f"{path} does not exist", "fix the path")
    for name, spec in config["tokenizers"].items():
        if spec["source"] != "toy" and not spec["id"]:
            raise ConfigError(f"tokenizers.{name}.id", "no tokenizer id", "set a hub id or a directory")
        if spec["source"] == "local" and not Path(spec["id"]).is_dir():
            raise ConfigError(f"tokenizers.{name}.id", f"directory {spec['id']} does not exist", "fix the path")
    from lmsat.metrics import METRICS  # light import: no torch

    for i, metric in enumerate(config["metrics"]):
        if metric not in METRICS:
            raise ConfigError(f"metrics[{i}]", f"unknown metric {metric!r}", f"use one of: {', '.join(METRICS)}")
    bottleneck = config["bottleneck"]
    for i, name in enumerate(bottleneck["models"]):
        if name not in models:
            raise ConfigError(f"bottleneck.models[{i}]", f"unknown model {name!r}", f"use one of: {', '.join(models)}")
        d = models[name].hidden_size
        for j, rank in enumerate(bottleneck["ranks"]):
            if rank > d:
                raise ConfigError(
                    f"bottleneck.ranks[{j}]",
                    f"rank {rank} exceeds the hidden size d={d} of model {name} ({models[name].key}.hidden_size)",
                    "use ranks r <= d; a rank-r head with r > d is no constraint",
                )


def load_plan(config: dict, schema_path: str | Path) -> Plan:
    """Validate `config` against the schema, fill defaults, check references, expand."""
    config = select(validate_config(config, load_yaml(schema_path)))
    models = _models(config)
    _check_references(config, models)
    return Plan(config=config, models=by_size(models))


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
                revisions, steps = _revisions(spec, model, suite, config, key)
                kept = [(r, s) for r, s in zip(revisions, steps) if r in chosen["revisions"]]
                if not kept:
                    raise ConfigError(
                        "select.revisions", f"model {model['name']} has none of {chosen['revisions']}",
                        f"pick revisions it has (e.g. {revisions[0]}, {revisions[-1]}) or deselect it in select.models",
                    )
                found.update(r for r, _ in kept)
                model["revisions"] = dict(spec, schedule="list", list=[r for r, _ in kept], steps=[s for _, s in kept], subsample=0)
        missing = [r for r in chosen["revisions"] if r not in found]
        if missing:
            raise ConfigError("select.revisions", f"no selected model has revisions {missing}", "check their names")
    return config


def by_size(models: dict[str, ModelEntry]) -> dict[str, ModelEntry]:
    """`models` ordered suite by suite (in config order), smallest first within a suite:
    the order of every table's rows and every figure's panels and legends."""
    suites = list(dict.fromkeys(m.suite for m in models.values()))
    ordered = sorted(models.values(), key=lambda m: (suites.index(m.suite), m.size))
    return {m.name: m for m in ordered}
