#!/usr/bin/env bash
# Start the virtual Slurm cluster: slurmctld and four slurmd daemons (vnode1..vnode4) on this
# host, with accounting (slurmdbd over a MariaDB server of its own), so that tests and demos can
# run real sbatch/srun jobs across 4 nodes, read end states with sacct and meet QOS limits.
#
#   bash launch/virtual/start.sh          # idempotent; seconds once the packages are installed
#   export SLURM_CONF=/tmp/vitfsdp-slurm/etc/slurm.conf VITFSDP_SLURM=1
#   bash launch/virtual/stop.sh
#   VITFSDP_SLURM_NETWORK_GBIT_S=0.2 bash launch/virtual/start.sh   # nodes apart (network.sh)
#
# Environment: VITFSDP_SLURM_DIR (state directory, default /tmp/vitfsdp-slurm),
# VITFSDP_SLURM_CTLD_PORT (default 16817), VITFSDP_SLURM_NODE_PORT_BASE (node i listens on
# base+i, default 17000), VITFSDP_SLURM_DBD_PORT (slurmdbd, default 16819),
# VITFSDP_SLURM_DB_PORT (MariaDB on 127.0.0.1, default 16306), VITFSDP_SLURM_START_TIMEOUT_S
# (wait for idle nodes, default 60), VITFSDP_SLURM_ACCOUNTING (1, the default: slurmdbd and
# MariaDB; 0: none, no sacct and no QOS limits, a cluster that starts in seconds),
# VITFSDP_SLURM_NETWORK_GBIT_S (unset, the default: every node on this host's loopback; a rate
# in Gbit/s: each slurmd in its own network namespace behind a link of that rate, root only),
# VITFSDP_SLURM_NETWORK_SUBNET (the nodes' /24 then, default 10.78.0).
# Needs root: the daemons run as root (SlurmUser=root) and packages come from apt.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=common.sh
source "$HERE/common.sh"  # STATE_DIR, CONF, log, die, pid_alive, cancel_all_jobs
# shellcheck source=network.sh
source "$HERE/network.sh"  # NETNS, NET_*, net_check_settings, net_decide, net_setup, net_exec ...
NODES=(vnode1 vnode2 vnode3 vnode4)
NODE_LIST="vnode[1-${#NODES[@]}]"
PARTITION=debug
CPUS_PER_NODE=64
GPUS_PER_NODE=8
CTLD_PORT=${VITFSDP_SLURM_CTLD_PORT:-16817}
NODE_PORT_BASE=${VITFSDP_SLURM_NODE_PORT_BASE:-17000}
START_TIMEOUT_S=${VITFSDP_SLURM_START_TIMEOUT_S:-60}
DBD_PORT=${VITFSDP_SLURM_DBD_PORT:-16819}
DB_PORT=${VITFSDP_SLURM_DB_PORT:-16306}
ACCOUNTING=${VITFSDP_SLURM_ACCOUNTING:-1}
DB_DIR=$STATE_DIR/mariadb  # MariaDB's data directory, socket and pid file (owned by mysql)
DB_SOCKET=$DB_DIR/mariadbd.sock
# A QOS with a per-user job limit, as a site's debug QOS (Frontier's allows 1 job): jobs
# submitted with --qos=limit2 beyond 2 queued or running are refused by sbatch.
LIMIT_QOS=limit2
LIMIT_QOS_MAX_JOBS=2
PACKAGES=(slurm-wlm munge slurmdbd mariadb-server)

