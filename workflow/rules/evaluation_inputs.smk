# The input functions and helpers of the rules in evaluation.smk, used by them only; it
# includes this file above its rules (`snakemake --lint` flags a file that mixes rules
# and functions). What several stages share: common.smk.


def get_storycloze_files(wildcards):
    """The manually downloaded Story Cloze 2016 CSVs (checked to exist before the job)."""
    data_dir = Path(EVALUATION["storycloze_dir"])
    return [str(data_dir / name) for name in STORYCLOZE_2016_FILES.values()]


def offline_context_words():
    """Rule build_offline_tasks: the words before synthetic_mc's answer, the evaluated toy
    models' context (toy.seq_len tokens, a token per word): lm-eval feeds a model its context
    and the answer but its last token, so up to seq_len + 1 tokens fit, and none is cut (it
    would cut a longer context from the left, with a warning per item). 0, the whole
    document, when no toy model is evaluated."""
    toy = [m for m in EVALUATED_MODELS if MODELS[m].source == "toy"]
    return CONFIG["toy"]["seq_len"] if toy else 0


def selected_revision(model, kind):
    """Revision of `model` picked as `kind`; the best one is read from the checkpoint output,
    the final is the run's (run_final: best_final.csv's, though it may have left the disk).
    """
    gone = VANISHED.get(model, ())
    if kind == "final":
        picked = run_final(model)
    else:
        # get() waits for the checkpoint; its table is read from the bucket in a storage run (a
        # job without the planner's disk has no copy of it yet when its inputs are planned)
        selection = planned_file(
            planned_path(checkpoints.select_checkpoints.get().output[0])
        )
        loss = planned_file(f"results/{RUN}/tables/loss.csv")
        picked = checked_selection(
            selection, loss, model, kind, MODELS[model].revisions + gone
        )
    # its records are kept in the tables (VANISHED), but lm-eval needs its weights
    if picked in gone:
        raise ValueError(
            f"model {model}: its {kind} checkpoint {picked} is no longer in {MODELS[model].id} (measured before it "
            "went: its records stay in the tables), so Table 1 cannot evaluate it. Fix: put the checkpoint back, "
            f"or leave {model} out of evaluation.models"
        )
    return picked


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
    final = selected_revision(model.name, "final")
    if wildcards.kind == "final":
        return dict(
            weights=weights_of(model.name, final),
            tasks=tasks,
            staged=lmeval_task_staged(wildcards.task),
            datasets=lmeval_task_datasets(wildcards.task),
        )
    selection = ancient(checkpoints.select_checkpoints.get().output[0])
    best = selected_revision(model.name, "best")
    if best == final:
        final = f"results/{RUN}/evaluation/{model.name}/final/{wildcards.task}.json"
        return dict(selection=selection, same_as=final)
    if model.source == "hub" and not tracked_weights(model.name, best):
        # a copy of its own (rule fetch_best_checkpoint); one staged by hand is read in place
        weights = f"results/{RUN}/weights/best/{model.name}/{best}"
    else:
        weights = weights_of(model.name, best)
    staged = lmeval_task_staged(wildcards.task)
    datasets = lmeval_task_datasets(wildcards.task)
    return dict(
        weights=weights,
        tasks=tasks,
        selection=selection,
        staged=staged,
        datasets=datasets,
    )


def reuses_final(input):
    return "same_as" in input.keys()
