#!/usr/bin/env bash
# Runs the coverage-guided fuzz targets in fuzz/ (cargo-fuzz, nightly).
#
#   scripts/fuzz.sh smoke [SECONDS]   every target for SECONDS (default 30) from
#                                     the kept corpus, FUZZ_JOBS (default 2) at
#                                     a time; new inputs go to
#                                     target/fuzz-work/, the tree is left as it is
#   scripts/fuzz.sh long RUNS [TARGET...]   each target (default: all) for RUNS
#                                     executions, growing fuzz/corpus/<target>,
#                                     then minimises that corpus (cargo fuzz cmin)
#
# Installs nightly (rustup) and cargo-fuzz (crates.io) when missing. A crash
# leaves its input in fuzz/artifacts/<target>/ and fails the script.
#
# Environment: FUZZ_PROFILE=dev builds without optimisations (a quicker
# build for a smoke; CI uses it; with cargo's CARGO_PROFILE_DEV_OPT_LEVEL=1,
# optimised and with debug assertions), FUZZ_SANITIZER=address builds with
# AddressSanitizer (the long runs and CI's smoke use it), FUZZ_JOBS=N runs
# `long` in N processes sharing the corpus (RUNS split between them) and
# `smoke` N targets at a time (default 2), FUZZ_MAX_SECONDS caps each
# target's `long` run.
set -euo pipefail
cd "$(dirname "$0")/.."

TARGETS=(runtime_buffers captured_buffers compact_rows json_parsers_agree lean_vs_encoded field_types)
# FUZZ_SANITIZER=address builds with AddressSanitizer (in a folder of its
# own: the smoke's build stays as it is); the default is none.
SANITIZER=${FUZZ_SANITIZER:-none}
TARGET_DIR=$PWD/target/fuzz
[ "$SANITIZER" = none ] || TARGET_DIR=$PWD/target/fuzz-$SANITIZER
# The targets share one build, with 16 codegen units (a build of wasmtime
# with one unit takes too long on two cores).
FUZZ_FLAGS=(-s "$SANITIZER" --codegen-units 16 --target-dir "$TARGET_DIR")
[ "${FUZZ_PROFILE:-release}" = dev ] && FUZZ_FLAGS+=(--dev)

ensure_tools() {
  rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
  command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
}

dict_for() {
  case "$1" in
    json_parsers_agree|lean_vs_encoded|field_types) echo "-dict=$PWD/fuzz/json.dict" ;;
    *) echo "" ;;
  esac
}

# Read-only seed folders beside a target's own corpus: captured_buffers
# starts from the buffers the real runtime wrote (tests/data/runtime-buffers).
seeds_for() {
  case "$1" in
    captured_buffers) ls -d "$PWD"/tests/data/runtime-buffers/*/ ;;
    *) ;;
  esac
}

run_target() { # target, corpus dirs..., -- libfuzzer args...
  local target=$1
  shift
  (cd fuzz && cargo +nightly fuzz run "${FUZZ_FLAGS[@]}" "$target" "$@")
}

smoke() {
  local seconds=${1:-30} lanes=${FUZZ_JOBS:-2} lane failed=0
  local logs="$PWD/target/fuzz-work/logs"
  mkdir -p "$logs"
  # The targets in $lanes lanes side by side (one process each: a lane per
  # core), each lane's output printed whole when it ends.
  local pids=()
  for lane in $(seq 0 $((lanes - 1))); do
    smoke_lane "$seconds" "$lane" "$lanes" >"$logs/lane-$lane.log" 2>&1 &
    pids+=($!)
  done
  for lane in "${!pids[@]}"; do
    wait "${pids[$lane]}" || failed=1
    cat "$logs/lane-$lane.log"
  done
  return "$failed"
}

smoke_lane() { # seconds, lane, lanes: the targets lane, lane + lanes, ...
  local seconds=$1 lane=$2 lanes=$3 n=0 target status=0
  for target in "${TARGETS[@]}"; do
    if [ $((n % lanes)) -eq "$lane" ]; then
      local work="$PWD/target/fuzz-work/$target" started=$SECONDS
      mkdir -p "$work" "fuzz/corpus/$target"
      echo "== fuzz $target for ${seconds}s (lane $lane)"
      # shellcheck disable=SC2046
      run_target "$target" "$work" "$PWD/fuzz/corpus/$target" $(seeds_for "$target") -- \
        -max_total_time="$seconds" -print_final_stats=1 $(dict_for "$target") || status=1
      echo "== $target: $((SECONDS - started)) s (the kept corpus replayed first)"
    fi
    n=$((n + 1))
  done
  return "$status"
}

long() {
  local runs=$1 target
  shift
  local chosen=("$@")
  [ ${#chosen[@]} -gt 0 ] || chosen=("${TARGETS[@]}")
  for target in "${chosen[@]}"; do
    mkdir -p "fuzz/corpus/$target"
    echo "== fuzz $target for $runs executions"
    local started=$SECONDS jobs=${FUZZ_JOBS:-1} each=$runs extra=()
    if [ "$jobs" -gt 1 ]; then
      each=$((runs / jobs))
      extra=(-jobs="$jobs" -workers="$jobs")
    fi
    [ -z "${FUZZ_MAX_SECONDS:-}" ] || extra+=(-max_total_time="$FUZZ_MAX_SECONDS")
    # shellcheck disable=SC2046
    run_target "$target" "$PWD/fuzz/corpus/$target" $(seeds_for "$target") -- \
      -runs="$each" -print_final_stats=1 "${extra[@]}" $(dict_for "$target")
    echo "== $target: up to $runs executions ($jobs process(es)) in $((SECONDS - started)) s"
    (cd fuzz && cargo +nightly fuzz cmin "${FUZZ_FLAGS[@]}" "$target" "$PWD/corpus/$target")
    echo "== $target: corpus $(ls "fuzz/corpus/$target" | wc -l) files, $(du -sh "fuzz/corpus/$target" | cut -f1)"
  done
}

ensure_tools
(cd fuzz && cargo +nightly fuzz build "${FUZZ_FLAGS[@]}")
case "${1:-}" in
  smoke) smoke "${2:-30}" ;;
  long) [ -n "${2:-}" ] || { echo "usage: $0 long RUNS [TARGET...]" >&2; exit 2; }; long "${@:2}" ;;
  *) echo "usage: $0 smoke [SECONDS] | long RUNS [TARGET...]" >&2; exit 2 ;;
esac
