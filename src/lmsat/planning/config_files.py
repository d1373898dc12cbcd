"""Config files read strictly and validated against the schema: a key given twice, a file that is no
config, a value of the wrong type are ConfigFileError/ConfigError naming file, key and fix;
defaults filled; the result config and its hash (what a run's outputs depend on)."""

from __future__ import annotations

import copy
import hashlib
import json
import re
from pathlib import Path

import jsonschema
import yaml

from lmsat.checkpoints.loading import context_length as context_length  # lmsat init reads a checkpoint's context
from lmsat.core.names import PATH_NAME_PATTERN as PATH_NAME_PATTERN  # the schema's pattern of names
from lmsat.errors import ConfigError, ConfigFileError


def operational_keys(schema: dict, prefix: tuple = ()) -> list[tuple[str, ...]]:
    """Config keys the schema marks `operational: true`: they choose how a job runs
    (resources, threads, device, retries), never what it computes. They stay out of job
    params and of config_sha256, so raising `mem_mb` after an OOM reruns nothing."""
    keys = []
    for name, sub in schema.get("properties", {}).items():
        if sub.get("operational"):
            keys.append(prefix + (name,))
        else:
            keys += operational_keys(sub, prefix + (name,))
    return keys


def result_config(config: dict, schema: dict) -> dict:
    """`config` without its operational keys: what shapes the results."""
    config = copy.deepcopy(config)
    for key in operational_keys(schema):
        section = config
        for part in key[:-1]:
            section = section.get(part, {})
        section.pop(key[-1], None)
    return config


def config_sha256(config: dict) -> str:
    """SHA-256 of a validated config (defaults filled; pass `result_config(...)` so that
    operational settings do not change it), independent of key order."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()


def config_sources(paths, overrides: dict | None = None) -> str:
    """The config files a plan read, in words: each relative to the working directory when
    under it (nothing under results/ holds an absolute path into the run), and the
    --config overrides."""
    here = Path.cwd().resolve()
    shown = []
    for path in paths:
        resolved = Path(path).resolve()
        shown.append(str(resolved.relative_to(here)) if resolved.is_relative_to(here) else str(path))
    text = ", ".join(shown) or "no config file"
    return text + (f" with --config {json.dumps(overrides, sort_keys=True, default=str)}" if overrides else "")


def _refuse_duplicate_keys(node: yaml.Node, source: str, key: str = "") -> None:
    """ConfigError at the first key given twice in one mapping of a composed YAML document
    (PyYAML would keep the last one silently); `source`: its file; `key`: the dotted key of `node`."""
    if isinstance(node, yaml.MappingNode):
        seen: dict = {}
        for key_node, value_node in node.value:
            name = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key_node)
            full = f"{key}.{name}" if key else name
            line = key_node.start_mark.line + 1
            if name in seen:
                raise ConfigError(
                    full,
                    f"given twice in {source}, lines {seen[name]} and {line} (the last would silently win)",
                    "keep one of them",
                )
            seen[name] = line
            _refuse_duplicate_keys(value_node, source, full)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _refuse_duplicate_keys(item, source, f"{key}[{i}]")


NOT_A_CONFIG_FIX = "give a YAML config file (such as config/config.yaml or one `lmsat init` wrote)"


def load_yaml(path: str | Path) -> dict:
    """A YAML (or JSON) config file. ConfigFileError naming the file when it is no config at all
    (binary, as a checkpoint's weights or an HDF5 cache; not YAML; a list or a string, as a
    CSV table reads), ConfigError naming file, key and lines for a duplicate key."""
    data = Path(path).read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigFileError(path, f"a binary file, not a YAML config (byte {error.start} is not UTF-8 text)",
                              NOT_A_CONFIG_FIX) from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        if node is not None:
            _refuse_duplicate_keys(node, str(path))
        value = yaml.safe_load(text)
    except yaml.YAMLError as error:
        where = getattr(error, "problem_mark", None)
        line = f" (line {where.line + 1}, column {where.column + 1})" if where is not None else ""
        raise ConfigFileError(path, f"not valid YAML{line}: {getattr(error, 'problem', None) or error}",
                              "correct the YAML there (indent with spaces, never tabs), or " + NOT_A_CONFIG_FIX) from None
    if value is None:
        return {}
    if not isinstance(value, dict):
        shown = text.strip().splitlines()[0][:60] if text.strip() else ""
        raise ConfigFileError(path, f"holds a YAML {type(value).__name__} ({shown!r}), not a mapping of config keys",
                              NOT_A_CONFIG_FIX)
    return value


def read_config_files(paths, schema: dict | None, targets: bool = True) -> dict[str, dict]:
    """path -> its config, for every config file of a plan (load_yaml's checks). A mapping none
    of whose keys is a config key (the schema's top-level ones), as a run's JSON record, is
    refused as no config too. With `targets` (the files came from Snakemake's command line),
    each refusal also says how to write a target: --configfile takes every argument after it,
    so `snakemake --configfile mine.yaml results/x` reads the target as a config file.
    `schema` None: no key check (lmsat as a `module`: the deploying workflow's own config files)."""
    here = Path.cwd().resolve()

    def shown(path: str) -> str:  # as the user wrote it, mostly (Snakemake makes the paths absolute)
        resolved = Path(path).resolve()
        return str(resolved.relative_to(here)) if resolved.is_relative_to(here) else path

    keys = set(schema.get("properties", {})) if schema is not None else None
    read, errors = {}, {}
    for path in map(str, paths):
        try:
            config = load_yaml(path)
        except ConfigFileError as error:
            errors[path] = error
            continue
        if keys is not None and config and not keys & set(config):
            errors[path] = ConfigFileError(
                shown(path), f"none of its keys ({', '.join(sorted(map(str, config))[:5])}) is a config key "
                f"({', '.join(sorted(keys)[:6])}, ...): it is no config", NOT_A_CONFIG_FIX)
            continue
        read[path] = config
    for path, error in errors.items():
        if not targets:
            raise error
        config = shown(next(iter(read), "config/mine.yaml"))
        raise ConfigFileError(
            shown(path), error.problem,
            f"if {shown(path)} is a target, write `--` before the targets: Snakemake's --configfile takes every "
            f"argument after it as a config file (snakemake --configfile {config} -- {shown(path)}); else "
            + NOT_A_CONFIG_FIX,
        ) from None
    return read


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
