"""Retry with exponential backoff what reaches the network, when its fault is transient.

A leaf: the downloads (lmsat.checkpoints.fetch), the hub dataset stream (lmsat.data.corpus) and staging
(lmsat.planning.staging) retry with one policy, and tell transient faults (connection refused or
reset, timeouts, HTTP 5xx, 429, 408) from permanent ones (unknown repository or revision,
gated repository, offline mode) the same way.

    with_backoff(lambda: snapshot_download(...), RetryPolicy(attempts=3), what="pythia-70m@step1000")
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from lmsat.errors import FetchError

log = logging.getLogger(__name__)

RETRY_STATUS = (408, 429)  # besides 5xx: request timeout, rate limited


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 5  # tries of one download, the first included
    first_wait_s: float = 10.0  # wait before the second try; doubled before each later one
    max_wait_s: float = 300.0  # cap of one wait

    def wait_s(self, failed_attempt: int) -> float:
        """Seconds to wait after the `failed_attempt`-th try (1-based) failed."""
        return min(self.max_wait_s, self.first_wait_s * 2 ** (failed_attempt - 1))


def job_retry_policy(snakemake) -> RetryPolicy:
    """The retry policy of a Snakemake job that reaches the network. Config keys
    fetch.attempts/first_wait_s/max_wait_s are operational: read from the config, never
    passed as params, so retuning them after a hub outage reruns nothing."""
    fetch = snakemake.config["fetch"]
    return RetryPolicy(**{key: fetch[key] for key in ("attempts", "first_wait_s", "max_wait_s")})


def causes(error: BaseException):
    """`error` and the exceptions it was raised from, outermost first."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def _transport_errors() -> tuple[type, ...]:
    """Connection and timeout errors of the HTTP clients huggingface_hub may use."""
    classes: list[type] = [ConnectionError, TimeoutError]
    for module, names in (("httpx2", ("TransportError",)), ("httpx", ("TransportError",)),
                          ("requests", ("ConnectionError", "Timeout"))):
        try:
            imported = __import__(module)
        except ImportError:
            continue
        classes += [getattr(imported, name) for name in names if hasattr(imported, name)]
    return tuple(classes)


def is_transient(error: BaseException) -> bool:
    """Whether trying again later may succeed: network trouble or an overloaded hub, not a
    missing repository or revision, a gated repository or a deliberately offline machine.

    huggingface_hub re-raises a failed hub call as LocalEntryNotFoundError (no cached copy)
    from the original error, so the chain of causes is what decides.
    """
    from huggingface_hub import errors as hub

    permanent = (
        hub.OfflineModeIsEnabled,  # HF_HUB_OFFLINE=1: a ConnectionError, but on purpose
        hub.RepositoryNotFoundError,  # also GatedRepoError
        hub.RevisionNotFoundError,
        hub.EntryNotFoundError,
        hub.DisabledRepoError,
        hub.HFValidationError,
        FetchError,
    )
    transport = _transport_errors()
    for cause in causes(error):
        if isinstance(cause, hub.LocalEntryNotFoundError):  # "not cached": why is in its cause
            continue
        if isinstance(cause, permanent):
            return False
        if isinstance(cause, hub.HfHubHTTPError):
            status = getattr(getattr(cause, "response", None), "status_code", None)
            return status is not None and (status >= 500 or status in RETRY_STATUS)
        if isinstance(cause, transport):
            return True
    return False


def retry_wait(error: BaseException, failed_attempt: int, policy: RetryPolicy, *, what: str) -> float | None:
    """Seconds to wait (logged) before trying `what` again after its `failed_attempt`-th try
    (1-based) failed with `error`; None to give up: a permanent error, or the last try."""
    if failed_attempt >= policy.attempts or not is_transient(error):
        return None
    wait = policy.wait_s(failed_attempt)
    log.warning("%s: try %d of %d failed (%s: %s); trying again in %.0f s",
                what, failed_attempt, policy.attempts, type(error).__name__, error, wait)
    return wait


def with_backoff(call, policy: RetryPolicy, *, what: str, sleep=time.sleep):
    """`call()`, tried up to policy.attempts times while it fails with a transient error."""
    for attempt in range(1, policy.attempts + 1):
        try:
            return call()
        except Exception as error:
            wait = retry_wait(error, attempt, policy, what=what)
            if wait is None:
                raise
            sleep(wait)
