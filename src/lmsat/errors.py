"""The exceptions that several layers raise and catch, in a leaf that imports nothing.

Each is also importable from the module of its subject (lmsat.data.corpus.CorpusError,
lmsat.checkpoints.fetch.FetchError, lmsat.checkpoints.loading.ModelLoadError,
lmsat.planning.staging.StagingMissing), so `except lmsat.checkpoints.loading.ModelLoadError`
works; the library itself imports them from here, so that a loader and a staging job can
raise each other's errors without importing each other (tests/test_layers.py).
"""

from __future__ import annotations

# How to put a missing staged file in place, in every StagingMissing message.
STAGING_HINT = "run the staging rules first (see docs/cluster.md, 'Compute nodes without internet')"


class ConfigError(ValueError):
    """A config problem, with the offending key and the fix."""

    def __init__(self, key: str, problem: str, fix: str = ""):
        self.key = key
        message = f"config key '{key}': {problem}"
        if fix:
            message += f". Fix: {fix}"
        super().__init__(message)


class ConfigFileError(ConfigError):
    """A config file that cannot be read as a config (not text, not YAML, no mapping of
    config keys): names the file and the fix."""

    def __init__(self, path, problem: str, fix: str):
        self.key, self.problem, self.fix = str(path), problem, fix
        ValueError.__init__(self, f"config file {path}: {problem}. Fix: {fix}")


class CorpusError(ValueError):
    """A corpus that cannot give what the config asks of it."""


class FetchError(RuntimeError):
    """A checkpoint could not be fetched; the message names model, revision and the fix."""


class ModelLoadError(RuntimeError):
    """A checkpoint or tokenizer could not be loaded; the message names model and revision."""


class StagingMissing(FileNotFoundError):
    """A compute job needs a staged file that is not there (staging was skipped)."""

    def __init__(self, what: str, path, rule: str):
        super().__init__(
            f"{what}: staged file {path} is missing, and compute jobs run offline; {STAGING_HINT}: "
            f"`snakemake stage_all` where the network is reachable (rule {rule}), then rerun"
        )


class PublishedRecordError(ValueError):
    """The packaged record of EleutherAI's published evaluations is damaged or incomplete; the
    message names the file, the line and the model, and how to restore it."""


class MonitorError(ValueError):
    """A model, sample or setting that lmsat.standalone.callback cannot watch a training run with;
    raised before training starts, naming the culprit and the fix."""


class ShardedModelError(MonitorError):
    """A model whose weights are sharded across processes (FSDP, DTensor, DeepSpeed ZeRO-3):
    the watch reads the whole model on one process, so it refuses it, naming a parameter."""
