# Loss along training: the aggregate table and Fig. 1a.


localrules:
    tabulate_loss,
    plot_loss_curves,


rule tabulate_loss:
    input:
        checkpoint_files("results/{run}/metrics/loss/{model}/{revision}.json"),
    output:
        "results/{run}/tables/loss.csv",
    log:
        "logs/{run}/tabulate_loss.log",
    conda:
        "../../envs/lmsat.yaml"
    params:
        config_sha256=CONFIG_SHA256,
        models=list(MODELS),
    script:
        "../scripts/tabulate_loss.py"


rule plot_loss_curves:
    input:
        table="results/{run}/tables/loss.csv",
        language=synthetic_reference(),
    output:
        png=figure_report("results/{run}/figures/fig1a_loss.png"),
        pdf=figure_report("results/{run}/figures/fig1a_loss.pdf"),
    log:
        "logs/{run}/plot_loss_curves.log",
    conda:
        "../../envs/lmsat.yaml"
    script:
        "../scripts/plot_loss_curves.py"
