"""A run without a shared disk (issue 52): every job in a scratch directory of its own, every
file through an S3 bucket (moto's server on 127.0.0.1, tests/s3_server.py says why).

Snakemake runs as it does for Kubernetes, Google Batch or AWS Batch: `--shared-fs-usage none`,
`--job-deploy-sources` (each job deploys the workflow from the source archive in the bucket),
`--default-storage-provider s3`; each job is started by tests/storage/scratch_job.sh (the
cluster-sync executor) in an empty directory of its own. A job that reads a file it did not
declare (a sibling of an input, a params: path, the working directory's contents) fails
there; a file it writes without declaring it never reaches the bucket, so the jobs after it
fail; and what each job left in its directory is checked against its outputs.

The reduced config (conftest.small_toy_config: two toy models, two checkpoints each, every
stage of the default config) runs every rule the default run does. Its tables must equal
those of a local run of the same config; afterwards the bucket holds every product and the
working directory none outside Snakemake's storage cache.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, small_toy_config
from golden_tables import RECORDED, compare_tables, is_provenance, read_csv_text
from s3_server import S3Server

BUCKET, PREFIX = "lmsat-test", "lmsat"
RUN_BUCKET = "lmsat-run"  # the storage run's (the other tests empty BUCKET)
SCRATCH_JOB = ROOT / "tests" / "storage" / "scratch_job.sh"
# The storage run takes minutes per job stage (each job starts a Snakemake of its own): .ci/run
# sets this; `make test` runs the rest of this file.
STORAGE_RUN = os.environ.get("LMSAT_STORAGE_RUN") == "1"
needs_storage_run = pytest.mark.skipif(not STORAGE_RUN, reason="the storage run: LMSAT_STORAGE_RUN=1 (as .ci/run sets)")


@pytest.fixture
def server():
    s3 = S3Server().start()
    s3.empty(BUCKET)
    yield s3
    s3.stop()


def provider(server: S3Server, local: Path):
    """snakemake-storage-plugin-s3's provider for `server`, as Snakemake makes it."""
    import logging

    from snakemake_storage_plugin_s3 import StorageProvider, StorageProviderSettings

    from s3_server import ACCESS_KEY, SECRET_KEY

    settings = StorageProviderSettings(endpoint_url=server.endpoint, access_key=ACCESS_KEY, secret_key=SECRET_KEY)
    return StorageProvider(logger=logging.getLogger("s3"), local_prefix=local, settings=settings)


# ---------------------------------------------------------------- a job reads its inputs


def test_a_job_reads_a_planned_path_as_its_inputs_local_copy_and_refuses_an_undeclared_one():
    from lmsat.core.job_inputs import UndeclaredInput, corpus_at, local_copy, tokenizer_at

    copy = ".snakemake/storage/s3/bucket/lmsat/results/default/corpora/synthetic/eval.txt"
    assert local_copy("results/default/corpora/synthetic/eval.txt", [copy, "other"]) == copy
    assert local_copy("results/default/x.txt", ["results/default/x.txt"]) == "results/default/x.txt"  # one disk
    with pytest.raises(UndeclaredInput, match="results/default/corpora/synthetic/train.txt is not an input"):
        local_copy("results/default/corpora/synthetic/train.txt", [copy])
    with pytest.raises(UndeclaredInput):  # a path that merely ends alike is another file
        local_copy("synthetic/eval.txt", [".snakemake/storage/s3/b/p/xsynthetic/eval.txt"])
    spec = dict(type="synthetic", files=["results/default/corpora/synthetic/eval.txt"], max_documents=0)
    assert corpus_at(spec, [[copy]])["files"] == [copy]
    own = dict(type="text_files", files=["/data/mine.txt"])
    assert corpus_at(own, [])["files"] == ["/data/mine.txt"]  # the user's own file: where it is
    tokenizer = ".snakemake/storage/s3/bucket/lmsat/results/default/toy/tokenizer"
    assert tokenizer_at(dict(source="toy", id="results/default/toy/tokenizer"), [tokenizer])["id"] == tokenizer
    staged = dict(source="hub", id="EleutherAI/pythia-70m", staged="results/default/staged/tokenizers/neox")
    assert tokenizer_at(staged, ["results/default/staged/tokenizers/neox"])["staged"] == staged["staged"]


