# lmsat's workflow is workflow/Snakefile (where the Snakemake workflow catalog and a
# `module` statement look for it); this file keeps `snakemake` working from the root.


include: "workflow/Snakefile"


# Snakemake never takes an included file's rule as the default target: name it here.
workflow.default_target = "all"
