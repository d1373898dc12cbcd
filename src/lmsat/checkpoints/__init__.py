"""Checkpoints: each family's layout, other formats converted, fetched, pinned, published locally, checked, loaded."""

from lmsat.compat import forward_from

__getattr__ = forward_from(__name__)  # the names of the old module lmsat.checkpoints (lmsat.compat)
