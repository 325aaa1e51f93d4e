#!/usr/bin/env bash
# Builds the release binaries that ship: x86_64 and aarch64, linked against glibc 2.27 symbols so one
# binary runs on JetPack 4.6 (Ubuntu 18.04, glibc 2.27) through JetPack 6, and on Ubuntu 18.04+ CUDA
# hosts. Then checks each binary's highest GLIBC_ symbol version (must be <= 2.27) and smoke-tests it:
# start the server on model-repos/examples/simple, wait for ready, run one ONNX inference. The aarch64
# binary runs under qemu-aarch64 with the aarch64 libonnxruntime.so from PyPI's onnxruntime wheel.
#
#   scripts/build-portable.sh [x86_64|aarch64 ...]     # default: both
#
# How: `cargo zigbuild --target <triple>.2.27` (cargo-zigbuild from crates.io, installed with cargo
# install when missing; zig from PyPI's ziglang package, pip-installed into .venv), with the rust std
# for aarch64 from `rustup target add`. Output: target/portable/<triple>/release/tritonrs.
# Needs: the Rust toolchain (rustup), python3 (scripts/env.sh), and for the aarch64 smoke test
# qemu-user plus the arm64 C and C++ runtimes (libc6:arm64, libstdc++6:arm64), which
# scripts/cross-aarch64.sh installs; as root this script installs them itself.
set -euo pipefail
cd "$(dirname "$0")/.."

