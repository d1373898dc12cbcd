# EleutherAI's published record of Pythia as a run (a suite with `source: published`;
# lmsat.products.published_run): its tables and its summary page, from the CSV packaged with
# lmsat. No model, no download, no GPU; seconds. Its figures are drawn by plot_figure
# (lmsat.figures.published) and its tables rendered by render_table, as a model run's.


localrules:
    summarize_published,


rule summarize_published:
    output:
        **{name: f"<results>/tables/{name}.csv" for name in PUBLISHED_TABLES},
        html=report(
            PUBLISHED_SUMMARY,
            caption="../report/published_summary.rst",
            category=PUBLISHED_CATEGORY,
        ),
    log:
        "<logs>/summarize_published.log",
    conda:
        "../../envs/lmsat.yaml"
    params:
        suites={
            name: dict(
                models=[m["name"] for m in suite["models"]],
                min_params=suite["min_params"],
            )
            for name, suite in PUBLISHED.items()
        },
        config_sha256=CONFIG_SHA256,
        run=RUN,
        evals_sha256=PUBLISHED_EVALS_SHA256,  # the packaged CSV it reads (published_inputs.smk)
        figures=[f for f in summary_figures() if is_published_figure(f[1])],
    script:
        "../scripts/summarize_published.py"
