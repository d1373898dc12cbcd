"""A local S3-compatible server for the storage runs (tests/test_storage.py,
benchmarks/storage_run.py): moto's standalone server (`moto[server]` from PyPI), run in a
thread of this process on a free port of 127.0.0.1.

Why moto: it is a pure-Python package on PyPI (CI and `make test` install it with pip, no
binary to download, unlike MinIO), it implements the S3 calls that Snakemake's s3 storage
plugin makes (HeadBucket, CreateBucket, HeadObject, GetObject, PutObject, ListObjectsV2,
DeleteObject) over real HTTP with boto3 on the other side, and its buckets live in this
process's memory: stopping the server (a fault: every request is refused) and starting it
again on the same port brings back the same buckets, as a storage service that was
unreachable for a while and comes back.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager

# Credentials the plugin sends (moto accepts any); the region moto's buckets are made in.
ACCESS_KEY, SECRET_KEY, REGION = "lmsat-test", "lmsat-test-secret", "us-east-1"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class S3Server:
    """moto's S3 on http://127.0.0.1:<port>; start() and stop() as often as a test needs."""

    def __init__(self, port: int | None = None):
        self.port = port or free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._server = None

    def start(self) -> S3Server:
        from moto.server import ThreadedMotoServer

        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self._server.start()
        deadline = time.monotonic() + 30
        while True:  # listening: a request now is answered, not refused
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    def empty(self, bucket: str) -> None:
        """An empty `bucket` (moto keeps its buckets in this process, across servers and tests)."""
        client = self.client()
        if bucket not in [b["Name"] for b in client.list_buckets()["Buckets"]]:
            client.create_bucket(Bucket=bucket)
        for key in self.keys(bucket):
            client.delete_object(Bucket=bucket, Key=key)

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=ACCESS_KEY,
                            aws_secret_access_key=SECRET_KEY, region_name=REGION)

    def make_bucket(self, bucket: str) -> None:
        self.client().create_bucket(Bucket=bucket)

    def keys(self, bucket: str, prefix: str = "") -> dict[str, int]:
        """{key: size} of every object under `prefix`."""
        found = {}
        for page in self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            found.update({item["Key"]: item["Size"] for item in page.get("Contents", [])})
        return found

    def last_modified(self, bucket: str, prefix: str = "") -> dict[str, float]:
        """{key: upload time} of every object under `prefix` (an upload again is a later time)."""
        found = {}
        for page in self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            found.update({item["Key"]: item["LastModified"].timestamp() for item in page.get("Contents", [])})
        return found

    def environment(self) -> dict[str, str]:
        """The variables a Snakemake process (and its jobs) reads the plugin's credentials from."""
        return {"SNAKEMAKE_STORAGE_S3_ACCESS_KEY": ACCESS_KEY, "SNAKEMAKE_STORAGE_S3_SECRET_KEY": SECRET_KEY,
                "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_DEFAULT_REGION": REGION}


@contextmanager
def s3_server() -> Iterator[S3Server]:
    server = S3Server().start()
    try:
        yield server
    finally:
        server.stop()