def test_a_job_loads_a_model_from_its_inputs_local_copy(default_config):
    from dataclasses import replace

    from lmsat.core.job_inputs import model_at
    from lmsat.core.plan import ModelEntry

    base = dict(name="toy-d16", suite="toy", id="lmsat-toy/toy-d16", hidden_size=16, vocab_size=0, n_params=0,
                tokenizer="toy", tokens_per_step=1, revisions=("step0", "step16"), steps=(0, 16), allow_pickle=False,
                trust_remote_code=False, key="k")
    toy = ModelEntry(source="toy", hub_cache="results/default/toy/hub", **base)
    local_copy = ".snakemake/storage/s3/b/lmsat/results/default/toy/hub/models--lmsat-toy--toy-d16"
    assert model_at(toy, "step16", [local_copy, "x.json"]).hub_cache == ".snakemake/storage/s3/b/lmsat/results/default/toy/hub"
    hub = replace(toy, source="hub", hub_cache="results/default/weights/toy-d16/{revision}")
    fetched = ".snakemake/storage/s3/b/lmsat/results/default/weights/toy-d16/step16"
    assert model_at(hub, "step16", [fetched]).cache_dir("step16") == fetched
    assert model_at(hub, "step16", ["results/default/weights/records/toy-d16/step16.json"]) == hub  # staged by hand
    bucket = replace(toy, source="local", id="s3://runs/mine", hub_cache="")
    revision = ".snakemake/storage/s3/runs/mine/checkpoint-16"
    assert model_at(bucket, "checkpoint-16", [revision]).pretrained_source("checkpoint-16")[0] == revision
    on_disk = replace(bucket, id="/data/runs/mine")
    assert model_at(on_disk, "checkpoint-16", []) == on_disk


# ---------------------------------------------------------------- the s3 plugin and the claim in a bucket


def test_a_directory_uploaded_after_snakemake_asked_for_it_is_found(server, tmp_path):
    """snakemake-storage-plugin-s3 0.3.6 remembered a first "not a directory": the toy hub, a
    directory() output, was "missing in storage" after its job had uploaded it."""
    from lmsat.planning.storage import recheck_directories

    objects = provider(server, tmp_path)
    directory = objects.object(f"s3://{BUCKET}/lmsat/results/default/toy/tokenizer")
    assert directory.exists() is False
    server.client().put_object(Bucket=BUCKET, Key="lmsat/results/default/toy/tokenizer/tokenizer.json", Body=b"{}")
    assert recheck_directories(r"/toy/tokenizer$")  # as common.smk names its directory() outputs
    assert directory.exists() is True


def test_the_bucket_is_asked_for_once_while_it_exists(server, tmp_path, monkeypatch):
    """The s3 plugin asked whether the bucket exists before each "missing" answer and each
    upload: 1,052 of a reduced toy run's 5,825 requests."""
    from snakemake_storage_plugin_s3 import StorageObject

    from lmsat.planning.storage import remember_buckets

    asked, plain = [], StorageObject.bucket_exists

    def counted(self):
        asked.append(self.bucket)
        return plain(self)

    monkeypatch.setattr(StorageObject, "bucket_exists", counted)
    assert remember_buckets()
    objects = provider(server, tmp_path)
    for name in ("a.csv", "b.csv", "c.csv"):
        assert objects.object(f"s3://{BUCKET}/{PREFIX}/results/default/{name}").exists() is False
    assert asked == [BUCKET]
    elsewhere = objects.object("s3://lmsat-no-such-bucket/results/default/a.csv")
    assert elsewhere.bucket_exists() is False and elsewhere.bucket_exists() is False  # asked again each time
    server.make_bucket("lmsat-no-such-bucket")
    assert elsewhere.bucket_exists() is True and elsewhere.bucket_exists() is True
    assert asked == [BUCKET] + ["lmsat-no-such-bucket"] * 3
    server.client().delete_bucket(Bucket="lmsat-no-such-bucket")  # moto's buckets outlive its servers


def requests_of(objects) -> list[str]:
    """The S3 requests the plugin's client sends from now on, as `HEAD key`, `LIST prefix`, ..."""
    sent = []

    def record(params, model, **_):
        sent.append(f"{model.name} {params.get('Key') or params.get('Prefix')}")

    objects.s3c.meta.client.meta.events.register("before-parameter-build.s3", record)
    return sent


