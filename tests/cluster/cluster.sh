#!/usr/bin/env bash
# An emulated cluster on one machine: K "nodes", each a network namespace
# with its own hostname, on a Linux bridge the host is on too, so that an
# mpirun started on the host reaches every node over TCP as it would reach
# real machines. Needs root (or CAP_NET_ADMIN + CAP_SYS_ADMIN), iproute2
# (ip, tc), util-linux (unshare) and Open MPI's mpirun.
#
#   cluster.sh up K [--ppn N] [--rate RATE] [--delay MS] [--name NAME]
#       K nodes (1..99), N slots each in the hostfile (default 2). RATE
#       (tc syntax: 10gbit, 1gbit, 500mbit; default unshaped) caps each
#       node's link in both directions with tbf; MS adds a netem delay of
#       MS milliseconds each way. NAME (1-10 of [a-z0-9], default "zc")
#       keeps clusters apart: every name below and the subnet derive from
#       it, so two clusters with different names coexist.
#   cluster.sh run [--name NAME] -- MPIRUN_ARGS...
#       mpirun over the cluster's hostfile with the options it needs.
#   cluster.sh exec [--name NAME] NODE -- CMD...
#       CMD inside node NODE (0-based), with that node's network and hostname.
#   cluster.sh link [--name NAME] NODE down|up
#       Cut (or restore) node NODE's link to the bridge: its processes
#       stay alive but nobody reaches them, as when a machine's cable is pulled.
#   cluster.sh status [--name NAME]
#   cluster.sh down [--name NAME]
#       Kill every process inside the nodes and remove everything "up"
#       created. Idempotent; works after a crash (it finds things by name).
#   cluster.sh env [--name NAME]
#       Print the cluster's facts as shell assignments (dir, hostfile,
#       agent, subnet, nodes, ppn).
#
# What "up" creates, for NAME and node i (0-based):
#   bridge   zbNAME, address 10.231.S.254/24 (the host's side)
#   netns    zinc-NAME-i, holding eth0 = 10.231.S.(i+1)/24 and lo
#   veth     zvNAME-i on the bridge, its peer is the node's eth0
#   tc       tbf [+ netem] on zvNAME-i (host -> node) and on the node's
#            eth0 (node -> host and other nodes)
#   files    $ZINC_CLUSTER_DIR/NAME/ (default /tmp/zinc-cluster/NAME):
#            hostfile (one address per node, slots=ppn), agent (the rsh
#            agent), state (subnet, K, ppn)
# S is chosen from NAME's checksum; if that /24 is in use on the host,
# the next free one is taken.
#
# Why each piece (measured with Open MPI 4.1):
# - A UTS namespace per node: Open MPI's shared-memory transport (vader)
#   and its session directory are keyed on the hostname; two nodes with
#   the same hostname on one /tmp and /dev/shm collide, and ranks crash in
#   MPI_Init. The agent starts each orted under `unshare --uts` with the
#   node's hostname, and every rank is that orted's child.
# - btl self,vader,tcp with btl_tcp_if_include / oob_tcp_if_include set to
#   the cluster's subnet: ranks on one node use shared memory, across nodes
#   TCP over the bridge, and nothing tries the host's other interfaces.
# - btl_vader_single_copy_mechanism=none: CMA (process_vm_readv) fails
#   between processes in different namespaces.
# - plm_rsh_no_tree_spawn: mpirun starts every orted itself, through the
#   agent, from the host.
set -euo pipefail

die() { echo "cluster.sh: $*" >&2; exit 1; }

name=zc
root_dir=${ZINC_CLUSTER_DIR:-/tmp/zinc-cluster}

# Names derived from NAME; see the table above.
ns_of() { echo "zinc-$name-$1"; }
veth_of() { echo "zv$name-$1"; }
bridge() { echo "zb$name"; }
dir() { echo "$root_dir/$name"; }

check_name() {
  [[ $name =~ ^[a-z0-9]{1,10}$ ]] || die "--name '$name': use 1-10 characters of [a-z0-9] (interface names are limited to 15 bytes)"
}

# The third octet of the cluster's subnet: NAME's checksum, moved on past
# any /24 the host already has an address in.
pick_subnet() {
  local s
  s=$(( $(printf '%s' "$name" | cksum | cut -d' ' -f1) % 250 + 1 ))
  for _ in $(seq 250); do
    if ! ip -4 -o addr show | grep -q " 10\.231\.$s\."; then echo "$s"; return; fi
    s=$(( s % 250 + 1 ))
  done
  die "no free 10.231.x.0/24 subnet"
}

