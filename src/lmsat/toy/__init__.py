"""The embedded toy suite: a synthetic language with known next-token distributions, and the tiny models trained on it."""

from lmsat.compat import forward_from

__getattr__ = forward_from(__name__)  # the names of the old module lmsat.toy (lmsat.compat)
