#!/usr/bin/env bash
# Runs every fuzz target (modex node and proc blobs; transport, runtime, fence and group-creation
# messages) for SECONDS seconds each (default 60), starting from the checked-in seed corpus
# (fuzz/corpus/TARGET, read only: new inputs go to a scratch dir). Exits non-zero if a target
# crashes; the crashing input is left in fuzz/artifacts/TARGET/ (turn it into a regression:
# copy it to fuzz/regressions/TARGET/ and run `cargo test -p openib --test modex_corpus
# --test wire_corpus`).
#
#   fuzz/run.sh 120
#   FUZZ_TARGETS=transport_msg fuzz/run.sh 300
#
# The targets are built first, then run FUZZ_JOBS at a time (default: the number of CPUs, at
# most 2: CI's budget), each single-threaded for its SECONDS.
#
# Needs cargo-fuzz (installed here if missing) and a nightly compiler, or RUSTC_BOOTSTRAP=1
# on stable (set here).
#
# Memory: a target that grows past RSS_LIMIT_MB in all, or asks for more than MALLOC_LIMIT_MB
# in one allocation, has found a bug (libFuzzer reports it as a crash, "out-of-memory" or
# "malloc(N) exceeds limit"): no input of at most 4 KiB may make a decoder or the transport's
# receive path allocate by what a peer announces.
set -euo pipefail
SECONDS_EACH="${1:-60}"
RSS_LIMIT_MB=2048
MALLOC_LIMIT_MB=64
cd "$(dirname "$0")"
export RUSTC_BOOTSTRAP=1
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz/run.sh: installing cargo-fuzz" >&2
  cargo install cargo-fuzz --locked
fi
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
status=0
# FUZZ_TARGETS: the targets to run (default: all).
targets=(${FUZZ_TARGETS:-node_blob proc_blob transport_msg runtime_msg fence_msg gc_msg})
jobs="${FUZZ_JOBS:-$(nproc)}"
if [ "$jobs" -gt 2 ] && [ -z "${FUZZ_JOBS:-}" ]; then jobs=2; fi
# Built first, one after the other (the runs below then build nothing; a build error is
# shown with the target's failure).
for target in "${targets[@]}"; do
  cargo fuzz build "$target" >"$scratch/$target.build" 2>&1 || true
done
run_one() {
  local target=$1
  mkdir -p "$scratch/$target" "artifacts/$target"
  echo "fuzz/run.sh: $target for ${SECONDS_EACH}s" >&2
  # The regressions of a target, if it has any (git keeps no empty directory; libFuzzer
  # refuses a missing one).
  local inputs=("$scratch/$target" "corpus/$target")
  if [ -d "regressions/$target" ]; then inputs+=("regressions/$target"); fi
  cargo fuzz run "$target" "${inputs[@]}" -- \
    -max_total_time="$SECONDS_EACH" -rss_limit_mb="$RSS_LIMIT_MB" \
    -malloc_limit_mb="$MALLOC_LIMIT_MB" -max_len=4096 \
    -artifact_prefix="artifacts/$target/" -print_final_stats=1 > "$scratch/$target.log" 2>&1 || true
  grep -E "^(#[0-9]+ *DONE|==|SUMMARY|stat::number_of_executed_units|stat::average_exec_per_sec|INFO: seed corpus)" \
    "$scratch/$target.log" | sed "s/^/$target: /" || true
}
running=0
for target in "${targets[@]}"; do
  run_one "$target" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then
    wait -n || true
    running=$((running - 1))
  fi
done
wait
for target in "${targets[@]}"; do
  if grep -qE "ERROR: libFuzzer|panicked at|SUMMARY: .*Sanitizer|deadly signal|out-of-memory|exceeds limit" "$scratch/$target.log"; then
    echo "fuzz/run.sh: $target FOUND A CRASH; see fuzz/artifacts/$target/" >&2
    grep -E "panicked at|SUMMARY|Test unit written" "$scratch/$target.log" >&2 || true
    status=1
  elif ! grep -q "stat::number_of_executed_units" "$scratch/$target.log"; then
    # A target that never ran (build error, bad argument) is a failure, not a pass.
    echo "fuzz/run.sh: $target did not run:" >&2
    cat "$scratch/$target.build" >&2
    grep -vE '^ +[0-9]+: |^ +at ' "$scratch/$target.log" | tail -n 15 >&2
    status=1
  fi
done
exit $status
