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
import os
import re
from pathlib import Path

import jsonschema
import yaml

from lmsat import pins, rundir, schedules
from lmsat.errors import ConfigError, ConfigFileError
from lmsat.models import check_context
from lmsat.models import context_length as context_length  # lmsat init reads a checkpoint's context
from lmsat.names import PATH_NAME_PATTERN as PATH_NAME_PATTERN  # the schema's pattern of names
from lmsat.names import check_path_name
from lmsat.plan import ModelEntry, Plan

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
    finished outputs came from another result config than `result` (lmsat.config.result_config
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
    column `config_sha256` (lmsat.tables.with_provenance) records it; read from each table's
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


def write_run_claim(run_dir, result: dict, sources: str) -> None:
    """Record `result` (the plan's result config) as the config of `run_dir`'s outputs."""
    path = Path(run_dir) / RUN_CLAIM
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"sources": sources, "config_sha256": config_sha256(result), "result_config": result},
                              indent=1, sort_keys=True, default=str))
    tmp.replace(path)


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


def _planned_around(models: dict) -> list[str]:
    """A note per hub revision the plan leaves out because it holds no weights upstream
    (lmsat.schedules.missing_weights: a generated schedule plans around it; a list naming it
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
    """revision name -> (step, commit) of a spec's pins file (lmsat.pins) for `pinned`, the
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


