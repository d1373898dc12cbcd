"""A run whose files live in object storage (docs/cluster.md, "Clouds and Kubernetes"):
what planning must know and do when Snakemake maps every path to a storage provider
(--default-storage-provider s3 --default-storage-prefix s3://bucket/prefix).

- `recheck_directories`: a workaround for snakemake-storage-plugin-s3 (<= 0.3.6), whose
  storage object remembers a first "not a directory" for good, so that a directory()
  output uploaded by a job is "missing in storage" to the Snakemake process that asked
  before the job ran (the toy hub, the toy tokenizer, a staged tokenizer).
- `reuse_input_sizes`: Snakemake's scheduler asks, at every scheduling round, whether each
  input of each ready job exists and how large it is; through a storage plugin that is two
  requests per file per round, most of a storage run's time in the main process.
- `remember_buckets`: the s3 plugin asks whether the bucket exists before it answers that
  an object is missing and before each upload (a request each, 18% of a toy run's).
- `answer_stored_files`: the s3 plugin asks the storage again for each question Snakemake
  asks of an object (exists, its time, its size: a HEAD each, and a listing to learn whether
  it is a directory); an object this process has just uploaded from a file is asked once.
- The run claim (lmsat.planning.run_claim) kept in the bucket: checked and written there, so
  that a bucket holding another config's run under the same prefix is refused as a run
  directory on disk is.
"""

from __future__ import annotations

from pathlib import Path

from lmsat.planning.run_claim import RUN_CLAIM


def _wrap_method(module: str, owner: str, name: str, wrap) -> bool:
    """Replace method `name` of class `owner` (in `module`) by `wrap(plain)`, `plain` being the
    method as its package defines it (called again, it wraps the package's, not its own
    wrapper). False if the package, the class or the method is not there."""
    import importlib

    try:
        cls = getattr(importlib.import_module(module), owner)
    except (ImportError, AttributeError):
        return False
    plain = getattr(cls, name, None)
    if plain is None:
        return False
    tag = wrap.__qualname__  # the wrapper that made it: another's (two wrap exists) is kept below
    if getattr(plain, "lmsat_tag", None) == tag:
        plain = plain.lmsat_plain
    wrapped = wrap(plain)
    wrapped.lmsat_plain, wrapped.lmsat_tag = plain, tag
    setattr(cls, name, wrapped)
    return True


def recheck_directories(directories: str = r".") -> bool:
    """Make the s3 plugin's storage objects whose query matches the regular expression
    `directories` (the workflow's directory() outputs) look again whether they are a directory
    each time Snakemake asks whether they exist (a listing request: only where it is needed).
    True if the plugin needed it (and now has it)."""
    import re

    pattern = re.compile(directories)

    def wrap(plain):
        def exists(self) -> bool:
            if pattern.search(self.query):
                self._is_dir = None  # a directory may have been uploaded since it last looked
            return plain(self)

        return exists

    return _wrap_method("snakemake_storage_plugin_s3", "StorageObject", "exists", wrap)


def remember_buckets() -> bool:
    """Make the s3 plugin's storage objects ask once per bucket, and endpoint, that it exists.
    A bucket found stays found for the run (nothing in a run deletes one); one not found is
    asked again. True if the plugin has that method (and now remembers)."""
    found: set[tuple[str, str]] = set()

    def wrap(plain):
        def bucket_exists(self) -> bool:
            key = (str(getattr(self.provider.settings, "endpoint_url", None)), self.bucket)
            if key not in found and plain(self):
                found.add(key)
            return key in found

        return bucket_exists

    return _wrap_method("snakemake_storage_plugin_s3", "StorageObject", "bucket_exists", wrap)


