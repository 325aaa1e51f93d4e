#!/usr/bin/env bash
# Builds libtritonrs_trt8.so: tritonrs's TensorRT shim for TensorRT 8.2-8.6 (JetPack 4.6.x and 5.x).
# The tritonrs binary carries the TensorRT 10 shim; no package registry has TensorRT 8 headers, so
# this variant is built on the device, against JetPack's own headers, from the same source
# (src/backend/tensorrt/shim in a checkout, /usr/share/tritonrs/trt-shim from the .deb).
#
#   sudo jetson/build-trt8-shim.sh [OUT]     # default OUT=/usr/lib/tritonrs/libtritonrs_trt8.so
#
# tritonrs finds it there (or next to its binary, or with --backend-config=tensorrt,shim=PATH) when
# libnvinfer.so.8 is the TensorRT it loads.
# Needs: gcc/g++ (build-essential) and TensorRT's headers (libnvinfer-dev, part of JetPack:
# /usr/include/aarch64-linux-gnu/NvInferRuntime.h). Knobs: TRT_INCLUDE (the folder holding
# NvInferRuntime.h), CXX (default g++).
# Like the linked shim, it is built without exceptions, RTTI or the C++ standard library.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
say() { printf 'build-trt8-shim: %s\n' "$*" >&2; }
die() { say "ERROR: $*"; exit 1; }

OUT=${1:-/usr/lib/tritonrs/libtritonrs_trt8.so}
CXX=${CXX:-g++}
if [ -f "$here/../src/backend/tensorrt/shim/trt_shim.cpp" ]; then
    SRC=$here/../src/backend/tensorrt/shim
elif [ -f "$here/trt_shim.cpp" ]; then
    SRC=$here
else
    die "cannot find trt_shim.cpp (run this from a tritonrs checkout or the .deb's /usr/share/tritonrs/trt-shim)"
fi
if [ -z "${TRT_INCLUDE:-}" ]; then
    for d in /usr/include/aarch64-linux-gnu /usr/include/x86_64-linux-gnu /usr/include /usr/local/include \
             /usr/src/tensorrt/include /opt/tensorrt/include; do
        [ -f "$d/NvInferRuntime.h" ] && { TRT_INCLUDE=$d; break; }
    done
fi
[ -n "${TRT_INCLUDE:-}" ] && [ -f "$TRT_INCLUDE/NvInferRuntime.h" ] \
    || die "no NvInferRuntime.h found: install libnvinfer-dev (JetPack) or set TRT_INCLUDE"
command -v "$CXX" >/dev/null || die "$CXX not found: apt-get install g++"
version=$(sed -n 's/^#define NV_TENSORRT_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\).*/\2/p' "$TRT_INCLUDE/NvInferVersion.h" | paste -sd.)
say "TensorRT headers $version in $TRT_INCLUDE"

mkdir -p "$(dirname "$OUT")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# -x c++ through the C driver-like flags: no libstdc++ is linked (-nodefaultlibs, then libc and libgcc).
"$CXX" -std=c++14 -O2 -fPIC -fno-exceptions -fno-rtti -fvisibility=hidden \
    -Wall -Wno-deprecated-declarations -Wno-unused-parameter \
    -I"$SRC" -I"$TRT_INCLUDE" -c "$SRC/trt_shim.cpp" -o "$tmp/trt_shim.o"
# Only the trs_* functions are exported (not the shim's operator delete, which must not interpose).
printf '{ global: trs_*; local: *; };\n' > "$tmp/exports.map"
"$CXX" -shared -nodefaultlibs -o "$tmp/libtritonrs_trt8.so" "$tmp/trt_shim.o" -lc -lgcc -Wl,--no-undefined \
    -Wl,-soname,libtritonrs_trt8.so -Wl,--version-script="$tmp/exports.map"
if objdump -p "$tmp/libtritonrs_trt8.so" | grep -q 'NEEDED.*libstdc++'; then
    die "the shim links libstdc++; it must not"
fi
install -m 0644 "$tmp/libtritonrs_trt8.so" "$OUT"
# The library answers its ABI and header versions (python3 is on every JetPack).
if command -v python3 >/dev/null; then
    python3 - "$OUT" <<'PY'
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
print("build-trt8-shim: %s: ABI %d, TensorRT headers %d" % (sys.argv[1], lib.trs_abi_version(), lib.trs_header_version()))
PY
fi
say "installed $OUT"
