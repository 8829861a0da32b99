#!/usr/bin/env bash
# Stop the virtual Slurm cluster started by launch/virtual/start.sh. Idempotent.
#
#   bash launch/virtual/stop.sh               # cancel jobs, stop slurmd ×4, slurmctld,
#                                             # slurmdbd and its MariaDB, and remove the
#                                             # emulated network where there is one
#   bash launch/virtual/stop.sh --with-munge  # also stop munged
#
# The state directory (VITFSDP_SLURM_DIR, default /tmp/vitfsdp-slurm) and its logs are kept.
# The network (network.sh) is found from the state directory alone: removed whatever
# VITFSDP_SLURM_NETWORK_GBIT_S says now.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=common.sh
source "$HERE/common.sh"  # STATE_DIR, CONF, log, die, pid_alive, cancel_all_jobs
# shellcheck source=network.sh
source "$HERE/network.sh"  # net_teardown
RUN_DIR=$STATE_DIR/run
STOP_TIMEOUT_S=15

any_alive() {
    local pid
    for pid in "$@"; do
        kill -0 "$pid" 2>/dev/null && return 0
    done
    return 1
}

# stop_daemons NAME PIDFILE...: SIGTERM to all at once, SIGKILL after STOP_TIMEOUT_S.
stop_daemons() {
    local name=$1 f _ pids=()
    shift
    for f in "$@"; do
        if pid_alive "$f" "$name"; then
            pids+=("$(<"$f")")
            log "stopping $name (pid ${pids[-1]}, $(basename "$f" .pid))"
        fi
    done
    if [[ ${#pids[@]} -gt 0 ]]; then
        kill -TERM "${pids[@]}" 2>/dev/null || true
        for _ in $(seq $((STOP_TIMEOUT_S * 10))); do
            any_alive "${pids[@]}" || break
            sleep 0.1
        done
        if any_alive "${pids[@]}"; then
            log "$name did not stop in ${STOP_TIMEOUT_S}s: SIGKILL"
            kill -KILL "${pids[@]}" 2>/dev/null || true
        fi
    fi
    rm -f "$@"
}

# Jobs would otherwise outlive their slurmd (slurmstepd keeps running) and be lost on restart.
cancel_jobs() {
    local _
    [[ -f $CONF ]] && pid_alive "$RUN_DIR/slurmctld.pid" slurmctld || return 0
    export SLURM_CONF=$CONF
    cancel_all_jobs "cancelling jobs" || return 0
    for _ in $(seq $STOP_TIMEOUT_S); do
        [[ -z $(squeue -h -t running,completing -o %i 2>/dev/null) ]] && return
        sleep 1
    done
    log "jobs still completing after ${STOP_TIMEOUT_S}s; stopping anyway"
}

main() {
    shopt -s nullglob
    cancel_jobs
    stop_daemons slurmd "$RUN_DIR"/slurmd-*.pid
    stop_daemons slurmctld "$RUN_DIR/slurmctld.pid"
    stop_daemons slurmdbd "$RUN_DIR/slurmdbd.pid"
    stop_daemons mariadbd "$STATE_DIR/mariadb/mariadbd.pid"
    net_teardown  # after the slurmds: what still runs in a node's namespace is killed
    if [[ ${1:-} == --with-munge ]]; then
        stop_daemons munged /run/munge/munged.pid
    fi
    log "stopped"
}

main "$@"
