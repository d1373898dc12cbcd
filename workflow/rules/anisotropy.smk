# Anisotropy (Godey et al. 4.1): the registered `anisotropy` metric of every checkpoint
# (rule compute_checkpoint_metric, from its hidden-state cache), then Figs. 2 and 3.


localrules:
    tabulate_anisotropy,
    plot_anisotropy,


rule tabulate_anisotropy:
    input:
        records=checkpoint_files(
            "results/{run}/metrics/anisotropy/{model}/{revision}.json"
        ),
        loss="results/{run}/tables/loss.csv",
    output:
        layers="results/{run}/tables/anisotropy_layers.csv",
        training="results/{run}/tables/anisotropy_training.csv",
    log:
        "logs/{run}/tabulate_anisotropy.log",
    conda:
        "../../envs/lmsat.yaml"
    params:
        config_sha256=CONFIG_SHA256,
        models=list(MODELS),
    script:
        "../scripts/tabulate_anisotropy.py"


rule plot_anisotropy:
    input:
        layers="results/{run}/tables/anisotropy_layers.csv",
        training="results/{run}/tables/anisotropy_training.csv",
    output:
        fig2_png=figure_report("results/{run}/figures/fig2_anisotropy_depth.png"),
        fig2_pdf=figure_report("results/{run}/figures/fig2_anisotropy_depth.pdf"),
        fig3_png=figure_report("results/{run}/figures/fig3_anisotropy_training.png"),
        fig3_pdf=figure_report("results/{run}/figures/fig3_anisotropy_training.pdf"),
    log:
        "logs/{run}/plot_anisotropy.log",
    conda:
        "../../envs/lmsat.yaml"
    params:
        suites=CONFIG["figures"]["anisotropy_suites"],
    script:
        "../scripts/plot_anisotropy.py"
