"""A local run's warm interpreter: one process that has imported torch, transformers, lm-eval
and lmsat once, and forks each job of the run from there.

At toy scale a job's seconds are mostly its interpreter's start-up (docs/performance.md: an
analyse_checkpoint job spent 4.6 of 8 s importing transformers' modeling code and 2-3 s on
torch). Each job stays its own Snakemake job and its own process: the workflow script, run
by Snakemake as always, hands its job to the warm interpreter at its first lines
(`import lmsat.runtime.warm_start`), which forks a child that runs the same script file, in the same
working directory, with the same environment, arguments, sys.path and standard streams (the
descriptors travel over the socket), and reports its exit status back; the script's process
waits for it and exits with that status. A job that is not served (no warm interpreter, a
Snakemake job of another executor, another Python, threads other than 1, an environment
that differs from the one the warm interpreter imported under) starts its own imports as
before, so the warm interpreter changes how fast a job starts, never what it computes.

Started by the workflow's onstart handler for a run on the local executor
(`start`, config `warm_start`), stopped by onsuccess / onerror (`stop`), and it ends by
itself when the Snakemake process that started it is gone. Its log (start-up, every job it
served with its wall seconds, CPU seconds and peak memory, from wait4) is
logs/<run>/warm_interpreter.log. Linux only (fork, SCM_RIGHTS, /proc/self/task).

Safe to fork because nothing has run yet: the warm interpreter only imports, it never runs
a torch op (no thread pool, no CUDA context: checked before every fork), and it refuses to
serve once any thread other than a known fork-safe one exists (pyarrow's jemalloc
background thread, which jemalloc's own fork handlers cover). Thread counts are fixed at
import by the BLAS and OpenMP libraries, so it imports with every thread variable at 1 and
serves only jobs whose variables are 1 (Snakemake sets them to the job's `threads`).

This module imports only the standard library: a job's script imports it before anything.
"""

from __future__ import annotations

import argparse
import atexit
import importlib
import os
import select
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lmsat.runtime.warm_lifetime import OWNER_VARIABLE, die_with_parent, end_orphan, stay_with_snakemake
from lmsat.runtime.warm_wire import receive, send

SOCKET_VARIABLE = "LMSAT_WARM_SOCKET"
# Snakemake sets these to a job's `threads` (snakemake.shell); the warm interpreter's
# libraries read them once, when imported.
THREAD_VARIABLES = (
    "OMP_NUM_THREADS", "GOTO_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS",
)
# Differences between a job's environment and the warm interpreter's that no import reads:
# the shell's own, and Snakemake's temporary directory (tempfile's cached choice is reset
# in the child). Snakemake runs a job through a non-interactive bash, which drops PS1 and
# PS2 and resets PS4 (`. .venv/bin/activate` exports PS1), and sets _, SHLVL and PWD.
SHELL_VARIABLES = frozenset({"_", "SHLVL", "PWD", "OLDPWD", "PS1", "PS2", "PS3", "PS4", "PROMPT_COMMAND",
                             "PROMPT_DIRTRIM"})
IGNORED_VARIABLES = SHELL_VARIABLES | {"TMPDIR", "TMP", "TEMP", "TEMPDIR", OWNER_VARIABLE}  # (read by no import)
# Threads whose library makes a fork safe (pyarrow's allocator, imported with pandas and
# lm-eval's datasets: jemalloc registers its own pthread_atfork handlers).
FORK_SAFE_THREADS = frozenset({"jemalloc_bg_thd"})
# What a run's jobs import, cheapest and most used first; lmsat.runtime.offline before every hub
# library, which reads the offline switches when imported. A module that fails to import
# is logged and left to the jobs.
PRELOAD = (
    "lmsat.runtime.offline",
    "numpy", "h5py", "yaml",
    "lmsat.core.io", "lmsat.core.plan", "lmsat.data.corpus", "lmsat.core.integrity",
    "torch",
    "transformers",
    "transformers.modeling_utils",
    "transformers.models.auto.modeling_auto",
    "lmsat.checkpoints.loading", "lmsat.checkpoints.validation", "lmsat.data.hidden_states",
    "lmsat.products.metrics", "lmsat.standalone.analyse",
    "lmsat.bottleneck.rank_heads", "lmsat.bottleneck.representation_cache", "lmsat.bottleneck.rank_grid",
    "lmsat.toy.suite", "lmsat.checkpoints.local_hub", "lmsat.saturation.scaling",
    "pandas", "lmsat.products.table_files", "lmsat.products.saturation_tables",
    "lmsat.products.degeneration_tables", "lmsat.products.bottleneck_tables",
    "lmsat.figures", "matplotlib", "matplotlib.figure", "matplotlib.backends.backend_agg",
    "scipy.stats", "lmsat.toy.language",
    "lm_eval", "lm_eval.evaluator", "lm_eval.models.huggingface", "lmsat.saturation.downstream",
)
# A run with fewer jobs to do than this starts no warm interpreter: its imports would cost
# more than they save.
MIN_JOBS = 8
STDIO = (0, 1, 2)

