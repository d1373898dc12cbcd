"""Load and check a pipeline config up front, and expand it into models and checkpoints.

Every problem is reported before any job runs, as a ConfigError that names the config key
and says how to fix it. `workflow/rules/common.smk` calls `load_plan` once at DAG time;
nothing here touches the network.

    plan = load_plan(config, "workflow/schemas/config.schema.yaml")
    plan.models["pythia-160m"].revisions  # ('step0', 'step1', ..., 'step143000')"""

from __future__ import annotations

import copy
from pathlib import Path

from lmsat.checkpoints import pins
from lmsat.checkpoints.loading import context_length as context_length  # lmsat init reads a checkpoint's context
from lmsat.core.names import PATH_NAME_PATTERN as PATH_NAME_PATTERN  # the schema's pattern of names
from lmsat.core.names import check_path_name
from lmsat.core.plan import Plan
from lmsat.planning.config_files import load_yaml, validate_config
from lmsat.planning.discovery import offline_defaults, resolve_local_runs, steps_per_epoch
from lmsat.planning.model_entries import by_size, model_entries, planned_around
from lmsat.planning.refusals import (
    check_references,
    check_scaling_plan,
    check_sections,
    check_stored_dtypes,
    drop_sections_without_their_metrics,
    published_suites,
    refuse_ambiguous_plan,
)
from lmsat.planning.slicing import select, slice_run


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


def load_plan(config: dict, schema: str | Path | dict, default_run: str = "default",
              config_dir: str | Path | None = None, folders=None) -> Plan:
    """Validate `config` against the schema (a dict or its YAML file), fill defaults, check
    references, expand. `default_run` names the run when the config does not (the stem of
    its config file); `config_dir`, the directory of that file, is where relative paths of
    pins files (`revisions.pins`, lmsat.checkpoints.pins) are read from (None: the working directory).
    A local model's or tokenizer's id that is a storage URL is read through `folders`
    (lmsat.planning.bucket_runs; None: S3 with the environment's endpoint and credentials)."""
    from lmsat.planning.bucket_runs import plan_with_mirrors

    with pins.relative_to(config_dir):
        return plan_with_mirrors(config, lambda mirrored: _load_plan(mirrored, schema, default_run), folders)


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
    check_stored_dtypes(config, published)
    config = resolve_local_runs(config)  # discovered revisions, before a selection cuts them
    whole = config
    config = select(whole)
    if config is not whole:  # a slice never writes into its full run (slice_run)
        config["run"] = slice_run(config["run"], config["select"])
    models = model_entries(config)
    refuse_ambiguous_plan(config, models)
    notes = drop_sections_without_their_metrics(config)
    check_references(config, models)
    check_sections(config, models)
    notes += check_scaling_plan(config, models)
    notes += planned_around(models)
    trained = models
    if config is not whole:  # the selected models with all their revisions
        unselected = copy.deepcopy(whole)
        for suite in unselected["suites"].values():
            suite["models"] = [m for m in suite["models"] if m["name"] in models]
        unselected["suites"] = {name: s for name, s in unselected["suites"].items() if s["models"]}
        trained = model_entries(unselected)
    config["suites"] = {**config["suites"], **published}
    return Plan(config=config, models=by_size(models), trained=trained, notes=tuple(notes),
                steps_per_epoch=steps_per_epoch(models))
