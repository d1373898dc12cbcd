# Low-rank attention along training (Kobayashi et al., beyond Godey et al.): per-head
# metrics of W_Q^T W_K and W_O W_V from every checkpoint's attention file, and the figure.


localrules:
    tabulate_attention,
    plot_attention,


rule tabulate_attention:
    input:
        files=checkpoint_files("results/{run}/attention/{model}/{revision}.h5"),
        identical="results/{run}/tables/identical_weights.csv",
    output:
        "results/{run}/tables/attention_lowrank.csv",
    log:
        "logs/{run}/tabulate_attention.log",
    conda:
        "../../envs/lmsat.yaml"
    params:
        config_sha256=CONFIG_SHA256,
        models=list(MODELS),
    script:
        "../scripts/tabulate_attention.py"


rule plot_attention:
    input:
        "results/{run}/tables/attention_lowrank.csv",
    output:
        png=figure_report("results/{run}/figures/attention_lowrank.png"),
        pdf=figure_report("results/{run}/figures/attention_lowrank.pdf"),
    log:
        "logs/{run}/plot_attention.log",
    conda:
        "../../envs/lmsat.yaml"
    script:
        "../scripts/plot_attention.py"
