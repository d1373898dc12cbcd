"""Progress of long jobs in their logs: what is done, the throughput and the time left.

A job's log is a file, so a progress bar redrawn with carriage returns is no use there;
these log one line at most every `interval` seconds (LMSAT_PROGRESS_SECONDS, default 60),
plus the first and the last:

    progress = Progress("head r=16", total=400, unit="step", per_unit={"tokens": 1024})
    for step in range(400):
        ...
        progress.update(1, loss=f"{loss:.3f}")
    # -> head r=16: 120/400 steps (30%), 45.2 steps/s, 46.3k tokens/s, 6 s left; loss=3.210

ThrottledLog does the same for a library that draws its own tqdm bar on stderr (lm-eval):
    with contextlib.redirect_stderr(ThrottledLog(log)): lm_eval.simple_evaluate(...)
"""

from __future__ import annotations

import io
import logging
import os
import re
import time

INTERVAL = float(os.environ.get("LMSAT_PROGRESS_SECONDS", "60"))
log = logging.getLogger(__name__)


def _duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def _count(value: float) -> str:
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= size:
            return f"{value / size:.1f}{suffix}"
    return f"{value:.3g}"


class Progress:
    """Counts units done of `total` (None: unknown) and logs a line every `interval` seconds.

    per_unit: other quantities per unit, shown as their throughput too (tokens per step);
    initial: units done by an earlier, resumed run (counted done, not in the throughput).
    The first update and finish() always log; `clock` is time.monotonic unless given.
    """

    def __init__(self, what: str, total: int | None, unit: str, *, initial: int = 0, per_unit: dict | None = None,
                 interval: float | None = None, logger: logging.Logger | None = None, clock=time.monotonic):
        self.what, self.total, self.unit = what, total, unit
        self.per_unit = per_unit or {}
        self.interval = INTERVAL if interval is None else interval
        self.log = logger or log
        self.clock = clock
        self.start = self.clock()
        self.last_logged: float | None = None
        self.initial = self.done = initial  # units done before this call (a resumed job)
        self.lines: list[str] = []  # every line logged, for the job's summary and tests

    def line(self, **extra) -> str:
        elapsed = max(self.clock() - self.start, 1e-9)
        rate = (self.done - self.initial) / elapsed
        if self.total:
            text = f"{self.what}: {self.done:,}/{self.total:,} {self.unit}s ({100 * self.done / self.total:.0f}%)"
        else:
            text = f"{self.what}: {self.done:,} {self.unit}s"
        text += f", {_count(rate)} {self.unit}s/s"
        for name, factor in self.per_unit.items():
            text += f", {_count(rate * factor)} {name}/s"
        if self.total and rate > 0:
            text += f", {_duration((self.total - self.done) / rate)} left"
        text += f" ({_duration(elapsed)} so far)"
        if extra:
            text += "; " + ", ".join(f"{k}={v}" for k, v in extra.items())
        return text

    def _emit(self, **extra) -> str:
        text = self.line(**extra)
        self.log.info("%s", text)
        self.lines.append(text)
        self.last_logged = self.clock()
        return text

    def update(self, n: int = 1, **extra) -> str | None:
        """Add n units done; log (and return) a line if `interval` has passed since the last."""
        self.done += n
        now = self.clock()
        if self.last_logged is None or now - self.last_logged >= self.interval:
            return self._emit(**extra)
        return None

    def finish(self, **extra) -> str:
        return self._emit(**extra)


PROGRESS_BAR = re.compile(r"\d+%\|")  # tqdm's "Running loglikelihood requests:  45%|####5  | 36/80 [...]"


class ThrottledLog(io.TextIOBase):
    """A text stream for a library's stderr: tqdm bar redraws are logged at most every
    `interval` seconds (and at 100%), anything else line by line."""

    def __init__(self, logger: logging.Logger | None = None, interval: float | None = None, clock=time.monotonic):
        self.log = logger or log
        self.interval = INTERVAL if interval is None else interval
        self.clock = clock
        self.last_logged: float | None = None
        self.pending = ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.pending += text
        *segments, self.pending = re.split(r"[\r\n]", self.pending)
        for segment in segments:
            segment = segment.strip()
            if not segment:
                continue
            if PROGRESS_BAR.search(segment):
                now = self.clock()
                if (self.last_logged is None or now - self.last_logged >= self.interval
                        or segment.split("%|")[0].strip().endswith("100")):
                    self.log.info("%s", segment)
                    self.last_logged = now
            else:
                self.log.info("%s", segment)
        return len(text)

    def flush(self) -> None:
        pass
