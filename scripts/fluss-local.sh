#!/usr/bin/env bash
# A local Apache Fluss cluster (ZooKeeper, coordinator, one or more tablet
# servers) from the published fluss-server jar, without Docker.
#
#   scripts/fluss-local.sh start    start (or find running) and print the bootstrap address
#   scripts/fluss-local.sh stop     stop everything and remove the data folder
#   scripts/fluss-local.sh status   say whether it runs; exit 0 when it does
#   scripts/fluss-local.sh restart-tablet [KILL|TERM] [ID]   stop tablet server ID
#                                        (default 0) with that signal (default KILL)
#                                        and start it again
#   scripts/fluss-local.sh kill-tablet [KILL|TERM] [ID] / start-tablet [ID]
#   scripts/fluss-local.sh pause [ROLE...]   freeze (SIGSTOP) servers without closing
#                                        their sockets, as a hung JVM or a partition
#                                        without RST would; ROLE is coordinator or
#                                        tabletN (default: the coordinator and every
#                                        tablet server). Keep a pause shorter than
#                                        the ZooKeeper session (6 s): past it the
#                                        servers' sessions expire and Fluss 0.9.1
#                                        refuses writes until restarted.
#   scripts/fluss-local.sh resume [ROLE...]  thaw them (SIGCONT)
#   scripts/fluss-local.sh zk           ZooKeeper's shell (from the fluss-server jar)
#                                        on the cluster's ZooKeeper, commands from
#                                        stdin (Fluss's nodes are under /fluss)
#
# Environment: FLUSS_DIR (data, logs, pids; default <repo>/.fluss),
# FLUSS_LIB_DIR (resolved jars; default ~/.cache/iggy-fluss-sink/fluss-lib-<version>),
# FLUSS_PORT (coordinator, default 9123; tablet server i takes port + 1 + i),
# FLUSS_ZK_PORT (default 2181), FLUSS_TABLETS (tablet servers, default 1; the
# default replication factor is min(FLUSS_TABLETS, 3)), FLUSS_CLIENT_PROXY_PORT
# (unset by default: when set, tablet server i also listens for clients on
# port + 11 + i and advertises that listener at FLUSS_CLIENT_PROXY_PORT + i,
# where a test's fault proxy forwards to it; the servers keep talking to each
# other directly, and clients bootstrap at the coordinator's port as usual). The logs of a failed start are copied to
# <repo>/target/fluss-failed-logs/<time>/ and their tails printed.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
VERSION=0.9.1-incubating
FLUSS_DIR=${FLUSS_DIR:-$ROOT/.fluss}
LIB_DIR=${FLUSS_LIB_DIR:-$HOME/.cache/iggy-fluss-sink/fluss-lib-$VERSION}
PORT=${FLUSS_PORT:-9123}
TABLETS=${FLUSS_TABLETS:-1}
REPLICATION=$((TABLETS < 3 ? TABLETS : 3))
tablet_port() { echo $((PORT + 1 + $1)); }
tablet_ids() { seq 0 $((TABLETS - 1)); }
ZK_PORT=${FLUSS_ZK_PORT:-2181}
BOOTSTRAP="127.0.0.1:$PORT"
PROXY_PORT=${FLUSS_CLIENT_PROXY_PORT:-}
tablet_client_port() { echo $((PORT + 11 + $1)); }
coordinator_internal_port() { echo $((PORT + 10)); }
START_TIMEOUT=${FLUSS_START_TIMEOUT:-120}

JAVA_OPTS=(--add-opens=java.base/java.nio=org.apache.arrow.memory.core,ALL-UNNAMED
           --add-opens=java.base/java.nio=ALL-UNNAMED
           -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.net.preferIPv4Stack=true)

log() { echo "fluss-local: $*" >&2; }

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

pid_alive() { [ -f "$FLUSS_DIR/$1.pid" ] && kill -0 "$(cat "$FLUSS_DIR/$1.pid")" 2>/dev/null; }

# Java runs the cluster and Maven fetches it; both come from apt when missing.
ensure_tools() {
  command -v java >/dev/null && command -v mvn >/dev/null && return
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  command -v apt-get >/dev/null || { log "java and maven are needed (openjdk-17-jre-headless, maven)"; exit 1; }
  log "installing java and maven with apt-get"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq openjdk-17-jre-headless maven >/dev/null
}

resolve_jars() {
  ensure_tools
  if [ -f "$LIB_DIR/fluss-server-$VERSION.jar" ] && ls "$LIB_DIR"/log4j-core-*.jar >/dev/null 2>&1; then
    return
  fi
  log "resolving fluss-server $VERSION from Maven Central into $LIB_DIR"
  mkdir -p "$LIB_DIR"
  mvn -q -B -f "$ROOT/scripts/fluss/pom.xml" dependency:copy-dependencies -DoutputDirectory="$LIB_DIR"
}

