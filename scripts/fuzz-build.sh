#!/usr/bin/env bash
# CI check for the fuzz targets in fuzz/: builds and links all four on stable Rust, then replays
# the seed corpus (fuzz/seeds/<target>/*) through each, so a seed that panics fails CI.
#
#   scripts/fuzz-build.sh
#
# This does not fuzz. It is a plain `cargo build` of the fuzz crate: no nightly, no cargo-fuzz,
# no sanitizer or coverage instrumentation. It still compiles libfuzzer-sys (libFuzzer's C++
# sources, built by its build script with the system C++ compiler) and links the real libFuzzer
# driver. To fuzz, see fuzz/README.md.
#
# What it needs beyond the Rust toolchain: a C++ compiler (`c++`, Debian package g++). When it
# is missing the script installs g++ with apt-get if it runs as root, and fails otherwise.
#
# fuzz/Cargo.lock (git-ignored) is copied from ./Cargo.lock when missing or older, so the fuzz
# build uses the same dependency versions as the server (cargo only adds libfuzzer-sys and its
# few dependencies, which needs the crates.io index once).
# By default it builds into the main target/ directory, so it reuses the dependencies that
# scripts/test.sh already compiled and adds only tritonrs + libFuzzer (~30 s instead of ~2 min
# on 2 cores). Set FUZZ_TARGET_DIR to build somewhere else (e.g. fuzz/target).
set -euo pipefail
cd "$(dirname "$0")/.."

TARGETS=(pbtxt_config infer_json binary_tensor config_override zmtp_stream)
TARGET_DIR=${FUZZ_TARGET_DIR:-$PWD/target}

log() { printf '[fuzz-build] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
run() { log "+ $*"; "$@"; }
now() { date +%s; }
start=$(now)

# --- 1. C++ compiler for libFuzzer ----------------------------------------------------------
cxx=${CXX:-}
if [ -z "$cxx" ]; then
    for c in c++ g++ clang++; do
        if command -v "$c" >/dev/null; then cxx=$c; break; fi
    done
fi
if [ -z "$cxx" ]; then
    log "no C++ compiler found; libfuzzer-sys needs one to build libFuzzer"
    [ "$(id -u)" = 0 ] || die "run as root to install it, or: apt-get install --no-install-recommends g++"
    command -v apt-get >/dev/null || die "apt-get not found; install a C++ compiler (g++ or clang++)"
    t=$(now)
    # shellcheck source=scripts/apt.sh
    source "$(dirname "${BASH_SOURCE[0]}")/apt.sh"
    run apt_get update -qq
    run apt_get install -y -qq --no-install-recommends g++
    log "apt: $(( $(now) - t )) s"
    cxx=c++
fi
export CXX="$cxx" # what libfuzzer-sys's build script (the cc crate) compiles libFuzzer with
log "C++ compiler: $(command -v "$cxx") ($("$cxx" --version | head -n1))"

# --- 2. build ---------------------------------------------------------------------------------
if [ ! -e fuzz/Cargo.lock ] || [ Cargo.lock -nt fuzz/Cargo.lock ]; then
    run cp Cargo.lock fuzz/Cargo.lock
fi
t=$(now)
CARGO_TARGET_DIR="$TARGET_DIR" run cargo build --manifest-path fuzz/Cargo.toml --bins
log "build: $(( $(now) - t )) s (target dir $TARGET_DIR)"

# --- 3. replay the seeds ----------------------------------------------------------------------
# Given files rather than directories, libFuzzer runs each input once and exits non-zero if one
# crashes (a panic aborts the process).
for target in "${TARGETS[@]}"; do
    bin="$TARGET_DIR/debug/$target"
    [ -x "$bin" ] || die "$bin was not built"
    seeds=(fuzz/seeds/"$target"/*)
    [ -e "${seeds[0]}" ] || die "no seeds in fuzz/seeds/$target"
    log "+ $bin fuzz/seeds/$target/* (${#seeds[@]} inputs)"
    if ! output=$("$bin" "${seeds[@]}" 2>&1); then
        printf '%s\n' "$output" >&2
        die "$target crashed on a seed input"
    fi
done

log "OK in $(( $(now) - start )) s: ${TARGETS[*]}"