def test_an_object_this_process_uploaded_is_asked_once_and_a_file_never_listed(server, tmp_path, monkeypatch):
    """The s3 plugin made a HEAD request for each question about an object (exists, time, size)
    and listed, once per storage object, whether it is a directory: 2,806 HEAD and 851 listing
    requests of a reduced toy run's 4,817, most about files that process had just uploaded."""
    from snakemake_storage_plugin_s3 import StorageObject

    from lmsat.planning.storage import answer_stored_files

    for name in ("is_dir", "exists", "mtime", "size", "store_object", "remove"):
        monkeypatch.setattr(StorageObject, name, StorageObject.__dict__[name])  # put back after the test
    prefix = f"s3://{BUCKET}/{PREFIX}"
    assert answer_stored_files(files=rf"^{re.escape(prefix)}/results/", directories=r"/toy/tokenizer$")
    objects = provider(server, tmp_path)
    sent = requests_of(objects)
    local = tmp_path / "loss.csv"
    local.write_text("step,loss\n0,5.5\n")
    query = f"{prefix}/results/default/tables/loss.csv"

    def fresh():  # Snakemake makes a storage object per job that names the file
        made = objects.object(query)
        made.set_local_path(local)
        return made

    assert fresh().exists() is False and [r for r in sent if r.startswith(("HeadObject", "ListObjects"))] == [
        f"HeadObject {PREFIX}/results/default/tables/loss.csv"]  # no listing
    uploader = fresh()
    uploader.store_object()
    sent.clear()
    stored = server.client().head_object(Bucket=BUCKET, Key=f"{PREFIX}/results/default/tables/loss.csv")
    for asker in (uploader, fresh(), fresh()):  # the job that made it, then two later jobs
        assert asker.exists() is True
        assert asker.mtime() == stored["LastModified"].timestamp() and asker.size() == len(local.read_bytes())
        asker.retrieve_object()
    assert [r for r in sent if r.startswith("HeadObject")] == [f"HeadObject {PREFIX}/results/default/tables/loss.csv"]
    assert not [r for r in sent if r.startswith("ListObjects")]
    local.write_text("step,loss\n0,5.5\n16,4.1\n")  # a rerun of its job uploads it again
    uploader.store_object()
    assert fresh().size() == len(local.read_bytes())
    server.client().put_object(Bucket=BUCKET, Key=f"{PREFIX}/results/default/tables/other.csv", Body=b"written elsewhere")
    fresh().remove()  # (the plugin deletes a bucket it empties: other.csv keeps it)
    assert fresh().exists() is False  # removed here: asked again
    sent.clear()
    elsewhere = objects.object(f"{prefix}/results/default/tables/other.csv")
    assert elsewhere.size() == 17 and elsewhere.size() == 17  # not this process's upload: asked each time
    assert sent.count(f"HeadObject {PREFIX}/results/default/tables/other.csv") == 2
    directory = objects.object(f"{prefix}/results/default/toy/tokenizer")
    server.client().put_object(Bucket=BUCKET, Key=f"{PREFIX}/results/default/toy/tokenizer/tokenizer.json", Body=b"{}")
    assert directory.exists() is True  # a directory() output: listed, as the plugin does


def test_every_directory_output_of_the_workflow_is_one_that_storage_lists():
    """answer_stored_files takes the run's other files for files: a directory() output that
    common.smk's DIRECTORY_OUTPUTS missed would be "missing in storage" after its job."""
    import ast

    rules = {path.name: path.read_text() for path in (ROOT / "workflow" / "rules").glob("*.smk")}
    literal = re.search(r"^DIRECTORY_OUTPUTS = (\(.*?\n\))", rules["common.smk"], re.S | re.M).group(1)
    directories = re.compile(ast.literal_eval(literal))
    declared = [pattern for text in rules.values()
                for pattern in re.findall(r'(?:directory|fetched_checkpoint)\(\s*"(<results>/[^"]+)"', text)]
    examples = {"model": "toy-d16", "revision": "step16", "tokenizer": "pythia", "task": "lambada_openai"}
    assert len(declared) >= 6, declared
    for pattern in declared:
        path = "s3://b/lmsat/" + pattern.replace("<results>", "results/default").format(**examples)
        assert directories.search(path), pattern  # (a file it matches is only listed, as the plugin does)

