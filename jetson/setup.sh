#!/usr/bin/env bash
# Sets up tritonrs on a Jetson (or any Debian/Ubuntu host):
#   sudo jetson/setup.sh [tritonrs_<version>_arm64.deb]
# 1. installs the .deb when one is given;
# 2. says which JetPack / L4T this is and the power mode (nvpmodel), warning when it is not MAXN;
# 3. finds ONNX Runtime (>= 1.17: system, /opt, or a pip-installed onnxruntime), CUDA and TensorRT
#    libraries, and writes ONNX Runtime's path into the configuration file as
#    backend-config = ["onnxruntime,library=..."] unless one is set already; CUDA and TensorRT are
#    recorded as comments (tritonrs finds them by their sonames); with TensorRT 8 (JetPack 4.6 / 5)
#    it says whether the TensorRT 8 shim is installed and how to build it;
# 4. checks the configuration with `tritonrs validate --config`.
# ROOT (default /) and CONFIG (default $ROOT/etc/tritonrs/tritonrs.toml) let tests run it on a fake tree.
set -euo pipefail

ROOT=${ROOT:-/}
ROOT=${ROOT%/}
CONFIG=${CONFIG:-$ROOT/etc/tritonrs/tritonrs.toml}
say() { printf 'setup: %s\n' "$*"; }

if [ $# -gt 0 ]; then
    [ "$(id -u)" = 0 ] || { say "run as root to install $1"; exit 1; }
    apt-get install -y "$(realpath "$1")"
fi

# --- which board and JetPack
if [ -r "$ROOT/etc/nv_tegra_release" ]; then
    l4t=$(sed -n 's/^# R\([0-9]*\) (release), REVISION: \([0-9.]*\).*/\1.\2/p' "$ROOT/etc/nv_tegra_release")
    case "$l4t" in
        32.*) jetpack="4.x (Ubuntu 18.04, CUDA 10.2)" ;;
        35.*) jetpack="5.x (Ubuntu 20.04, CUDA 11.4)" ;;
        36.*) jetpack="6.x (Ubuntu 22.04, CUDA 12)" ;;
        *) jetpack="unknown" ;;
    esac
    say "L4T R$l4t: JetPack $jetpack"
else
    say "not a Jetson (no /etc/nv_tegra_release)"
fi
if command -v nvpmodel >/dev/null && [ "$ROOT" = "" ]; then
    mode=$(nvpmodel -q 2>/dev/null | sed -n 's/^NV Power Mode: *//p')
    say "power mode: ${mode:-unknown}"
    case "$mode" in MAXN*) ;; *) say "for steady latency: sudo nvpmodel -m 0 && sudo jetson_clocks" ;; esac
fi

# --- libraries
newest() { { ls -1 "$@" 2>/dev/null || true; } | sort -V | tail -n1; }
ort=""
for pattern in "$ROOT/opt/tritonrs/lib/libonnxruntime.so*" "$ROOT/usr/local/lib/libonnxruntime.so*" \
               "$ROOT/usr/lib/aarch64-linux-gnu/libonnxruntime.so*" "$ROOT/usr/lib/x86_64-linux-gnu/libonnxruntime.so*" \
               "$ROOT/usr/local/lib/python3*/dist-packages/onnxruntime/capi/libonnxruntime.so*" \
               "$ROOT/usr/lib/python3/dist-packages/onnxruntime/capi/libonnxruntime.so*"; do
    # shellcheck disable=SC2086
    found=$(newest $pattern)
    if [ -n "$found" ]; then ort=$found; break; fi
done
cuda=$(newest "$ROOT"/usr/local/cuda/lib64/libcudart.so.*)
trt=$(newest "$ROOT"/usr/lib/aarch64-linux-gnu/libnvinfer.so.* "$ROOT"/usr/lib/x86_64-linux-gnu/libnvinfer.so.*)
say "ONNX Runtime: ${ort:-not found (see jetson/README.md: Which ONNX Runtime)}"
say "CUDA runtime: ${cuda:-not found}"
say "TensorRT: ${trt:-not found}"
case "${trt##*libnvinfer.so.}" in
    8.*)
        if [ -f "$ROOT/usr/lib/tritonrs/libtritonrs_trt8.so" ]; then
            say "TensorRT 8 shim: $ROOT/usr/lib/tritonrs/libtritonrs_trt8.so"
        else
            say "TensorRT 8 needs its shim for tensorrt_plan models: sudo /usr/share/tritonrs/trt-shim/build-trt8-shim.sh"
        fi
        ;;
esac
if [ -n "$ort" ]; then
    version=${ort##*libonnxruntime.so.}
    if [ "$version" != "$ort" ] && [ "$(printf '%s\n1.17\n' "$version" | sort -V | head -n1)" != "1.17" ]; then
        say "warning: ONNX Runtime $version is older than 1.17, which tritonrs needs; ONNX models will be UNAVAILABLE"
    fi
fi

# --- the configuration file
if [ ! -f "$CONFIG" ]; then
    say "no $CONFIG (is the package installed?)"
    exit 1
fi
if [ -n "$ort" ]; then
    if grep -q '^backend-config *=' "$CONFIG"; then
        say "$CONFIG already sets backend-config; left as it is"
    else
        printf '\n# Written by jetson/setup.sh.\nbackend-config = ["onnxruntime,library=%s"]\n' "${ort#"$ROOT"}" >>"$CONFIG"
        say "wrote the ONNX Runtime library into $CONFIG"
    fi
fi
for lib in "$cuda" "$trt"; do
    if [ -n "$lib" ] && ! grep -qF "${lib#"$ROOT"}" "$CONFIG"; then
        printf '# Found by jetson/setup.sh: %s\n' "${lib#"$ROOT"}" >>"$CONFIG"
    fi
done
if command -v tritonrs >/dev/null; then
    tritonrs validate --config "$CONFIG" || say "tritonrs validate found problems (above)"
fi
say "next: put models in /var/lib/tritonrs/models, then: sudo systemctl restart tritonrs"
