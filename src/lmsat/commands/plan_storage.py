"""`lmsat plan`'s line on a storage run (docs/cluster.md, "Clouds and Kubernetes"): the bytes
its jobs move through the bucket.

Without a shared disk every job downloads each of its inputs from the bucket and uploads each
of its outputs, so a file read by many jobs crosses the network many times: a checkpoint once
up (its fetch) and once down per job that loads it (its analysis, the final revision's
parameter count, head cache and each lm-eval task), a hidden-state cache once up and once
down per metric that reads it (the cache-pair metrics read two more). Counted from the plan's
jobs (the dry run's listing) and the size models of `lmsat plan` (checkpoints: estimated
parameters x the bytes of their stored dtype; caches: lmsat.planning.job_times.CacheShape); the small files
(records, tables, figures, samples) are left out. A toy model's jobs each download its whole
published repository (every revision). What it is not: a bill; a provider charges requests
and egress by its own rules (usually nothing for traffic inside one region).
"""

from __future__ import annotations

from dataclasses import dataclass

# rules whose jobs each download a whole checkpoint; rules that upload one
CHECKPOINT_READERS = ("analyse_checkpoint", "count_model_parameters", "build_head_cache", "evaluate_checkpoint")
FETCHES = ("fetch_checkpoint", "fetch_best_checkpoint")


@dataclass
class Traffic:
    """Bytes a storage run moves: up (job outputs into the bucket) and down (inputs out of it)."""

    up: float = 0.0
    down: float = 0.0
    checkpoint_reads: int = 0  # jobs that download a checkpoint
    cache_reads: int = 0  # hidden-state caches downloaded (a cache-pair metric reads up to three)


def checkpoint_bytes(entry, context) -> float:
    """What a job that loads `entry` downloads: its revision (estimated parameters x the bytes
    of its suite's fetch.stored_dtype), or a toy model's whole repository (float32, every
    revision). `context`: lmsat.planning.job_times.JobContext."""
    from lmsat.checkpoints.fetch import estimated_parameters

    if entry.source == "toy":
        return 4.0 * estimated_parameters(entry) * len(entry.revisions)
    return context.stored_bytes(entry)


def storage_traffic(jobs, context) -> Traffic:
    """The bytes the planned `jobs` (lmsat.commands.plan.Job) move through storage; sizes from
    `lmsat plan`'s models (`context`: lmsat.planning.job_times.JobContext)."""
    from lmsat.planning.job_times import head_cache_bytes

    traffic = Traffic()
    for job in jobs:
        model = context.model(job)
        if model is None:
            continue
        weights = checkpoint_bytes(model, context)
        cache = context.shape(model).bytes
        if job.rule in FETCHES:
            traffic.up += weights
        elif job.rule in CHECKPOINT_READERS:
            traffic.down += weights
            traffic.checkpoint_reads += 1
            if job.rule == "analyse_checkpoint":
                traffic.up += cache
            elif job.rule == "build_head_cache":
                traffic.up += head_cache_bytes(model, context.config["bottleneck"])
        elif job.rule == "compute_checkpoint_metric":
            traffic.down += cache
            traffic.cache_reads += 1
        elif job.rule == "compare_checkpoint_caches":
            traffic.down += 3 * cache  # its own, the final one's and the previous one's
            traffic.cache_reads += 3
        elif job.rule == "train_rank_head":
            traffic.down += head_cache_bytes(model, context.config["bottleneck"])
    return traffic


def storage_line(traffic: Traffic, size) -> str:
    """The line `lmsat plan` prints: what a run through a bucket moves, in and out (`size`:
    bytes in words)."""
    return (f"through storage (a run without a shared disk, docs/cluster.md): {size(traffic.up + traffic.down)} "
            f"({size(traffic.up)} up, {size(traffic.down)} down: {traffic.checkpoint_reads:,} checkpoint downloads, "
            f"{traffic.cache_reads:,} hidden-state cache downloads; small files left out)")
