"""Short numbers for tick labels and legends (no matplotlib: the ticks and the style use it)."""

from __future__ import annotations


def compact_number(value: float, digits: int = 3) -> str:
    """1500 -> '1.5k', 2e9 -> '2B', 0.03 -> '0.03': short tick labels (tokens, parameters, ranks),
    to `digits` significant digits."""
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.{digits}g}{suffix}"
    return f"{value:.{digits}g}"