def test_the_scheduler_asks_an_inputs_size_once_it_exists_and_again_while_it_is_missing(monkeypatch):
    """Snakemake's scheduler asked every ready job's inputs for their existence and size at
    every scheduling round: two storage requests per file per round, 60% of a storage run's
    main process (py-spy, the reduced toy config: 20,269 requests for 110 jobs)."""
    import asyncio
    from types import SimpleNamespace

    from snakemake.scheduling.job_scheduler import JobScheduler

    from lmsat.planning.storage import reuse_input_sizes

    asked = []

    class StorageFile(str):  # what the scheduler calls of an input (snakemake.io._IOFile)
        present = True

        async def exists(self):
            asked.append(("exists", str(self)))
            return self.present

        async def size(self):
            asked.append(("size", str(self)))
            return 10

    monkeypatch.setattr(JobScheduler, "update_input_sizes", JobScheduler.update_input_sizes)
    assert reuse_input_sizes()
    cache, missing = StorageFile("results/default/cache/toy-d16/step0.h5"), StorageFile("results/default/later.h5")
    missing.present = False
    scheduler = SimpleNamespace(_input_sizes={})
    jobs = [SimpleNamespace(input=[cache]), SimpleNamespace(input=[cache, missing])]
    for _ in range(3):  # three scheduling rounds with the same ready jobs
        asyncio.run(JobScheduler.update_input_sizes(scheduler, jobs))
    assert asked.count(("size", str(cache))) == 1 + 2  # the second job's round asks its inputs again
    assert asked.count(("exists", str(missing))) == 3 and scheduler._input_sizes[missing] is None
    missing.present = True  # its job has made it
    asyncio.run(JobScheduler.update_input_sizes(scheduler, jobs))
    asked.clear()
    asyncio.run(JobScheduler.update_input_sizes(scheduler, jobs))
    assert asked == [] and scheduler._input_sizes == {cache: 10, missing: 10}


def test_a_bucket_holding_another_configs_run_is_refused_as_a_run_directory_is(server, tmp_path, default_config):
    from lmsat.errors import ConfigError
    from lmsat.planning.config_files import load_yaml, result_config
    from lmsat.planning.load import load_plan
    from lmsat.planning.storage import check_storage_run_claim, write_storage_run_claim

    from conftest import SCHEMA

    schema = load_yaml(SCHEMA)
    ours = result_config(load_plan(default_config, schema).config, schema)
    theirs = result_config(load_plan({**default_config, "seed": 1}, schema).config, schema)
    url = f"s3://{BUCKET}/lmsat/results/default"
    run = provider(server, tmp_path / "copies").object(url)
    check_storage_run_claim(run, url, ours, "config/mine.yaml", replace=False)  # an empty prefix: nothing to lose
    write_storage_run_claim(run, theirs, "config/theirs.yaml")
    server.client().put_object(Bucket=BUCKET, Key="lmsat/results/default/tables/loss.csv", Body=b"model\n")
    with pytest.raises(ConfigError) as refused:
        check_storage_run_claim(run, url, ours, "config/mine.yaml", replace=False)
    message = str(refused.value)
    assert f"{url}/ holds the finished outputs of run 'default' made by config/theirs.yaml" in message
    assert "seed: 1 there, 0 now" in message and "replace_results: true" in message and "lmsat-claim-" not in message
    check_storage_run_claim(run, url, theirs, "config/theirs.yaml", replace=False)  # its own config: planned
    check_storage_run_claim(run, url, ours, "config/mine.yaml", replace=True)  # replacing them, as asked
    server.client().delete_object(Bucket=BUCKET, Key="lmsat/results/default/run_config.json")
    with pytest.raises(ConfigError, match=f"{url}/ holds finished outputs .* but no claim"):
        check_storage_run_claim(run, url, ours, "config/mine.yaml", replace=False)


# ---------------------------------------------------------------- an own run kept in a bucket


def upload(server: S3Server, folder: Path, url: str) -> None:
    """`aws s3 sync folder url`, with boto3."""
    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    for path in folder.rglob("*"):
        if path.is_file():
            server.client().upload_file(str(path), bucket, f"{prefix}/{path.relative_to(folder).as_posix()}")


