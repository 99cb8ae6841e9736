#!/usr/bin/env bash
# A single-node Apache Fluss cluster (ZooKeeper, coordinator, tablet server)
# from the published fluss-server jar, without Docker.
#
#   scripts/fluss-local.sh start    start (or find running) and print the bootstrap address
#   scripts/fluss-local.sh stop     stop everything and remove the data folder
#   scripts/fluss-local.sh status   say whether it runs; exit 0 when it does
#   scripts/fluss-local.sh restart-tablet [KILL|TERM]   stop the tablet server with
#                                        that signal (default KILL) and start it again
#   scripts/fluss-local.sh kill-tablet [KILL|TERM] / start-tablet
#
# Environment: FLUSS_DIR (data, logs, pids; default <repo>/.fluss),
# FLUSS_LIB_DIR (resolved jars; default ~/.cache/iggy-fluss-sink/fluss-lib-<version>),
# FLUSS_PORT (coordinator, default 9123; the tablet server takes the next port),
# FLUSS_ZK_PORT (default 2181). The logs of a failed start are copied to
# <repo>/target/fluss-failed-logs/<time>/ and their tails printed.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
VERSION=0.9.1-incubating
FLUSS_DIR=${FLUSS_DIR:-$ROOT/.fluss}
LIB_DIR=${FLUSS_LIB_DIR:-$HOME/.cache/iggy-fluss-sink/fluss-lib-$VERSION}
PORT=${FLUSS_PORT:-9123}
TABLET_PORT=$((PORT + 1))
ZK_PORT=${FLUSS_ZK_PORT:-2181}
BOOTSTRAP="127.0.0.1:$PORT"
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
  mkdir -p "$FLUSS_DIR"/{zk,coordinator,tablet,remote,data,logs}
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
default.replication.factor: 1
netty.server.num-network-threads: 1
netty.server.num-worker-threads: 2
netty.client.num-network-threads: 1
server.io-pool.size: 2
kv.rocksdb.writebuffer.size: 8mb
kv.rocksdb.shared-rate-limiter.bytes-per-sec: 512mb
zookeeper.client.session-timeout: 6s"
  printf '%s\nbind.listeners: FLUSS://127.0.0.1:%s\n' "$common" "$PORT" > "$FLUSS_DIR/coordinator/server.yaml"
  printf '%s\nbind.listeners: FLUSS://127.0.0.1:%s\ntablet-server.id: 0\ndata.dir: %s\n' \
    "$common" "$TABLET_PORT" "$FLUSS_DIR/data" > "$FLUSS_DIR/tablet/server.yaml"
  for role in zk coordinator tablet; do
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

tablet_registered() {
  pid_alive tablet || fail_start "the tablet server exited"
  port_open "$TABLET_PORT" && grep -q "Registered tablet server" \
    "$FLUSS_DIR/logs/tablet.log" "$FLUSS_DIR/logs/coordinator.log" 2>/dev/null
}

start_tablet() {
  launch tablet 1g org.apache.fluss.server.tablet.TabletServer --configDir "$FLUSS_DIR/tablet"
  wait_for "the tablet server" "$START_TIMEOUT" tablet_registered
}

running() { pid_alive zk && pid_alive coordinator && pid_alive tablet && port_open "$PORT" && port_open "$TABLET_PORT"; }

start_all() {
  if running; then
    log "already running"
    echo "$BOOTSTRAP"
    return
  fi
  stop_all
  resolve_jars
  if port_open "$ZK_PORT" || port_open "$PORT" || port_open "$TABLET_PORT"; then
    log "ports $ZK_PORT, $PORT or $TABLET_PORT are taken by something else"
    exit 1
  fi
  write_configs
  log "starting ZooKeeper on $ZK_PORT"
  launch zk 256m org.apache.fluss.shaded.zookeeper3.org.apache.zookeeper.server.quorum.QuorumPeerMain "$FLUSS_DIR/zk/zoo.cfg"
  wait_for "ZooKeeper" 60 port_open "$ZK_PORT"
  log "starting the coordinator on $PORT"
  launch coordinator 512m org.apache.fluss.server.coordinator.CoordinatorServer --configDir "$FLUSS_DIR/coordinator"
  wait_for "the coordinator" "$START_TIMEOUT" port_open "$PORT"
  log "starting the tablet server on $TABLET_PORT"
  start_tablet
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

# SIGKILL the tablet server, then wait until the coordinator has seen it go
# (its ZooKeeper session expires): a tablet server that comes back before
# that is handed stale leadership and serves some tables as unknown.
kill_tablet() { # signal (KILL by default)
  local signal=${1:-KILL}
  local gone="Received CHILD_REMOVED event for server 0"
  local before
  before=$(grep -c "$gone" "$FLUSS_DIR/logs/coordinator.log" 2>/dev/null || true)
  kill_role tablet "$signal"
  local waited=0
  until [ "$(grep -c "$gone" "$FLUSS_DIR/logs/coordinator.log" 2>/dev/null || true)" -gt "${before:-0}" ]; do
    sleep 0.5
    waited=$((waited + 1))
    if [ "$waited" -ge 120 ]; then log "the coordinator did not notice the tablet server going"; exit 1; fi
  done
  log "tablet server stopped with SIG$signal; the coordinator has noticed"
}

stop_all() {
  for role in tablet coordinator zk; do kill_role "$role"; done
  rm -rf "$FLUSS_DIR"
}

case "${1:-}" in
  start) start_all ;;
  stop) stop_all; log "stopped" ;;
  status)
    if running; then echo "running at $BOOTSTRAP"; else echo "not running"; exit 1; fi ;;
  kill-tablet) kill_tablet "${2:-KILL}" ;;
  start-tablet) : > "$FLUSS_DIR/logs/tablet.log"; start_tablet ;;
  restart-tablet) kill_tablet "${2:-KILL}"; : > "$FLUSS_DIR/logs/tablet.log"; start_tablet ;;
  *) echo "usage: $0 start|stop|status|kill-tablet [SIG]|start-tablet|restart-tablet [SIG]" >&2; exit 2 ;;
esac
