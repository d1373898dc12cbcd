# The published record's helpers (its rule: published.smk).


def is_published_figure(path):
    """Whether a figure of summary_figures() is one of the published record's."""
    return FIGURES[Path(path).stem].category == PUBLISHED_CATEGORY
