"""The warm interpreter (lmsat.runtime.warm, issue 35): a job it forks runs as a fresh interpreter
would (working directory, environment, arguments, streams, exit status, traceback), jobs it
must not serve start their own interpreter, signals reach the forked job, a job whose process
vanished is ended, the warm interpreter ends with the process that started it, and a model
loaded in a forked job has the tensors a fresh interpreter loads, for every family, storage
dtype, tied head and sharded checkpoint. The default run's jobs are forked from it: see
test_workflow.py (test_the_default_run_forks_its_jobs_from_the_warm_interpreter).

Each job here is a real script run by a real interpreter, as Snakemake runs one: a file
whose first lines set `__real_file__` (Snakemake's preamble does) and import lmsat.runtime.offline
and lmsat.runtime.warm_start.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import lmsat.runtime.warm as warm

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the warm interpreter is Linux only")

SRC = Path(__file__).resolve().parents[1] / "src"
PREAMBLE = f"""\
__real_file__ = __file__  # what Snakemake's script preamble sets
import sys
sys.path[:0] = [{str(SRC)!r}]
import lmsat.runtime.offline
import lmsat.runtime.warm_start
import lmsat.runtime.warm
"""


def wait_for(condition, seconds: float, what: str):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"not within {seconds} s: {what}")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A warm interpreter started as the workflow's onstart starts one; -> its log."""
    log = tmp_path_factory.mktemp("warm") / "warm_interpreter.log"
    assert warm.start(str(log), jobs=warm.MIN_JOBS, local=True) is None
    STARTED_ENV.update(os.environ)  # a Snakemake job's starts as its Snakemake process's
    try:
        wait_for(lambda: log.exists() and "imports done" in log.read_text(), 180, f"the imports ({log})")
        yield log
    finally:
        warm.stop()


STARTED_ENV: dict = {}


def job_env(**changes) -> dict:
    """A Snakemake job's environment: this process's when it started the warm interpreter
    (pytest changes PYTEST_CURRENT_TEST at each test), with the thread variables at 1."""
    env = dict(STARTED_ENV or os.environ, **{v: "1" for v in warm.THREAD_VARIABLES})
    env.update(changes)
    return {k: v for k, v in env.items() if v is not None}


def run_job(tmp_path, body: str, *args, env=None, name="job.py", **kwargs) -> subprocess.CompletedProcess:
    script = tmp_path / name
    script.write_text(PREAMBLE + textwrap.dedent(body))
    return subprocess.run(
        [sys.executable, str(script), *args], cwd=tmp_path, env=env or job_env(), capture_output=True, text=True,
        timeout=300, **kwargs,
    )


def served_lines(log: Path, name: str) -> list[str]:
    return [line for line in log.read_text().splitlines() if f" {name}: exit " in line]


def test_a_forked_job_runs_in_its_own_directory_environment_arguments_and_streams(server, tmp_path):
    body = """
        import os, tempfile
        print("out", os.getcwd(), sys.argv[1:], tempfile.gettempdir(), lmsat.runtime.warm.SERVING)
        print("err", list(dict.fromkeys(sys.path)), file=sys.stderr)
        print("stdin", sys.stdin.read())
        raise SystemExit(3)
    """
    (tmp_path / "tmp").mkdir()  # Snakemake's tmpdir resource: the one variable a job may change
    done = run_job(tmp_path, body, "a", "b c", env=job_env(TMPDIR=str(tmp_path / "tmp")), input="fed", name="served.py")
    assert done.returncode == 3, done.stderr
    assert done.stdout.splitlines() == [f"out {tmp_path} ['a', 'b c'] {tmp_path / 'tmp'} True", "stdin fed"]
    fresh = run_job(tmp_path, body, "a", "b c", env=job_env(TMPDIR=str(tmp_path / "tmp"), LMSAT_WARM_SOCKET=None),
                    input="fed", name="fresh.py")
    assert fresh.stdout.replace("False", "True") == done.stdout  # the same, in its own interpreter
    assert done.stderr == fresh.stderr.replace("fresh.py", "served.py")  # sys.path, duplicates aside
    [line] = served_lines(server, "served.py")
    assert "exit 3" in line and "s CPU" in line and "MB" in line