def answer_stored_files(files: str = r"$^", directories: str = r"$^") -> bool:
    """Make the s3 plugin's storage objects answer from one request what Snakemake asks of an
    object this process uploaded from a file, and never list to learn that a file is one.

    Snakemake asks an output, after its job, whether it exists, its time and its size, and
    asks them again as the input of each later job (`wait_for_files`, the scheduler's sizes,
    `retrieve_from_storage`, the checksum check): the plugin makes a HEAD request for each
    answer, and a listing, once per storage object, to learn whether it is a directory
    (2,806 HEAD and 851 listing requests of a reduced toy run's 4,817).

    - An object this process stored from a file: the first question after the upload makes
      one HEAD request, whose time and size answer every later question, until this process
      stores or removes the object again. Only this process's own uploads are remembered: an
      object that existed before, or that another process (a remote job) wrote, is asked as
      the plugin asks, so a rewrite elsewhere is never answered from memory.
    - A query that matches `files` and not `directories` is a file: whether it is a directory
      is answered without a listing (the workflow's outputs are files except its directory()
      outputs, which `directories` names; a directory it missed would be "missing", loudly).
    True if the plugin has the methods (and now answers so)."""
    import re

    files_pattern, directories_pattern = re.compile(files), re.compile(directories)
    answers: dict[tuple[str, str, str], tuple[float, int] | None] = {}  # None: stored, not yet asked

    def entry(self) -> tuple[str, str, str]:
        return (str(getattr(self.provider.settings, "endpoint_url", None)), self.bucket, self.key)

    def head(self) -> tuple[float, int]:
        key = entry(self)
        known = answers.get(key)
        if known is None:
            found = self.s3obj()
            found.load()  # one HEAD request: raises the plugin's ClientError where it would
            known = answers[key] = (found.last_modified.timestamp(), found.content_length)
        return known

    def wrap_is_dir(plain):
        def is_dir(self) -> bool:
            if entry(self) in answers or (files_pattern.search(self.query) and not directories_pattern.search(self.query)):
                self._is_dir = False
                return False
            return plain(self)

        return is_dir

    def wrap_answer(index: int | None):
        def wrap(plain):
            def answer(self):
                if entry(self) not in answers:
                    return plain(self)
                try:
                    known = head(self)
                except Exception:  # gone since (or any error): as the plugin asks, with its errors
                    answers.pop(entry(self), None)
                    return plain(self)
                return True if index is None else known[index]

            return answer

        return wrap

    def wrap_change(stored: bool):
        def wrap(plain):
            def change(self):
                answers.pop(entry(self), None)
                plain(self)
                if stored and not self.local_path().is_dir():
                    answers[entry(self)] = None  # its time and size: the storage's, asked once

            return change

        return wrap

    wrapped = [
        _wrap_method("snakemake_storage_plugin_s3", "StorageObject", name, wrap)
        for name, wrap in (("is_dir", wrap_is_dir), ("exists", wrap_answer(None)), ("mtime", wrap_answer(0)),
                           ("size", wrap_answer(1)), ("store_object", wrap_change(True)), ("remove", wrap_change(False)))
    ]
    return all(wrapped)


def reuse_input_sizes() -> bool:
    """Make Snakemake's scheduler ask the size of a ready job's input only until it has one.

    `JobScheduler.update_input_sizes` (Snakemake 9) asks every input of every ready job for
    its existence and size at every scheduling round, only to rank jobs by the size of their
    inputs. An input that exists when a job is ready is a finished output: it keeps its size
    for the rest of the run, so a size once known is reused; a missing one is asked again.
    True if Snakemake has that method (and now reuses sizes)."""

    def wrap(plain):
        async def update_input_sizes(self, jobs):
            known = self._input_sizes
            await plain(self, [job for job in jobs if any(known.get(path) is None for path in job.input)])

        return update_input_sizes

    return _wrap_method("snakemake.scheduling.job_scheduler", "JobScheduler", "update_input_sizes", wrap)


# ---------------------------------------------------------------- the run claim in a bucket


def mirror_for_claim(directory, into: Path) -> bool:
    """Lay out in `into` what the run claim's check (lmsat.planning.run_claim.check_run_claim)
    reads of a run directory kept in storage (`directory`: the storage object of
    results/<run>): the claim and the tables as downloaded, every other file as an empty
    stand-in (only its name counts). False if the plugin cannot list a directory (then only
    the claim is checked, by the caller)."""
    subkeys = getattr(directory, "get_subkeys", None)
    if subkeys is None:
        return False
    into.mkdir(parents=True, exist_ok=True)
    prefix = directory.key + "/"
    for item in subkeys():
        name = item.key[len(prefix):]
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if name in (RUN_CLAIM, RUN_CLAIM + ".tmp") or (name.startswith("tables/") and name.endswith(".csv")):
            item.Object().download_file(str(target))
        else:
            target.touch()
    return True


def check_storage_run_claim(directory, url: str, result: dict, sources: str, replace: bool, claimed: bool = True) -> None:
    """check_run_claim for a run directory kept in storage (`directory`, its storage object;
    `url`: s3://bucket/prefix/results/<run>, as the refusal names it): the same refusals, for
    the same evidence (the claim, the files there, the config hash its tables record)."""
    import tempfile

    from lmsat.errors import ConfigError
    from lmsat.planning.run_claim import check_run_claim

    if replace:
        return
    with tempfile.TemporaryDirectory(prefix="lmsat-claim-") as mirror:
        run_dir = Path(mirror) / "run"
        if not mirror_for_claim(directory, run_dir):
            claim = directory.provider.object(f"{directory.query.rstrip('/')}/{RUN_CLAIM}")
            if not claim.exists():
                return
            claim.set_local_path(run_dir / RUN_CLAIM)
            run_dir.mkdir(parents=True)
            claim.retrieve_object()
        try:
            check_run_claim(run_dir, result, sources, replace, claimed)
        except ConfigError as error:
            refusal = ConfigError.__new__(ConfigError)
            refusal.key = error.key
            ValueError.__init__(refusal, str(error).replace(str(run_dir), url))
            raise refusal from None


def write_storage_run_claim(directory, result: dict, sources: str) -> None:
    """write_run_claim into the storage directory `directory` (results/<run> in the bucket)."""
    import tempfile

    from lmsat.planning.run_claim import write_run_claim

    with tempfile.TemporaryDirectory(prefix="lmsat-claim-") as local:
        write_run_claim(local, result, sources)
        claim = directory.provider.object(f"{directory.query.rstrip('/')}/{RUN_CLAIM}")
        claim.set_local_path(Path(local) / RUN_CLAIM)
        claim.store_object()
