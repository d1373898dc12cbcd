"""A job reads its files where its inputs are, never where the plan named them.

The workflow plans paths (results/<run>/toy/tokenizer, a corpus's files, a model's hub cache)
and passes the specs holding them to a job as params. On one shared disk the job finds each
file there; with a storage provider (docs/cluster.md, "Clouds and Kubernetes") it finds it
only as a local copy that Snakemake downloaded for it, at <local prefix>/<provider>/<bucket>/
<prefix>/<planned path>. So every planned path a job opens is first mapped onto the input it
is the copy of (`local_copy`); a workflow-made path that is not an input of the job is an
error naming it (the job would read a file storage never gave it), which makes each job
check that it declared what it reads. Paths of the user's own files (absolute paths: a
local corpus, tokenizer or checkpoint) stay as they are: in a storage run the workflow
declares them local() inputs (users_own in workflow/rules/common.smk), so the jobs that read
them run on the submitting machine; an own run for remote jobs keeps them in the bucket.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import replace
from pathlib import PurePosixPath

from lmsat.core.plan import ModelEntry


class UndeclaredInput(RuntimeError):
    """A job was about to read a workflow-made file that is not one of its inputs."""


def _tail(planned: str) -> str:
    """What a local copy of `planned` ends with: the normalised path, a URL's without its
    scheme (s3://bucket/key -> bucket/key, as Snakemake's storage plugins lay their copies)."""
    text = str(planned)
    if "://" in text:
        text = text.split("://", 1)[1]
    return str(PurePosixPath(os.path.normpath(text)))


def is_storage_url(path: str) -> bool:
    return "://" in str(path)


def local_copy(planned: str, inputs: Iterable[str]) -> str:
    """The input of this job that is `planned`: itself on a shared disk, its local copy with a
    storage provider. UndeclaredInput if none is (the rule must declare it)."""
    tail = _tail(planned)
    found = [str(p) for p in inputs if os.path.normpath(str(p)) == tail or _tail(str(p)).endswith("/" + tail)]
    if not found:
        raise UndeclaredInput(
            f"{planned} is not an input of this job, so a job without the planner's disk (a storage run: "
            "docs/cluster.md, 'Clouds and Kubernetes') would not have it. Fix: declare it in the rule's input"
        )
    return min(found, key=len)


def _mapped(path: str, inputs: list[str]) -> str:
    """`path` as this job reads it: an absolute path (the user's own file) as it is, a
    workflow-made path or storage URL as its input's local copy."""
    if os.path.isabs(path) and not is_storage_url(path):
        return path
    return local_copy(path, inputs)


def _flat(inputs) -> list[str]:
    flat = []
    for item in inputs:
        if isinstance(item, (list, tuple)):
            flat += _flat(item)
        else:
            flat.append(str(item))
    return flat


def tokenizer_at(spec: dict, inputs) -> dict:
    """config['tokenizers'] entry `spec` (as the workflow passed it) reading this job's copy:
    a staged hub tokenizer's directory, the toy tokenizer's, a local one's in storage."""
    inputs = _flat(inputs)
    if spec.get("staged"):
        return {**spec, "staged": _mapped(spec["staged"], inputs)}
    if spec["source"] in ("toy", "local"):
        return {**spec, "id": _mapped(spec["id"], inputs)}
    return spec


def corpus_at(spec: dict, inputs) -> dict:
    """config['corpora'] entry `spec` reading this job's copies of its files (or staged prefix)."""
    inputs = _flat(inputs)
    located = dict(spec)
    if spec.get("staged"):
        located["staged"] = _mapped(spec["staged"], inputs)
    if spec.get("files"):
        located["files"] = [_mapped(path, inputs) for path in spec["files"]]
    return located


def model_at(entry: ModelEntry, revision: str, inputs) -> ModelEntry:
    """`entry` reading `revision` from this job's copy: the toy suite's published repository
    (<hub cache>/models--lmsat-toy--<name>), a hub revision's fetched cache, or a local
    checkpoint directory named by a storage URL (<id>/<revision>). A hub revision that the
    pipeline did not fetch (staged by hand, read where it is) and a local directory on disk
    are read where they are."""
    inputs = _flat(inputs)
    if entry.source == "toy":
        cache = entry.cache_dir(revision)
        repository = str(PurePosixPath(cache) / ("models--" + entry.id.replace("/", "--")))
        return replace(entry, hub_cache=os.path.dirname(local_copy(repository, inputs)))
    if entry.source == "hub":
        cache = entry.cache_dir(revision)
        try:
            return replace(entry, hub_cache=local_copy(cache, inputs))
        except UndeclaredInput:
            return entry  # staged by hand: its input is the record of rule record_weights
    if entry.source == "local" and is_storage_url(entry.id):
        directory = local_copy(f"{entry.id.rstrip('/')}/{revision}", inputs)
        return replace(entry, id=os.path.dirname(directory))
    return entry