load_state() {
  [ -f "$(dir)/state" ] || die "no cluster '$name' (run: cluster.sh up K --name $name)"
  # shellcheck disable=SC1091
  . "$(dir)/state"
}

# tc on one interface (run inside the node with ip netns exec for eth0).
shape() {
  local rate=$1 delay=$2; shift 2
  [ -n "$rate" ] || [ -n "$delay" ] || return 0
  if [ -n "$rate" ]; then
    # tbf's bucket: 10 ms of traffic at the rate (at least 64 KiB) so that
    # a 10 gbit link is not capped by the bucket instead of the rate.
    local bits burst
    bits=$(echo "$rate" | awk '{ v = $1 + 0; u = tolower($1); sub(/^[0-9.]+/, "", u);
      m = (u == "kbit") ? 1e3 : (u == "mbit") ? 1e6 : (u == "gbit") ? 1e9 : (u == "bit" || u == "") ? 1 : -1;
      if (m < 0) exit 1; printf "%.0f", v * m }') || die "--rate '$rate': use a number with bit, kbit, mbit or gbit"
    burst=$(( bits / 8 / 100 )); [ "$burst" -ge 65536 ] || burst=65536
    "$@" tc qdisc add dev "$IFACE" root handle 1: tbf rate "$rate" burst "$burst" latency 100ms
    [ -z "$delay" ] || "$@" tc qdisc add dev "$IFACE" parent 1:1 handle 10: netem delay "${delay}ms" limit 100000
  else
    "$@" tc qdisc add dev "$IFACE" root handle 10: netem delay "${delay}ms" limit 100000
  fi
}

