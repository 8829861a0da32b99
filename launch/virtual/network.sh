# The virtual cluster's nodes apart on an emulated network (sourced by start.sh and stop.sh,
# after common.sh). Opt-in: with VITFSDP_SLURM_NETWORK_GBIT_S set, each slurmd runs in its own
# network namespace, behind a link shaped to that rate both ways:
#
#   host namespace   slurmctld, sinfo/srun/sbatch ...    vsl<id>  <subnet>.254
#                                                          │ veth
#   <net>-sw         bridge br0, its ports:               host, p1, p2, p3, p4
#                                                               │ veth, htb both ends
#   <net>-vnode1     slurmd -N vnode1 and its jobs        eth0  <subnet>.1   (vnode2..4 alike)
#
# <net> is vslurm-<id>, <id> a checksum of the state directory's path: stop.sh finds the
# network from VITFSDP_SLURM_DIR alone, and two clusters (two state directories) never share
# a name. The veth into the host namespace (vsl<id>, address <subnet>.254) is the only device
# added there: slurmctld and the Slurm commands reach every slurmd at its NodeAddr through it,
# and the slurmds reach slurmctld at SlurmctldHost=localhost(<subnet>.254). Removing the
# switch namespace removes that veth with it (a veth pair goes when one end goes).
#
# Each node's TCP settings and shaped link are made by the local launcher's own code
# (net_link: vitfsdp.launch.netns.link_node, this repository's, run by python3): both ends of
# each node's link (its eth0 and its switch port) carry an htb class at the rate, so a node
# sends and receives at most the rate at once, as through a full-duplex NIC. Latency is not
# emulated (no netem on this kernel); a `netem delay` qdisc would be the leaf of class 1:10.
# The rest is shell, not netns.py's EmulatedNetwork, because the namespaces live as long as
# the daemons (from start.sh to stop.sh), not as long as one Python process (EmulatedNetwork
# is a `with` block with a guard process).
#
# Sources: ip-netns(8), ip-link(8), tc-htb(8); `ip netns exec` bind-mounts the files of
# /etc/netns/<name>/ over /etc (the nodes' hosts files).

NET_GBIT_S=${VITFSDP_SLURM_NETWORK_GBIT_S:-}  # empty: the loopback cluster (the default)
NET_SUBNET=${VITFSDP_SLURM_NETWORK_SUBNET:-10.78.0}  # the nodes' /24: node i is <subnet>.i
NET_ID=$(realpath -m "$STATE_DIR" | tr -d '\n' | cksum | awk '{printf "%08x", $1}')
NET_NAME=vslurm-$NET_ID
NET_HOST_IF=vsl$NET_ID  # the host end of the veth into the switch (15 characters at most)
NET_HOST_ADDR=$NET_SUBNET.254
NET_NODE_IF=eth0  # the node end of its link, inside the node's namespace (GLOO_SOCKET_IFNAME)
NET_STAMP=$STATE_DIR/run/network  # written last: the network is complete and has these settings
NET_ETC=/etc/netns
# The repository this script is in: net_link runs its vitfsdp, whichever one is installed.
NET_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
NETNS=0  # 1 once net_decide has found the network wanted and possible

