#!/usr/bin/env bash
# Bring up a real single-node SLURM cluster on this machine, for tests and CI:
# munge, slurmctld and slurmd on localhost (Debian slurm 22.05, no systemd, no slurmdbd).
#
#   tests/slurm/up.sh [STATE_DIR]    # default: $LMSAT_SLURM_STATE or /tmp/lmsat-slurm
#   tests/slurm/down.sh [STATE_DIR]  # stops the daemons this script started, by PID
#
# Installs the Debian packages when they are missing (needs root and a package mirror).
# The config goes to the default paths /etc/slurm/{slurm,gres}.conf, not to $SLURM_CONF: the
# executor plugin's job step strips every SLURM_* variable before its nested `srun`, which
# then finds no config. Config files there that up.sh did not write are refused.
# Everything else lives in STATE_DIR: spool and state dirs, daemon logs, and one
# `<daemon>.pid` file per daemon started here (a munged that was already running is reused
# and not recorded, so down.sh never stops what it did not start). Idempotent: a cluster
# already up under STATE_DIR is left as it is.
set -euo pipefail

STATE=${1:-${LMSAT_SLURM_STATE:-/tmp/lmsat-slurm}}
mkdir -p "$STATE"
STATE=$(cd "$STATE" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
CONF=/etc/slurm/slurm.conf
GRES_CONF=/etc/slurm/gres.conf
MARK="# written by lmsat tests/slurm/up.sh"
WAIT_S=${LMSAT_SLURM_WAIT_S:-60} # how long to wait for the node to become idle

log() { echo "up.sh: $*" >&2; }
die() {
    log "$*"
    for f in slurmctld.log slurmd.log; do
        [[ -f $STATE/$f ]] && { log "--- tail of $STATE/$f"; tail -n 20 "$STATE/$f" >&2; }
    done
    exit 1
}
as_root() { if [[ $(id -u) == 0 ]]; then "$@"; else sudo -n "$@"; fi; }
alive() { # alive NAME: the PID in STATE/NAME.pid runs the program NAME
    local pid
    pid=$(cat "$STATE/$1.pid" 2>/dev/null) || return 1
    [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$1" ]]
}
node_state() { sinfo --noheader --Node --format=%T 2>/dev/null | head -n 1; }

# ---------------------------------------------------------------- packages
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null ||
    ! command -v sbatch >/dev/null || ! command -v munged >/dev/null; then
    log "installing slurmctld slurmd slurm-client munge"
    as_root apt-get update -qq
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends \
        slurmctld slurmd slurm-client munge >/dev/null
fi

# ---------------------------------------------------------------- already up?
if alive slurmctld && alive slurmd && [[ $(node_state) == idle* || $(node_state) == mixed* || $(node_state) == alloc* ]]; then
    log "already up ($STATE)"
    exit 0
fi

# ---------------------------------------------------------------- ports free?
# Another controller (a test cluster of another STATE_DIR, or a real one) holds the ports.
for port in 6817 6818; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        die "port $port is in use: $(head -n 1 "$CONF" 2>/dev/null || echo 'another SLURM daemon') runs; stop it first (tests/slurm/down.sh STATE_DIR)"
    fi
done

# ---------------------------------------------------------------- munge
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    [[ -s /etc/munge/munge.key ]] || as_root mungekey --create --keyfile /etc/munge/munge.key
    as_root install -d -o munge -g munge -m 0755 /run/munge
    as_root install -d -o munge -g munge -m 0700 /var/lib/munge /var/log/munge
    as_root chown munge:munge /etc/munge/munge.key
    as_root chmod 0400 /etc/munge/munge.key
    as_root runuser -u munge -- munged --force
    for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
    munge -n | unmunge >/dev/null || die "munged did not start (see /var/log/munge/munged.log)"
    cp /run/munge/munged.pid "$STATE/munged.pid"
    log "munged started (pid $(cat "$STATE/munged.pid"))"
fi

# ---------------------------------------------------------------- slurm.conf
# The node as slurmd sees it (sockets, cores, threads), with ~90% of free memory.
HOST=$(hostname -s)
NODE=$(slurmd -C | head -n 1 | sed -E 's/ RealMemory=[0-9]+//')
MEM_MB=$(awk '/MemAvailable/ {printf "%d", $2 / 1024 * 0.9}' /proc/meminfo)
mkdir -p "$STATE/ctld" "$STATE/spool"
for f in "$CONF" "$GRES_CONF"; do
    if [[ -e $f ]] && ! grep -qF "$MARK" "$f"; then
        die "$f exists and was not written by this script; move it away to use the test cluster"
    fi
done
{
    echo "$MARK (state: $STATE)"
    sed -e "s|@STATE@|$STATE|g" -e "s|@HOST@|$HOST|g" -e "s|@NODE@|$NODE|" \
        -e "s|@MEM_MB@|$MEM_MB|" "$HERE/slurm.conf.in"
} >"$STATE/slurm.conf"
# Two pretend GPUs: slurmd counts a GPU per device file and only checks that it exists.
touch "$STATE/fake-gpu0" "$STATE/fake-gpu1"
printf '%s\n' "$MARK (state: $STATE)" "AutoDetect=off" \
    "NodeName=$HOST Name=gpu File=$STATE/fake-gpu[0-1]" >"$STATE/gres.conf"
as_root install -D -m 0644 "$STATE/slurm.conf" "$CONF"
as_root install -D -m 0644 "$STATE/gres.conf" "$GRES_CONF"

# ---------------------------------------------------------------- daemons
alive slurmctld || { as_root slurmctld -c || die "slurmctld did not start"; }
alive slurmd || { as_root slurmd -c || die "slurmd did not start"; }
for i in $(seq $((WAIT_S * 2))); do
    if ((i > 10)); then # after 5 s both have written their PID files
        alive slurmctld || die "slurmctld exited (see $STATE/slurmctld.log)"
        alive slurmd || die "slurmd exited (see $STATE/slurmd.log)"
    fi
    state=$(node_state)
    [[ $state == idle* ]] && break
    if [[ $state == down* || $state == drain* ]]; then # e.g. a stale state file
        as_root scontrol update NodeName="$HOST" State=RESUME >/dev/null 2>&1 || true
    fi
    sleep 0.5
done
[[ $(node_state) == idle* ]] || die "node $HOST is '$(node_state)', not idle, after ${WAIT_S}s"
log "up: $(sinfo --noheader --format='%P %D %c cpus %m MB %T') ($STATE)"