def test_a_forked_jobs_exception_prints_the_scripts_traceback_and_exits_1(server, tmp_path):
    done = run_job(tmp_path, "def main():\n    raise ValueError('the culprit')\n\nmain()\n", name="failing.py")
    assert done.returncode == 1
    assert done.stderr.startswith("Traceback (most recent call last):"), done.stderr
    assert f'File "{tmp_path / "failing.py"}", line' in done.stderr and "in main" in done.stderr
    assert done.stderr.strip().endswith("ValueError: the culprit")
    assert "runpy" not in done.stderr and "lmsat/runtime/warm.py" not in done.stderr
    assert served_lines(server, "failing.py")


def test_a_forked_jobs_uncaught_error_reaches_the_jobs_log(server, tmp_path):
    """The job's own excepthook (lmsat.core.io.setup_logging's writes the error into the job log)."""
    body = """
        from lmsat.core.io import setup_logging
        setup_logging("job.log")
        raise RuntimeError("corpus empty has no documents")
    """
    done = run_job(tmp_path, body, name="logged.py")
    assert done.returncode == 1 and served_lines(server, "logged.py")
    log = (tmp_path / "job.log").read_text()
    assert "CRITICAL uncaught exception" in log and "RuntimeError: corpus empty has no documents" in log


@pytest.mark.parametrize(
    "changes, reason",
    [
        (dict(OMP_NUM_THREADS="2"), "OMP_NUM_THREADS=2"),
        (dict(MKL_NUM_THREADS=None), "MKL_NUM_THREADS=(unset)"),
        (dict(HF_HOME="/elsewhere"), "its environment differs in HF_HOME"),
    ],
)
def test_a_job_the_warm_interpreter_must_not_serve_starts_its_own(server, tmp_path, changes, reason):
    done = run_job(tmp_path, "print(lmsat.runtime.warm.SERVING)\n", env=job_env(**changes), name="declined.py")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"  # ran here, not in a forked job
    assert f"lmsat.runtime.warm: this job starts its own interpreter ({reason}" in done.stderr
    assert not served_lines(server, "declined.py")


def test_without_a_warm_interpreter_the_job_runs_as_before(tmp_path):
    done = run_job(tmp_path, "print(lmsat.runtime.warm.SERVING)\n", env=job_env(LMSAT_WARM_SOCKET=str(tmp_path / "none")))
    assert (done.returncode, done.stdout.strip()) == (0, "False")
    # said, since the run's socket listens before any job starts: its absence is worth a line
    assert done.stderr.startswith("lmsat.runtime.warm: this job starts its own interpreter (no warm interpreter answers at")


SLEEPER = """
    import os, time
    from pathlib import Path
    Path("pid").write_text(str(os.getpid()))
    while True:
        time.sleep(0.05)
"""


def gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")  # exited (its parent reaps it)


def start_sleeper(tmp_path) -> tuple[subprocess.Popen, int]:
    """A job that sleeps until signalled; -> (its script's process, the forked job's pid)."""
    (tmp_path / "sleeper.py").write_text(PREAMBLE + textwrap.dedent(SLEEPER))
    process = subprocess.Popen(
        [sys.executable, str(tmp_path / "sleeper.py")], cwd=tmp_path, env=job_env(),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    pid = int(wait_for(lambda: (tmp_path / "pid").exists() and (tmp_path / "pid").read_text(), 60, "the job's pid"))
    assert pid != process.pid  # the forked job, not the script's own process
    return process, pid


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 128 + signal.SIGTERM), (signal.SIGINT, 128 + signal.SIGINT)])
def test_a_signal_to_the_jobs_process_reaches_the_forked_job(server, tmp_path, signum, code):
    process, pid = start_sleeper(tmp_path)
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == code, stderr
    if signum == signal.SIGINT:
        assert "KeyboardInterrupt" in stderr  # raised in the job, as in a fresh interpreter
    wait_for(lambda: gone(pid), 10, f"the forked job {pid} ending")


