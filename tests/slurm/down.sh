#!/usr/bin/env bash
# Stop the single-node SLURM cluster that tests/slurm/up.sh started, by the PIDs it
# recorded in STATE_DIR (slurmd, slurmctld, then munged if up.sh started it), and remove
# the /etc/slurm/{slurm,gres}.conf that up.sh wrote.
#
#   tests/slurm/down.sh [STATE_DIR]   # default: $LMSAT_SLURM_STATE or /tmp/lmsat-slurm
set -euo pipefail

STATE=${1:-${LMSAT_SLURM_STATE:-/tmp/lmsat-slurm}}
as_root() { if [[ $(id -u) == 0 ]]; then "$@"; else sudo -n "$@"; fi; }

stop() { # stop NAME: TERM the PID in STATE/NAME.pid if it still runs NAME, KILL after 10 s
    local file=$STATE/$1.pid pid
    pid=$(cat "$file" 2>/dev/null) || return 0
    if [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$1" ]]; then
        as_root kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 100); do [[ -d /proc/$pid ]] || break; sleep 0.1; done
        if [[ -d /proc/$pid ]]; then
            echo "down.sh: $1 (pid $pid) ignored SIGTERM; killing it" >&2
            as_root kill -KILL "$pid" 2>/dev/null || true
        fi
        echo "down.sh: stopped $1 (pid $pid)" >&2
    fi
    rm -f "$file"
}

stop slurmd
stop slurmctld
stop munged

MARK="# written by lmsat tests/slurm/up.sh (state: $(cd "$STATE" 2>/dev/null && pwd))"
for conf in /etc/slurm/slurm.conf /etc/slurm/gres.conf; do
    if [[ $(head -n 1 "$conf" 2>/dev/null) == "$MARK" ]]; then as_root rm -f "$conf"; fi
done
