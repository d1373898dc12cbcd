# LM-head spectra along training (Godey et al. 4.2): the tables, the identical-weights check
# (EleutherAI/pythia#205, #206), Fig. 4 (normalised spectra) and Fig. 5 (singular entropy).


localrules:
    tabulate_spectra,
    plot_spectra,


rule tabulate_spectra:
    input:
        checkpoint_files("results/{run}/spectra/{model}/{revision}.h5"),
    output:
        spectra="results/{run}/tables/spectra.csv",
        entropy="results/{run}/tables/singular_entropy.csv",
        identical="results/{run}/tables/identical_weights.csv",
    log:
        "logs/{run}/tabulate_spectra.log",
    conda:
        "../../envs/lmsat.yaml"
    params:
        config_sha256=CONFIG_SHA256,
        models=list(MODELS),
    script:
        "../scripts/tabulate_spectra.py"


rule plot_spectra:
    input:
        spectra="results/{run}/tables/spectra.csv",
        entropy="results/{run}/tables/singular_entropy.csv",
    output:
        fig4_png=figure_report("results/{run}/figures/fig4_head_spectra.png"),
        fig4_pdf=figure_report("results/{run}/figures/fig4_head_spectra.pdf"),
        fig5_png=figure_report("results/{run}/figures/fig5_singular_entropy.png"),
        fig5_pdf=figure_report("results/{run}/figures/fig5_singular_entropy.pdf"),
    log:
        "logs/{run}/plot_spectra.log",
    conda:
        "../../envs/lmsat.yaml"
    params:
        power=CONFIG["spectra"]["entropy_power"],
    script:
        "../scripts/plot_spectra.py"