def test_an_own_run_in_a_bucket_is_configured_by_init_and_planned_from_the_bucket(server, tmp_path, monkeypatch):
    """Issue 52 item 3: lmsat init --storage-url writes the config for the bucket and says how to
    upload; planning reads the run's checkpoints from the bucket; each job that loads a revision
    downloads it as a storage input; a URL in init's place of the run folder says what to do."""
    from lmsat.planning.bucket_runs import S3Folders
    from lmsat.planning.config_files import load_yaml
    from lmsat.planning.load import load_plan

    from conftest import SCHEMA
    from s3_server import ACCESS_KEY, SECRET_KEY
    from test_own_run import train, write_text

    train(tmp_path / "out", write_text(tmp_path / "train.txt", 200, seed=0), max_steps=4, save_steps=2)
    write_text(tmp_path / "eval.txt", 100, seed=1)
    init = [sys.executable, "-m", "lmsat", "init", str(tmp_path / "out"), "--text", str(tmp_path / "eval.txt")]
    refused = subprocess.run([sys.executable, "-m", "lmsat", "init", f"s3://{BUCKET}/runs/out", "--text",
                              str(tmp_path / "eval.txt")], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert refused.returncode == 2 and "--storage-url s3://bucket/prefix" in refused.stderr, refused.stderr
    local = subprocess.run(init + ["-o", "local.yaml"], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    written = subprocess.run(init + ["-o", "bucket.yaml", "--storage-url", f"s3://{BUCKET}/runs"], capture_output=True,
                             text=True, cwd=tmp_path, timeout=600)
    assert local.returncode == 0 and written.returncode == 0, local.stderr + written.stderr
    assert f"aws s3 sync {tmp_path / 'out'} s3://{BUCKET}/runs/out" in written.stdout
    config = load_yaml(tmp_path / "bucket.yaml")
    ((suite,),) = [config["suites"].values()]
    assert [m["id"] for m in suite["models"]] == [f"s3://{BUCKET}/runs/out"]
    assert config["tokenizers"]["own"]["id"].startswith(f"s3://{BUCKET}/runs/out/checkpoint-")
    upload(server, tmp_path / "out", f"s3://{BUCKET}/runs/out")
    folders = S3Folders(server.endpoint, ACCESS_KEY, SECRET_KEY)
    schema = load_yaml(SCHEMA)
    in_bucket = load_plan(config, schema, folders=folders)
    on_disk = load_plan(load_yaml(tmp_path / "local.yaml"), schema)
    ((model,),), ((disk_model,),) = [in_bucket.models.values()], [on_disk.models.values()]
    assert model.id == f"s3://{BUCKET}/runs/out" and model.revisions == disk_model.revisions == ("checkpoint-2", "checkpoint-4")
    assert (model.hidden_size, model.num_layers, model.vocab_size) == (disk_model.hidden_size, disk_model.num_layers,
                                                                       disk_model.vocab_size)
    # the workflow's jobs: each revision a storage input of the job that loads it
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    storage_clone(checkout)
    (checkout / "config" / "bucket.yaml").write_text((tmp_path / "bucket.yaml").read_text())
    env = run_environment(server, tmp_path)
    planned = snakemake(checkout, "config/bucket.yaml", "-n", *storage_arguments(server, bucket=BUCKET), env=env)
    assert planned.returncode == 0, planned.stderr[-4000:]
    assert f"s3://{BUCKET}/runs/out/checkpoint-4 (retrieve from storage)" in planned.stdout + planned.stderr


# ---------------------------------------------------------------- lmsat plan: bytes through storage


def test_lmsat_plan_counts_the_bytes_a_storage_run_moves(tmp_path):
    from lmsat.checkpoints.fetch import estimated_parameters
    from lmsat.commands.plan import dry_run, load
    from lmsat.commands.plan_storage import storage_traffic
    from lmsat.planning.job_times import JobContext, head_cache_bytes

    configfile = tmp_path / "small.yaml"
    configfile.write_text(yaml.safe_dump(small_toy_config()))
    plan, jobs = load(str(configfile)), dry_run(str(configfile), None, tmp_path)
    context = JobContext(plan.config, plan.models, jobs)
    traffic = storage_traffic(jobs, context)
    readers = [j for j in jobs if j.rule in ("analyse_checkpoint", "count_model_parameters", "build_head_cache",
                                             "evaluate_checkpoint")]
    assert traffic.checkpoint_reads == len(readers) > 0
    repository = {name: 4 * estimated_parameters(m) * len(m.revisions) for name, m in plan.models.items()}
    caches = {name: context.shape(m).bytes for name, m in plan.models.items()}
    analysed = [j.wildcards["model"] for j in jobs if j.rule == "analyse_checkpoint"]
    heads = [j.wildcards["model"] for j in jobs if j.rule == "build_head_cache"]
    assert traffic.up == pytest.approx(sum(caches[m] for m in analysed)
                                       + sum(head_cache_bytes(plan.models[m], plan.config["bottleneck"]) for m in heads))
    assert traffic.down >= sum(repository[j.wildcards["model"]] for j in readers)
    printed = subprocess.run([sys.executable, "-m", "lmsat", "plan", "--configfile", str(configfile), "--directory",
                              str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert printed.returncode == 0, printed.stderr[-3000:]
    line = printed.stdout.splitlines()[-1] if "through storage" in printed.stdout.splitlines()[-1] else next(
        line for line in printed.stdout.splitlines() if line.startswith("through storage"))
    assert f"{traffic.checkpoint_reads:,} checkpoint downloads" in line


# ---------------------------------------------------------------- the storage run


def storage_clone(into: Path) -> Path:
    """A checkout of this working tree (its files that git tracks or would, as they are now, in a git index:
    Snakemake's source archive takes what `git ls-files` lists) to run the workflow from."""
    listing = ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"]
    listed = subprocess.run(listing, cwd=ROOT, capture_output=True, check=True).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)
    subprocess.run(["git", "init", "-q"], cwd=into, check=True)
    subprocess.run(["git", "add", "-A"], cwd=into, check=True)
    return into


def write_config(checkout: Path, config: dict, name: str = "storage") -> str:
    path = checkout / "config" / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return f"config/{name}.yaml"


def storage_arguments(server: S3Server, bucket: str = RUN_BUCKET, prefix: str = PREFIX) -> list[str]:
    return ["--default-storage-provider", "s3", "--default-storage-prefix", f"s3://{bucket}/{prefix}",
            "--storage-s3-endpoint-url", server.endpoint, "--storage-s3-retries", "2"]


def scratch_arguments() -> list[str]:
    """Each job as a cloud executor runs it: no shared filesystem, sources from the bucket. The
    metric jobs (seconds each) go 8 to a job, as profiles/slurm groups them: each job's own
    Snakemake start-up is what a remote job costs on the toy config."""
    return ["--executor", "cluster-sync", "--cluster-sync-submit-cmd", str(SCRATCH_JOB), "--jobs", "2",
            "--shared-fs-usage", "none", "--job-deploy-sources", "--seconds-between-status-checks", "1",
            "--max-status-checks-per-second", "20", "--local-cores", "2", "--group-components", "checkpoint_metrics=8"]


def run_environment(server: S3Server, scratch: Path) -> dict[str, str]:
    return {**os.environ, **server.environment(), "LMSAT_SCRATCH_ROOT": str(scratch),
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",  # a job's `python`
            "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def snakemake(checkout: Path, configfile: str, *arguments: str, env=None, timeout=3600) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "snakemake", "--configfile", configfile, "--cores", "2", *arguments]
    return subprocess.run(command, cwd=checkout, capture_output=True, text=True, timeout=timeout,
                          env=env or {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"})


def download(server: S3Server, bucket: str, prefix: str, into: Path) -> list[str]:
    """Every object under s3://bucket/prefix/ into `into` (relative names kept)."""
    client = server.client()
    keys = sorted(server.keys(bucket, prefix + "/"))
    for key in keys:
        target = into / key[len(prefix) + 1:]
        target.parent.mkdir(parents=True, exist_ok=True)
        client.download_file(bucket, key, str(target))
    return keys


@pytest.fixture(scope="module")
def storage_runs(tmp_path_factory):
    """(local run's checkout, storage run's checkout, its scratch root, bucket copy, server,
    seconds of each run) of the reduced config: the storage run with every job in a scratch
    directory, the local run on one disk."""
    base = tmp_path_factory.mktemp("storage")
    config = small_toy_config()
    (base / "local").mkdir()
    local = storage_clone(base / "local")
    configfile = write_config(local, config)
    started = time.perf_counter()
    done = snakemake(local, configfile)
    local_seconds = time.perf_counter() - started
    assert done.returncode == 0, done.stderr[-5000:]

    (base / "remote").mkdir()
    remote = storage_clone(base / "remote")
    write_config(remote, config)
    scratch = base / "scratch"
    scratch.mkdir()
    server = S3Server().start()
    server.empty(RUN_BUCKET)
    started = time.perf_counter()
    done = snakemake(remote, configfile, *storage_arguments(server), *scratch_arguments(),
                     env=run_environment(server, scratch))
    storage_seconds = time.perf_counter() - started
    assert done.returncode == 0, done.stderr[-8000:]
    bucket = base / "bucket"
    download(server, RUN_BUCKET, PREFIX, bucket)
    print(f"storage run: {storage_seconds:.0f} s, local run {local_seconds:.0f} s")
    yield dict(local=local, remote=remote, scratch=scratch, bucket=bucket, server=server,
               seconds=(local_seconds, storage_seconds), stderr=done.stderr)
    server.stop()


def products(root: Path) -> set[str]:
    """The files of a run under results/ (relative names)."""
    return {str(p.relative_to(root)) for p in (root / "results").rglob("*") if p.is_file()}


@needs_storage_run
def test_a_storage_run_with_jobs_in_scratch_directories_makes_the_local_runs_tables(storage_runs, tmp_path):
    local_tables = storage_runs["local"] / "results" / "default" / "tables"
    storage_tables = storage_runs["bucket"] / "results" / "default" / "tables"
    assert sorted(p.name for p in storage_tables.iterdir()) == sorted(p.name for p in local_tables.iterdir())
    # the tables golden_tables records within its tolerances; the others (the published record's,
    # the verdicts) cell for cell, provenance columns aside: the same code on the same machine
    golden = tmp_path / "golden"
    golden.mkdir()
    for table in local_tables.iterdir():
        if (RECORDED / table.name).exists():
            shutil.copy(table, golden / table.name)
        elif table.suffix != ".csv":
            assert (storage_tables / table.name).read_text() == table.read_text(), table.name
        else:
            made, there = read_csv_text(storage_tables / table.name), read_csv_text(table)
            keep = [i for i, column in enumerate(there[0]) if not is_provenance(column)]
            assert made[0] == there[0]
            assert [[row[i] for i in keep] for row in made[1]] == [[row[i] for i in keep] for row in there[1]]
    assert len(list(golden.iterdir())) >= 20
    assert compare_tables(storage_tables, recorded_dir=golden) == []


@needs_storage_run
def test_the_bucket_holds_every_product_and_the_working_tree_none(storage_runs):
    local, remote, bucket = storage_runs["local"], storage_runs["remote"], storage_runs["bucket"]
    assert products(bucket) == products(local)
    assert not (remote / "results").exists()  # every product is in the bucket (or its cache)
    outside = [p for p in remote.rglob("*") if p.is_file() and p.relative_to(remote).parts[0] not in (".git", ".snakemake")
               and not subprocess.run(["git", "ls-files", "--error-unmatch", str(p.relative_to(remote))], cwd=remote,
                                      capture_output=True).returncode == 0]
    assert [str(p.relative_to(remote)) for p in outside
            if p.relative_to(remote).parts[0] != "logs" and str(p.relative_to(remote)) != "config/storage.yaml"] == []


@needs_storage_run
def test_the_storage_run_refuses_another_config_under_the_same_prefix(storage_runs):
    """The claim in the bucket (lmsat.planning.storage): the finished run's prefix refuses a plan of
    another config before any job, as a run directory on disk does."""
    server, remote = storage_runs["server"], storage_runs["remote"]
    done = snakemake(remote, "config/storage.yaml", "-n", "--config", "seed=1", *storage_arguments(server),
                     env=run_environment(server, storage_runs["scratch"]))
    assert done.returncode != 0
    said = done.stdout + done.stderr
    assert f"s3://{RUN_BUCKET}/{PREFIX}/results/default/ holds the finished outputs of run 'default'" in said, said[-3000:]
    assert "seed: 0 there, 1 now" in said


@needs_storage_run
def test_each_job_left_nothing_but_its_declared_files_in_its_directory(storage_runs):
    """A job's scratch directory after it: the deployed sources, the job script and its output,
    and under .snakemake/ its storage copies and Snakemake's own records; a file anywhere else
    was written without being an output (it never reached the bucket)."""
    sources = set(subprocess.run(["git", "ls-files"], cwd=storage_runs["remote"], capture_output=True, text=True,
                                 check=True).stdout.split()) | {"config/storage.yaml"}  # the archive holds the configfile too
    strays = {}
    for job in sorted(storage_runs["scratch"].iterdir()):
        for path in job.rglob("*"):
            name = str(path.relative_to(job))
            if path.is_dir() or name in sources or name in ("jobscript.sh", "job.out") or name.startswith(".snakemake/"):
                continue
            strays.setdefault(job.name, []).append(name)
    assert strays == {}


# ---------------------------------------------------------------- faults


def finished_outputs(checkout: Path) -> set[str]:
    """Storage queries of the outputs Snakemake recorded as finished (.snakemake/metadata)."""
    import base64
    import json

    finished = set()
    for record in (checkout / ".snakemake" / "metadata").iterdir():
        data = json.loads(record.read_text())
        name = base64.urlsafe_b64decode(record.name + "=" * (-len(record.name) % 4)).decode()
        if not data.get("incomplete") and name.startswith("s3://"):
            finished.add(name)
    return finished


@needs_storage_run
def test_a_storage_server_down_mid_run_fails_named_and_the_rerun_completes_reuploading_nothing_finished(tmp_path):
    """The bucket's server stops while jobs run, and comes back: the run fails naming the storage
    error, a rerun completes it, and no finished output is lost or uploaded again."""
    config = small_toy_config(models=("toy-d16",))
    (tmp_path / "run").mkdir()
    checkout = storage_clone(tmp_path / "run")
    configfile = write_config(checkout, config)
    server = S3Server().start()
    server.empty("lmsat-faults")
    arguments = storage_arguments(server, bucket="lmsat-faults")
    env = run_environment(server, tmp_path)
    try:
        command = [sys.executable, "-m", "snakemake", "--configfile", configfile, "--cores", "2", *arguments]
        log = open(tmp_path / "first.log", "w")
        first = subprocess.Popen(command, cwd=checkout, stdout=log, stderr=subprocess.STDOUT, env=env)
        trained = f"{PREFIX}/results/default/toy/models/toy-d16.json"
        deadline = time.monotonic() + 1200
        while trained not in server.keys("lmsat-faults", f"{PREFIX}/results/default/toy/") and first.poll() is None:
            assert time.monotonic() < deadline, "the toy model was never trained"
            time.sleep(0.5)
        server.stop()  # mid-run: the jobs after the training cannot get their inputs nor store their outputs
        assert first.wait(timeout=1200) != 0
        failed = (tmp_path / "first.log").read_text()
        # Where the fault surfaces depends on the moment the server stops: Snakemake's WorkflowError
        # ("Failed to retrieve input from storage", "Failed to store output in storage ..."), or the
        # scheduler's size request's own traceback. Each ends with boto's error naming the object:
        # in its path (a HEAD, GET or PUT) or as the prefix a listing asks for (a directory's).
        named = rf"/lmsat-faults/{PREFIX}/\S+|/lmsat-faults\?prefix={PREFIX}%2F\S+"
        assert re.search(rf"Could not connect to the endpoint URL: \"{re.escape(server.endpoint)}(?:{named})\"",
                         failed), failed[-3000:]
        server.start()  # back, with the same buckets
        before = server.last_modified("lmsat-faults", PREFIX + "/")
        finished = {q for q in finished_outputs(checkout) if q.startswith("s3://lmsat-faults/")}
        assert finished, "no job had finished before the fault"
        done = snakemake(checkout, configfile, *arguments, "--rerun-incomplete", env=env)  # as the profiles set
        assert done.returncode == 0, done.stderr[-5000:]
        after = server.last_modified("lmsat-faults", PREFIX + "/")
    finally:
        server.stop()
    assert set(before) <= set(after)  # nothing lost
    key = lambda query: query.removeprefix("s3://lmsat-faults/")  # noqa: E731
    uploaded_again = sorted(name for q in finished for name in before  # a directory output: each of its files
                            if (name == key(q) or name.startswith(key(q) + "/")) and after.get(name) != before[name])
    assert uploaded_again == []
    assert any(key(q) not in before for q in finished_outputs(checkout))  # the rerun made the rest
