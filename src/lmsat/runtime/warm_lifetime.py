"""How long a job of a warm run may live (lmsat.runtime.warm): no longer than the process that
serves it, nor than the Snakemake process that started it.

A job that outlives its Snakemake (`kill -9` of Snakemake, an OOM kill) keeps writing into
results/ while the rerun recomputes the same files: two writers of one checkpoint's cache
and its resumable `.parts`, outputs landing after the rerun removed them. So a job process
dies with its Snakemake (the parent-death signal), and a job whose Snakemake is already
gone never starts: the rerun makes it.

Only the standard library: a job's script imports it before anything.
"""

from __future__ import annotations

import os
import select
import signal
import sys

OWNER_VARIABLE = "LMSAT_WARM_OWNER"  # the pid of the Snakemake process whose jobs these are


def die_with_parent(parent: int) -> None:
    """The kernel SIGKILLs this process when its parent (`parent`) ends; if it has already
    ended, exit now. In a forked job its parent is the warm interpreter: no job outlives it
    (its writes would land after Snakemake removed the failed job's outputs)."""
    import ctypes

    pr_set_pdeathsig = 1  # <linux/prctl.h>
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # it ended before the prctl
        os._exit(1)


def stay_with_snakemake(script: str) -> None:
    """In a job's process: die with the Snakemake process that started it (OWNER_VARIABLE,
    its direct parent), or, where that process is gone already, exit 1 without running
    `script` (the rerun makes its outputs)."""
    owner = int(os.environ.get(OWNER_VARIABLE) or 0)
    if not owner:
        return
    if os.getppid() == owner:
        die_with_parent(owner)
        return
    try:
        os.kill(owner, 0)  # a shell between them: alive is all that can be known
    except ProcessLookupError:
        print(f"lmsat.runtime.warm: the Snakemake process that started this job (pid {owner}) is gone, so "
              f"{os.path.basename(script)} does not run: a late write would meet the rerun's", file=sys.stderr)
        os._exit(1)
    except PermissionError:
        pass


def end_orphan(pid: int, pidfd: int | None) -> bool:
    """SIGKILL the forked job `pid` (through its `pidfd`) and wait until it has ended; False
    without a pidfd (its own parent-death signal, die_with_parent, ends it then)."""
    if pidfd is None:
        return False
    try:
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    except ProcessLookupError:
        pass  # ended already
    while not select.select([pidfd], [], [], 10)[0]:  # readable once the process has exited
        print(f"lmsat.runtime.warm: waiting for killed job process {pid} to end", file=sys.stderr)
    return True
