# Each model's best and final checkpoints, and their zero-shot downstream evaluation with
# the LM Evaluation Harness (Table 1): one job per model x checkpoint kind x task.
# The task files and staged task data that staging.smk shares: common.smk.
from lmsat.evaluation import STORYCLOZE_2016_FILES
from lmsat.integrity import selected_revision as checked_selection


localrules:
    select_checkpoints,
    build_offline_tasks,
    write_storycloze_task,
    make_table1,


checkpoint select_checkpoints:
    input:
        "results/{run}/tables/loss.csv",
    output:
        "results/{run}/tables/best_final.csv",
    log:
        "logs/{run}/select_checkpoints.log",
    conda:
        "../../envs/lmsat.yaml"
    script:
        "../scripts/select_checkpoints.py"


rule build_offline_tasks:
    input:
        "results/{run}/corpora/synthetic/eval.txt",
    output:
        expand(
            "results/{run}/evaluation/tasks/{name}.{ext}",
            run="{run}",
            name=OFFLINE_TASKS,
            ext=("yaml", "jsonl"),
        ),
    log:
        "logs/{run}/build_offline_tasks.log",
    conda:
        "../../envs/lmsat.yaml"
    params:
        n_docs=EVALUATION["offline_docs"],
        n_choices=EVALUATION["offline_choices"],
        seed=CONFIG["seed"],
    script:
        "../scripts/build_offline_tasks.py"


def get_storycloze_files(wildcards):
    """The manually downloaded Story Cloze 2016 CSVs (checked to exist before the job)."""
    data_dir = Path(EVALUATION["storycloze_dir"])
    return [str(data_dir / name) for name in STORYCLOZE_2016_FILES.values()]


rule write_storycloze_task:
    input:
        get_storycloze_files,
    output:
        "results/{run}/evaluation/tasks/storycloze_2016.yaml",
    log:
        "logs/{run}/write_storycloze_task.log",
    conda:
        "../../envs/lmsat.yaml"
    params:
        data_dir=EVALUATION["storycloze_dir"],
    script:
        "../scripts/write_storycloze_task.py"


def selected_revision(model, kind):
    """Revision of `model` picked as `kind`; the best one is read from the checkpoint output."""
    if kind == "final":
        return MODELS[model].final_revision
    selection = checkpoints.select_checkpoints.get(run=RUN).output[0]
    loss = f"results/{RUN}/tables/loss.csv"
    return checked_selection(selection, loss, model, kind, MODELS[model].revisions)


def get_evaluation_inputs(wildcards):
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
    if model.source == "hub" and not tracked_weights(model.name, best):
        # a copy of its own (rule fetch_best_checkpoint); one staged by hand is read in place
        weights = f"results/{RUN}/weights/best/{model.name}/{best}"
    else:
        weights = weights_of(model.name, best)
    staged = lmeval_task_staged(wildcards.task)
    return dict(weights=weights, tasks=tasks, selection=selection, staged=staged)


def reuses_final(input):
    return "same_as" in input.keys()


rule evaluate_checkpoint:
    input:
        unpack(get_evaluation_inputs),
    output:
        "results/{run}/evaluation/{model}/{kind}/{task}.json",
    log:
        "logs/{run}/evaluate_checkpoint/{model}/{kind}/{task}.log",
    benchmark:
        "benchmarks/out/{run}/evaluate_checkpoint/{model}/{kind}/{task}.tsv"
    conda:
        "../../envs/lmsat.yaml"
    threads: CONFIG["threads"]
    resources:
        mem_mb=lambda wildcards, input, attempt: (
            500
            if reuses_final(input)
            else model_mem_mb(wildcards.model, EVALUATION["mem_mb"], attempt)
        ),
        runtime=lambda wildcards, input, attempt: (
            5 if reuses_final(input) else EVALUATION["runtime"] * attempt
        ),
        gpu=lambda wildcards, input: (
            1 if CONFIG["device"] == "cuda" and not reuses_final(input) else 0
        ),
    params:
        revision=lambda wildcards: selected_revision(wildcards.model, wildcards.kind),
        model=lambda wildcards: model_at(
            wildcards.model, selected_revision(wildcards.model, wildcards.kind)
        ),
        include_path=lambda wildcards: TASK_DIR if task_files(wildcards.task) else None,
        lmeval={
            key: EVALUATION[key]
            for key in (
                "batch_size",
                "limit",
                "num_fewshot",
                "dtype",
                "bootstrap_iters",
            )
        },
    script:
        "../scripts/evaluate_checkpoint.py"


rule make_table1:
    input:
        records=evaluation_records(),
    output:
        csv="results/{run}/tables/table1.csv",
        md="results/{run}/tables/table1.md",
        tex="results/{run}/tables/table1.tex",
    log:
        "logs/{run}/make_table1.log",
    conda:
        "../../envs/lmsat.yaml"
    params:
        tasks=EVALUATION["tasks"],
        config_sha256=CONFIG_SHA256,
    script:
        "../scripts/make_table1.py"