def test_a_job_whose_process_vanished_is_ended(server, tmp_path):
    process, pid = start_sleeper(tmp_path)
    process.kill()  # no signal to forward: the warm interpreter sees the connection close
    process.wait()
    wait_for(lambda: gone(pid), 15, f"the forked job {pid} ending")


def test_the_warm_interpreter_ends_when_the_process_that_started_it_is_gone(tmp_path):
    log = tmp_path / "warm.log"
    starter = (
        f"import sys; sys.path[:0] = [{str(SRC)!r}]; import lmsat.runtime.warm as w; "
        f"print(w.start({str(log)!r}, jobs=w.MIN_JOBS, local=True)); print(__import__('os').environ[w.SOCKET_VARIABLE])"
    )
    done = subprocess.run([sys.executable, "-c", starter], capture_output=True, text=True, timeout=60)
    started, socket_path = done.stdout.split()
    assert started == "None", done.stderr  # started, then its starter exits
    text = wait_for(lambda: log.exists() and "Snakemake is gone" in log.read_text() and log.read_text(), 60,
                    "the warm interpreter stopping")
    server_pid = int(text.split(" pid ")[1].split(":")[0])
    wait_for(lambda: gone(server_pid), 15, "the warm interpreter's process ending")
    assert not Path(socket_path).parent.exists()  # its socket and directory removed


def test_no_warm_interpreter_for_a_small_or_remote_run_or_when_switched_off(tmp_path):
    log = tmp_path / "warm.log"
    starter = f"""
import os, sys
sys.path[:0] = [{str(SRC)!r}]
import lmsat.runtime.warm as w
print(w.start({str(log)!r}, jobs=w.MIN_JOBS - 1, local=True))
print(w.start({str(log)!r}, jobs=100, local=False))
print(w.start({str(log)!r}, jobs=100, local=True, enabled=False))
print(w.SOCKET_VARIABLE in os.environ)
"""
    inherited = dict(os.environ, LMSAT_WARM_SOCKET=str(tmp_path / "an outer run's"))
    done = subprocess.run([sys.executable, "-c", starter], capture_output=True, text=True, timeout=60, env=inherited)
    assert done.stdout.splitlines() == [
        f"{warm.MIN_JOBS - 1} jobs to run (fewer than {warm.MIN_JOBS})", "jobs run on another executor",
        "config warm_start is false", "False",  # an outer run's socket is not passed on to this run's jobs
    ], done.stderr
    assert not log.exists()


LOADER = """
    import json
    from safetensors.torch import save_file
    from lmsat.checkpoints.loading import load_causal_lm
    from lmsat.core.plan import ModelEntry

    cases = json.loads(open("cases.json").read())
    for name, case in cases.items():
        lm = load_causal_lm(ModelEntry(**case), "step1", dtype="auto")
        state = {k: v.contiguous() for k, v in lm.state_dict().items()}
        tied = lm.get_output_embeddings().weight.data_ptr() == lm.get_input_embeddings().weight.data_ptr()
        save_file({k: v.clone() for k, v in state.items()}, f"{sys.argv[1]}/{name}.safetensors",
                  metadata={"tied": str(tied), "served": str(lmsat.runtime.warm.SERVING)})
"""


