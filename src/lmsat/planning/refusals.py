"""The plan's checks: references between sections, each section's own limits, plans that would
be ambiguous, duplicate steps, shared weights, a sample too small, a scaling fit that cannot be
made; each a ConfigError naming the key and the fix, or a note of what the plan leaves out."""

from __future__ import annotations

from pathlib import Path

from lmsat.checkpoints.loading import context_length as context_length  # lmsat init reads a checkpoint's context
from lmsat.core.names import PATH_NAME_PATTERN as PATH_NAME_PATTERN  # the schema's pattern of names
from lmsat.core.names import check_path_name
from lmsat.core.plan import ModelEntry
from lmsat.errors import ConfigError
from lmsat.planning.model_entries import PICKLE_FILES, WEIGHT_FILES, file_kind


def check_references(config: dict, models: dict[str, ModelEntry]) -> None:
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
    from lmsat.products.metrics import METRICS  # light import: no torch

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


def check_sections(config: dict, models: dict[str, ModelEntry]) -> None:
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
    from lmsat.saturation.downstream import METRICS as TABLE1_METRICS

    for i, task in enumerate(evaluation["tasks"]):
        if task not in TABLE1_METRICS:
            raise ConfigError(
                f"evaluation.tasks[{i}]",
                f"task {task!r} has no Table 1 metric",
                f"use one of: {', '.join(TABLE1_METRICS)}, or register it in lmsat.saturation.downstream.METRICS",
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
    from lmsat.bottleneck.rank_grid import learning_rates, n_windows, set_corpora, windows_per_shard

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


MIN_SAMPLE_SEQUENCES = 2  # a standard error needs two independent draws at least


def refuse_ambiguous_plan(config: dict, models: dict[str, ModelEntry]) -> None:
    """Plans whose tables would be wrong without an error: two revisions of a model at one
    step, one checkpoint analysed as two models, a sample with no standard error."""
    _refuse_duplicate_steps(config, models)
    _refuse_shared_weights(config, models)
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


def _refuse_shared_weights(config: dict, models: dict[str, ModelEntry]) -> None:
    """Two models (or two revisions) reading one checkpoint: local revisions that resolve to
    the same directory or weights file (symbolic links included), or one hub id at one
    revision twice (hub ids are case-insensitive), a pinned revision compared by the commit
    its pins file resolves it to. Its rows would count twice, in the scaling fit too."""
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
                # a pinned revision reaches the hub as its commit: two steps pinned to one commit
                # (a pasted pins row, half edited) would fetch one checkpoint twice
                resolved = model.hub_revision(revision)
                at = f"commit {resolved}" if resolved != revision else f"revision {revision}"
                places = [(("hub", f"{model.id.casefold()}@{resolved}"), f"hub checkpoint {model.id} at {at}")]
            else:
                continue
            for place, shown in places:
                if place in owners:
                    other, other_revision = owners[place]
                    raise ConfigError(
                        f"{_revisions_key(config, model)}.pins" if model.commits else f"{model.key}.id",
                        f"{'revisions' if other.name == model.name else 'models'} {other.name}@{other_revision} and "
                        f"{model.name}@{revision} read the same {shown} (steps {other.step(other_revision)} and "
                        f"{model.step(revision)}), so one checkpoint would be tabulated twice",
                        "remove the duplicate (or point each model and revision to its own checkpoint; "
                        "a pins file gives each step the commit that holds it)",
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


def drop_sections_without_their_metrics(config: dict) -> list[str]:
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
    against it (lmsat.products.published_run.check_models: a ConfigError naming the entry)."""
    from lmsat.products.published_run import check_models

    published = {n: s for n, s in config["suites"].items() if s["source"] == "published"}
    if len(published) > 1:
        raise ConfigError(f"suites.{list(published)[1]}.source", "a run reads EleutherAI's published record once",
                          f"list every published model in one suite ({list(published)[0]})")
    for name, suite in published.items():
        check_path_name(f"suites.{name}", name, "suite name")
        check_models([m["name"] for m in suite["models"]], f"suites.{name}.models")
    return published


def check_stored_dtypes(config: dict, published: dict[str, dict]) -> None:
    """Each suite `fetch.stored_dtype` names is one of the config's checkpoint suites (a
    misspelt name would leave that suite's downloads sized by fetch.bytes_per_param)."""
    for name in config["fetch"]["stored_dtype"]:
        if name not in config["suites"]:
            kind = "is EleutherAI's published record, which downloads no checkpoint" if name in published else "is no suite"
            raise ConfigError(f"fetch.stored_dtype.{name}", f"{name!r} {kind}",
                              f"name a checkpoint suite of this config: {', '.join(config['suites']) or 'none'}")


def check_scaling_plan(config: dict, models: dict[str, ModelEntry]) -> list[str]:
    """The Fig. 1b fit needs two model sizes with N >= scaling.min_params: decided at
    planning where the sizes are known (n_params, or a local checkpoint's config.json of any
    family lmsat.checkpoints.adapters knows). A plan that cannot make the fit does not plan it (Fig. 1b,
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
    lmsat.saturation.scaling.FAMILY_COUNTS sizes (those of lmsat.checkpoints.adapters); 0: unknown."""
    if model.source != "local":
        return 0
    from lmsat.checkpoints.trainer_runs import read_config
    from lmsat.core.names import checkpoint_path
    from lmsat.errors import ModelLoadError

    try:  # config.json, or another trainer's saved step's converted config (lmsat.checkpoints.trainer_layouts)
        model_config = read_config(checkpoint_path(model.id, model.final_revision))
    except (OSError, ValueError, ModelLoadError):
        return 0
    from lmsat.saturation.scaling import config_parameter_counts

    try:
        counts = config_parameter_counts(model_config)
    except (TypeError, ValueError, AttributeError):  # a config.json without the family's shapes
        return 0
    return counts[kind] if counts else 0
