"""An own run kept in a bucket: a local model's (or tokenizer's) `id` given as a storage URL
(`id: s3://bucket/runs/mine`), for a run without a shared disk (docs/cluster.md, "Clouds and
Kubernetes").

Planning reads a local run folder: the checkpoint directories `discover` finds, each one's
config.json (the architecture, the context), the names of its weight files. For a URL it reads
the same from a mirror that holds the folder's listing: the small files (config.json,
trainer_state.json, tokenizer files: up to SMALL_BYTES each) downloaded, every other file (the
weights) an empty stand-in with its name. The plan keeps the URL: the workflow gives each job
the revisions it loads as storage inputs (common.smk: weights_of), downloaded for it.

Access: S3 through boto3 (installed with the s3 storage plugin, `pip install -e ".[cloud]"`),
with the endpoint and credentials the plugin reads from the environment
(SNAKEMAKE_STORAGE_S3_ENDPOINT_URL, _ACCESS_KEY, _SECRET_KEY; AWS's own variables and files
otherwise) or the ones the workflow passes on from Snakemake's --storage-s3-* settings.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import replace
from pathlib import Path

from lmsat.core.job_inputs import is_storage_url
from lmsat.errors import ConfigError

SMALL_BYTES = 1_000_000  # files planning reads whole; a larger one is a stand-in


class S3Folders:
    """Lists and downloads the objects under an s3:// URL."""

    def __init__(self, endpoint_url: str | None = None, access_key: str | None = None, secret_key: str | None = None):
        env = os.environ.get
        self.endpoint_url = endpoint_url or env("SNAKEMAKE_STORAGE_S3_ENDPOINT_URL")
        self.access_key = access_key or env("SNAKEMAKE_STORAGE_S3_ACCESS_KEY")
        self.secret_key = secret_key or env("SNAKEMAKE_STORAGE_S3_SECRET_KEY")

    def _client(self):
        try:
            import boto3
        except ImportError:
            raise ConfigError("suites", "a model or tokenizer id is an s3:// URL, and boto3 is not installed",
                              'pip install -e ".[cloud]" (the s3 storage plugin and boto3)') from None
        return boto3.client("s3", endpoint_url=self.endpoint_url, aws_access_key_id=self.access_key,
                            aws_secret_access_key=self.secret_key)

    def files(self, url: str) -> dict[str, int]:
        """{name relative to `url`: size} of every object under it."""
        bucket, _, prefix = url.removeprefix("s3://").partition("/")
        prefix = prefix.strip("/") + "/"
        found = {}
        for page in self._client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for item in page.get("Contents", []):
                if not item["Key"].endswith("/"):
                    found[item["Key"][len(prefix):]] = item["Size"]
        return found

    def download(self, url: str, name: str, target: Path) -> None:
        bucket, _, prefix = url.removeprefix("s3://").partition("/")
        self._client().download_file(bucket, f"{prefix.strip('/')}/{name}", str(target))


def mirror(url: str, into: Path, folders) -> Path:
    """`into` laid out as the folder at `url` is, for planning to read (see the module)."""
    try:
        files = folders.files(url)
    except ConfigError:
        raise
    except Exception as error:  # botocore's errors: no bucket, no credentials, no server
        raise ConfigError("suites", f"cannot list {url} ({type(error).__name__}: {error})",
                          "check the URL, and the endpoint and credentials (SNAKEMAKE_STORAGE_S3_ENDPOINT_URL, "
                          "SNAKEMAKE_STORAGE_S3_ACCESS_KEY, SNAKEMAKE_STORAGE_S3_SECRET_KEY, or --storage-s3-*)") from None
    into.mkdir(parents=True, exist_ok=True)
    for name, size in files.items():
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if size <= SMALL_BYTES:
            folders.download(url, name, target)
        else:
            target.touch()
    return into


def url_ids(config: dict) -> list[tuple[str, ...]]:
    """Where `config` names a storage URL as a local model's or tokenizer's id: config paths."""
    found = [("suites", suite, "models", index) for suite, s in config.get("suites", {}).items()
             for index, model in enumerate(s.get("models", [])) if model.get("source") == "local"
             and is_storage_url(model.get("id") or "")]
    found += [("tokenizers", name) for name, spec in config.get("tokenizers", {}).items()
              if spec.get("source") == "local" and is_storage_url(spec.get("id") or "")]
    return found


def _at(config: dict, where: tuple) -> dict:
    item = config
    for key in where:
        item = item[key]
    return item


def plan_with_mirrors(config: dict, plan_config, folders=None):
    """`plan_config(config)` (lmsat.planning.load's planning) with every storage-URL id read
    from a mirror of its folder, the plan's ids then the URLs again."""
    places = url_ids(config)
    if not places:
        return plan_config(config)
    for where in places:
        url = _at(config, where)["id"]
        if not url.startswith("s3://"):
            raise ConfigError(".".join(map(str, where)) + ".id", f"{url}: only s3:// URLs are read at planning",
                              "keep the run in an S3 bucket (any S3 API: AWS, MinIO, Cloud Storage's)")
    folders = folders or S3Folders()
    with tempfile.TemporaryDirectory(prefix="lmsat-bucket-runs-") as scratch:
        local = {}
        mirrored = {**config, "suites": {k: {**s, "models": [dict(m) for m in s.get("models", [])]}
                                         for k, s in config.get("suites", {}).items()},
                    "tokenizers": {k: dict(v) for k, v in config.get("tokenizers", {}).items()}}
        for index, where in enumerate(places):
            url = _at(config, where)["id"]
            if url not in local:
                local[url] = str(mirror(url, Path(scratch) / str(index), folders))
            _at(mirrored, where)["id"] = local[url]
        plan = plan_config(mirrored)
    back = {path: url for url, path in local.items()}
    for suite in plan.config["suites"].values():
        for model in suite.get("models", []):
            model["id"] = back.get(model.get("id"), model.get("id"))
    for spec in plan.config["tokenizers"].values():
        spec["id"] = back.get(spec.get("id"), spec.get("id"))
    relabel = lambda entries: {n: replace(e, id=back.get(e.id, e.id)) for n, e in entries.items()}  # noqa: E731
    return replace(plan, models=relabel(plan.models), trained=relabel(plan.trained))
