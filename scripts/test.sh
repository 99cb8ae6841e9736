#!/usr/bin/env bash
# The project's test command (README: "Run the tests"): formatting, lints,
# the WebAssembly transforms built from source, then every test.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/iggy-libs.sh
. scripts/iggy-libs.sh

# The Iggy binaries first: a run that cannot test the runtime says so at once.
iggy_dir=${FLUSS_SINK_IGGY_DIR:-../shared/iggy}
if [ ! -x "$iggy_dir/iggy-server" ] || [ ! -x "$iggy_dir/iggy-connectors" ]; then
  if [ "${CI:-}" = true ] || [ "${FLUSS_SINK_WITHOUT_IGGY:-}" != 1 ]; then
    echo "the Iggy runtime tests (tests/tests/iggy_runtime*.rs) need iggy-server and iggy-connectors in $iggy_dir:" >&2
    echo "set FLUSS_SINK_IGGY_DIR to a folder with both (apache/iggy builds them)," >&2
    echo "or FLUSS_SINK_WITHOUT_IGGY=1 to run everything else (never under CI=true)" >&2
    exit 1
  fi
  echo "################################################################################"
  echo "# FLUSS_SINK_WITHOUT_IGGY=1: the tests inside the real Iggy runtime are NOT RUN"
  echo "# (tests/tests/iggy_runtime*.rs: no iggy-server and iggy-connectors in $iggy_dir);"
  echo "# each prints a NOT RUN line and returns: this run does not test the runtime"
  echo "################################################################################"
fi

echo "== cargo fmt --check"
cargo fmt --all -- --check
(cd transforms && cargo fmt --all -- --check)
(cd fuzz && cargo fmt --all -- --check)

echo "== cargo sort (dependency tables sorted; installs cargo-sort if missing)"
command -v cargo-sort >/dev/null || cargo install cargo-sort --locked
cargo sort --workspace --no-format --check
(cd transforms && cargo sort --workspace --no-format --check)
(cd fuzz && cargo sort --no-format --check)

echo "== cargo clippy"
cargo clippy --all-targets -- -D warnings

echo "== cargo clippy on the fuzz targets (their own workspace, checked with the main build's folder)"
(cd fuzz && CARGO_TARGET_DIR="$PWD/../target" cargo clippy --all-targets -- -D warnings)

echo "== the wasm32-wasip2 target (rustup), for the Rust transforms and their lints"
rustup target list --installed | grep -qx wasm32-wasip2 || rustup target add wasm32-wasip2

echo "== build the transforms (installs the other languages' guest toolchains if missing)"
cargo xtask build-transforms

echo "== cargo clippy on the transforms (their own workspace), for the host and for WebAssembly"
# WebAssembly-only code (cfg(target_arch = "wasm32")) is linted only by the second.
(cd transforms && cargo clippy --all-targets -- -D warnings)
(cd transforms && cargo clippy --target wasm32-wasip2 --all-targets -- -D warnings)

echo "== the real Iggy server and connectors runtime need libhwloc15 and libudev1"
install_iggy_libs

echo "== start a local Fluss cluster for the integration tests"
# On a failure, the shared cluster's logs are kept in
# target/fluss-failed-logs/shared, and the tables its coordinator registered
# but never gave buckets are named: writes to such a table are never
# acknowledged (Fluss 0.9.1, apache/fluss#1018: the sink and the tests' helper
# make such a table again when they created it, docs/fluss.md), and the
# moment the coordinator stopped bringing up any new bucket, if it did.
stop_shared_cluster() {
  local status=$? log=.fluss/logs/coordinator.log
  if [ "$status" -ne 0 ] && [ -f "$log" ]; then
    mkdir -p target/fluss-failed-logs/shared
    cp -r .fluss/logs/. target/fluss-failed-logs/shared/ || true
    grep -o 'Registered table [^ ]* for database [^ ]*' "$log" | while read -r _ _ table _ _ db; do
      grep -q "New table: $db.$table with" "$log" ||
        echo "fluss-local: the coordinator registered table $db.$table but never gave it buckets"
    done || true
    grep -m1 -B1 'is not empty while creating a new one' "$log" | head -1 | cut -c1-12 | while read -r at; do
      echo "fluss-local: from $at the coordinator brought up no new bucket (a partition of a lost table, docs/fluss.md)"
    done || true
  fi
  scripts/fluss-local.sh stop
}
if ! scripts/fluss-local.sh status >/dev/null 2>&1; then
  scripts/fluss-local.sh start
  trap stop_shared_cluster EXIT
fi
export FLUSS_BOOTSTRAP=127.0.0.1:9123
# The spools of the tests' instances (one folder per table) stay in target/.
export XDG_STATE_HOME="$PWD/target/test-state"

echo "== build the plugin library (the dlopen tests load it as the runtime does), the capture plugin and the tests"
# One build of the whole workspace: built alone (-p), the plugin resolves its
# dependencies' features apart from the tests' and compiles a second copy of
# wasmtime, arrow, fluss-rs and about 50 more crates.
cargo build --workspace --all-targets

echo "== fuzz smoke: every fuzz target for 30 s from its kept corpus, with AddressSanitizer (scripts/fuzz.sh)"
FUZZ_PROFILE=dev FUZZ_SANITIZER=address scripts/fuzz.sh smoke 30

echo "== cargo test (each test binary bounded: a hang fails within 15 minutes, named)"
# Two binaries at a time: most tests wait on Fluss, deadlines and restarts,
# not on the CPU. The failover test compares recovery times, so it runs with
# nothing beside it; the binaries that start an Iggy server (the runtime's
# tests and the `runtime` bench) share its fixed ports, so they run one
# after another.
cargo xtask test --per-binary 15m --jobs 2 --alone failover --one-at-a-time 'iggy_runtime*,runtime' \
  --workspace --all-targets