def test_a_forked_job_loads_the_tensors_a_fresh_interpreter_loads(server, tmp_path):
    """Every family the adapters know, in each storage dtype, tied and untied heads, and a
    sharded checkpoint: the pipeline's loader (lmsat.checkpoints.loading.load_causal_lm, every check of
    lmsat.checkpoints.validation) in a forked job and in a fresh interpreter gives equal tensors."""
    import json

    import torch
    from safetensors import safe_open

    from test_adapters import COMMON, VARIANTS, D, build

    cases = {}
    for family, tied in VARIANTS:
        for dtype in ("float32", "float16", "bfloat16"):
            name = f"{family}-{'tied' if tied else 'untied'}-{dtype}"
            model = build(family, tied).to(getattr(torch, dtype))
            shard = "8KB" if family == "gpt_neox" and dtype == "float32" else "5GB"  # one sharded case
            model.save_pretrained(tmp_path / "models" / name / "step1", max_shard_size=shard)
            cases[name] = dict(
                name=name, suite="s", source="local", id=str(tmp_path / "models" / name), hidden_size=D,
                vocab_size=COMMON["vocab_size"], n_params=0, tokenizer="words", tokens_per_step=1,
                revisions=["step1"], steps=[1], allow_pickle=False, trust_remote_code=False, key=name,
            )
    assert list((tmp_path / "models" / "gpt_neox-untied-float32" / "step1").glob("*.safetensors.index.json"))
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    for side, env in (("warm", job_env()), ("fresh", job_env(LMSAT_WARM_SOCKET=None))):
        (tmp_path / side).mkdir()
        done = run_job(tmp_path, LOADER, side, env=env, name=f"load_{side}.py")
        assert done.returncode == 0, done.stderr
    for name in cases:
        opened = {side: safe_open(tmp_path / side / f"{name}.safetensors", "pt") for side in ("warm", "fresh")}
        assert opened["warm"].metadata()["served"] == "True" and opened["fresh"].metadata()["served"] == "False"
        assert opened["warm"].metadata()["tied"] == opened["fresh"].metadata()["tied"]
        assert sorted(opened["warm"].keys()) == sorted(opened["fresh"].keys())
        for key in opened["fresh"].keys():
            warm_tensor, fresh_tensor = opened["warm"].get_tensor(key), opened["fresh"].get_tensor(key)
            assert warm_tensor.dtype == fresh_tensor.dtype, f"{name}: {key}"
            if key.endswith(".weight"):
                assert fresh_tensor.dtype == getattr(torch, name.rsplit("-", 1)[1])  # the stored dtype
            assert torch.equal(warm_tensor, fresh_tensor), f"{name}: {key}"  # a load copies bytes: equal


# ------------------------------------------------- issue 46: what a forked job runs, and when it must die


class OwnServer:
    """A warm interpreter of the lmsat under `src`, started as the workflow's onstart starts
    one by a process that stays until stop() (the module's `server` is shared: these tests
    edit its source or kill it). `env`: its jobs' environment."""

    def __init__(self, tmp_path: Path, src: Path):
        self.log = tmp_path / "own_warm.log"
        starter = (
            f"import os, sys; sys.path[:0] = [{str(src)!r}]; import lmsat.runtime.warm as w; "
            f"print(w.start({str(self.log)!r}, jobs=w.MIN_JOBS, local=True), w._server.pid, "
            "os.environ[w.SOCKET_VARIABLE], flush=True); sys.stdin.read(); w.stop()"
        )
        base = {k: v for k, v in os.environ.items() if k != warm.SOCKET_VARIABLE}
        self.starter = subprocess.Popen([sys.executable, "-c", starter], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True, env=base)
        started, pid, socket_path = self.starter.stdout.readline().split()
        assert started == "None"
        self.pid = int(pid)
        self.env = dict(base, LMSAT_WARM_SOCKET=socket_path, **{v: "1" for v in warm.THREAD_VARIABLES})

    def wait_for_imports(self):
        wait_for(lambda: self.log.exists() and "imports done" in self.log.read_text(), 300, f"the imports ({self.log})")

    def stop(self):
        self.starter.communicate(timeout=60)


def job_script(tmp_path: Path, name: str, body: str, src: Path) -> Path:
    script = tmp_path / name
    script.write_text(PREAMBLE.replace(repr(str(SRC)), repr(str(src))) + textwrap.dedent(body))
    return script


def source_hash(src: Path) -> str:
    """lmsat.core.io.source_sha256 of the lmsat under `src`, computed by a fresh interpreter."""
    code = f"import sys; sys.path[:0] = [{str(src)!r}]; from lmsat.core.io import source_sha256; print(source_sha256())"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