SRC = Path(__file__).resolve().parents[2]  # the folder holding this lmsat package (src/)
SERVING = False  # True in a job the warm interpreter forked: its hand-off is a no-op
_server: subprocess.Popen | None = None
_directory: str | None = None


# --- the job's side ---

def hand_off() -> None:
    """Run this Snakemake script job in the run's warm interpreter and exit with its status;
    return (and let the script import and run as usual) when no warm interpreter serves it."""
    path = os.environ.get(SOCKET_VARIABLE)
    main = sys.modules.get("__main__")
    script = getattr(main, "__real_file__", None)  # Snakemake's copy of the script, run as __main__
    if SERVING or not path or script is None or sys.platform != "linux":
        return
    stay_with_snakemake(script)  # a job never outlives the Snakemake whose job it is
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
        request = dict(
            script=script, argv=sys.argv, cwd=os.getcwd(), env=dict(os.environ), path=sys.path,
            executable=sys.executable, lmsat=sys.modules["lmsat"].__file__,
        )
        send(sock, request, STDIO)
        reply, pidfds = receive(sock, max_fds=1)
    except OSError as error:  # no warm interpreter (any more): this process runs the job
        reply, pidfds = {"declined": f"no warm interpreter answers at {path}: {error}"}, []
    if reply is None or "declined" in reply:
        why = reply["declined"] if reply is not None else "the warm interpreter closed the connection"
        print(f"lmsat.runtime.warm: this job starts its own interpreter ({why})", file=sys.stderr)
        sock.close()
        return
    pid = reply["pid"]
    pidfd = pidfds[0] if pidfds else None  # the forked job itself, never a later process with its pid

    def forward(signum, _frame):  # Snakemake stops a job by signalling its process
        try:
            if pidfd is not None:
                signal.pidfd_send_signal(pidfd, signum)
            else:
                os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(signum, forward)
    try:
        status, _ = receive(sock)
    except OSError:
        status = None
    if status is None:
        # The job fails; Snakemake then removes its outputs, so the forked process must be gone
        # first: a write of it after that removal would be taken for a finished output.
        ended = end_orphan(pid, pidfd)
        print(f"lmsat.runtime.warm: the warm interpreter ended before job process {pid} reported how it ended"
              f"{'; that process was killed' if ended else ''}", file=sys.stderr)
        code = 1
    else:
        code = status["status"]
        code = 128 - code if code < 0 else code  # killed by signal N: the shell's 128 + N
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


# --- the warm interpreter's side ---

def _threads() -> list[str]:
    """The names of this process's threads other than the main one."""
    names = []
    for task in os.listdir("/proc/self/task"):
        if task != str(os.getpid()):
            try:
                names.append(Path(f"/proc/self/task/{task}/comm").read_text().strip())
            except OSError:
                pass  # ended meanwhile
    return names


def _unsafe_threads() -> list[str]:
    return [name for name in _threads() if name not in FORK_SAFE_THREADS]


def _changes(before: dict, after: dict) -> dict:
    """key -> new value (None: removed)."""
    changed = {k: v for k, v in after.items() if before.get(k) != v}
    return changed | {k: None for k in before if k not in after}


def _source_state(root: Path) -> dict[str, tuple[int, ...]]:
    """relative path -> (size, mtime, ctime, inode) of every file of the lmsat package at
    `root` (the files lmsat.core.io.source_sha256 hashes): any write to a file changes its ctime."""
    state = {}
    for path in root.rglob("*"):
        relative = path.relative_to(root)
        if "__pycache__" in relative.parts:
            continue
        try:
            info = path.stat()
        except OSError:
            continue  # removed meanwhile
        if stat.S_ISREG(info.st_mode):
            state[relative.as_posix()] = (info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino)
    return state


def _content_digests(root: Path, names) -> dict[str, str | None]:
    """relative path -> SHA-256 of its bytes (None: gone), what lmsat.core.io.source_sha256 hashes."""
    import hashlib

    def digest(path: Path) -> str | None:
        try:
            return hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError:
            return None

    return {name: digest(root / name) for name in names}