# net_check_settings: refuse a bad rate or subnet in one line naming the variable, before
# anything is started; the rate is normalised (0.2, 1, 2.5: a JSON number).
net_check_settings() {
    local re_num='^([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$' octet
    if [[ -n $NET_GBIT_S ]]; then
        [[ $NET_GBIT_S =~ $re_num ]] && awk -v g="$NET_GBIT_S" 'BEGIN {exit !(g > 0)}' \
            || die "VITFSDP_SLURM_NETWORK_GBIT_S=$NET_GBIT_S must be a rate in Gbit/s > 0, e.g. 0.2 (unset: the loopback cluster)"
        NET_GBIT_S=$(awk -v g="$NET_GBIT_S" 'BEGIN {printf "%g", g}')
    fi
    [[ $NET_SUBNET =~ ^([0-9]+)\.([0-9]+)\.([0-9]+)$ ]] \
        || die "VITFSDP_SLURM_NETWORK_SUBNET=$NET_SUBNET must be the first three numbers of a /24, e.g. 10.78.0"
    for octet in "${BASH_REMATCH[@]:1}"; do
        ((10#$octet <= 255)) \
            || die "VITFSDP_SLURM_NETWORK_SUBNET=$NET_SUBNET must be the first three numbers of a /24, e.g. 10.78.0"
    done
}

# net_unavailable_reason: why namespaces cannot be made here (printed), or nothing.
net_unavailable_reason() {
    local cap
    cap=$(awk '/^CapEff:/ {print $2}' /proc/self/status 2>/dev/null)
    # CAP_NET_ADMIN (12) and CAP_SYS_ADMIN (21), as vitfsdp.launch.netns._has_caps
    if [[ -z $cap ]] || ! (((16#$cap >> 12 & 1) && (16#$cap >> 21 & 1))); then
        echo "not root (no CAP_NET_ADMIN and CAP_SYS_ADMIN)"
    elif ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
        echo "no ip or tc command (install iproute2)"
    elif ! command -v python3 >/dev/null; then
        echo "no python3 (vitfsdp.launch.netns shapes the links)"
    elif ! ip netns list >/dev/null 2>&1; then
        echo "ip netns list fails"
    fi
}

# net_decide: NETNS=1 when a rate is set and namespaces can be made; else one line saying the
# network is not emulated, and the loopback cluster.
net_decide() {
    [[ -n $NET_GBIT_S ]] || return 0
    local why
    why=$(net_unavailable_reason)
    if [[ -n $why ]]; then
        log "VITFSDP_SLURM_NETWORK_GBIT_S=$NET_GBIT_S but $why: the network is not emulated; the nodes share this host's loopback"
        NET_GBIT_S=""
        return 0
    fi
    NETNS=1
}

net_node_ns() { echo "$NET_NAME-$1"; }
net_node_addr() { echo "$NET_SUBNET.$(($1 + 1))"; }  # by index in NODES, from 0
net_stamp() { echo "gbit_s=$NET_GBIT_S subnet=$NET_SUBNET nodes=${NODES[*]}"; }

# net_namespaces: this cluster's namespaces that exist.
net_namespaces() {
    command -v ip >/dev/null || return 0
    ip netns list 2>/dev/null | awk -v p="$NET_NAME-" 'index($1, p) == 1 {print $1}'
}

# net_teardown: kill what still runs in this cluster's namespaces, delete them (their veths,
# the bridge and the qdiscs go with them), their /etc/netns folders, the host's veth and the
# stamp. Idempotent; logs what it removed.
net_teardown() {
    local names=() ns pid folder folders=()
    mapfile -t names < <(net_namespaces)
    for folder in "$NET_ETC/$NET_NAME-"*; do
        [[ -e $folder ]] && folders+=("$folder")
    done
    rm -f "$NET_STAMP"
    ((${#names[@]} + ${#folders[@]})) || ip link show "$NET_HOST_IF" >/dev/null 2>&1 || return 0
    for ns in "${names[@]}"; do
        for pid in $(ip netns pids "$ns" 2>/dev/null); do
            kill -KILL "$pid" 2>/dev/null || true
        done
    done
    for ns in "${names[@]}"; do
        ip netns del "$ns" 2>/dev/null || true
    done
    ip link del "$NET_HOST_IF" 2>/dev/null || true
    rm -rf "${folders[@]}"
    log "removed the emulated network $NET_NAME (namespaces: ${names[*]:-none})"
}

# net_complete: the network exists whole, with the settings asked for (a start that crashed
# part-way wrote no stamp).
net_complete() {
    local have ns node
    [[ -s $NET_STAMP && $(<"$NET_STAMP") == "$(net_stamp)" ]] || return 1
    have=$(net_namespaces)
    for ns in "$NET_NAME-sw" $(for node in "${NODES[@]}"; do net_node_ns "$node"; done); do
        grep -qx -- "$ns" <<<"$have" || return 1
    done
    ip -4 -o addr show dev "$NET_HOST_IF" 2>/dev/null | grep -q " $NET_HOST_ADDR/"
}

# net_link NAMESPACE SWITCH PORT: the node's TCP settings and its link (its eth0, and PORT of
# the switch) shaped to NET_GBIT_S both ways, by vitfsdp.launch.netns.link_node, the local
# launcher's own: one htb class (rate = ceil, burst 2 ms at the rate but at least 64 KiB).
net_link() {
    PYTHONPATH="$NET_REPO${PYTHONPATH:+:$PYTHONPATH}" python3 -c \
        "import sys; from vitfsdp.launch.netns import main; sys.exit(main())" \
        link "$1" "$2" "$3" "$NET_GBIT_S"
}

# net_write_etc NAMESPACE ADDRESS: the node's /etc/hosts (this host's name is the node's own
# address, so gethostname() lookups, gloo's among them, give it; every node's name its
# address, so MASTER_ADDR from SLURM_JOB_NODELIST resolves) and a resolv.conf without a server.
net_write_etc() {
    local folder=$NET_ETC/$1 i
    mkdir -p "$folder"
    {
        echo "127.0.0.1 localhost"
        echo "$2 $(hostname)"
        for i in "${!NODES[@]}"; do
            echo "$(net_node_addr "$i") ${NODES[$i]}"
        done
        echo "$NET_HOST_ADDR $NET_NAME-host"
    } >"$folder/hosts"
    echo "options timeout:1 attempts:1" >"$folder/resolv.conf"
}

# net_subnet_free: no address of NET_SUBNET on this host (another cluster's, a site's).
net_subnet_free() {
    local taken
    taken=$(ip -4 -o addr show | awk -v p="$NET_SUBNET." '{split($4, a, "/")} index(a[1], p) == 1 {print a[1] " on " $2}' | head -n1)
    [[ -z $taken ]] || die "VITFSDP_SLURM_NETWORK_SUBNET=$NET_SUBNET: this host already has $taken (another virtual cluster's network?); choose another, e.g. VITFSDP_SLURM_NETWORK_SUBNET=10.79.0"
}

# net_create: the switch, the host's veth, and per node a namespace, its hosts file, TCP
# settings and shaped link; the stamp last. Any failure (set -e) removes what was made.
net_create() {
    local sw=$NET_NAME-sw i node ns port
    net_subnet_free
    trap 'log "could not make the emulated network $NET_NAME (the failing command above)"; net_teardown' EXIT
    ip netns add "$sw"
    ip -n "$sw" link add br0 type bridge
    ip -n "$sw" link set lo up
    ip -n "$sw" link set br0 up
    ip link add "$NET_HOST_IF" type veth peer name host netns "$sw"
    ip -n "$sw" link set host master br0 up
    ip addr add "$NET_HOST_ADDR/24" dev "$NET_HOST_IF"
    ip link set "$NET_HOST_IF" up
    for i in "${!NODES[@]}"; do
        node=${NODES[$i]}
        ns=$(net_node_ns "$node")
        port=p$((i + 1))
        ip netns add "$ns"
        net_write_etc "$ns" "$(net_node_addr "$i")"
        ip -n "$sw" link add "$port" type veth peer name "$NET_NODE_IF" netns "$ns"
        ip -n "$sw" link set "$port" master br0 up
        ip -n "$ns" addr add "$(net_node_addr "$i")/24" dev "$NET_NODE_IF"
        ip -n "$ns" link set lo up
        ip -n "$ns" link set "$NET_NODE_IF" up
        net_link "$ns" "$sw" "$port"
    done
    ip route get "$(net_node_addr 0)" | grep -q "dev $NET_HOST_IF" \
        || die "$(net_node_addr 0) is not routed through $NET_HOST_IF: $(ip route get "$(net_node_addr 0)")"
    net_stamp >"$NET_STAMP"
    trap - EXIT
    log "emulated network $NET_NAME: ${#NODES[@]} nodes apart on $NET_GBIT_S Gbit/s links (htb, both ways; latency not emulated), $NET_SUBNET.1-${#NODES[@]}, slurmctld at $NET_HOST_ADDR"
}

# net_setup: reuse a complete network with these settings, else restart the daemons (their
# network is broken or changed), remove what a crashed start left and make it anew.
net_setup() {
    if net_complete; then
        log "reusing the emulated network $NET_NAME ($NET_GBIT_S Gbit/s)"
        return 0
    fi
    if any_daemon_running slurmd; then
        log "the emulated network $NET_NAME is missing, incomplete or changed: restarting the daemons"
        bash "$HERE/stop.sh"
    fi
    net_teardown
    net_create
}

# net_exec NODE CMD...: CMD in NODE's network namespace when the network is emulated (else as
# is), in a mount namespace of its own where the node's hosts and resolv.conf are bind-mounted
# over /etc's, as `ip netns exec` does. Not `ip netns exec` itself: it also remounts /sys for
# the namespace, which hides /sys/fs/cgroup, and Slurm 22.05's slurmd does not start without
# its cgroup plugin ("No filesystem mounted on /sys/fs/cgroup"). So /sys is this host's in a
# node (/sys/class/net lists the host's devices; `ip link` the node's).
net_exec() {
    local node=$1 ns
    shift
    if ((NETNS)); then
        ns=$(net_node_ns "$node")
        nsenter --net="/run/netns/$ns" -- unshare --mount --propagation slave -- sh -c \
            'etc=$1; shift; mount --bind "$etc/hosts" /etc/hosts &&
             mount --bind "$etc/resolv.conf" /etc/resolv.conf && exec "$@"' \
            net_exec "$NET_ETC/$ns" "$@"
    else
        "$@"
    fi
}
