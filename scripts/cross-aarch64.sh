#!/usr/bin/env bash
# Cross-builds tritonrs for aarch64-unknown-linux-gnu (Jetson / Raspberry Pi class devices) and
# checks the result under qemu user-mode emulation: `tritonrs --version`, then the library's unit
# tests (`cargo test --lib`).
#
#   scripts/cross-aarch64.sh
#
# rustup cannot download targets on the CI machines, so the aarch64 standard library comes from
# Debian instead: rustc-web (rustc 1.96 at /usr/bin/rustc) plus libstd-rust-web-dev:arm64. cargo
# stays the one on PATH (rustup's); RUSTC=/usr/bin/rustc makes it compile everything, build
# scripts and proc macros included, with Debian's rustc. Linking uses aarch64-linux-gnu-gcc.
#
# Idempotent: packages are only installed (apt-get, needs root) when missing; the build goes to
# its own target directory (target/aarch64), so the host build in target/ is not invalidated and
# a second run only rebuilds what changed.
#
# Knobs:
#   CROSS_PROFILE=debug|release  build profile (default debug: on 2 cores a clean debug build plus
#                                tests takes ~3 min, release ~6.5 min because of lto = "thin").
#   CROSS_TARGET_DIR=DIR         target directory (default target/aarch64).
#   CROSS_RUSTC=PATH             rustc with the aarch64 std (default /usr/bin/rustc).
#   CROSS_SKIP_TESTS=1           build and run --version only.
#
# Exit status: non-zero on any failure (missing package without root, build error, --version not
# printing "tritonrs <version>", a failing unit test).
set -euo pipefail
cd "$(dirname "$0")/.."

TARGET=aarch64-unknown-linux-gnu
PROFILE=${CROSS_PROFILE:-debug}
TARGET_DIR=${CROSS_TARGET_DIR:-target/aarch64}
RUSTC_BIN=${CROSS_RUSTC:-/usr/bin/rustc}
# g++ for the TensorRT shim (C++, built without the C++ standard library).
PACKAGES=(rustc-web libstd-rust-web-dev:arm64 gcc-aarch64-linux-gnu g++-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user)

log() { printf '[cross-aarch64] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
run() { log "+ $*"; "$@"; }
now() { date +%s; }
script_start=$(now)

case "$PROFILE" in
    debug) profile_flag=() ;;
    release) profile_flag=(--release) ;;
    *) die "CROSS_PROFILE must be debug or release, not '$PROFILE'" ;;
esac

# --- 1. Debian packages ---------------------------------------------------------------------
installed() { dpkg-query -W -f='${db:Status-Abbrev}' "$1" 2>/dev/null | grep -q '^ii'; }
missing=()
for pkg in "${PACKAGES[@]}"; do
    installed "$pkg" || missing+=("$pkg")
done
# cargo itself normally comes from rustup; fall back to Debian's when there is none.
command -v cargo >/dev/null || installed cargo-web || missing+=(cargo-web)

