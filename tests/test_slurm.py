"""The workflow on a real SLURM cluster: a shrunken default (toy) config run through
`snakemake --profile profiles/slurm --profile profiles/slurm-test` on the one-node cluster
of tests/slurm/up.sh, checked against SLURM's own records (squeue, scontrol, the job logs
that slurmd writes) and against a local run of the same config:

- every job that is not a localrule ran as a COMPLETED SLURM job that produced its output;
- GPU rules asked SLURM for a GPU, and the cheap metric jobs shared group jobs sized as
  one member (they run one after another);
- the results equal those of the local run (profiles/local);
- an extraction `scancel`ed mid-way is resubmitted (`retries`) and resumes its saved
  cache chunks instead of starting over;
- a job that fails at run time (a corrupt token sample) fails the run, and the main log
  shows the job's log.

Needs root (apt-get, daemons): runs where LMSAT_SLURM=1 (.ci/run sets it) or CI=true, and
there a cluster that cannot be brought up is a failure; skipped elsewhere. Takes ~6 minutes
on 2 cores (most of it Python start-up of ~20 jobs, twice, and SLURM polling).

    LMSAT_SLURM=1 python -m pytest tests/test_slurm.py -q
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, small_toy_config

SLURM_DIR = ROOT / "tests" / "slurm"
STATE = Path(os.environ.get("LMSAT_SLURM_STATE", "/tmp/lmsat-slurm"))
REQUIRED = os.environ.get("LMSAT_SLURM") == "1" or os.environ.get("CI", "").lower() == "true"
SNAKEMAKE = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile")]
SLURM_PROFILES = ["--profile", str(ROOT / "profiles" / "slurm"), "--profile", str(ROOT / "profiles" / "slurm-test")]
RUN_TIMEOUT_S = 900  # one workflow run; the whole module takes a few minutes on 2 cores
# Eval sequences and sequences per cache chunk: 1024 chunks to interrupt. A chunk of the
# tiny models takes ~4 ms (the cache is written in place), so fewer would let an extraction
# finish between the killer seeing its first chunk and SLURM cancelling it.
N_SEQ, CHUNK = 1024, 1
# The stages run: every kind of job (toy build and training, extraction asking for a GPU,
# weight analysis on CPU, grouped metric jobs, localrules) in 4 dependency levels. The whole
# default DAG (Table 1, scaling law, rank heads, n-grams: ~55 jobs) takes 3x longer on 2
# cores; LMSAT_SLURM_TARGETS=all runs it.
TARGETS = os.environ.get(
    "LMSAT_SLURM_TARGETS",
    "results/default/tables/loss.csv results/default/figures/fig1a_loss.png results/default/tables/anisotropy_training.csv "
    "results/default/tables/spectra.csv",
).split()

pytestmark = pytest.mark.skipif(
    not REQUIRED,
    reason="needs a SLURM cluster: set LMSAT_SLURM=1 (as .ci/run does) to bring one up with "
    "tests/slurm/up.sh (root; installs slurm and munge with apt-get)",
)


def small_config() -> dict:
    """The default toy config, shrunk: 2 models x 2 revisions, a short sample and training."""
    config = small_toy_config(("toy-d16", "toy-d32"), n_seq=N_SEQ, chunk=CHUNK)
    config["toy"]["eval_tokens"] = 4 * N_SEQ * 32  # the sample's pool: pool_factor 2 x n_tokens, and margin
    return config


def run(args: list[str], cwd: Path, name: str = "snakemake", timeout: float = RUN_TIMEOUT_S):
    """Run snakemake in `cwd` (its output kept in `cwd`/`name`.out); on timeout, stop it and
    cancel its SLURM jobs, then fail."""
    process = subprocess.Popen(
        SNAKEMAKE + args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, 9)
        output, _ = process.communicate()
        for name in set(re.findall(r"SLURM run ID: (\S+)", output)):
            subprocess.run(["scancel", "--name", name], check=False)
        pytest.fail(f"snakemake {' '.join(args)} ran past {timeout} s:\n{output[-5000:]}")
    (cwd / f"{name}.out").write_text(output)
    return subprocess.CompletedProcess(process.args, process.returncode, output)


def slurm_jobs() -> dict[str, dict]:
    """Every job slurmctld still holds (finished ones stay MinJobAge=600 s): id -> fields."""
    out = subprocess.run(
        ["squeue", "--states=all", "--noheader", "--format=%i|%T|%j|%k"], capture_output=True, text=True, check=True
    ).stdout
    jobs = {}
    for line in out.splitlines():
        job_id, state, name, comment = line.split("|", 3)
        jobs[job_id] = dict(state=state, name=name, comment=comment)
    return jobs


def scontrol_job(job_id: str) -> dict[str, str]:
    out = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True, check=True).stdout
    return dict(re.findall(r"(\w+)=(\S*)", out))


def job_blocks(log: str) -> list[tuple[bool, str, list[str]]]:
    """(is localrule, rule, outputs) of each job block that a snakemake log announces (the
    logs of failed jobs that it shows, between '=====' lines, are left out)."""
    log = re.sub(r"^Logfile .*:\n(=+)\n.*?^\1$", "", log, flags=re.M | re.S)
    blocks = []
    for match in re.finditer(r"^\s*(local)?rule (\w+):\n((?:\s+\w+: .*\n)+)", log, re.M):
        outputs = re.search(r"^\s+output: (.*)$", match.group(3), re.M)
        blocks.append((bool(match.group(1)), match.group(2), outputs.group(1).split(", ") if outputs else []))
    return blocks


def declared_localrules() -> set[str]:
    """Rule names in the `localrules:` blocks of workflow/rules/*.smk."""
    names = set()
    for smk in (ROOT / "workflow" / "rules").glob("*.smk"):
        for block in re.findall(r"^localrules:\n((?:[ \t]+.*\n)+)", smk.read_text(), re.M):
            names.update(re.findall(r"\w+", block))
    return names


class ExtractionKiller(threading.Thread):
    """Waits until an extraction job has saved its first cache chunk (of N_SEQ // CHUNK), then
    `scancel`s it: it dies with most of its chunks still to compute."""

    def __init__(self, run_dir: Path):
        super().__init__(daemon=True)
        self.run_dir, self.stop, self.killed = run_dir, threading.Event(), None

    def run(self):
        while not self.stop.is_set() and self.killed is None:
            for parts in self.run_dir.glob("results/default/cache/*/*.h5.parts"):
                if next(parts.glob("chunk_*.done"), None) is not None:
                    self.kill(parts)
                    break
            time.sleep(0.02)

    def kill(self, parts: Path):
        model, revision = parts.parent.name, parts.name.removesuffix(".h5.parts")
        comment = f"rule_analyse_checkpoint_wildcards_{model}_{revision}"  # model, revision (the run is a path variable)
        running = [i for i, job in slurm_jobs().items() if job["comment"] == comment and job["state"] == "RUNNING"]
        chunks = len(list(parts.glob("chunk_*.done")))  # done before the kill: a lower bound
        if len(running) != 1 or subprocess.run(["scancel", running[0]], capture_output=True).returncode:
            return  # not RUNNING yet, or already finished: try again
        # (a job cancelled while SIGSTOPped can stay STOPPED in squeue, which the executor
        # plugin takes for running and waits on forever: so no freezing it first)
        self.killed = dict(model=model, revision=revision, job_id=running[0], chunks=chunks)