write_configs() {
  mkdir -p "$FLUSS_DIR"/{zk,coordinator,remote,logs}
  cat > "$FLUSS_DIR/zk/zoo.cfg" <<CFG
dataDir=$FLUSS_DIR/zk/data
clientPort=$ZK_PORT
clientPortAddress=127.0.0.1
admin.enableServer=false
maxClientCnxns=100
tickTime=2000
initLimit=10
syncLimit=5
CFG
  local common="zookeeper.address: 127.0.0.1:$ZK_PORT
remote.data.dir: $FLUSS_DIR/remote
default.bucket.number: 1
default.replication.factor: $REPLICATION
netty.server.num-network-threads: 1
netty.server.num-worker-threads: 2
netty.client.num-network-threads: 1
server.io-pool.size: 2
kv.rocksdb.writebuffer.size: 8mb
kv.rocksdb.shared-rate-limiter.bytes-per-sec: 512mb
zookeeper.client.session-timeout: 6s"
  if [ -n "$PROXY_PORT" ]; then
    # Two listeners: FLUSS between the servers, CLIENT for clients. A client
    # that bootstraps on CLIENT is told the tablet servers' CLIENT addresses.
    printf '%s\nbind.listeners: FLUSS://127.0.0.1:%s, CLIENT://127.0.0.1:%s\ninternal.listener.name: FLUSS\n' \
      "$common" "$(coordinator_internal_port)" "$PORT" > "$FLUSS_DIR/coordinator/server.yaml"
  else
    printf '%s\nbind.listeners: FLUSS://127.0.0.1:%s\n' "$common" "$PORT" > "$FLUSS_DIR/coordinator/server.yaml"
  fi
  local roles=(zk coordinator) id
  for id in $(tablet_ids); do
    mkdir -p "$FLUSS_DIR/tablet$id" "$FLUSS_DIR/data$id"
    printf '%s\nbind.listeners: FLUSS://127.0.0.1:%s\ntablet-server.id: %s\ndata.dir: %s\n' \
      "$common" "$(tablet_port "$id")" "$id" "$FLUSS_DIR/data$id" > "$FLUSS_DIR/tablet$id/server.yaml"
    if [ -n "$PROXY_PORT" ]; then
      sed -i "s|^bind.listeners: .*|&, CLIENT://127.0.0.1:$(tablet_client_port "$id")|" "$FLUSS_DIR/tablet$id/server.yaml"
      printf 'advertised.listeners: CLIENT://127.0.0.1:%s\ninternal.listener.name: FLUSS\n' \
        "$((PROXY_PORT + id))" >> "$FLUSS_DIR/tablet$id/server.yaml"
    fi
    roles+=("tablet$id")
  done
  for role in "${roles[@]}"; do
    cat > "$FLUSS_DIR/$role/log4j2.properties" <<CFG
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = File
appender.file.type = File
appender.file.name = File
appender.file.fileName = $FLUSS_DIR/logs/$role.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{HH:mm:ss,SSS} %-5p %c{1} - %m%n
CFG
  done
}

launch() { # role, heap, main class, args...
  local role=$1 heap=$2 main=$3
  shift 3
  nohup java "${JAVA_OPTS[@]}" "-Xmx$heap" \
    -Dlog4j.configurationFile="$FLUSS_DIR/$role/log4j2.properties" -Dlog.file="$FLUSS_DIR/logs/$role.log" \
    -cp "$LIB_DIR/*" "$main" "$@" > "$FLUSS_DIR/logs/$role.out" 2>&1 < /dev/null &
  echo $! > "$FLUSS_DIR/$role.pid"
}

