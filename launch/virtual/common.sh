# Shared by start.sh and stop.sh (sourced): the state directory and small helpers.
STATE_DIR=${VITFSDP_SLURM_DIR:-/tmp/vitfsdp-slurm}
CONF=$STATE_DIR/etc/slurm.conf

log() { echo "[virtual-slurm] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# pid_alive PIDFILE NAME: the pid file names a live process called NAME.
pid_alive() {
    local pid
    [[ -s $1 ]] || return 1
    pid=$(<"$1")
    kill -0 "$pid" 2>/dev/null && [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$2" ]]
}

# cancel_all_jobs MESSAGE: scancel every job in the queue (SLURM_CONF set, slurmctld up), logging
# MESSAGE and the job ids; returns 1 when the queue is empty or cannot be read.
cancel_all_jobs() {
    local jobs
    jobs=$(squeue -h -o %i 2>/dev/null | paste -sd' ') || return 1
    [[ -n $jobs ]] || return 1
    log "$1 $jobs"
    # shellcheck disable=SC2086
    scancel $jobs 2>/dev/null || true
}