def _revisions(spec: dict, suite: dict, config: dict, spec_key: str, missing: dict[str, str] | None = None,
               pinned: tuple[str, str] | None = None):
    """(revisions, steps) of a revisions spec, in training order and subsampled. `missing`
    (revision -> the issue reporting it, lmsat.schedules.missing_weights): revisions without
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
            return rundir.suggest_step_regex(name)
    return ""


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
            revisions, steps = _revisions(spec, own, config, spec_key, missing, pinned)
            commits = ()
            if spec["pins"]:  # checkpoints that are commits on a branch, not branches
                table = _pinned(spec, own, spec_key, pinned)
                commits = tuple(table[r][1] for r in revisions)
            if source == "local":
                for revision in revisions:
                    _check_local_weights(Path(model_id) / revision, model["allow_pickle"], f"{key}.id")
                config_json = Path(model_id) / revisions[0] / "config.json"
                try:
                    model_config = json.loads(config_json.read_text())
                except (OSError, ValueError) as error:
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


def _check_references(config: dict, models: dict[str, ModelEntry]) -> None:
    for section, what in (("corpora", "corpus name"), ("tokenizers", "tokenizer name")):
        for name in config[section]:
            check_path_name(f"{section}.{name}", name, what)
    corpus = config["sample"]["corpus"]
    if corpus not in config["corpora"] and models:  # a published record alone samples nothing
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
                kind = file_kind(path)
                if kind != "a regular file":
                    raise ConfigError(
                        f"{key}.files[{i}]", f"{path} is {kind}, not a regular file",
                        "give the path of a .txt or .jsonl file (one document per line)",
                    )
    for name, spec in config["tokenizers"].items():
        if spec["source"] != "toy" and not spec["id"]:
            raise ConfigError(f"tokenizers.{name}.id", "no tokenizer id", "set a hub id or a directory")
        if spec["source"] == "local" and not Path(spec["id"]).is_dir():
            raise ConfigError(f"tokenizers.{name}.id", f"directory {spec['id']} does not exist", "fix the path")
    from lmsat.metrics import METRICS  # light import: no torch

    planned = config["metrics"] or list(METRICS)
    for i, metric in enumerate(config["metrics"] or []):
        check_path_name(f"metrics[{i}]", metric, "metric name")
        if metric not in METRICS:
            raise ConfigError(f"metrics[{i}]", f"unknown metric {metric!r}", f"use one of: {', '.join(METRICS)}")
    made = {table: metric for metric in planned for table in METRICS[metric].tables}
    for metric in planned:
        for table in METRICS[metric].tables.values():
            for need in table.needs:
                if need not in made:
                    owner = next((m for m in METRICS if need in METRICS[m].tables), need)
                    raise ConfigError(
                        "metrics", f"metric {metric!r} needs table {need!r} of metric {owner!r}",
                        f"add {owner} to metrics (or leave metrics null for all)",
                    )
    if "representation_similarity" in planned and config["extraction"]["layer_sample"] < 4:
        raise ConfigError(
            "extraction.layer_sample", f"{config['extraction']['layer_sample']} tokens per layer: representation_similarity "
            "compares every layer over these tokens and needs at least 4 (debiased CKA)",
            "set extraction.layer_sample to 4 or more (default 4096), or leave representation_similarity out of metrics",
        )
    for needed, why in (("loss", "best and final checkpoints, Table 1 and Fig. 1b read its table"),
                        ("spectra", "the bottleneck section reads the final head's spectrum")):
        if needed not in planned and (needed == "loss" or config["bottleneck"]["models"]):
            raise ConfigError("metrics", f"{needed} is not planned: {why}", f"add {needed} to metrics")
    for i, name in enumerate(config["scaling"]["models"]):
        if name not in models:
            raise ConfigError(f"scaling.models[{i}]", f"unknown model {name!r}", f"use one of: {', '.join(models)}")
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


def _check_sections(config: dict, models: dict[str, ModelEntry]) -> None:
    """Cross-checks of the analysis sections (figures, evaluation, scaling, bottleneck,
    ngrams) that the schema cannot express: ConfigError naming the key and the fix."""
    for i, suite in enumerate(config["figures"]["anisotropy_suites"]):
        if suite not in config["suites"]:
            raise ConfigError(
                f"figures.anisotropy_suites[{i}]",
                f"unknown suite {suite!r}",
                f"use one of: {', '.join(config['suites'])}, or add the suite under `suites`",
            )
    _check_evaluation(config["evaluation"], models)
    scaling = config["scaling"]
    if (scaling["A"] is None) != (scaling["alpha"] is None):
        raise ConfigError(
            "scaling.A" if scaling["A"] is None else "scaling.alpha",
            "only one of A and alpha is set",
            "set both (a published law, no fit) or neither (fit them)",
        )
    _check_bottleneck(config)
    _check_ngrams(config, models)


def _check_evaluation(evaluation: dict, models: dict[str, ModelEntry]) -> None:
    from lmsat.evaluation import METRICS as TABLE1_METRICS

    for i, task in enumerate(evaluation["tasks"]):
        if task not in TABLE1_METRICS:
            raise ConfigError(
                f"evaluation.tasks[{i}]",
                f"task {task!r} has no Table 1 metric",
                f"use one of: {', '.join(TABLE1_METRICS)}, or register it in lmsat.evaluation.METRICS",
            )
    for i, name in enumerate(evaluation["models"]):
        if name not in models:
            raise ConfigError(f"evaluation.models[{i}]", f"unknown model {name!r}", f"use one of: {', '.join(models)}")
    data_dir = evaluation["storycloze_dir"]
    if data_dir and not Path(data_dir).is_dir():
        raise ConfigError(
            "evaluation.storycloze_dir",
            f"directory {data_dir} does not exist",
            "download the Story Cloze 2016 CSVs there, or leave it empty to skip the task",
        )


def _check_bottleneck(config: dict) -> None:
    from lmsat.bottleneck import learning_rates, n_windows, set_corpora, windows_per_shard

    bottleneck = config["bottleneck"]
    if not bottleneck["models"]:
        return
    if not bottleneck["ranks"] and not bottleneck["full_rank"]:
        raise ConfigError("bottleneck.ranks", "no ranks to sweep", "list ranks r <= d or set full_rank: true")
    if bottleneck["lr_min"] > bottleneck["lr_max"]:
        raise ConfigError("bottleneck.lr_min", f"{bottleneck['lr_min']} > lr_max={bottleneck['lr_max']}", "swap them")
    if len(learning_rates(bottleneck)) != bottleneck["lr_count"]:
        raise ConfigError("bottleneck.lr_count", "grid values coincide at 3 significant digits", "widen [lr_min, lr_max] or lower lr_count")
    for name, corpus in set_corpora(config).items():
        if corpus not in config["corpora"]:
            raise ConfigError(
                f"bottleneck.{name}_corpus", f"corpus {corpus!r} is not defined",
                f"use one of: {', '.join(config['corpora']) or 'none'}, or '' for sample.corpus",
            )
    seq_len = config["sample"]["seq_len"]
    per_shard = windows_per_shard(bottleneck["shard_tokens"], seq_len)
    positions = min(per_shard, n_windows(bottleneck["train_tokens"], seq_len)) * (seq_len - 1)
    if bottleneck["seq_len"] > positions:
        raise ConfigError(
            "bottleneck.seq_len", f"{bottleneck['seq_len']} positions per training sequence, but a train shard holds "
            f"{positions} (windows of sample.seq_len={seq_len} give {seq_len - 1} each)",
            "lower bottleneck.seq_len or raise bottleneck.shard_tokens / train_tokens",
        )


def ngram_tokenizers(config: dict, models: dict[str, ModelEntry]) -> list[str]:
    """Tokenizers of Fig. 7: `ngrams.tokenizers`, else every model's."""
    return config["ngrams"]["tokenizers"] or sorted({m.tokenizer for m in models.values()})