RECORDER = """
    import json, time
    from pathlib import Path
    import lmsat.products.metrics
    from lmsat.core.io import source_sha256
    Path(sys.argv[1] + ".started").write_text("")
    while not Path("go").exists():
        time.sleep(0.05)
    Path(sys.argv[1]).write_text(json.dumps(dict(served=lmsat.runtime.warm.SERVING, source=source_sha256(),
                                                 edited=getattr(lmsat.products.metrics, "EDITED_DURING_THE_RUN", False))))
"""


def test_a_library_edit_during_a_warm_run_never_records_the_new_codes_hash_beside_the_old_codes_numbers(tmp_path):
    """Issue 46, case 3: after a `sed` into src/lmsat/products/metrics.py during a run, forked jobs ran the
    code the warm interpreter had imported and recorded the hash of the files on disk (28 of 36
    records: the new code's hash, the old code's numbers). Now a job forked before the edit records
    the hash of the code it runs (the one imported), and after the edit the warm interpreter
    serves no more jobs, saying why: each starts its own interpreter, with the edited code."""
    import json
    import shutil

    src = tmp_path / "src"
    shutil.copytree(SRC / "lmsat", src / "lmsat", ignore=shutil.ignore_patterns("__pycache__"))
    old = source_hash(src)
    server = OwnServer(tmp_path, src)
    try:
        server.wait_for_imports()  # lmsat.products.metrics imported, as in a run's later jobs
        script = job_script(tmp_path, "record.py", RECORDER, src)
        before = subprocess.Popen([sys.executable, str(script), "before.json"], cwd=tmp_path, env=server.env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_for(lambda: (tmp_path / "before.json.started").exists(), 120, "the job forked before the edit")
        subprocess.run(["sed", "-i", "$a EDITED_DURING_THE_RUN = True", str(src / "lmsat" / "products" / "metrics.py")], check=True)
        new = source_hash(src)
        assert new != old
        after = subprocess.Popen([sys.executable, str(script), "after.json"], cwd=tmp_path, env=server.env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_for(lambda: (tmp_path / "after.json.started").exists(), 300, "the job started after the edit")
        (tmp_path / "go").write_text("")
        outcomes = {name: process.communicate(timeout=300) for name, process in (("before", before), ("after", after))}
        assert before.returncode == 0 and after.returncode == 0, outcomes
    finally:
        server.stop()
    recorded = {name: json.loads((tmp_path / f"{name}.json").read_text()) for name in ("before", "after")}
    # forked before the edit: the imported (old) code, and its hash, though the files changed meanwhile
    assert recorded["before"] == dict(served=True, source=old, edited=False)
    # after it: not served, the edited code, and its hash
    assert recorded["after"] == dict(served=False, source=new, edited=True)
    reason = "lmsat's source changed since the warm interpreter imported it (src/lmsat/products/metrics.py)"
    assert f"lmsat.runtime.warm: this job starts its own interpreter ({reason}" in outcomes["after"][1]
    assert reason in server.log.read_text()


SOURCE_RECORDER = """
    import json
    from pathlib import Path
    from lmsat.core.io import source_sha256
    Path(sys.argv[1]).write_text(json.dumps(dict(served=lmsat.runtime.warm.SERVING, source=source_sha256())))
"""


def test_new_times_on_the_same_bytes_keep_the_warm_interpreter_serving_and_an_edit_still_stops_it(tmp_path):
    """Issue 49, item 9: a `touch`, an rsync (a new file of the same bytes renamed over the
    old) or a checkout away and back (the bytes rewritten in place) changes no byte of the
    code, so the jobs after it are still forked, and record the same hash; an edit after those
    still stops the serving (issue 46, case 3)."""
    import json
    import shutil

    src = tmp_path / "src"
    shutil.copytree(SRC / "lmsat", src / "lmsat", ignore=shutil.ignore_patterns("__pycache__"))
    old = source_hash(src)
    server = OwnServer(tmp_path, src)
    script = job_script(tmp_path, "record.py", SOURCE_RECORDER, src)
    package = src / "lmsat"
    try:
        wait_for(lambda: server.log.exists() and "listening" in server.log.read_text(), 120, "the source's state taken")
        time.sleep(0.01)  # new times, whatever the clock's resolution
        os.utime(package / "products" / "metrics.py")  # touch
        copy = package / "core" / ".io.py.tmp"  # rsync: a new file of the same bytes, renamed over it
        copy.write_bytes((package / "core" / "io.py").read_bytes())
        os.replace(copy, package / "core" / "io.py")
        checkout = package / "degeneration" / "similarity.py"  # a checkout away and back: rewritten in place
        text = checkout.read_bytes()
        checkout.write_bytes(text.replace(b"CKA", b"XXX"))
        checkout.write_bytes(text)
        done = subprocess.run([sys.executable, str(script), "touched.json"], cwd=tmp_path, env=server.env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        subprocess.run(["sed", "-i", "$a EDITED_DURING_THE_RUN = True", str(package / "products" / "metrics.py")], check=True)
        edited = subprocess.run([sys.executable, str(script), "edited.json"], cwd=tmp_path, env=server.env,
                                capture_output=True, text=True, timeout=300)
        assert edited.returncode == 0, edited.stderr
    finally:
        server.stop()
    assert source_hash(src) != old
    assert json.loads((tmp_path / "touched.json").read_text()) == dict(served=True, source=old)
    assert "starts its own interpreter" not in done.stderr
    assert json.loads((tmp_path / "edited.json").read_text()) == dict(served=False, source=source_hash(src))
    log = server.log.read_text()
    assert "new times, the same bytes; still serving" in log and "core/io.py" in log
    assert "lmsat's source changed since the warm interpreter imported it (src/lmsat/products/metrics.py)" in log


LATE_WRITER = """
    import os, time
    from pathlib import Path
    Path("pid").write_text(str(os.getpid()))
    while not Path("go").exists():
        time.sleep(0.05)
    Path("output.txt").write_text("written after its warm interpreter was killed")
"""


def test_the_jobs_of_a_sigkilled_warm_interpreter_die_with_it_and_never_write_later(tmp_path):
    """Issue 46, case 9: SIGKILL the warm interpreter while it runs a job: the forked job kept
    running and wrote its output after Snakemake had removed the failed job's outputs, and the
    rerun took it for finished. Now the job dies with its warm interpreter, before its script's
    process reports the failure."""
    server = OwnServer(tmp_path, SRC)
    try:
        script = job_script(tmp_path, "late.py", LATE_WRITER, SRC)
        process = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path, env=server.env,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        pid = int(wait_for(lambda: (tmp_path / "pid").exists() and (tmp_path / "pid").read_text(), 120, "the job's pid"))
        assert pid != process.pid, process.communicate(timeout=60)  # the forked job
        os.kill(server.pid, signal.SIGKILL)
        _, stderr = process.communicate(timeout=60)
        assert process.returncode == 1, stderr  # the job failed (Snakemake removes its outputs) ...
        assert "the warm interpreter ended before job process" in stderr
        assert gone(pid)  # ... once the forked job is gone
        (tmp_path / "go").write_text("")
        time.sleep(2)
        assert not (tmp_path / "output.txt").exists()  # no late write
    finally:
        server.stop()


ORPHAN = """
    import time
    from pathlib import Path
    Path(sys.argv[1] + ".started").write_text("")
    while not Path("go").exists():
        time.sleep(0.05)
    Path(sys.argv[1]).write_text("written after the Snakemake that started it was killed")
"""


def test_a_job_never_outlives_the_snakemake_that_started_it(tmp_path):
    """Issue 49, item 8: `kill -9` of Snakemake left its running jobs behind, and a job whose
    warm interpreter had gone with it (no warm interpreter answers) ran in its own interpreter:
    both wrote into results/ while the rerun made the same files (one checkpoint's cache and
    its resumable chunks, two writers). Now a job dies with the Snakemake process that started
    it, and one whose Snakemake is already gone never starts."""
    from lmsat.runtime.warm_lifetime import OWNER_VARIABLE

    assert OWNER_VARIABLE == "LMSAT_WARM_OWNER"  # what warm.start() sets in the run's environment
    script = job_script(tmp_path, "orphan.py", ORPHAN, SRC)
    env = dict(job_env(), LMSAT_WARM_SOCKET=str(tmp_path / "gone" / "socket"))  # its warm interpreter is gone
    starter = (  # a Snakemake process: the job is its direct child, it waits for it
        "import os, subprocess, sys; os.environ[sys.argv[1]] = str(os.getpid()); "
        "subprocess.run([sys.executable, sys.argv[2], 'running.txt'])"
    )
    snakemake = subprocess.Popen([sys.executable, "-c", starter, OWNER_VARIABLE, str(script)], cwd=tmp_path, env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: (tmp_path / "running.txt.started").exists(), 120, "the job started by the Snakemake process")
    snakemake.kill()  # SIGKILL, as `kill -9`: no signal reaches its job
    snakemake.wait(timeout=60)
    (tmp_path / "go").write_text("")
    time.sleep(3)
    assert not (tmp_path / "running.txt").exists()  # the running job died with its Snakemake: no late write
    gone_owner = subprocess.Popen([sys.executable, "-c", "pass"])  # a Snakemake that is gone
    gone_owner.wait()
    late = subprocess.run([sys.executable, str(script), "late.txt"], cwd=tmp_path, timeout=300, capture_output=True,
                          text=True, env=dict(env, **{OWNER_VARIABLE: str(gone_owner.pid)}))
    assert late.returncode == 1 and not (tmp_path / "late.txt.started").exists(), late  # never started
    assert f"the Snakemake process that started this job (pid {gone_owner.pid}) is gone" in late.stderr


ACTIVATE = Path(sys.prefix) / "bin" / "activate"


@pytest.mark.skipif(not ACTIVATE.exists(), reason="these tests do not run in a venv with an activate script")
def test_a_job_that_starts_with_its_warm_interpreter_waits_for_it_and_is_served(tmp_path):
    """CI: the run's first job connected before the starting warm interpreter had its socket,
    found none and ran in its own interpreter. The socket now listens before start() returns:
    a job started at once waits for the imports and is served."""
    server = OwnServer(tmp_path, SRC)  # no wait for its imports
    try:
        done = subprocess.run([sys.executable, str(job_script(tmp_path, "first.py", "print(lmsat.runtime.warm.SERVING)", SRC))],
                              cwd=tmp_path, env=server.env, capture_output=True, text=True, timeout=300)
    finally:
        server.stop()
    assert done.returncode == 0 and done.stdout.strip() == "True", done
    assert "starts its own interpreter" not in done.stderr


def test_a_run_from_an_activated_venv_forks_its_jobs(tmp_path):
    """Issue 46, case 10: `. .venv/bin/activate`, as the README says, exports PS1; the job shells
    (a non-interactive bash) drop it, and every job was declined ("its environment differs in
    PS1"): a default run took 12 min 52 s instead of 2.7. A real run from a real activated shell."""
    import shlex

    import yaml

    from conftest import ROOT, small_toy_config

    config = small_toy_config(("toy-d16",), n_seq=16, chunk=4)
    config.update(metrics=["loss"])
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    snakemake = (f"python -m snakemake -s {shlex.quote(str(ROOT / 'Snakefile'))} --directory {shlex.quote(str(tmp_path))} "
                 f"--configfile config.yaml --cores 2 results/default/tables/loss.csv")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV_DISABLE_PROMPT", warm.SOCKET_VARIABLE)}
    done = subprocess.run(["bash", "-c", f". {shlex.quote(str(ACTIVATE))} && test -n \"$PS1\" && {snakemake}"],
                          cwd=tmp_path, env=dict(env, HF_HUB_OFFLINE="1"), capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-4000:]
    log = (tmp_path / "logs" / "default" / "warm_interpreter.log").read_text()
    served = [line for line in log.splitlines() if ": exit 0," in line]
    assert "declined" not in log and len(served) >= warm.MIN_JOBS, log
    assert "starts its own interpreter" not in done.stderr