def daemon_running(name: str) -> bool:
    """Whether the PID that up.sh recorded for daemon `name` still runs it."""
    try:
        pid = (STATE / f"{name}.pid").read_text().strip()
        return Path(f"/proc/{pid}/comm").read_text().strip() == name
    except OSError:
        return False


@pytest.fixture(scope="module")
def cluster():
    """The test cluster: brought up by tests/slurm/up.sh (if .ci/run has not), torn down
    afterwards by tests/slurm/down.sh if this fixture brought it up."""
    started_here = not daemon_running("slurmctld")
    up = subprocess.run(["bash", str(SLURM_DIR / "up.sh"), str(STATE)], capture_output=True, text=True)
    if up.returncode != 0:
        pytest.fail(f"tests/slurm/up.sh failed (LMSAT_SLURM=1/CI=true require a cluster):\n{up.stdout}{up.stderr}")
    yield STATE
    if started_here:
        subprocess.run(["bash", str(SLURM_DIR / "down.sh"), str(STATE)], check=False)


@pytest.fixture(scope="module")
def runs(cluster, tmp_path_factory):
    """The same shrunken config run locally and through SLURM (with one extraction killed)."""
    base = tmp_path_factory.mktemp("slurm_runs")
    configfile = base / "config.yaml"
    configfile.write_text(yaml.safe_dump(small_config(), sort_keys=False))
    local_dir, slurm_dir = base / "local", base / "slurm"
    local_dir.mkdir()
    slurm_dir.mkdir()

    local = run(TARGETS + ["--configfile", str(configfile), "--profile", str(ROOT / "profiles" / "local"), "--cores", "2"], local_dir)
    assert local.returncode == 0, f"local run failed:\n{local.stdout[-5000:]}"

    killer = ExtractionKiller(slurm_dir)
    killer.start()
    clock = time.perf_counter()
    slurm = run(TARGETS + ["--configfile", str(configfile)] + SLURM_PROFILES, slurm_dir)
    killer.stop.set()
    killer.join()
    assert slurm.returncode == 0, f"SLURM run failed:\n{slurm.stdout[-8000:]}"
    print(f"SLURM run: {time.perf_counter() - clock:.0f} s")
    return dict(configfile=configfile, local_dir=local_dir, slurm_dir=slurm_dir, log=slurm.stdout,
                killed=killer.killed, jobs=slurm_jobs())