def _check_ngrams(config: dict, models: dict[str, ModelEntry]) -> None:
    ngrams = config["ngrams"]
    for key, names, defined in (
        ("corpora", ngrams["corpora"], config["corpora"]),
        ("tokenizers", ngram_tokenizers(config, models), config["tokenizers"]),
    ):
        for i, name in enumerate(names):
            if name not in defined:
                raise ConfigError(f"ngrams.{key}[{i}]", f"{name!r} is not defined", f"use one of: {', '.join(defined) or 'none'}")
    language = ngrams["ground_truth"]["language"]  # the schema keeps its order <= 2
    if ngrams["ground_truth"]["sample_sizes"] and ngrams["order"] - 1 < language["order"]:
        raise ConfigError(
            "ngrams.order", f"{ngrams['order']}-gram contexts do not determine the next token of the "
            f"order-{language['order']} ground-truth language", f"use ngrams.order >= {language['order'] + 1}",
        )


def _canonical(value, keep_order: bool = False):
    """`value` with every mapping's keys sorted (lists keep their order): Snakemake compares
    params as written, so reordering keys in a config file would rerun every job. The
    named-entry mappings (suites, tokenizers, corpora) keep their order, which is the plan's."""
    if isinstance(value, dict):
        keys = list(value) if keep_order else sorted(value)
        return {key: _canonical(value[key], keep_order=False) for key in keys}
    if isinstance(value, list):
        return [_canonical(item) for item in value]
    return value


MIN_SAMPLE_SEQUENCES = 2  # a standard error needs two independent draws at least


def _refuse_ambiguous_plan(config: dict, models: dict[str, ModelEntry]) -> None:
    """Plans whose tables would be wrong without an error: two revisions of a model at one
    step, one checkpoint analysed as two models, a sample with no standard error."""
    _refuse_duplicate_steps(config, models)
    _refuse_shared_weights(models)
    _refuse_tiny_sample(config["sample"])


def _revisions_key(config: dict, model: ModelEntry) -> str:
    """The config key of the revisions spec `model` follows: its own, or its suite's."""
    entries = config["suites"][model.suite]["models"]
    index = next(i for i, m in enumerate(entries) if m["name"] == model.name)
    own = entries[index].get("revisions")
    return f"suites.{model.suite}.models[{index}].revisions" if own else f"suites.{model.suite}.revisions"