ARCHES=("$@")
[ ${#ARCHES[@]} -gt 0 ] || ARCHES=(x86_64 aarch64)
FLOOR=2.27
ZIGLANG_VERSION=0.17.1
CARGO_ZIGBUILD_VERSION=0.24.1
ORT_VERSION=$(sed -n 's/^onnxruntime==//p' scripts/requirements.txt)
TARGET_DIR=${PORTABLE_TARGET_DIR:-$PWD/target/portable}

log() { printf '[build-portable] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
now() { date +%s; }
start=$(now)

# shellcheck source=scripts/env.sh
source scripts/env.sh

# --- tools ------------------------------------------------------------------------------------
if ! python -c 'import ziglang' 2>/dev/null; then
    log "pip install ziglang==$ZIGLANG_VERSION"
    python -m pip install -q "ziglang==$ZIGLANG_VERSION"
fi
# cargo-zigbuild runs `python3 -m ziglang` when there is no `zig` on PATH (.venv's python has it).
if ! command -v cargo-zigbuild >/dev/null; then
    t=$(now)
    log "cargo install cargo-zigbuild@$CARGO_ZIGBUILD_VERSION"
    cargo install -q --locked cargo-zigbuild --version "$CARGO_ZIGBUILD_VERSION"
    log "cargo-zigbuild: $(( $(now) - t )) s"
fi

need_apt=()
for arch in "${ARCHES[@]}"; do
    if [ "$arch" = aarch64 ]; then
        rustup target list --installed | grep -qx aarch64-unknown-linux-gnu || rustup target add aarch64-unknown-linux-gnu
        command -v qemu-aarch64 >/dev/null || need_apt+=(qemu-user)
        [ -e /lib/ld-linux-aarch64.so.1 ] || need_apt+=(libc6:arm64)
        [ -e /usr/lib/aarch64-linux-gnu/libstdc++.so.6 ] || need_apt+=(libstdc++6:arm64)
    fi
done
if [ ${#need_apt[@]} -gt 0 ]; then
    [ "$(id -u)" = 0 ] || die "missing ${need_apt[*]}: run as root, or: dpkg --add-architecture arm64 && apt-get install ${need_apt[*]}"
    dpkg --print-foreign-architectures | grep -qx arm64 || dpkg --add-architecture arm64
    # shellcheck source=scripts/apt.sh
    source scripts/apt.sh
    apt_get update -qq
    apt_get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

# --- build, floor, smoke test -------------------------------------------------------------------
highest_glibc() {
    objdump -T "$1" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -Vu | tail -n1
}

smoke() {
    local arch=$1 bin=$2 lib=$3 runner=() repo port log pid ok=
    [ "$arch" = aarch64 ] && runner=(qemu-aarch64 -L /)
    repo=$(mktemp -d)
    cp -r model-repos/examples/simple "$repo/"
    port=$(python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    log=$(mktemp)
    "${runner[@]}" "$bin" --model-repository "$repo" --backend-config="onnxruntime,library=$lib" \
        --http-address 127.0.0.1 --http-port "$port" --allow-grpc=false --allow-metrics=false >"$log" 2>&1 &
    pid=$!
    for _ in $(seq 120); do
        if curl -sf "http://127.0.0.1:$port/v2/health/ready" >/dev/null; then ok=1; break; fi
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.5
    done
    if [ -n "$ok" ]; then
        ok=
        curl -sf "http://127.0.0.1:$port/v2/models/simple/infer" -d '{"inputs":[
            {"name":"INPUT0","datatype":"INT32","shape":[1,16],"data":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]},
            {"name":"INPUT1","datatype":"INT32","shape":[1,16],"data":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}]}' \
            | grep -q '"data":\[2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17\]' && ok=1
    fi
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    rm -rf "$repo"
    if [ -z "$ok" ]; then
        cat "$log" >&2
        rm -f "$log"
        die "$arch smoke test failed (health or inference)"
    fi
    rm -f "$log"
}

# Unpacks the TensorRT 10 headers the TensorRT shim compiles against (see Cargo.toml); required here
# (build.rs fails otherwise), so a release binary always has its shim.
cargo fetch -q
export TRITONRS_REQUIRE_TRT_SHIM=1
for arch in "${ARCHES[@]}"; do
    triple=$arch-unknown-linux-gnu
    t=$(now)
    log "+ cargo zigbuild --release --target $triple.$FLOOR"
    CARGO_TARGET_DIR="$TARGET_DIR" cargo zigbuild --release --target "$triple.$FLOOR" --bin tritonrs
    bin="$TARGET_DIR/$triple/release/tritonrs"
    log "$arch build: $(( $(now) - t )) s, $(du -h "$bin" | cut -f1)"

    glibc=$(highest_glibc "$bin")
    if [ "$(printf '%s\n%s\n' "$glibc" "$FLOOR" | sort -V | tail -n1)" != "$FLOOR" ]; then
        objdump -T "$bin" | grep "GLIBC_$glibc" >&2
        die "$bin needs GLIBC_$glibc, above the $FLOOR floor"
    fi
    log "$arch needs GLIBC_$glibc at most (floor $FLOOR): OK"
    # The TensorRT shim is C++ built without the C++ runtime: no libstdc++/libc++ may creep in.
    if objdump -p "$bin" | grep -E 'NEEDED.*lib(std)?c\+\+' >&2 || objdump -T "$bin" | grep -E 'GLIBCXX|CXXABI' >&2; then
        die "$bin needs a C++ runtime library"
    fi

    if [ "$arch" = aarch64 ]; then
        wheel_dir="$TARGET_DIR/ort-aarch64"
        lib="$wheel_dir/libonnxruntime.so.$ORT_VERSION"
        if [ ! -e "$lib" ]; then
            mkdir -p "$wheel_dir"
            python -m pip download -q "onnxruntime==$ORT_VERSION" --platform manylinux_2_28_aarch64 \
                --only-binary=:all: --python-version 3.11 --no-deps -d "$wheel_dir"
            python - "$wheel_dir" "$lib" <<'PY'
import glob, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/onnxruntime-*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    name = next(n for n in z.namelist() if "/libonnxruntime.so" in n)
    open(sys.argv[2], "wb").write(z.read(name))
PY
        fi
    else
        lib=$ORT_DYLIB_PATH
    fi
    t=$(now)
    smoke "$arch" "$bin" "$lib"
    log "$arch smoke test (health, one ONNX inference): OK in $(( $(now) - t )) s"
done
log "OK in $(( $(now) - start )) s: ${ARCHES[*]} in $TARGET_DIR"
