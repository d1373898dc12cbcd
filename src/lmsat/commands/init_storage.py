"""`lmsat init --storage-url s3://bucket/prefix`: an own run's config for a run without a shared
disk (docs/cluster.md, "Clouds and Kubernetes"). lmsat init reads the run on this machine (its
checkpoints' configs, trainer states and tokenizer, the eval text); the config it writes names
the run folders and the tokenizer by where they will be in the bucket, and it prints the
commands that upload them there (planning reads them from the bucket: lmsat.planning.bucket_runs).
The eval text stays a file of this machine (its sample job runs here, Snakemake's local())."""

from __future__ import annotations

import copy
import shlex
from pathlib import Path


def is_url(text: str) -> bool:
    """A storage URL given where a path is expected (argparse's Path turns s3:// into s3:/)."""
    return "://" in text or text.startswith("s3:/")


def to_bucket(config: dict, url: str) -> tuple[dict, list[tuple[Path, str]]]:
    """`config` with its local models' and tokenizer's ids under `url`, and the (local folder,
    URL) pairs to upload: each run folder to url/<its name>, the tokenizer with the run that
    holds it (else to url/tokenizer)."""
    url = url.rstrip("/")
    config = copy.deepcopy(config)
    uploads: list[tuple[Path, str]] = []
    places: dict[Path, str] = {}
    for suite in config["suites"].values():
        for model in suite["models"]:
            folder = Path(model["id"])
            places[folder] = model["id"] = f"{url}/{folder.name}"
            uploads.append((folder, model["id"]))
    for spec in config["tokenizers"].values():
        if spec["source"] != "local":
            continue
        directory = Path(spec["id"])
        holder = next((f for f in places if directory == f or f in directory.parents), None)
        if holder is not None:
            spec["id"] = f"{places[holder]}/{directory.relative_to(holder).as_posix()}".rstrip("/.")
        else:
            spec["id"] = f"{url}/tokenizer"
            uploads.append((directory, spec["id"]))
    return config, uploads


def upload_commands(uploads: list[tuple[Path, str]]) -> str:
    """The commands that put the run where its config says (AWS's CLI; any S3 client does)."""
    return "".join(f"  aws s3 sync {shlex.quote(str(folder))} {shlex.quote(target)}  # --endpoint-url URL for an S3 "
                   "API other than AWS's\n" for folder, target in uploads)
