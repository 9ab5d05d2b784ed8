#!/usr/bin/env bash
# tests/multinode/nodes.sh: several "nodes" on this machine, for the multinode tests (ctest -L
# multinode) and for trying a hostfile by hand.
#
#   tests/multinode/nodes.sh NODES SLOTS -- COMMAND [ARGS...]
#
# Each node is a network namespace joined to a bridge by a veth pair, with an address of its own
# (node k, zn-nodeK, has 10.77.0.(k+1)). Processes started on a node also get its hostname (a
# UTS namespace), a /dev/shm of their own and an /etc/hosts naming every node (a mount
# namespace), so that Open MPI's session directories and shared-memory segments are per node as
# on separate machines, and the nodes find each other by name. The filesystem is otherwise
# shared, as a cluster's is.
#
# Open MPI starts its daemons on the other nodes with its own remote start (plm rsh), through an
# agent this script writes: "rsh HOST COMMAND" enters HOST's namespaces and runs COMMAND there,
# as ssh would log in to a real node. COMMAND runs on node 0 with
#   ZERO_NODES_HOSTFILE  a hostfile naming every node with slots=SLOTS
#   ZERO_NODES_MPI_ARGS  the mpirun options that go with it (the agent, and TCP kept to the
#                        nodes' network), one per line
#   ZERO_NODES_WORK      a directory every node sees, removed at the end; nodes named in
#                        its file `stalled` (one per line) never start: the agent hangs
#                        instead of entering them, as ssh to a node that is down would
# Everything is torn down when COMMAND ends, fails or is interrupted. COMMAND's exit status is
# returned; 77 (ctest's skip) with the reason when this machine cannot make the nodes (not root,
# no network namespaces, no veth or bridge devices, no iproute2).
set -uo pipefail

usage() {
  echo "usage: tests/multinode/nodes.sh NODES SLOTS -- COMMAND [ARGS...]" >&2
  exit 2
}
[[ $# -ge 4 && $3 == -- ]] || usage
nodes=$1 slots=$2
shift 3
[[ $nodes =~ ^[0-9]+$ && $nodes -ge 2 && $nodes -le 8 ]] || {
  echo "nodes.sh: NODES must be 2 to 8, got '$nodes'" >&2
  exit 2
}
[[ $slots =~ ^[0-9]+$ && $slots -ge 1 ]] || {
  echo "nodes.sh: SLOTS must be a positive number, got '$slots'" >&2
  exit 2
}

skip() {
  echo "SKIPPED: nodes.sh cannot make $nodes nodes here: $*"
  exit 77
}
((EUID == 0)) || skip "network namespaces need root"
command -v ip >/dev/null || skip "no 'ip' command (install iproute2)"
command -v unshare >/dev/null || skip "no 'unshare' command (install util-linux)"

prefix=zn
bridge=$prefix-br
node_name() { echo "$prefix-node$1"; }

teardown() {
  for ((k = 0; k < 8; k++)); do
    local ns
    ns=$(node_name "$k")
    if ip netns list 2>/dev/null | grep -qw "$ns"; then
      # Processes still in the namespace (a daemon the job left) go first.
      ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
      ip netns del "$ns" 2>/dev/null
    fi
    ip link del "$prefix-v$k" 2>/dev/null
  done
  ip link del "$bridge" 2>/dev/null
}

# A run that was killed may have left its nodes behind: the names are fixed (ctest runs one
# multinode test at a time: RESOURCE_LOCK multinode).
teardown
work=$(mktemp -d "${TMPDIR:-/tmp}/zero-nodes.XXXXXX") || exit 1
cleanup() {
  teardown
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

ip link add "$bridge" type bridge 2>"$work/err" || skip "no bridge device: $(cat "$work/err")"
ip link set "$bridge" up
for ((k = 0; k < nodes; k++)); do
  ns=$(node_name "$k")
  address=10.77.0.$((k + 1))
  ip netns add "$ns" 2>"$work/err" || skip "no network namespace: $(cat "$work/err")"
  ip link add "$prefix-v$k" type veth peer name eth0 netns "$ns" 2>"$work/err" ||
    skip "no veth device: $(cat "$work/err")"
  ip link set "$prefix-v$k" master "$bridge" up
  ip -n "$ns" addr add "$address/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  echo "$address $ns" >>"$work/hosts"
  echo "$ns slots=$slots" >>"$work/hostfile"
done
printf '127.0.0.1 localhost\n' >>"$work/hosts"

# Enters node NS's namespaces and runs a shell command there with its hostname, its own /dev/shm
# and the nodes' /etc/hosts.
cat >"$work/enter" <<EOF
#!/usr/bin/env bash
ns=\$1
shift
exec ip netns exec "\$ns" unshare --uts --mount /bin/sh -c \\
  'hostname "\$0" && mount -t tmpfs zero-nodes-shm /dev/shm &&
   mount --bind "$work/hosts" /etc/hosts && exec /bin/sh -c "\$1"' "\$ns" "\$*"
EOF
# Open MPI's remote-start agent: "rsh [OPTIONS] HOST COMMAND...", as ssh takes it.
cat >"$work/rsh" <<EOF
#!/usr/bin/env bash
while [[ \${1:-} == -* ]]; do shift; done
host=\$1
shift
ns=\$(awk -v h="\$host" '\$1 == h || \$2 == h {print \$2}' "$work/hosts")
[[ -n \$ns && \$ns != localhost ]] || { echo "nodes.sh rsh: no node '\$host'" >&2; exit 255; }
if grep -qx "\$ns" "$work/stalled" 2>/dev/null; then exec sleep 86400; fi
exec "$work/enter" "\$ns" "\$@"
EOF
chmod +x "$work/enter" "$work/rsh"
"$work/enter" "$(node_name 0)" true 2>"$work/err" ||
  skip "cannot enter a node (unshare --uts --mount, or mount tmpfs): $(cat "$work/err")"

export ZERO_NODES_HOSTFILE=$work/hostfile
export ZERO_NODES_WORK=$work
export ZERO_NODES_MPI_ARGS="--mca
plm_rsh_agent
$work/rsh
--mca
oob_tcp_if_include
10.77.0.0/24
--mca
btl_tcp_if_include
10.77.0.0/24"
printf -v command '%q ' "$@"
"$work/enter" "$(node_name 0)" "cd $(printf '%q' "$PWD") && exec $command"
