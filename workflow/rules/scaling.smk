# Saturation against a Chinchilla-style scaling law (Fig. 1b): each model's parameter
# count, the fit of A and alpha on the larger models, and every model's best and final
# checkpoints compared with the law (shortfall in %); Fig. 1b is drawn by rule plot_figure
# (products.smk).
# Input functions and helpers: scaling_inputs.smk.


include: "scaling_inputs.smk"


localrules:
    fit_scaling_law,


rule count_model_parameters:
    input:
        weights=get_final_checkpoint_weights,
    output:
        "<results>/params/{model}.json",
    log:
        "<logs>/count_model_parameters/{model}.log",
    conda:
        "../../envs/lmsat.yaml"
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        model=get_final_model_params,
    script:
        "../scripts/count_model_parameters.py"


rule fit_scaling_law:
    input:
        selection="<results>/tables/best_final.csv",
        counts=parameter_counts(),
    output:
        fit="<results>/tables/scaling_fit.csv",
        shortfall="<results>/tables/scaling_shortfall.csv",
    log:
        "<logs>/fit_scaling_law.log",
    conda:
        "../../envs/lmsat.yaml"
    params:
        scaling=SCALING,
        n_params={name: model.n_params for name, model in MODELS.items()},
        seed=CONFIG["seed"],
        config_sha256=CONFIG_SHA256,
    script:
        "../scripts/fit_scaling_law.py"