cmd_up() {
  local k="" ppn=2 rate="" delay=""
  while [ $# -gt 0 ]; do
    case $1 in
      --ppn) ppn=$2; shift 2 ;;
      --rate) rate=$2; shift 2 ;;
      --delay) delay=$2; shift 2 ;;
      --name) name=$2; shift 2 ;;
      -*) die "up: unknown option $1" ;;
      *) k=$1; shift ;;
    esac
  done
  check_name
  [[ $k =~ ^[0-9]+$ ]] && [ "$k" -ge 1 ] && [ "$k" -le 99 ] || die "up: give the number of nodes K (1..99)"
  [[ $ppn =~ ^[0-9]+$ ]] && [ "$ppn" -ge 1 ] || die "up: --ppn must be a positive integer"
  [ -z "$delay" ] || [[ $delay =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "up: --delay is in milliseconds (a number)"
  ip link show "$(bridge)" >/dev/null 2>&1 && die "cluster '$name' is already up (cluster.sh down --name $name)"
  [ "$(id -u)" -eq 0 ] || die "up needs root (network namespaces, bridges, tc)"

  # Anything failing from here on leaves nothing behind.
  trap 'cmd_down >/dev/null 2>&1' EXIT
  local s; s=$(pick_subnet)
  local net=10.231.$s
  mkdir -p "$(dir)"
  ip link add "$(bridge)" type bridge
  ip addr add "$net.254/24" dev "$(bridge)"
  ip link set "$(bridge)" up
  if [ -n "$delay" ]; then
    tc qdisc add dev "$(bridge)" root netem delay 1ms 2>/dev/null ||
      die "up: --delay needs tc's netem qdisc, which this kernel lacks (sch_netem); leave --delay out"
    tc qdisc del dev "$(bridge)" root
  fi
  : >"$(dir)/hostfile"
  local i ns veth
  for i in $(seq 0 $((k - 1))); do
    ns=$(ns_of "$i"); veth=$(veth_of "$i")
    ip netns add "$ns"
    ip link add "$veth" type veth peer name eth0 netns "$ns"
    ip link set "$veth" master "$(bridge)" up
    ip netns exec "$ns" ip link set lo up
    ip netns exec "$ns" ip addr add "$net.$((i + 1))/24" dev eth0
    ip netns exec "$ns" ip link set eth0 up
    IFACE=$veth shape "$rate" "$delay"
    IFACE=eth0 shape "$rate" "$delay" ip netns exec "$ns"
    echo "$net.$((i + 1)) slots=$ppn" >>"$(dir)/hostfile"
  done

  # The rsh agent: Open MPI runs `agent [opts] HOST COMMAND...` and expects
  # COMMAND run by a shell on HOST, as ssh would.
  cat >"$(dir)/agent" <<EOF
#!/bin/sh
# rsh agent of the emulated cluster '$name' (written by cluster.sh up):
# runs a command inside the node that owns the given address, under that
# node's own hostname ($name-nI).
while [ \$# -gt 0 ]; do case \$1 in -*) shift ;; *) break ;; esac; done
host=\$1; shift
case \$host in
  $net.*) i=\$(( \${host##*.} - 1 )) ;;
  *) echo "agent of cluster $name: \$host is not a node of this cluster" >&2; exit 255 ;;
esac
exec ip netns exec "zinc-$name-\$i" unshare --uts sh -c 'hostname "\$0" && exec sh -c "\$1"' "$name-n\$i" "\$*"
EOF
  chmod +x "$(dir)/agent"
  cat >"$(dir)/state" <<EOF
subnet=$net.0/24
nodes=$k
ppn=$ppn
rate=$rate
delay=$delay
EOF
  trap - EXIT
  echo "cluster $name: $k nodes x $ppn slots on $net.0/24${rate:+, $rate}${delay:+, ${delay} ms delay}; hostfile $(dir)/hostfile"
}

cmd_run() {
  load_state
  command -v mpirun >/dev/null || die "run: no mpirun on PATH"
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  OMPI_MCA_btl_vader_single_copy_mechanism=none \
  exec mpirun --hostfile "$(dir)/hostfile" \
    --mca plm_rsh_agent "$(dir)/agent" --mca plm_rsh_no_tree_spawn 1 \
    --mca btl self,vader,tcp \
    --mca btl_tcp_if_include "$subnet" --mca oob_tcp_if_include "$subnet" \
    --bind-to none "$@"
}

cmd_exec() {
  load_state
  local i=$1; shift
  [ "${1:-}" = -- ] && shift
  [[ $i =~ ^[0-9]+$ ]] && [ "$i" -lt "$nodes" ] || die "exec: node '$i' is not one of 0..$((nodes - 1))"
  exec ip netns exec "$(ns_of "$i")" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$name-n$i" "$@"
}

cmd_link() {
  load_state
  local i=$1 state=$2
  [[ $i =~ ^[0-9]+$ ]] && [ "$i" -lt "$nodes" ] || die "link: node '$i' is not one of 0..$((nodes - 1))"
  case $state in down|up) ;; *) die "link: say down or up" ;; esac
  ip link set "$(veth_of "$i")" "$state"
}

cmd_status() {
  load_state
  echo "cluster $name: $nodes nodes x $ppn slots, subnet $subnet${rate:+, rate $rate}${delay:+, delay ${delay} ms}"
  local i
  for i in $(seq 0 $((nodes - 1))); do
    local link procs
    link=$(ip -br link show "$(veth_of "$i")" 2>/dev/null | awk '{print $2}')
    procs=$(ip netns pids "$(ns_of "$i")" 2>/dev/null | wc -l)
    echo "  node $i: $(ns_of "$i") ${subnet%.0/24}.$((i + 1)) hostname $name-n$i link ${link:-missing} processes $procs"
  done
}

cmd_env() {
  load_state
  echo "dir=$(dir)"
  echo "hostfile=$(dir)/hostfile"
  echo "agent=$(dir)/agent"
  cat "$(dir)/state"
}

cmd_down() {
  local ns
  # Processes first (a namespace with processes in it lingers), then the
  # namespaces (their eth0 and its veth peer go with them), then the bridge.
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^zinc-$name-[0-9]+$" || true); do
    local pids; pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [ -z "$pids" ] || kill -KILL $pids 2>/dev/null || true
  done
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^zinc-$name-[0-9]+$" || true); do
    ip netns del "$ns" 2>/dev/null || true
  done
  local v
  for v in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | grep -E "^zv$name-[0-9]+$" || true); do
    ip link del "$v" 2>/dev/null || true
  done
  ip link del "$(bridge)" 2>/dev/null || true
  rm -rf "$(dir)"
  echo "cluster $name: down"
}

# --name may come anywhere before "--".
sub=${1:-}; [ $# -gt 0 ] && shift
args=()
while [ $# -gt 0 ]; do
  case $1 in
    --name) name=${2:-}; shift 2 || die "--name needs a value" ;;
    --) args+=("$@"); break ;;
    *) args+=("$1"); shift ;;
  esac
done
check_name
case $sub in
  up) cmd_up "${args[@]}" ;;
  run) [ "${args[0]:-}" = -- ] && args=("${args[@]:1}"); cmd_run "${args[@]}" ;;
  exec) cmd_exec "${args[@]}" ;;
  link) [ ${#args[@]} -eq 2 ] || die "usage: cluster.sh link NODE down|up"; cmd_link "${args[@]}" ;;
  status) cmd_status ;;
  env) cmd_env ;;
  down) cmd_down ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2 ;;
esac