def slurm_logs(run_dir: Path) -> dict[str, str]:
    """SLURM job id -> the job's stdout/stderr, as slurmd wrote it (logs/slurm/**/<id>.log)."""
    return {p.stem: p.read_text() for p in (run_dir / "logs" / "slurm").rglob("*.log")}


def test_every_non_local_job_ran_as_a_completed_slurm_job(runs):
    blocks = job_blocks(runs["log"])
    remote = [(rule, outputs) for local, rule, outputs in blocks if not local]
    local_rules = {rule for local, rule, _ in blocks if local}
    assert {"build_synthetic_language", "train_toy_model", "analyse_checkpoint", "compute_checkpoint_metric"} <= {
        rule for rule, _ in remote
    }
    assert local_rules <= declared_localrules() | {"all"}, "a rule ran on the submitting node without being a localrule"

    run_id = re.search(r"SLURM run ID: (\S+)", runs["log"]).group(1)
    submitted = set(re.findall(r"has been submitted with SLURM jobid (\d+)", runs["log"]))
    logs = slurm_logs(runs["slurm_dir"])
    completed = {i for i in submitted if runs["jobs"][i]["state"] == "COMPLETED"}
    assert all(runs["jobs"][i]["name"] == run_id for i in submitted)
    assert submitted <= set(logs), "every submitted job has a log written by slurmd"
    cancelled = {runs["killed"]["job_id"]} if runs["killed"] else set()
    assert submitted - completed == cancelled, "only the cancelled extraction did not complete"
    for rule, outputs in remote:
        for output in outputs:
            makers = [i for i in completed if re.search(rf"^\s+output: .*{re.escape(output)}(,|$)", logs[i], re.M)]
            assert len(makers) == 1, f"{rule} -> {output}: made by SLURM jobs {makers}"
            assert (runs["slurm_dir"] / output).exists()


# the rules that profiles/slurm puts in group checkpoint_metrics (its `groups:`; the rules name no group)
GROUPED = ("compute_checkpoint_metric", "compare_checkpoint_caches")


