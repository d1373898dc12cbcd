# The Python of evaluation.smk and scaling.smk (Table 1 and Fig. 1b): their config
# sections checked up front, wildcard constraints and input functions. Kept apart from the
# rules so that `snakemake --lint` stays clean; could be merged into common.smk.
import csv
from pathlib import Path

from lmsat.config import ConfigError
from lmsat.evaluation import METRICS as EVALUATION_METRICS
from lmsat.evaluation import OFFLINE_TASKS, STORYCLOZE_2016_FILES

# ---------------------------------------------------------------- Table 1

EVALUATION = CONFIG["evaluation"]
# in the plan's order (by size): Table 1's rows follow its records
EVALUATED_MODELS = [m for m in MODELS if m in EVALUATION["models"]] or list(MODELS)
CHECKPOINT_KINDS = ("best", "final")
TASK_DIR = f"results/{RUN}/evaluation/tasks"


def _check_evaluation_config():
    """Cross-references of config['evaluation'], checked before any job is planned."""
    for i, task in enumerate(EVALUATION["tasks"]):
        if task not in EVALUATION_METRICS:
            raise ConfigError(
                f"evaluation.tasks[{i}]",
                f"task {task!r} has no Table 1 metric",
                f"use one of: {', '.join(EVALUATION_METRICS)}, or register it in "
                "lmsat.evaluation.METRICS",
            )
    for i, name in enumerate(EVALUATION["models"]):
        if name not in MODELS:
            raise ConfigError(
                f"evaluation.models[{i}]",
                f"unknown model {name!r}",
                f"use one of: {', '.join(MODELS)}",
            )
    data_dir = EVALUATION["storycloze_dir"]
    if data_dir and not Path(data_dir).is_dir():
        raise ConfigError(
            "evaluation.storycloze_dir",
            f"directory {data_dir} does not exist",
            "download the Story Cloze 2016 CSVs there, or leave it empty to skip the task",
        )


_check_evaluation_config()


wildcard_constraints:
    kind="|".join(CHECKPOINT_KINDS),
    task=_alternatives(EVALUATION["tasks"]) or "(?!)",


def evaluation_outputs():
    """Table 1, when tasks are configured (for final_outputs in common.smk)."""
    if not EVALUATION["tasks"]:
        return []
    return [
        "results/{run}/tables/table1.csv",
        "results/{run}/tables/table1.md",
        "results/{run}/tables/table1.tex",
    ]


def selected_revision(model, kind):
    """Revision of `model` picked as `kind`; the best one is read from the checkpoint output."""
    if kind == "final":
        return MODELS[model].final_revision
    with open(checkpoints.select_checkpoints.get(run=RUN).output[0]) as handle:
        for row in csv.DictReader(handle):
            if row["model"] == model and row["kind"] == kind:
                return row["revision"]
    raise ValueError(
        f"results/{RUN}/tables/best_final.csv: no {kind} checkpoint of model {model}"
    )


def task_files(task):
    """Task YAMLs (and data) the pipeline writes for `task`; none for lm-eval's own tasks."""
    if task in OFFLINE_TASKS:
        return [f"{TASK_DIR}/{task}.yaml", f"{TASK_DIR}/{task}.jsonl"]
    if task == "storycloze_2016" and EVALUATION["storycloze_dir"]:
        return [f"{TASK_DIR}/storycloze_2016.yaml"]
    return []


def storycloze_files(wildcards):
    """The manually downloaded Story Cloze 2016 CSVs (checked to exist before the job)."""
    data_dir = Path(EVALUATION["storycloze_dir"])
    return [str(data_dir / name) for name in STORYCLOZE_2016_FILES.values()]


def evaluation_inputs(wildcards):
    # Why a checkpoint (select_checkpoints): the best revision is known only once every loss
    # exists, and it shapes the DAG itself, not only a parameter. When a model's best
    # checkpoint is its final one (no saturation, as for the larger Pythia models), its "best"
    # job must not rerun lm-eval on the same weights but depend on the "final" job and copy
    # its JSON; which of the two a best job is depends on the contents of best_final.csv.
    # Final revisions come from the config, so a dry run plans every final job directly, and
    # every best job behind the checkpoint (its revision shown as <TBD>).
    # The selection is ancient(): best_final.csv is rewritten whenever loss.csv is (any
    # config change re-stamps loss.csv), but a best job must rerun only when its revision
    # (a param, so a rerun trigger) or the reused final JSON changes.
    model = MODELS[wildcards.model]
    tasks = task_files(wildcards.task)
    if wildcards.kind == "final":
        return dict(
            weights=weights_of(model.name, model.final_revision),
            tasks=tasks,
            staged=lmeval_task_staged(wildcards.task),
        )
    selection = ancient(checkpoints.select_checkpoints.get(run=RUN).output[0])
    best = selected_revision(model.name, "best")
    if best == model.final_revision:
        final = f"results/{RUN}/evaluation/{model.name}/final/{wildcards.task}.json"
        return dict(selection=selection, same_as=final)
    if model.source == "hub":  # a copy of its own (rule fetch_best_checkpoint)
        weights = f"results/{RUN}/weights/best/{model.name}/{best}"
    else:
        weights = weights_of(model.name, best)
    staged = lmeval_task_staged(wildcards.task)
    return dict(weights=weights, tasks=tasks, selection=selection, staged=staged)


def reuses_final(input):
    return "same_as" in input.keys()


def evaluation_records():
    return [
        f"results/{RUN}/evaluation/{model}/{kind}/{task}.json"
        for model in EVALUATED_MODELS
        for kind in CHECKPOINT_KINDS
        for task in EVALUATION["tasks"]
    ]


# ---------------------------------------------------------------- Fig. 1b

SCALING = CONFIG["scaling"]


def _check_scaling_config():
    if (SCALING["A"] is None) != (SCALING["alpha"] is None):
        raise ConfigError(
            "scaling.A" if SCALING["A"] is None else "scaling.alpha",
            "only one of A and alpha is set",
            "set both (a published law, no fit) or neither (fit them)",
        )


_check_scaling_config()


def scaling_outputs():
    """The fit, the shortfall table and Fig. 1b (for final_outputs in common.smk)."""
    return [
        "results/{run}/tables/scaling_fit.csv",
        "results/{run}/tables/scaling_shortfall.csv",
        "results/{run}/figures/fig1b_scaling.png",
        "results/{run}/figures/fig1b_scaling.pdf",
    ]


SCALED_MODELS = SCALING["models"] or list(MODELS)


def parameter_counts():
    """Counts of the Fig. 1b models whose n_params the config leaves at 0 (read from their
    config)."""
    return [
        f"results/{RUN}/params/{name}.json"
        for name in SCALED_MODELS
        if MODELS[name].n_params == 0
    ]