def _refuse_duplicate_steps(config: dict, models: dict[str, ModelEntry]) -> None:
    """Two revisions of one model at one training step (`step800` and `step-800` under the
    default step_regex): which one is 'final' or 'best' would follow list order."""
    for model in models.values():
        seen: dict[int, str] = {}
        for revision, step in zip(model.revisions, model.steps):
            if step in seen:
                raise ConfigError(
                    _revisions_key(config, model),
                    f"revisions {seen[step]!r} and {revision!r} of model {model.name} are both step {step}, so "
                    "which of them is final or best would be arbitrary",
                    "list one revision per training step (or give each its own step in `steps`)",
                )
            seen[step] = revision


def _refuse_shared_weights(models: dict[str, ModelEntry]) -> None:
    """Two models (or two revisions) reading one checkpoint: local revisions that resolve to
    the same directory or weights file (symbolic links included), or one hub id at one
    revision twice (hub ids are case-insensitive). Its rows would count twice, in the
    scaling fit too."""
    owners: dict[tuple[str, str], tuple[ModelEntry, str]] = {}
    for model in models.values():
        for revision in model.revisions:
            if model.source == "local":
                directory = (Path(model.id) / revision).resolve()
                places = [(("directory", str(directory)), f"weights directory {directory}")]
                weights = [directory / name for name in WEIGHT_FILES + PICKLE_FILES if (directory / name).is_file()]
                if weights:  # a weights file linked from another model's directory
                    places.append((("file", str(weights[0].resolve())), f"weights file {weights[0].resolve()}"))
            elif model.source == "hub":
                places = [(("hub", f"{model.id.casefold()}@{revision}"), f"hub checkpoint {model.id} at revision {revision}")]
            else:
                continue
            for place, shown in places:
                if place in owners:
                    other, other_revision = owners[place]
                    raise ConfigError(
                        f"{model.key}.id",
                        f"{'revisions' if other.name == model.name else 'models'} {other.name}@{other_revision} and "
                        f"{model.name}@{revision} read the same {shown}, so one checkpoint would be tabulated twice",
                        "remove the duplicate (or point each model and revision to its own checkpoint)",
                    )
                owners[place] = (model, revision)