def _environment_difference(job: dict, base: dict) -> list[str]:
    keys = (set(job) | set(base)) - IGNORED_VARIABLES - set(THREAD_VARIABLES)
    return sorted(k for k in keys if job.get(k) != base.get(k))


class _Server:
    def __init__(self, listener: socket.socket, parent: int, log_path: str):
        self.parent = parent
        self.log = open(log_path, "a", buffering=1)
        self.listener = listener
        importlib.import_module("lmsat.runtime.offline")  # what a compute job's environment holds when it hands off
        self.base_env = dict(os.environ)
        # The source the jobs run is what this process imports, from now on: a job forked here
        # records its hash (lmsat.core.io.source_sha256, cached before any fork), and a change to a
        # file of the package stops the serving (decline_reason), so that a job never runs old
        # code under the new code's hash, and every job after an edit runs the edited code.
        self.source_root = Path(sys.modules["lmsat"].__file__).resolve().parent
        self.source = _source_state(self.source_root)
        # Times say where to look, bytes decide: a file with new times but its old bytes (an
        # editor's save without change, a checkout away and back, an rsync) changes nothing
        # the records' hash covers, so it does not stop the serving.
        self.contents = _content_digests(self.source_root, self.source)
        importlib.import_module("lmsat.core.io").source_sha256()
        self.running: dict[int, tuple[socket.socket, float, str]] = {}  # pid -> (connection, start, script)
        self.killed: dict[int, float] = {}  # pid -> when SIGTERM was sent
        self.refusing: str | None = None
        self.served = 0
        # a job's end wakes the loop (SIGCHLD through this pipe), which reaps it at once
        self.wake_read, self.wake_write = os.pipe()
        os.set_blocking(self.wake_write, False)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.set_wakeup_fd(self.wake_write, warn_on_full_buffer=False)

    def note(self, message: str) -> None:
        self.log.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} pid {os.getpid()}: {message}\n")

    def decline_reason(self, request: dict) -> str | None:
        if self.refusing:
            return self.refusing
        if request["executable"] != sys.executable:
            return f"another Python: {request['executable']}, not {sys.executable}"
        if os.path.realpath(request["lmsat"]) != os.path.realpath(sys.modules["lmsat"].__file__):
            return f"another lmsat: {request['lmsat']}"
        env = request["env"]
        threads = [v for v in THREAD_VARIABLES if env.get(v) != "1"]
        if threads:
            return f"{threads[0]}={env.get(threads[0], '(unset)')}; the warm interpreter serves 1-thread jobs"
        differing = _environment_difference(env, self.base_env)
        if differing:
            return "its environment differs in " + ", ".join(differing[:5])
        now = _source_state(self.source_root)
        touched = sorted(k for k in set(now) | set(self.source) if now.get(k) != self.source.get(k))
        changed = [k for k, digest in _content_digests(self.source_root, touched).items() if digest != self.contents.get(k)]
        if touched and not changed:  # hashed once: the next job compares times again
            self.source = now
            self.note(f"src/lmsat/{', '.join(touched)}: new times, the same bytes; still serving")
        if changed:
            shown = ", ".join(f"src/lmsat/{name}" for name in changed[:3]) + (", ..." if len(changed) > 3 else "")
            self.refusing = (f"lmsat's source changed since the warm interpreter imported it ({shown}), so a job "
                             "forked from it would run the old code; it serves no more jobs, each starts its own "
                             "interpreter with the code on disk")
            return self.refusing
        unsafe = _unsafe_threads()
        if unsafe:
            self.refusing = f"the warm interpreter has threads {unsafe}, so it cannot fork safely"
            return self.refusing
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_initialized():
            self.refusing = "CUDA is initialized in the warm interpreter"
            return self.refusing
        return None

    def accept(self) -> None:
        conn, _ = self.listener.accept()
        conn.settimeout(10)
        try:
            request, fds = receive(conn, max_fds=len(STDIO))
        except (OSError, ValueError):
            request, fds = None, []
        if request is None or len(fds) != len(STDIO):
            for fd in fds:
                os.close(fd)
            conn.close()
            return
        reason = self.decline_reason(request)
        if reason:
            self.note(f"declined {request['script']}: {reason}")
            for fd in fds:
                os.close(fd)
            try:
                send(conn, {"declined": reason})
            except OSError:
                pass  # its process is gone already
            conn.close()
            return
        sys.stdout.flush()
        sys.stderr.flush()
        server = os.getpid()
        pid = os.fork()
        if pid == 0:
            self.become_job(conn, request, fds, server)  # never returns
        for fd in fds:
            os.close(fd)
        conn.settimeout(None)
        self.running[pid] = (conn, time.perf_counter(), request["script"])
        # a pidfd of the child, unreaped until reap(): the job's process can kill exactly it
        try:
            pidfd: tuple[int, ...] = (os.pidfd_open(pid),)
        except (AttributeError, OSError):  # Linux < 5.3
            pidfd = ()
        try:
            send(conn, {"pid": pid}, pidfd)
        except OSError:  # the job's process is gone: so is the job
            self.terminate(pid)
        finally:
            for fd in pidfd:
                os.close(fd)

    def become_job(self, conn: socket.socket, request: dict, fds: list[int], server: int) -> None:
        global SERVING
        code = 1
        try:
            die_with_parent(server)
            SERVING = True
            signal.set_wakeup_fd(-1)
            for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
                signal.signal(signum, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            os.close(self.wake_read)
            os.close(self.wake_write)
            self.listener.close()
            for other, _, _ in self.running.values():
                other.close()
            conn.close()
            self.log.close()
            for target, fd in zip(STDIO, fds):
                os.dup2(fd, target)
                os.close(fd)
            os.chdir(request["cwd"])
            imported_env = _changes(self.base_env, dict(os.environ))  # what the imports set
            os.environ.clear()
            os.environ.update(request["env"])
            for key, value in imported_env.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            tempfile.tempdir = None
            sys.argv = list(request["argv"])
            sys.path[:] = request["path"]
            code = _run_script(request["script"])
            _finish_interpreter()
        finally:
            os._exit(code)

    def reap(self) -> None:
        while self.running:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn, start, script = self.running.pop(pid)
            self.killed.pop(pid, None)
            code = os.waitstatus_to_exitcode(status)
            seconds = time.perf_counter() - start
            self.served += 1
            self.note(
                f"job {pid} {Path(script).name}: exit {code}, {seconds:.2f} s wall, "
                f"{usage.ru_utime + usage.ru_stime:.2f} s CPU, peak {usage.ru_maxrss / 1024:.0f} MB"
            )
            try:
                send(conn, {"status": code, "seconds": seconds})
            except OSError:
                pass
            conn.close()

    def stop_orphans(self, readable) -> None:
        """A job whose Snakemake process is gone (killed without a signal to forward) is ended."""
        for pid, (conn, _, _) in list(self.running.items()):
            if conn in readable and pid not in self.killed:
                try:
                    gone = conn.recv(1, socket.MSG_PEEK) == b""
                except OSError:
                    gone = True
                if gone:
                    self.terminate(pid)
        for pid, since in list(self.killed.items()):
            if time.monotonic() - since > 10:
                _signal(pid, signal.SIGKILL)

    def terminate(self, pid: int) -> None:
        self.killed[pid] = time.monotonic()
        _signal(pid, signal.SIGTERM)

    def parent_alive(self) -> bool:
        return os.getppid() == self.parent

    def serve(self, preload: list[str]) -> None:
        start = time.perf_counter()
        stopping = []
        signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
        self.note(f"listening; {len(preload)} modules to import, between jobs")
        while not stopping and self.parent_alive():
            watched = [self.listener, self.wake_read] + [c for c, _, _ in self.running.values()]
            readable, _, _ = select.select(watched, [], [], 0 if preload else 0.5)
            if self.wake_read in readable:
                os.read(self.wake_read, 4096)
            if self.listener in readable:
                try:
                    self.accept()
                except Exception as error:  # one bad request never stops the run's other jobs
                    self.note(f"a request failed: {type(error).__name__}: {error}")
            self.stop_orphans(readable)
            self.reap()
            if preload and not readable:
                name = preload.pop(0)
                try:
                    importlib.import_module(name)
                except Exception as error:  # a job needing it imports it (and reports its error)
                    self.note(f"left {name} to the jobs: {type(error).__name__}: {error}")
                if not preload:
                    self.note(f"imports done in {time.perf_counter() - start:.1f} s; other threads: {_threads()}")
        self.note(f"stopping ({'asked' if stopping else 'Snakemake is gone'}) after {self.served} jobs")
        for pid in list(self.running):
            self.terminate(pid)
        deadline = time.monotonic() + 10
        while self.running and time.monotonic() < deadline:
            self.reap()
            time.sleep(0.05)
        for pid in list(self.running):
            _signal(pid, signal.SIGKILL)
        self.listener.close()


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _run_script(script: str) -> int:
    """Run `script` as __main__ the way `python script` would; its exit code."""
    import runpy

    sys.path[0:0] = [os.path.dirname(os.path.abspath(script))]  # `python script` puts its folder first
    try:
        runpy.run_path(script, run_name="__main__")
        return 0
    except SystemExit as exit_:
        if exit_.code is None:
            return 0
        if isinstance(exit_.code, int):
            return exit_.code
        print(exit_.code, file=sys.stderr)
        return 1
    except BaseException as error:
        # to the job's excepthook (the job log's, lmsat.core.io.setup_logging), as `python script`
        # does, with the traceback from the script on (not runpy's frames)
        tb = error.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename != script:
            tb = tb.tb_next
        error = error.with_traceback(tb or error.__traceback__)
        sys.excepthook(type(error), error, error.__traceback__)
        return 128 + signal.SIGINT if isinstance(error, KeyboardInterrupt) else 1


def _finish_interpreter() -> None:
    """What an interpreter does at exit: join non-daemon threads, run atexit, flush."""
    import threading

    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is not None:
        shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


# --- the run's side (the workflow's onstart / onsuccess / onerror) ---

def start(log_path: str, jobs: int, local: bool, enabled: bool = True) -> str | None:
    """Start the warm interpreter for this Snakemake process's jobs; why not, if it does not
    (None when it starts). Its socket's path reaches the jobs through SOCKET_VARIABLE."""
    global _server, _directory
    if _server is None:
        for variable in (SOCKET_VARIABLE, OWNER_VARIABLE):  # inherited from an outer run: not this run's
            os.environ.pop(variable, None)
    if not enabled:
        return "config warm_start is false"
    if sys.platform != "linux":
        return f"Linux only (this is {sys.platform})"
    if not local:
        return "jobs run on another executor"
    if jobs < MIN_JOBS:
        return f"{jobs} jobs to run (fewer than {MIN_JOBS})"
    if _server is not None:
        return None
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    _directory = tempfile.mkdtemp(prefix="lmsat-warm-")  # 0700: only this user connects
    socket_path = os.path.join(_directory, "socket")
    os.environ[SOCKET_VARIABLE] = socket_path
    os.environ[OWNER_VARIABLE] = str(os.getpid())  # its jobs die with this Snakemake (warm_lifetime)
    env = dict(os.environ, **{v: "1" for v in THREAD_VARIABLES})
    src = str(SRC)  # this lmsat's, first on sys.path as in a job
    # The socket listens before any job starts: a job that connects while the warm interpreter
    # still starts and imports waits in the backlog for its answer (it would otherwise find no
    # socket and run in its own interpreter).
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path)
    listener.listen(128)
    code = "import sys; sys.path[:0] = [sys.argv[1]]; import lmsat.runtime.warm as warm; warm.main(sys.argv[2:])"
    command = [sys.executable, "-c", code, src, socket_path, str(os.getpid()), log_path, str(listener.fileno())]
    try:
        with open(log_path, "a") as log:
            _server = subprocess.Popen(
                command, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                pass_fds=(listener.fileno(),),
            )
    finally:
        listener.close()  # the warm interpreter's copy is the one that accepts
    return None


def stop() -> None:
    """Stop the warm interpreter this process started (a no-op when there is none)."""
    global _server, _directory
    if _server is not None:
        _server.terminate()
        try:
            _server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            _server.kill()
            _server.wait()
        _server = None
    for variable in (SOCKET_VARIABLE, OWNER_VARIABLE):
        os.environ.pop(variable, None)
    if _directory is not None:
        import shutil

        shutil.rmtree(_directory, ignore_errors=True)
        _directory = None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="lmsat's warm interpreter (started by the workflow)")
    parser.add_argument("socket")
    parser.add_argument("parent", type=int, help="the Snakemake process: gone, the warm interpreter ends")
    parser.add_argument("log")
    parser.add_argument("listener", type=int, help="the descriptor of the socket, listening already")
    args = parser.parse_args(argv)
    server = _Server(socket.socket(fileno=args.listener), args.parent, args.log)
    try:
        server.serve(list(PRELOAD))
    finally:  # only the warm interpreter reaches here: a forked job ends in os._exit
        for remove, path in ((os.unlink, args.socket), (os.rmdir, os.path.dirname(args.socket))):
            try:
                remove(path)
            except OSError:
                pass