install_packages() {
    local pkg missing=()
    for pkg in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' \
            || missing+=("$pkg")
    done
    [[ ${#missing[@]} -eq 0 ]] && return
    log "installing ${missing[*]} (apt-get)"
    local apt_log
    apt_log=$(mktemp)
    export DEBIAN_FRONTEND=noninteractive
    if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"; } \
        >"$apt_log" 2>&1; then
        cat "$apt_log" >&2
        die "apt-get could not install ${missing[*]}"
    fi
    rm -f "$apt_log"
}

start_munge() {
    if munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then
        return
    fi
    if [[ ! -s /etc/munge/munge.key ]]; then
        log "creating /etc/munge/munge.key"
        install -d -o munge -g munge -m 0700 /etc/munge
        runuser -u munge -- mungekey --create --keyfile=/etc/munge/munge.key
    fi
    install -d -o munge -g munge -m 0755 /run/munge
    install -d -o munge -g munge -m 0700 /var/lib/munge /var/log/munge
    log "starting munged"
    runuser -u munge -- /usr/sbin/munged
    local _
    for _ in $(seq 50); do
        munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1 && return
        sleep 0.1
    done
    die "munged does not answer; see /var/log/munge/munged.log"
}

node_lines() {
    local i addr
    for i in "${!NODES[@]}"; do
        addr=""
        ((NETNS)) && addr=" NodeAddr=$(net_node_addr "$i")"
        printf 'NodeName=%s NodeHostname=localhost Port=%d%s\\n' \
            "${NODES[$i]}" $((NODE_PORT_BASE + i + 1)) "$addr"
    done
}

# Simulated memory per node: half of this host's memory, split over the nodes.
real_memory_mb() {
    awk -v n=${#NODES[@]} '/^MemTotal:/ {print int($2 / 1024 / 2 / n)}' /proc/meminfo
}

# fill TEMPLATE...: the templates with their @VAR@ placeholders filled, one after the other,
# on stdout. VITFSDP_SLURM_ACCOUNTING=0 turns slurm.conf.in's accounting lines into
# AccountingStorageType=accounting_storage/none (its Enforce line would need slurmdbd).
fill() {
    local lines accounting=()
    lines=$(node_lines)
    ((ACCOUNTING)) || accounting=(
        -e 's|^AccountingStorageType=.*|AccountingStorageType=accounting_storage/none|'
        -e '/^AccountingStorage\(Host\|Port\|Enforce\)=/d')
    sed -e "s|@STATE_DIR@|$STATE_DIR|g" \
        -e "s|@CTLD_HOST@|$CTLD_HOST|g" \
        -e "s|@CTLD_PORT@|$CTLD_PORT|g" \
        -e "s|@CPUS_PER_NODE@|$CPUS_PER_NODE|g" \
        -e "s|@GPUS_PER_NODE@|$GPUS_PER_NODE|g" \
        -e "s|@LAST_GPU@|$((GPUS_PER_NODE - 1))|g" \
        -e "s|@REAL_MEMORY_MB@|$(real_memory_mb)|g" \
        -e "s|@NODE_LIST@|$NODE_LIST|g" \
        -e "s|@NODE_LINES@|${lines%\\n}|g" \
        -e "s|@DBD_PORT@|$DBD_PORT|g" \
        -e "s|@DB_PORT@|$DB_PORT|g" \
        -e "s|@DB_PASS@|$(db_password)|g" \
        -e "s|@NET_GBIT_S@|$NET_GBIT_S|g" \
        -e "s|@NET_NAME@|$NET_NAME|g" \
        -e "s|@NET_SUBNET@|$NET_SUBNET|g" \
        -e "s|@NET_HOST_ADDR@|$NET_HOST_ADDR|g" \
        -e "s|@NET_NODE_IF@|$NET_NODE_IF|g" \
        "${accounting[@]}" "$@"
}

# update OUT: stdin becomes OUT where it differs; returns 1 when OUT changed.
update() {
    cat >"$1.new"
    if cmp -s "$1.new" "$1"; then
        rm -f "$1.new"
        return 0
    fi
    mv "$1.new" "$1"
    return 1
}

# The rendered configuration: slurm.conf (with slurm.netns.conf.in's lines when the network
# is emulated), gres.conf, slurmdbd.conf and the network's TaskProlog. When any of them
# changed the running daemons are restarted (stop.sh; it removes the network too).
prepare_state_dir() {
    local node templates=("$HERE/slurm.conf.in")
    mkdir -p "$STATE_DIR"/{etc,state,run,log,dev}
    for ((i = 0; i < GPUS_PER_NODE; i++)); do
        ln -sfn /dev/null "$STATE_DIR/dev/gpu$i"
    done
    for node in "${NODES[@]}"; do
        install -d -m 0755 "$STATE_DIR/spool/$node"
    done
    ((NETNS)) && templates+=("$HERE/slurm.netns.conf.in")
    local changed=0
    fill "${templates[@]}" | update "$CONF" || changed=1
    fill "$HERE/gres.conf.in" | update "$STATE_DIR/etc/gres.conf" || changed=1
    (umask 077 && fill "$HERE/slurmdbd.conf.in" | update "$STATE_DIR/etc/slurmdbd.conf") \
        || changed=1
    chmod 0600 "$STATE_DIR/etc/slurmdbd.conf"  # slurmdbd refuses a readable one
    if ((NETNS)); then
        fill "$HERE/task_prolog.sh.in" | update "$STATE_DIR/etc/task_prolog.sh" || changed=1
        chmod 0755 "$STATE_DIR/etc/task_prolog.sh"  # run as the job's user
    fi
    if ((changed)) && any_daemon_running; then
        log "slurm.conf changed: restarting the daemons"
        bash "$HERE/stop.sh"
    fi
}

# any_daemon_running [NAME...]: whether one of the named Slurm daemons of this cluster runs
# (default: slurmctld, slurmdbd, any slurmd).
any_daemon_running() {
    local name node names=("$@")
    ((${#names[@]})) || names=(slurmctld slurmdbd slurmd)
    for name in "${names[@]}"; do
        case $name in
            slurmd)
                for node in "${NODES[@]}"; do
                    pid_alive "$STATE_DIR/run/slurmd-$node.pid" slurmd && return 0
                done ;;
            *) pid_alive "$STATE_DIR/run/$name.pid" "$name" && return 0 ;;
        esac
    done
    return 1
}

# The database password of the slurm user, made once per state directory (this host only).
db_password() {
    local f=$STATE_DIR/etc/db.pass
    [[ -s $f ]] || (umask 077 && od -An -N16 -tx1 /dev/urandom | tr -d ' \n' >"$f")
    cat "$f"
}

# wait_for SECONDS WHAT CMD...: until CMD succeeds, or die naming WHAT.
wait_for() {
    local timeout_s=$1 what=$2 deadline
    shift 2
    deadline=$((SECONDS + timeout_s))
    until "$@" >/dev/null 2>&1; do
        ((SECONDS < deadline)) || { show_logs; die "$what does not answer after ${timeout_s}s"; }
        sleep 0.2
    done
}

# MariaDB for slurmdbd: its own data directory, socket and port (127.0.0.1), run as mysql.
start_mariadb() {
    local err_log=$STATE_DIR/log/mariadbd.log
    if ! pid_alive "$DB_DIR/mariadbd.pid" mariadbd; then
        if [[ ! -d $DB_DIR/mysql ]]; then
            log "creating the accounting database in $DB_DIR"
            install -d -o mysql -g mysql -m 0700 "$DB_DIR"
            mariadb-install-db --no-defaults --user=mysql --datadir="$DB_DIR" \
                --auth-root-authentication-method=socket --skip-test-db \
                >"$STATE_DIR/log/mariadb-install.log" 2>&1 \
                || { cat "$STATE_DIR/log/mariadb-install.log" >&2; die "mariadb-install-db failed"; }
        fi
        [[ -e $err_log ]] || install -o mysql -g mysql -m 0644 /dev/null "$err_log"
        log "starting mariadbd (127.0.0.1:$DB_PORT)"
        setsid mariadbd --no-defaults --user=mysql --datadir="$DB_DIR" --socket="$DB_SOCKET" \
            --pid-file="$DB_DIR/mariadbd.pid" --port="$DB_PORT" --bind-address=127.0.0.1 \
            --skip-name-resolve --log-error="$err_log" --innodb-buffer-pool-size=32M \
            </dev/null >/dev/null 2>&1 &
    fi
    wait_for 60 mariadbd mariadb-admin --no-defaults --socket="$DB_SOCKET" ping
    mariadb --no-defaults --socket="$DB_SOCKET" -u root -e "
        CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1';
        ALTER USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$(db_password)';
        GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
}

start_slurmdbd() {
    if ! pid_alive "$STATE_DIR/run/slurmdbd.pid" slurmdbd; then
        log "starting slurmdbd"
        slurmdbd
    fi
    wait_for 60 slurmdbd sacctmgr -n show cluster
}

# The cluster, and the QOS limit2 that root may use (root's association comes with the
# cluster). Idempotent: only what is missing is added.
setup_accounting() {
    local cluster
    cluster=$(awk -F= '/^ClusterName=/ {print $2}' "$CONF")
    sacctmgr -n -P show cluster format=cluster | grep -qx "$cluster" \
        || sacctmgr -i add cluster "$cluster" >/dev/null
    sacctmgr -n -P show qos format=name | grep -qx "$LIMIT_QOS" \
        || sacctmgr -i add qos "$LIMIT_QOS" MaxSubmitJobsPerUser=$LIMIT_QOS_MAX_JOBS \
            MaxJobsPerUser=$LIMIT_QOS_MAX_JOBS >/dev/null
    sacctmgr -n -P show assoc where user=root cluster="$cluster" format=qos \
        | tr ',' '\n' | grep -qx "$LIMIT_QOS" \
        || sacctmgr -i modify user root set qos+="$LIMIT_QOS" >/dev/null
}

# Node names must resolve (MASTER_ADDR is taken from SLURM_JOB_NODELIST).
add_hosts_entries() {
    local node missing=()
    for node in "${NODES[@]}"; do
        getent hosts "$node" >/dev/null || missing+=("$node")
    done
    [[ ${#missing[@]} -eq 0 ]] && return
    log "adding ${missing[*]} to /etc/hosts"
    echo "127.0.0.1 ${missing[*]}  # vitfsdp virtual Slurm cluster" >>/etc/hosts
}

# Start what is not running. STARTED_SINCE[node] is the epoch second before its slurmd was
# started here (0 for a slurmd that was already running).
declare -A STARTED_SINCE
COLD_START=0
start_daemons() {
    local node now
    now=$(date +%s)
    any_daemon_running slurmctld slurmd || COLD_START=1
    if ! pid_alive "$STATE_DIR/run/slurmctld.pid" slurmctld; then
        log "starting slurmctld"
        slurmctld -f "$CONF"
    fi
    local where=""
    for node in "${NODES[@]}"; do
        STARTED_SINCE[$node]=0
        if ! pid_alive "$STATE_DIR/run/slurmd-$node.pid" slurmd; then
            ((NETNS)) && where=" in network namespace $(net_node_ns "$node")"
            log "starting slurmd -N $node$where"
            net_exec "$node" slurmd -f "$CONF" -N "$node"
            STARTED_SINCE[$node]=$now
        fi
    done
}

# After a cold start (no slurmctld and no slurmd was running), jobs the controller recovers from
# its saved state belong to a cluster that stopped without stop.sh (killed, or the host
# restarted): nothing of theirs runs any more, but they hold their nodes until cancelled.
cancel_stale_jobs() {
    ((COLD_START)) || return 0
    wait_for 30 slurmctld scontrol ping
    cancel_all_jobs "cancelling jobs left from a cluster that stopped without stop.sh:" || true
}

show_logs() {
    local f
    for f in "$STATE_DIR"/log/*.log; do
        [[ -e $f ]] || continue
        echo "----- tail $f (PMIx plugin noise left out)" >&2
        grep -vE 'pmix|MPI: Cannot create context' "$f" | tail -n 15 >&2
    done
}

# Nodes that are idle and whose slurmd registered since it was started here: the controller
# recovers nodes as idle from its saved state before their slurmd is up.
num_ready_nodes() {
    local line num_ready=0
    local re='NodeName=([^ ]+) .* State=([^ ]+) .* SlurmdStartTime=([0-9T:-]+)'
    while read -r line; do
        [[ $line =~ $re && ${BASH_REMATCH[2]} == IDLE ]] || continue
        (($(date -d "${BASH_REMATCH[3]}" +%s) >= ${STARTED_SINCE[${BASH_REMATCH[1]}]:-0})) \
            && num_ready=$((num_ready + 1))
    done < <(scontrol show node -o "$NODE_LIST" 2>/dev/null)
    echo "$num_ready"
}

# Nodes the controller drained under an earlier configuration (kept in its saved state) are
# resumed once; a node drained again under this configuration shows up in the logs on timeout.
resume_drained() {
    local drained
    drained=$(sinfo -h -N -p "$PARTITION" -t drain -o %N 2>/dev/null | sort -u | paste -sd,)
    [[ -n $drained ]] || return 1
    log "resuming drained nodes $drained (reason: $(sinfo -h -R -o %E | head -n1))"
    scontrol update nodename="$drained" state=resume || true
    return 0
}

wait_until_idle() {
    local deadline=$((SECONDS + START_TIMEOUT_S)) resumed=0
    until [[ $(num_ready_nodes) -eq ${#NODES[@]} ]]; do
        if ((!resumed)) && resume_drained; then resumed=1; fi
        if ((SECONDS >= deadline)); then
            sinfo -N -p "$PARTITION" >&2 || true
            squeue >&2 || true
            show_logs
            die "not all ${#NODES[@]} nodes idle after ${START_TIMEOUT_S}s (logs above, in $STATE_DIR/log)"
        fi
        sleep 0.5
    done
}

print_usage() {
    local accounting="Accounting: slurmdbd on port $DBD_PORT (sacct); QOS $LIMIT_QOS allows $LIMIT_QOS_MAX_JOBS jobs per user."
    ((ACCOUNTING)) || accounting="Accounting: none (VITFSDP_SLURM_ACCOUNTING=0): no sacct, no QOS limits."
    cat <<EOT
Virtual Slurm cluster up: ${#NODES[@]} nodes $NODE_LIST × $CPUS_PER_NODE CPUs × $GPUS_PER_NODE GPUs (GRES), partitions $PARTITION (default), batch.
$accounting
EOT
    ((NETNS)) && cat <<EOT
Network: nodes apart on an emulated $NET_GBIT_S Gbit/s link (htb, both ways; latency not emulated): each slurmd in network namespace $NET_NAME-vnodeI at $NET_SUBNET.I, slurmctld at $NET_HOST_ADDR.
EOT
    cat <<EOT
Use it with:
  export SLURM_CONF=$CONF VITFSDP_SLURM=1
  sinfo; srun -N2 -n4 hostname; sacct
Stop it with: bash launch/virtual/stop.sh
EOT
}

main() {
    [[ $EUID -eq 0 ]] || die "run as root (the daemons run as SlurmUser=root)"
    [[ $ACCOUNTING == [01] ]] \
        || die "VITFSDP_SLURM_ACCOUNTING=$ACCOUNTING must be 1 (slurmdbd, sacct) or 0 (none)"
    net_check_settings
    net_decide
    CTLD_HOST=localhost
    ((NETNS)) && CTLD_HOST="localhost($NET_HOST_ADDR)"  # the slurmds' way to slurmctld
    export SLURM_CONF=$CONF
    install_packages
    start_munge
    ((NETNS)) || add_hosts_entries  # with the network, each node's own hosts file names them
    prepare_state_dir
    if ((NETNS)); then
        net_setup
    else
        net_teardown  # what a start with the network, then killed, left (usually nothing)
    fi
    if ((ACCOUNTING)); then
        start_mariadb
        start_slurmdbd
        setup_accounting
    fi
    start_daemons
    cancel_stale_jobs
    wait_until_idle
    print_usage
}

main "$@"
