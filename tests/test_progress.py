"""Progress lines of long jobs: done/total, throughput, time left, at most one per interval."""

import logging

from lmsat.bottleneck.ngrams import count_ngrams
from lmsat.runtime.progress import Progress, ThrottledLog


class Clock:
    """A clock the test moves by hand."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_progress_logs_rate_and_time_left_once_per_interval():
    clock = Clock()
    progress = Progress("rank-4 head", 400, "step", per_unit={"tokens": 1024}, interval=60, clock=clock)
    clock.now = 1.0
    assert progress.update(10) == "rank-4 head: 10/400 steps (2%), 10 steps/s, 10.2k tokens/s, 39 s left (1 s so far)"
    clock.now = 30.0
    assert progress.update(100) is None  # within the interval
    clock.now = 61.5
    line = progress.update(90, train_loss="3.2100")
    assert line.startswith("rank-4 head: 200/400 steps (50%)") and line.endswith("; train_loss=3.2100")
    assert "62 s left" in line
    assert progress.finish().startswith("rank-4 head: 200/400")
    assert len(progress.lines) == 3


def test_resumed_progress_counts_only_this_calls_throughput():
    clock = Clock()
    progress = Progress("head", 100, "step", initial=50, interval=0, clock=clock)
    clock.now = 10.0
    assert progress.update(10).startswith("head: 60/100 steps (60%), 1 steps/s, 40 s left")


def test_ngram_counting_reports_tokens_done():
    clock = Clock()
    progress = Progress("5-gram counting", None, "token", interval=0, clock=clock)
    chunks = [[1, 2, 3, 4, 5, 6], [7, 1, 2, 3, 4, 5]]
    clock.now = 2.0
    counts = count_ngrams(chunks, order=5, vocab_size=8, progress=progress)
    assert counts.n_tokens == 12
    assert progress.lines[-1].startswith("5-gram counting: 12 tokens, 6 tokens/s")


def test_throttled_log_keeps_tqdm_redraws_to_one_line_per_interval(caplog):
    clock = Clock()
    stream = ThrottledLog(logging.getLogger("lm-eval-test"), interval=60, clock=clock)
    with caplog.at_level(logging.INFO, logger="lm-eval-test"):
        stream.write("Running loglikelihood requests:   0%|          | 0/80 [00:00<?, ?it/s]")
        for done in range(1, 80):
            clock.now = done
            stream.write(f"\rRunning loglikelihood requests:  {done * 100 // 80}%|#  | {done}/80 [00:{done:02d}<00:10, 1.0it/s]")
        stream.write("\rRunning loglikelihood requests: 100%|##########| 80/80 [01:20<00:00, 1.0it/s]\n")
        stream.write("a warning line\n")
    messages = [record.getMessage() for record in caplog.records]
    assert [m.split("|")[-1].split("[")[0].strip() for m in messages[:-1]] == ["0/80", "60/80", "80/80"]
    assert messages[-1] == "a warning line"