fail_start() {
  local keep
  keep="$ROOT/target/fluss-failed-logs/$(date +%Y%m%d-%H%M%S)"
  mkdir -p "$keep"
  cp -r "$FLUSS_DIR/logs/." "$keep/" 2>/dev/null || true
  log "$1; logs kept in $keep"
  for f in "$keep"/*; do
    [ -f "$f" ] || continue
    echo "---- tail of $f" >&2
    tail -n 25 "$f" >&2
  done
  stop_all
  exit 1
}

wait_for() { # what, seconds, command...
  local what=$1 limit=$2
  shift 2
  local waited=0
  until "$@"; do
    sleep 1
    waited=$((waited + 1))
    [ "$waited" -lt "$limit" ] || fail_start "$what not ready after ${limit}s"
  done
}

tablet_registered() { # id
  pid_alive "tablet$1" || fail_start "tablet server $1 exited"
  port_open "$(tablet_port "$1")" && grep -q "Registered tablet server $1 at" \
    "$FLUSS_DIR/logs/tablet$1.log" 2>/dev/null
}

start_tablet() { # id
  local heap=1g
  [ "$TABLETS" -eq 1 ] || heap=512m
  : > "$FLUSS_DIR/logs/tablet$1.log"
  launch "tablet$1" "$heap" org.apache.fluss.server.tablet.TabletServer --configDir "$FLUSS_DIR/tablet$1"
  wait_for "tablet server $1" "$START_TIMEOUT" tablet_registered "$1"
}

running() {
  pid_alive zk && pid_alive coordinator && port_open "$PORT" || return 1
  local id
  for id in $(tablet_ids); do
    pid_alive "tablet$id" && port_open "$(tablet_port "$id")" || return 1
  done
}

start_all() {
  if running; then
    log "already running"
    echo "$BOOTSTRAP"
    return
  fi
  stop_all
  resolve_jars
  local id
  for p in "$ZK_PORT" "$PORT" $(for id in $(tablet_ids); do tablet_port "$id"; done); do
    if port_open "$p"; then log "port $p is taken by something else"; exit 1; fi
  done
  write_configs
  log "starting ZooKeeper on $ZK_PORT"
  launch zk 256m org.apache.fluss.shaded.zookeeper3.org.apache.zookeeper.server.quorum.QuorumPeerMain "$FLUSS_DIR/zk/zoo.cfg"
  wait_for "ZooKeeper" 60 port_open "$ZK_PORT"
  log "starting the coordinator on $PORT"
  launch coordinator 512m org.apache.fluss.server.coordinator.CoordinatorServer --configDir "$FLUSS_DIR/coordinator"
  wait_for "the coordinator" "$START_TIMEOUT" port_open "$PORT"
  for id in $(tablet_ids); do
    log "starting tablet server $id on $(tablet_port "$id")"
    start_tablet "$id"
  done
  log "ready"
  echo "$BOOTSTRAP"
}

kill_role() {
  local role=$1 signal=${2:-TERM}
  if pid_alive "$role"; then
    local pid
    pid=$(cat "$FLUSS_DIR/$role.pid")
    kill "-$signal" "$pid" 2>/dev/null || true
    for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$FLUSS_DIR/$role.pid"
}

# Stop a tablet server with a signal, then wait until the coordinator has
# seen it go (its ZooKeeper session ends): a tablet server that comes back
# before that is handed stale leadership and serves some tables as unknown.
kill_tablet() { # signal (KILL by default), id (0 by default)
  local signal=${1:-KILL} id=${2:-0}
  local gone="Received CHILD_REMOVED event for server $id"
  local before
  before=$(grep -c "$gone" "$FLUSS_DIR/logs/coordinator.log" 2>/dev/null || true)
  kill_role "tablet$id" "$signal"
  local waited=0
  until [ "$(grep -c "$gone" "$FLUSS_DIR/logs/coordinator.log" 2>/dev/null || true)" -gt "${before:-0}" ]; do
    sleep 0.5
    waited=$((waited + 1))
    if [ "$waited" -ge 120 ]; then log "the coordinator did not notice the tablet server going"; exit 1; fi
  done
  log "tablet server $id stopped with SIG$signal; the coordinator has noticed"
}

# The roles `pause` and `resume` act on: those named, or every server.
server_roles() {
  if [ $# -gt 0 ]; then echo "$@"; return; fi
  echo coordinator
  local id
  for id in $(tablet_ids); do echo "tablet$id"; done
}

signal_roles() { # signal, roles...
  local signal=$1 role
  shift
  for role in $(server_roles "$@"); do
    pid_alive "$role" || { log "$role is not running"; exit 1; }
    kill "-$signal" "$(cat "$FLUSS_DIR/$role.pid")"
  done
}

stop_all() {
  local pid_file
  for pid_file in "$FLUSS_DIR"/tablet*.pid; do
    [ -f "$pid_file" ] && kill_role "$(basename "$pid_file" .pid)"
  done
  for role in coordinator zk; do kill_role "$role"; done
  rm -rf "$FLUSS_DIR"
}

case "${1:-}" in
  start) start_all ;;
  stop) stop_all; log "stopped" ;;
  status)
    if running; then echo "running at $BOOTSTRAP"; else echo "not running"; exit 1; fi ;;
  kill-tablet) kill_tablet "${2:-KILL}" "${3:-0}" ;;
  start-tablet) start_tablet "${2:-0}" ;;
  restart-tablet) kill_tablet "${2:-KILL}" "${3:-0}"; start_tablet "${3:-0}" ;;
  pause) shift; signal_roles STOP "$@"; log "paused" ;;
  resume) shift; signal_roles CONT "$@"; log "resumed" ;;
  zk)
    resolve_jars
    exec java -cp "$LIB_DIR/*" org.apache.fluss.shaded.zookeeper3.org.apache.zookeeper.ZooKeeperMain \
      -server "127.0.0.1:$ZK_PORT" ;;
  *) echo "usage: $0 start|stop|status|kill-tablet [SIG] [ID]|start-tablet [ID]|restart-tablet [SIG] [ID]|pause [ROLE...]|resume [ROLE...]|zk" >&2; exit 2 ;;
esac