def test_gpu_rules_ask_slurm_for_a_gpu_and_metric_jobs_share_group_jobs(runs):
    by_comment = {}
    for job_id, job in runs["jobs"].items():
        if job["name"].startswith("lmsat_"):
            by_comment.setdefault(job["comment"].split("_wildcards_")[0], []).append(job_id)
    for job_id in by_comment["rule_analyse_checkpoint"]:
        assert scontrol_job(job_id).get("TresPerJob") == "gres:gpu:1"
    for job_id in by_comment["rule_train_toy_model"]:
        assert "TresPerJob" not in scontrol_job(job_id)

    groups = [i for comment, ids in by_comment.items() if "checkpoint_metrics" in comment for i in ids]
    assert len(groups) >= 1
    metric_jobs = 0
    for job_id in groups:
        # the job step prints each member's rule block unindented, and its srun's Snakemake a localrule block
        members = len(re.findall(rf"^\s*rule ({'|'.join(GROUPED)}):", slurm_logs(runs["slurm_dir"])[job_id], re.M))
        fields = scontrol_job(job_id)
        assert fields["NumCPUs"] == "1" and fields["MinMemoryNode"] == "2000M"  # one member's needs
        hours, minutes, _ = map(int, fields["TimeLimit"].split(":"))
        assert 60 * hours + minutes == 10 * members  # the members' runtimes, one after another
        metric_jobs += members
    planned = [rule for local, rule, _ in job_blocks(runs["log"]) if rule in GROUPED and not local]
    assert metric_jobs == len(planned) and len(groups) < metric_jobs


def test_slurm_results_equal_local_results(runs):
    tables = sorted(p.relative_to(runs["local_dir"]) for p in (runs["local_dir"] / "results" / "default" / "tables").glob("*.csv"))
    assert Path("results/default/tables/loss.csv") in tables
    for table in tables:
        assert (runs["slurm_dir"] / table).read_text() == (runs["local_dir"] / table).read_text(), table


def test_killed_extraction_is_resubmitted_and_resumes_its_chunks(runs):
    killed = runs["killed"]
    assert killed is not None, "no extraction was caught mid-way (all finished before a chunk was seen)"
    assert runs["jobs"][killed["job_id"]]["state"] == "CANCELLED"
    attempts = sorted((runs["slurm_dir"] / "logs" / "slurm" / "rule_analyse_checkpoint"
                       / f"{killed['model']}_{killed['revision']}").glob("*.log"), key=lambda p: int(p.stem))
    assert [p.stem for p in attempts][0] == killed["job_id"] and len(attempts) == 2, attempts
    retry = attempts[1].stem
    assert runs["jobs"][retry]["state"] == "COMPLETED"
    assert "--attempt 2" in attempts[1].read_text()

    log = (runs["slurm_dir"] / "logs" / "default" / "analyse_checkpoint" / killed["model"] / f"{killed['revision']}.log").read_text()
    n_chunks = N_SEQ // CHUNK
    resumed = re.search(rf"resuming \S+: (\d+) of {n_chunks} chunks already done", log)
    assert resumed, log[:2000]
    done = int(resumed.group(1))
    assert killed["chunks"] <= done < n_chunks
    computed = re.findall(rf"chunk \d+/{n_chunks}:", log)
    assert len(computed) == n_chunks - done  # only the missing chunks were computed again
    cache = runs["slurm_dir"] / "results" / "default" / "cache" / killed["model"] / f"{killed['revision']}.h5"
    assert cache.read_bytes() == (runs["local_dir"] / cache.relative_to(runs["slurm_dir"])).read_bytes()


def test_failing_job_fails_the_run_and_shows_its_log(runs):
    """Corrupt the token sample: the extraction rerun (newer input) fails at run time."""
    run_dir = runs["slurm_dir"]
    (run_dir / "results" / "default" / "samples" / "synthetic" / "toy.h5").write_bytes(b"not an HDF5 file")
    target = "results/default/cache/toy-d16/step0.h5"
    args = ["--configfile", str(runs["configfile"])] + SLURM_PROFILES + ["--retries", "0", target]
    failed = run(args, run_dir, name="failing")
    assert failed.returncode != 0
    assert "Error in rule analyse_checkpoint" in failed.stdout
    job_id = re.findall(r"has been submitted with SLURM jobid (\d+)", failed.stdout)[-1]
    assert slurm_jobs()[job_id]["state"] == "FAILED"
    error = "token sample results/default/samples/synthetic/toy.h5 is unreadable"
    assert error in slurm_logs(run_dir)[job_id]
    # show-failed-logs prints the rule's log (and, after it, the SLURM log) into the main log
    assert error in failed.stdout, (
        "the failed job's log was not shown: its rule log logs/default/analyse_checkpoint/toy-d16/step0.log "
        "must hold the exception (Snakemake 9.27 stops showing logs at the first empty one)"
    )
