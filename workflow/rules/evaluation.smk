# Each model's best and final checkpoints, and their zero-shot downstream evaluation with
# the LM Evaluation Harness (Table 1): one job per model x checkpoint kind x task.
# Input functions and helpers: evaluation_inputs.smk (task_files and
# evaluation_records, which other stages share too: its section `Table 1`).


include: "evaluation_inputs.smk"


localrules:
    select_checkpoints,
    build_offline_tasks,
    write_storycloze_task,
    make_table1,


checkpoint select_checkpoints:
    input:
        "<results>/tables/loss.csv",
    output:
        "<results>/tables/best_final.csv",
    log:
        "<logs>/select_checkpoints.log",
    conda:
        "../../envs/lmsat.yaml"
    script:
        "../scripts/select_checkpoints.py"


rule build_offline_tasks:
    input:
        "<results>/corpora/synthetic/eval.txt",
    output:
        expand(
            "<results>/evaluation/tasks/{name}.{ext}",
            name=OFFLINE_TASKS,
            ext=("yaml", "jsonl"),
        ),
    log:
        "<logs>/build_offline_tasks.log",
    conda:
        "../../envs/lmsat.yaml"
    params:
        n_docs=EVALUATION["offline_docs"],
        n_choices=EVALUATION["offline_choices"],
        seed=CONFIG["seed"],
        context_words=offline_context_words(),
    script:
        "../scripts/build_offline_tasks.py"


# A localrule because it reads the manual download where the user put it (evaluation.storycloze_dir,
# on this machine); its copies are outputs, which the evaluation jobs read wherever they run.
rule write_storycloze_task:
    input:
        get_storycloze_files,
    output:
        "<results>/evaluation/tasks/storycloze_2016.yaml",
        storycloze_copies("<results>/evaluation/tasks"),
    log:
        "<logs>/write_storycloze_task.log",
    conda:
        "../../envs/lmsat.yaml"
    params:
        data_dir=EVALUATION["storycloze_dir"],
    script:
        "../scripts/write_storycloze_task.py"


rule evaluate_checkpoint:
    input:
        unpack(get_evaluation_inputs),
    output:
        "<results>/evaluation/{model}/{kind}/{task}.json",
    log:
        "<logs>/evaluate_checkpoint/{model}/{kind}/{task}.log",
    benchmark:
        "<benchmarks>/evaluate_checkpoint/{model}/{kind}/{task}.tsv"
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
        csv="<results>/tables/table1.csv",
        md="<results>/tables/table1.md",
        tex="<results>/tables/table1.tex",
    log:
        "<logs>/make_table1.log",
    conda:
        "../../envs/lmsat.yaml"
    params:
        tasks=EVALUATION["tasks"],
        config_sha256=CONFIG_SHA256,
    script:
        "../scripts/make_table1.py"
