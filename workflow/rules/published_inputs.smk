# The published record's helpers (its rule: published.smk).
from lmsat.data.published_evals import packaged_sha256

# The packaged CSV reaches the job of summarize_published by its content, not its path (an
# absolute path of the checkout or install as an input would replan the job, and all after
# it, in a finished run copied with cp -a, moved, or deployed as a module: "Set of input
# files has changed since last execution"); a new CSV changes the hash and reruns it.
PUBLISHED_EVALS_SHA256 = packaged_sha256()


def is_published_figure(path):
    """Whether a figure of summary_figures() is one of the published record's."""
    return FIGURES[Path(path).stem].category == PUBLISHED_CATEGORY
