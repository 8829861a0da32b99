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