t=$(now)
if ((${#missing[@]})); then
    log "missing Debian packages: ${missing[*]}"
    [ "$(id -u)" = 0 ] || die "run as root to install them, or install them yourself: dpkg --add-architecture arm64 && apt-get update && apt-get install --no-install-recommends ${missing[*]}"
    command -v apt-get >/dev/null || die "apt-get not found; this script needs Debian 12 (bookworm) or later"
    if ! dpkg --print-foreign-architectures | grep -qx arm64; then
        run dpkg --add-architecture arm64
    fi
    # apt_get waits for another apt run's lock (unattended upgrades, a concurrent setup step).
    # shellcheck source=scripts/apt.sh
    source "$(dirname "${BASH_SOURCE[0]}")/apt.sh"
    run apt_get update -qq
    run apt_get install -y -qq --no-install-recommends "${missing[@]}"
    log "apt: $(( $(now) - t )) s"
else
    log "Debian packages present: ${PACKAGES[*]}"
fi

command -v cargo >/dev/null || export PATH="/usr/bin:$PATH"
[ -x "$RUSTC_BIN" ] || die "$RUSTC_BIN not found (package rustc-web)"
command -v aarch64-linux-gnu-gcc >/dev/null || die "aarch64-linux-gnu-gcc not found (package gcc-aarch64-linux-gnu)"
command -v qemu-aarch64 >/dev/null || die "qemu-aarch64 not found (package qemu-user)"
std_dir=$("$RUSTC_BIN" --print target-libdir --target "$TARGET")
compgen -G "$std_dir/libstd-*.rlib" >/dev/null || die "$RUSTC_BIN has no $TARGET standard library in $std_dir (package libstd-rust-web-dev:arm64)"
# ort 2.0.0-rc.15 declares rust-version 1.92. bookworm's own rustc-web is 1.85; the 1.96 build
# comes from bookworm-security, so that suite must be in the apt sources.
MIN_RUSTC=1.92
rustc_version=$("$RUSTC_BIN" --version | awk '{print $2}')
if [ "$(printf '%s\n%s\n' "$MIN_RUSTC" "$rustc_version" | sort -V | head -n1)" != "$MIN_RUSTC" ]; then
    die "$RUSTC_BIN is $rustc_version, the dependencies need >= $MIN_RUSTC (rustc-web from bookworm-security)"
fi
log "rustc: $("$RUSTC_BIN" --version); cargo: $(cargo --version)"

# --- 2. qemu library prefix -----------------------------------------------------------------
# libstd-rust-web-dev:arm64 pulls in libc6:arm64, so /lib/aarch64-linux-gnu holds an arm64 glibc
# (and /etc/ld.so.cache lists it). With `-L /usr/aarch64-linux-gnu` qemu would start the cross
# glibc's ld.so, which then finds libc.so.6 in /lib/aarch64-linux-gnu through that cache: a
# loader and libc from two different glibc builds. Binaries still start (--version works), but
# the test harness spins forever at 100% CPU in its first test. So use the multiarch glibc when
# it is there (loader and libc from one package), the cross one otherwise.
if [ -e /lib/ld-linux-aarch64.so.1 ]; then
    qemu_prefix=/
else
    qemu_prefix=/usr/aarch64-linux-gnu
fi

export RUSTC="$RUSTC_BIN"
export CARGO_TARGET_DIR="$TARGET_DIR"
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L $qemu_prefix"
# cc-rs based build scripts (none today) would otherwise pick the host compiler for C code.
export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
export CXX_aarch64_unknown_linux_gnu=aarch64-linux-gnu-g++
export AR_aarch64_unknown_linux_gnu=aarch64-linux-gnu-ar
# A one-shot CI build gains nothing from incremental compilation, and full debug info costs
# ~15% of the build time; line tables keep file:line in backtraces. (Measured on 2 cores: clean
# debug build + tests 4m12s with the defaults, 3m12s without incremental, 2m46s with both.)
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
export CARGO_PROFILE_DEV_DEBUG=${CARGO_PROFILE_DEV_DEBUG:-line-tables-only}
log "RUSTC=$RUSTC CARGO_INCREMENTAL=$CARGO_INCREMENTAL CARGO_PROFILE_DEV_DEBUG=$CARGO_PROFILE_DEV_DEBUG CARGO_TARGET_DIR=$CARGO_TARGET_DIR runner='$CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER' profile=$PROFILE"

# --- 3. build -------------------------------------------------------------------------------
t=$(now)
# Also unpacks the TensorRT 10 headers the TensorRT shim compiles against (see Cargo.toml).
run cargo fetch -q
export TRITONRS_REQUIRE_TRT_SHIM=1
run cargo build "${profile_flag[@]}" --target "$TARGET" --bin tritonrs
log "build: $(( $(now) - t )) s"

bin="$CARGO_TARGET_DIR/$TARGET/$PROFILE/tritonrs"
file_info=$(file -b "$bin" 2>/dev/null || true)
[ -z "$file_info" ] || log "$bin: $file_info"

# --- 4. --version under qemu ----------------------------------------------------------------
log "+ qemu-aarch64 -L $qemu_prefix $bin --version"
version=$(qemu-aarch64 -L "$qemu_prefix" "$bin" --version) || die "tritonrs --version failed under qemu"
printf '%s\n' "$version"
[[ "$version" =~ ^tritonrs\ [0-9] ]] || die "unexpected --version output: $version"

# --- 5. unit tests under qemu ---------------------------------------------------------------
if [ "${CROSS_SKIP_TESTS:-0}" != 1 ]; then
    t=$(now)
    # An ORT_DYLIB_PATH from scripts/env.sh names the host's x86_64 library, which no aarch64 test
    # can load; without it the tests that run ONNX Runtime say so and skip.
    unset ORT_DYLIB_PATH
    run cargo test "${profile_flag[@]}" --lib --target "$TARGET"
    log "unit tests (build + run): $(( $(now) - t )) s"
fi

log "OK in $(( $(now) - script_start )) s"
