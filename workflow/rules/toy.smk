# The embedded toy suite: a synthetic language with known next-token distributions, its
# tokenizer, and tiny GPT-NeoX models trained on it with a Pythia-like checkpoint schedule.
# Input functions and helpers: toy_inputs.smk.


include: "toy_inputs.smk"


rule build_synthetic_language:
    output:
        language="<results>/toy/language.h5",
        train="<results>/corpora/synthetic/train.txt",
        eval="<results>/corpora/synthetic/eval.txt",
        train_stats="<results>/corpora/synthetic/train.json",
        eval_stats="<results>/corpora/synthetic/eval.json",
        tokenizer=directory("<results>/toy/tokenizer"),
    log:
        "<logs>/build_synthetic_language.log",
    conda:
        "../../envs/lmsat.yaml"
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        language=CONFIG["toy"]["language"],
        train_tokens=CONFIG["toy"]["train_tokens"],
        eval_tokens=CONFIG["toy"]["eval_tokens"],
        doc_tokens=CONFIG["toy"]["doc_tokens"],
        seed=CONFIG["seed"],
    script:
        "../scripts/build_synthetic_language.py"


rule train_toy_model:
    input:
        train="<results>/corpora/synthetic/train.txt",
        tokenizer=TOY_TOKENIZER,
    output:
        manifest="<results>/toy/models/{model}.json",
        repository=directory("<results>/toy/hub/models--lmsat-toy--{model}"),
    log:
        "<logs>/train_toy_model/{model}.log",
    conda:
        "../../envs/lmsat.yaml"
    threads: CONFIG["threads"]
    resources:
        mem_mb=2000,
        runtime=30,
    params:
        model=get_trained_model_params,
        toy=CONFIG["toy"],
        seed=CONFIG["seed"],
    script:
        "../scripts/train_toy_model.py"
