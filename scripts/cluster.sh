#!/usr/bin/env bash
# A three-node RabbitMQ cluster on this machine, from the installed
# rabbitmq-server, beside (not instead of) the machine's own broker:
#
#   scripts/cluster.sh up            start the nodes (if needed) and join them
#   scripts/cluster.sh down          stop every node and remove its data
#   scripts/cluster.sh status        cluster status as node 1 sees it
#   scripts/cluster.sh stop-node N   stop node N (1-3) as a crash would
#   scripts/cluster.sh start-node N  start node N again; it rejoins
#   scripts/cluster.sh ctl N ARGS…   rabbitmqctl against node N
#   scripts/cluster.sh queues N ARGS… rabbitmq-queues against node N
#   scripts/cluster.sh urls          the AMQP_URL naming all three nodes
#
# Node N is docflowN@localhost, AMQP on 127.0.0.1:568N, Erlang distribution
# on 2568N; data, logs and the shared Erlang cookie live under
# $DOCFLOW_CLUSTER_DIR (default /tmp/docflow-cluster). Every command is
# idempotent. guest/guest may connect (from localhost only).
set -euo pipefail

base=${DOCFLOW_CLUSTER_DIR:-/tmp/docflow-cluster}
bin=/usr/lib/rabbitmq/bin
[ -x "$bin/rabbitmq-server" ] || bin=$(dirname "$(command -v rabbitmq-server)")

node_name() { echo "docflow$1@localhost"; }
amqp_port() { echo $((5680 + $1)); }

# The environment every server and CLI call of node N runs with.
node_env() {
  local n=$1 dir="$base/n$1"
  echo HOME="$base" \
    RABBITMQ_CONF_ENV_FILE="$base/rabbitmq-env.conf" \
    RABBITMQ_NODENAME="$(node_name "$n")" \
    RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 \
    RABBITMQ_NODE_PORT="$(amqp_port "$n")" \
    RABBITMQ_DIST_PORT=$((25680 + n)) \
    RABBITMQ_MNESIA_BASE="$dir/mnesia" \
    RABBITMQ_LOG_BASE="$dir/log" \
    RABBITMQ_PID_FILE="$dir/pid" \
    RABBITMQ_ENABLED_PLUGINS_FILE="$base/enabled_plugins" \
    RABBITMQ_CONFIG_FILE="$base/rabbitmq" \
    ERL_EPMD_ADDRESS=127.0.0.1 \
    ERL_CRASH_DUMP_SECONDS=0
}

ctl() {
  local n=$1
  shift
  env $(node_env "$n") "$bin/rabbitmqctl" -n "$(node_name "$n")" "$@"
}

queues() {
  local n=$1
  shift
  env $(node_env "$n") "$bin/rabbitmq-queues" -n "$(node_name "$n")" "$@"
}

prepare() {
  mkdir -p "$base"
  if [ ! -f "$base/.erlang.cookie" ]; then
    head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' | tr 'a-f' 'A-F' >"$base/.erlang.cookie"
    chmod 400 "$base/.erlang.cookie"
  fi
  : >"$base/rabbitmq-env.conf"
  echo '[].' >"$base/enabled_plugins"
  cat >"$base/rabbitmq.conf" <<'EOF'
# A local cluster for trying docflow on several nodes.
loopback_users.guest = true
# Small machines: do not block publishers at the default disk limit.
disk_free_limit.absolute = 50MB
EOF
}

running() { ctl "$1" -q status >/dev/null 2>&1; }

start_node() {
  local n=$1
  if running "$n"; then return 0; fi
  mkdir -p "$base/n$n/log"
  env $(node_env "$n") setsid "$bin/rabbitmq-server" >"$base/n$n/log/console.log" 2>&1 </dev/null &
  for _ in $(seq 120); do
    if ctl "$n" -q await_startup --timeout 1 >/dev/null 2>&1; then return 0; fi
    sleep 1
  done
  echo "node $n did not start; see $base/n$n/log" >&2
  tail -20 "$base/n$n/log/console.log" >&2 || true
  return 1
}

stop_node() {
  local n=$1
  if running "$n"; then
    ctl "$n" -q stop >/dev/null 2>&1 || true
  fi
  # A node that does not answer is killed by its pid file.
  if [ -f "$base/n$n/pid" ]; then
    kill -9 "$(cat "$base/n$n/pid")" 2>/dev/null || true
    rm -f "$base/n$n/pid"
  fi
}

clustered() {
  # Node N is in node 1's cluster (by the running nodes node 1 lists).
  ctl 1 -q cluster_status --formatter json 2>/dev/null | grep -q "\"$(node_name "$1")\""
}

up() {
  prepare
  for n in 1 2 3; do start_node "$n"; done
  for n in 2 3; do
    if clustered "$n"; then continue; fi
    ctl "$n" -q stop_app >/dev/null 2>&1
    ctl "$n" -q reset >/dev/null 2>&1
    ctl "$n" -q join_cluster "$(node_name 1)" >/dev/null 2>&1
    ctl "$n" -q start_app >/dev/null 2>&1
  done
  ctl 1 -q await_online_nodes 3 --timeout 60 >/dev/null 2>&1 || true
  echo "cluster up: $(urls)"
}

down() {
  # Nothing to stop without a cluster directory (its cookie lives there).
  [ -d "$base" ] || return 0
  for n in 3 2 1; do stop_node "$n"; done
  rm -rf "$base"
}

urls() {
  echo "amqp://guest:guest@127.0.0.1:$(amqp_port 1)/%2f,127.0.0.1:$(amqp_port 2),127.0.0.1:$(amqp_port 3)"
}

node_arg() {
  case "${1:-}" in
    1 | 2 | 3) ;;
    *) echo "node must be 1, 2 or 3" >&2; exit 2 ;;
  esac
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) ctl 1 cluster_status ;;
  stop-node) node_arg "${2:-}"; stop_node "$2" ;;
  start-node) node_arg "${2:-}"; prepare; start_node "$2" ;;
  ctl) node_arg "${2:-}"; n=$2; shift 2; ctl "$n" "$@" ;;
  queues) node_arg "${2:-}"; n=$2; shift 2; queues "$n" "$@" ;;
  urls) urls ;;
  *)
    sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