def _refuse_tiny_sample(sample: dict) -> None:
    """Fewer than MIN_SAMPLE_SEQUENCES eval sequences: no standard error (loss_sem 0.0)."""
    n_seq = -(-sample["n_tokens"] // sample["seq_len"])  # ceil: the sample is rounded up to whole sequences
    if n_seq < MIN_SAMPLE_SEQUENCES:
        raise ConfigError(
            "sample.n_tokens",
            f"{sample['n_tokens']} token(s) make {n_seq} sequence(s) of sample.seq_len={sample['seq_len']} tokens; "
            f"a standard error needs at least {MIN_SAMPLE_SEQUENCES}",
            f"set sample.n_tokens to at least {MIN_SAMPLE_SEQUENCES * sample['seq_len']} (or lower sample.seq_len)",
        )


def load_plan(config: dict, schema: str | Path | dict, default_run: str = "default",
              config_dir: str | Path | None = None) -> Plan:
    """Validate `config` against the schema (a dict or its YAML file), fill defaults, check
    references, expand. `default_run` names the run when the config does not (the stem of
    its config file); `config_dir`, the directory of that file, is where relative paths of
    pins files (`revisions.pins`, lmsat.pins) are read from (None: the working directory)."""
    with pins.relative_to(config_dir):
        return _load_plan(config, schema, default_run)


def _load_plan(config: dict, schema: str | Path | dict, default_run: str) -> Plan:
    config = validate_config(offline_defaults(config), schema if isinstance(schema, dict) else load_yaml(schema))
    config = {
        key: _canonical(value, keep_order=key in ("suites", "tokenizers", "corpora"))
        for key, value in sorted(config.items())
    }
    config["run"] = check_path_name("run", config["run"] or default_run, "run name")
    # Suites of EleutherAI's published record (source: published) have no checkpoints to
    # load: their model names are checked against the record, and the model planning below
    # (local runs, the selection, the entries) sees only the checkpoint suites.
    published = published_suites(config)
    config = dict(config, suites={n: s for n, s in config["suites"].items() if n not in published})
    config = resolve_local_runs(config)  # discovered revisions, before a selection cuts them
    whole = config
    config = select(whole)
    if config is not whole:  # a slice never writes into its full run (slice_run)
        config["run"] = slice_run(config["run"], config["select"])
    models = _models(config)
    _refuse_ambiguous_plan(config, models)
    notes = _drop_sections_without_their_metrics(config)
    _check_references(config, models)
    _check_sections(config, models)
    notes += check_scaling_plan(config, models)
    notes += _planned_around(models)
    trained = models
    if config is not whole:  # the selected models with all their revisions
        unselected = copy.deepcopy(whole)
        for suite in unselected["suites"].values():
            suite["models"] = [m for m in suite["models"] if m["name"] in models]
        unselected["suites"] = {name: s for name, s in unselected["suites"].items() if s["models"]}
        trained = _models(unselected)
    config["suites"] = {**config["suites"], **published}
    return Plan(config=config, models=by_size(models), trained=trained, notes=tuple(notes))


def _drop_sections_without_their_metrics(config: dict) -> list[str]:
    """A `metrics` list leaves out what a section reads (the bottleneck section: the final
    head's spectrum, metric `spectra`): the section is dropped from the plan, as `select`
    drops Table 1 when none of its models is selected, with a note saying so and how to keep
    it (-> the notes). `metrics: [loss]` plans the loss alone, whatever else the config has."""
    chosen = config["metrics"]
    if chosen and "spectra" not in chosen and config["bottleneck"]["models"]:
        dropped = config["bottleneck"]["models"]
        config["bottleneck"]["models"] = []
        return [f"the bottleneck section (rank-constrained heads of {', '.join(dropped)}; Figs. 6 and 8) is not "
                f"planned: it reads the final head's spectrum, and metrics {chosen} leave out spectra. To plan it, "
                "add spectra to metrics (or leave metrics null for all)"]
    return []


def published_suites(config: dict) -> dict[str, dict]:
    """The suites whose source is EleutherAI's published record, each model name checked
    against it (lmsat.published_record.check_models: a ConfigError naming the entry)."""
    from lmsat.published_record import check_models

    published = {n: s for n, s in config["suites"].items() if s["source"] == "published"}
    if len(published) > 1:
        raise ConfigError(f"suites.{list(published)[1]}.source", "a run reads EleutherAI's published record once",
                          f"list every published model in one suite ({list(published)[0]})")
    for name, suite in published.items():
        check_path_name(f"suites.{name}", name, "suite name")
        check_models([m["name"] for m in suite["models"]], f"suites.{name}.models")
    return published


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
                revisions, steps = _revisions(spec, own, config, f"{key}.revisions", missing, pinned)
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


def by_size(models: dict[str, ModelEntry]) -> dict[str, ModelEntry]:
    """`models` ordered suite by suite (in config order), smallest first within a suite:
    the order of every table's rows and every figure's panels and legends."""
    suites = list(dict.fromkeys(m.suite for m in models.values()))
    ordered = sorted(models.values(), key=lambda m: (suites.index(m.suite), m.size))
    return {m.name: m for m in ordered}


# ---------------------------------------------------------------- your own training run
# A local run folder (`source: local`, `id: <folder>`) is read at planning: its checkpoints
# are discovered (`revisions: {discover: "checkpoint-*"}`), and width, depth, vocabulary and
# tied head come from their config.json (given values are checked against it). Honest
# defaults for a plan without hub or toy models keep it offline (lmsat.rundir; lmsat init).

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
            revisions, _ = _revisions(spec, suite, config, spec_key)
            _fill_architecture(model, key, [Path(model["id"]) / r for r in revisions])
    return config


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
                          f"use the default {rundir.DEFAULT_STEP_REGEX!r}") from None
    found = rundir.discover(folder, pattern, spec["step_regex"], model["allow_pickle"])
    if found.unparsed:
        suggestion = rundir.suggest_step_regex(found.unparsed[0])
        raise ConfigError(
            f"{spec_key}.step_regex", f"{spec['step_regex']!r} reads no training step from {', '.join(found.unparsed[:3])} "
            f"(found by discover: {pattern!r} in {folder})",
            f"set step_regex: '{suggestion}' (its first group is the step)" if suggestion else "list the steps in `steps`",
        )
    if not found.revisions:
        others = sorted(p.name for p in folder.iterdir() if p.is_dir() and rundir.is_checkpoint(p, model["allow_pickle"]))
        seen = f"; checkpoint directories there: {', '.join(others[:5])}" if others else "; it holds no checkpoint directory"
        if found.incomplete:
            seen += f"; matched but without config.json and safetensors weights (yet): {', '.join(found.incomplete[:5])}"
        glob = next((g for g in rundir.TRAINER_GLOBS if others and any(Path(o).match(g) for o in others)), "")
        raise ConfigError(
            f"{spec_key}.discover", f"{pattern!r} matches no checkpoint in {folder}{seen}",
            f"use discover: '{glob}'" if glob else "point the model's id at the folder that holds the checkpoint directories",
        )
    conflicts = rundir.step_conflicts(folder, found.revisions)
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
    stated: dict = {}
    for directory in directories:
        path = directory / "config.json"
        if not path.is_file():
            continue  # _models reports the missing file
        try:
            found = rundir.architecture(json.loads(path.read_text()))
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


