#!/usr/bin/env bash
# The main job end to end (README: "Run the demo"): a local Fluss cluster up,
# the Rust transforms built (the demo runs one), the plugin built, 10,000
# messages through it — inside the real Iggy server and connectors runtime
# when their binaries are in ../shared/iggy (or $FLUSS_SINK_IGGY_DIR), else
# through the plugin's C functions loaded with dlopen as the runtime loads
# them — and the rows read back from Fluss and shown. Leaves the cluster
# running when it was already up; `KEEP_FLUSS=1` keeps one it started.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/iggy-libs.sh
. scripts/iggy-libs.sh

echo "== build the Rust transforms (installs the wasm guest toolchain if missing)"
cargo xtask build-transforms rust

iggy_dir=${FLUSS_SINK_IGGY_DIR:-../shared/iggy}
if [ -x "$iggy_dir/iggy-server" ] && [ -x "$iggy_dir/iggy-connectors" ]; then
  echo "== the Iggy binaries are in $iggy_dir: the demo runs through the real runtime"
  install_iggy_libs
else
  echo "== no Iggy binaries in $iggy_dir: the demo drives the plugin through its C functions (set FLUSS_SINK_IGGY_DIR to run it in the real runtime)"
fi

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
