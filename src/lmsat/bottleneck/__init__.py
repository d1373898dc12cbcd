"""The softmax bottleneck (section 5): rank-r heads and their cache, W-errors, the gradient bottleneck."""

from lmsat.compat import forward_from

__getattr__ = forward_from(__name__)  # the names of the old module lmsat.bottleneck (lmsat.compat)
