#!/usr/bin/env bash
# The main job end to end (README: "Run the demo"): a local Fluss cluster up,
# the WebAssembly transforms built, the plugin built and loaded with dlopen as
# the connectors runtime loads it, 10,000 messages through it, and the rows
# read back from Fluss and shown. Leaves the cluster running when it was
# already up; `KEEP_FLUSS=1` keeps one it started.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== build the transforms (installs the wasm guest toolchain if missing)"
cargo xtask build-transforms

echo "== build the plugin library"
cargo build -p iggy_connector_fluss_sink

echo "== start a local Fluss cluster"
if ! scripts/fluss-local.sh status >/dev/null 2>&1; then
  scripts/fluss-local.sh start
  [ "${KEEP_FLUSS:-}" = 1 ] || trap 'scripts/fluss-local.sh stop' EXIT
fi
export FLUSS_BOOTSTRAP=127.0.0.1:9123

echo "== messages through the plugin, rows read back"
cargo run -q -p integration-tests --example demo
