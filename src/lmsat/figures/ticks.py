"""Log-axis ticks of every figure (lmsat.figures.style.log_axis): few, short labels for any
data span. Subclasses of matplotlib's, so imported where an axis is drawn, not at DAG time
(lmsat.figures imports every other module of the package to read its registry entries)."""

from __future__ import annotations

import numpy as np
from matplotlib.ticker import Formatter, Locator, MaxNLocator

from lmsat.figures.numbers import compact_number

# Log-axis ticks: per decade, the mantissas labelled, coarsest first; the first set with at
# least MIN_LOG_TICKS ticks in view is used (a run spanning less than a decade gets 2 and 5,
# or every integer mantissa), so labels are few and short whatever the run's length. A span
# narrower than two integer mantissas (0.1 to 0.16: only 0.1) gets evenly spaced round values
# (0.1, 0.12, 0.14, 0.16), so no log axis is read from one label.
LOG_SUBS = ((1.0,), (1.0, 2.0, 5.0), (1.0, 2.0, 3.0, 5.0, 7.0), tuple(float(m) for m in range(1, 10)))
MIN_LOG_TICKS = 3
MAX_LOG_TICKS = 7  # more decades than this: every k-th decade


class CompactLogLocator(Locator):
    """Major ticks of a log axis: a few 'round' values (1, 2, 5 x 10^k, ...) in view, never
    more than MAX_LOG_TICKS; matplotlib's own labels the minor ticks of a sub-decade span,
    whose labels overlap."""

    def __call__(self):
        vmin, vmax = self.axis.get_view_interval()
        return self.tick_values(vmin, vmax)

    def tick_values(self, vmin, vmax):
        vmin, vmax = sorted((vmin, vmax))
        if not vmax > 0:
            return np.array([])
        vmin = max(vmin, vmax * 1e-12)
        decades = np.arange(np.floor(np.log10(vmin)), np.ceil(np.log10(vmax)) + 1)
        for subs in LOG_SUBS:
            ticks = np.array([m * 10**d for d in decades for m in subs])
            ticks = ticks[(ticks >= vmin * (1 - 1e-9)) & (ticks <= vmax * (1 + 1e-9))]
            if len(ticks) >= MIN_LOG_TICKS or subs == LOG_SUBS[-1]:
                break
        if len(ticks) > MAX_LOG_TICKS:  # many decades: keep every k-th power of ten
            ticks = np.array([10**d for d in decades if vmin <= 10**d <= vmax])
            ticks = ticks[:: int(np.ceil(len(ticks) / MAX_LOG_TICKS))]
        if len(ticks) < 2:  # a narrow span: round values evenly spaced within it
            ticks = MaxNLocator(nbins=MIN_LOG_TICKS, steps=[1, 2, 2.5, 5, 10]).tick_values(vmin, vmax)
            ticks = ticks[(ticks >= vmin * (1 - 1e-9)) & (ticks <= vmax * (1 + 1e-9)) & (ticks > 0)]
        return ticks



class CompactFormatter(Formatter):
    """compact_number, with as many significant digits as the ticks in view need to differ
    (3 at least: 0.1001 and 0.1002 would both read 0.1)."""

    digits = 3

    def set_locs(self, locs):
        super().set_locs(locs)
        self.digits = 3
        while self.digits < 15 and len({compact_number(v, self.digits) for v in locs}) < len(set(locs)):
            self.digits += 1

    def __call__(self, value, pos=None):
        return compact_number(value, self.digits)