def check_scaling_plan(config: dict, models: dict[str, ModelEntry]) -> list[str]:
    """The Fig. 1b fit needs two model sizes with N >= scaling.min_params: decided at
    planning where the sizes are known (n_params, or a local checkpoint's config.json of any
    family lmsat.adapters knows). A plan that cannot make the fit does not plan it (Fig. 1b,
    its tables and the shortfall): the metric tables of a one-size run are not refused for
    it. The note names every model with its size and the fixes (-> the plan's notes). A slice
    (select.models) is left alone: it is cut for its targets, not for the fit."""
    scaling = config["scaling"]
    if not scaling["enabled"] or scaling["A"] is not None or config["select"]["models"]:
        return []
    names = scaling["models"] or list(models)
    sizes, unknown = {}, []
    for name in names:
        count = models[name].n_params or _local_parameter_count(models[name], scaling["params"])
        if count:
            sizes[name] = count
        else:
            unknown.append(name)
    threshold = scaling["min_params"]
    above = {n for n in sizes.values() if n >= threshold}
    if len(above) + len(unknown) >= 2:
        return []
    listed = ", ".join([f"{name} {n:.4g}" for name, n in sizes.items()] + [f"{name} unknown" for name in unknown])
    distinct = sorted(set(sizes.values()), reverse=True)
    fix = f"lower scaling.min_params to at most {distinct[1]:.4g}, " if len(distinct) >= 2 else "add a model size, "
    config["scaling"] = dict(scaling, enabled=False)
    return [f"the Fig. 1b scaling fit (tables scaling_fit, scaling_shortfall) is not planned: the fit of A and alpha "
            f"needs two model sizes with N ({scaling['params']}) >= scaling.min_params={threshold:.4g}, but "
            f"{len(above)} of this plan's sizes reach it ({listed}). To plan it: " + fix
            + "or set scaling.A and scaling.alpha (a published law, no fit); scaling.enabled: false silences this note"]


def _local_parameter_count(model: ModelEntry, kind: str) -> int:
    """`kind` parameter count of a local model from its final config.json, for every family
    lmsat.scaling.FAMILY_COUNTS sizes (those of lmsat.adapters); 0: unknown."""
    if model.source != "local":
        return 0
    path = Path(model.id) / model.final_revision / "config.json"
    try:
        model_config = json.loads(path.read_text())
    except (OSError, ValueError):
        return 0
    from lmsat.scaling import config_parameter_counts

    try:
        counts = config_parameter_counts(model_config)
    except (TypeError, ValueError, AttributeError):  # a config.json without the family's shapes
        return 0
    return counts[kind] if counts else 0
