"""Representation and weight degeneration (section 4): anisotropy, spectra, attention, similarity, weight fits."""

from lmsat.compat import forward_from

__getattr__ = forward_from(__name__)  # the names of the old module lmsat.degeneration (lmsat.compat)
