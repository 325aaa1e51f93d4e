#!/usr/bin/env bash
# Coverage-guided fuzzing of every target in fuzz/ for a bounded time each, on stable Rust: what CI
# runs after scripts/fuzz-build.sh.
#
#   scripts/fuzz-run.sh [SECONDS]     # default 60 s per target (FUZZ_SECONDS also sets it)
#
# Builds the fuzz crate with the instrumentation `cargo fuzz build -s none` adds (sanitizer coverage
# passes: stable codegen options; no AddressSanitizer, which needs nightly), plus debug assertions and
# overflow checks, in release mode, into its own target directory (FUZZ_RUN_TARGET_DIR, default
# target/fuzz-run: the flags differ from every other build, so sharing would rebuild both). Then each
# target runs from its seeds (fuzz/seeds/<target>, with fuzz/dicts/<target>.dict where there is one)
# into a scratch corpus, with an RSS limit, a limit on
# any single allocation and a per-input timeout, so an unbounded allocation or a hang fails too.
# On a crash it prints libFuzzer's report and the crashing input as base64, and exits non-zero.
# Needs what scripts/fuzz-build.sh needs (a C++ compiler for libFuzzer); run that first.
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_EACH=${1:-${FUZZ_SECONDS:-60}}
TARGETS=(pbtxt_config infer_json binary_tensor config_override zmtp_stream)
TARGET_DIR=${FUZZ_RUN_TARGET_DIR:-$PWD/target/fuzz-run}
HOST=$(rustc -vV | sed -n 's/^host: //p')

log() { printf '[fuzz-run] %s\n' "$*" >&2; }
now() { date +%s; }
start=$(now)

if [ ! -e fuzz/Cargo.lock ] || [ Cargo.lock -nt fuzz/Cargo.lock ]; then
    cp Cargo.lock fuzz/Cargo.lock
fi
# The flags of `cargo fuzz build -s none` (cargo-fuzz's project.rs), minus nothing: coverage counters,
# the PC table and comparison tracing that guide libFuzzer, and `--cfg fuzzing`.
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks"
# --target keeps RUSTFLAGS off build scripts and proc macros, as cargo-fuzz does.
t=$(now)
log "+ cargo build --release --target $HOST --manifest-path fuzz/Cargo.toml --bins (target dir $TARGET_DIR)"
CARGO_TARGET_DIR="$TARGET_DIR" CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 \
    cargo build --release --target "$HOST" --manifest-path fuzz/Cargo.toml --bins
log "build: $(( $(now) - t )) s"

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
failed=()
for target in "${TARGETS[@]}"; do
    bin="$TARGET_DIR/$HOST/release/$target"
    corpus="$scratch/$target"
    mkdir -p "$corpus" "$scratch/artifacts-$target"
    log "+ $target for ${SECONDS_EACH}s"
    # -rss_limit_mb: the whole process; -malloc_limit_mb: any single allocation (a configuration
    # that sizes a huge buffer must be refused before it is allocated); -timeout: one input.
    dict=()
    [ -f "fuzz/dicts/$target.dict" ] && dict=(-dict="fuzz/dicts/$target.dict")
    if "$bin" "${dict[@]}" -max_total_time="$SECONDS_EACH" -rss_limit_mb=2048 -malloc_limit_mb=512 -timeout=10 \
        -print_final_stats=1 -artifact_prefix="$scratch/artifacts-$target/" \
        "$corpus" "fuzz/seeds/$target" >"$scratch/$target.log" 2>&1; then
        stats=$(grep -E '^stat::number_of_executed_units|^stat::average_exec_per_sec' "$scratch/$target.log" \
            | sed 's/^stat:://' | tr '\n' ' ')
        log "$target: no crash ($stats)"
    else
        tail -n 60 "$scratch/$target.log" >&2
        for f in "$scratch/artifacts-$target"/*; do
            [ -e "$f" ] || continue
            log "$target crashed on $(basename "$f"); the input as base64 (decode into a file and pass it to the target):"
            base64 -w0 "$f" >&2
            echo >&2
        done
        failed+=("$target")
    fi
done

if [ "${#failed[@]}" -gt 0 ]; then
    log "FAILED: ${failed[*]} ($(( $(now) - start )) s)"
    exit 1
fi
log "OK in $(( $(now) - start )) s: ${TARGETS[*]}, ${SECONDS_EACH}s each"
