#!/usr/bin/env bash
# Runs every test of tritonrs on this machine: Rust unit tests, then the black-box suite that starts
# the real binary on ephemeral ports and talks to it with the official tritonclient.
# Sets up what it needs on a fresh Debian machine (a Python venv with tritonclient and the
# onnxruntime wheel that provides libonnxruntime.so) through scripts/env.sh, perf_analyzer and Model
# Analyzer through scripts/test-tools.sh, and Debian's systemd
# (for systemd-analyze) and mosquitto packages (as root, with apt-get).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/env.sh
source scripts/env.sh
# Debian packages the black-box tests use: systemd-analyze checks the unit in systemd/
# (tests/python/test_systemd.py; no running systemd needed) and mosquitto is the broker of the MQTT
# tests (started per test on an ephemeral port; the package's own service is not used).
missing=()
command -v systemd-analyze >/dev/null 2>&1 || missing+=(systemd)
command -v mosquitto >/dev/null 2>&1 || [ -x /usr/sbin/mosquitto ] || missing+=(mosquitto)
# redis-server (with redis-cli) is the shared response cache of tests/python/test_redis_cache.py and
# benches/redis_cache.py, started on an ephemeral port; the package's own service is not used.
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
# The TensorRT shim is C++ (the cc crate compiles it with c++).
command -v c++ >/dev/null 2>&1 || missing+=(g++)
# Azurite, the Azure Blob server of tests/python/test_cloud_repository.py, comes from npm.
command -v npm >/dev/null 2>&1 || missing+=(npm)
# Triton's own Python backend (tests/python/test_capi_pytriton.py) embeds the system interpreter: its
# shared libpython and numpy.
if [ -x /usr/bin/python3 ]; then
    pyver=$(/usr/bin/python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
    /usr/bin/python3 -c 'import numpy' >/dev/null 2>&1 || missing+=(python3-numpy)
    ls /usr/lib/*/libpython"$pyver".so.1.0 >/dev/null 2>&1 || missing+=("libpython$pyver")
fi
if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "== apt-get install ${missing[*]}"
        # shellcheck source=scripts/apt.sh
        source scripts/apt.sh
        apt_get update -qq
        apt_get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    else
        echo "missing Debian packages for the tests: sudo apt-get install ${missing[*]}" >&2
        exit 1
    fi
fi
# The reference tools (perf_analyzer, Model Analyzer and genai-perf, which some black-box tests drive
# tritonrs with, into .anchors/, .ma-venv/ and .gp-venv/) and Azurite (npm, into .npm/) install in the
# background while cargo builds and runs the unit tests: mostly downloads, about a gigabyte. Their log
# is printed when the black-box tests start. Where the tools cannot be installed, those tests skip and
# say why; Azurite failing to install fails the run.
export ANCHORS="${ANCHORS:-$PWD/.anchors}"
mkdir -p target
tools_log="$PWD/target/test-tools.log"
(
    if [ ! -x .npm/node_modules/.bin/azurite-blob ]; then
        echo "== npm install azurite (into .npm/)"
        npm install --prefix .npm --no-audit --no-fund --silent azurite@3.37.0 || exit 1
    fi
    echo "== reference tools (perf_analyzer, model-analyzer, genai-perf)"
    scripts/test-tools.sh || echo "warning: scripts/test-tools.sh failed; the perf_analyzer, Model Analyzer and genai-perf tests skip" >&2
) >"$tools_log" 2>&1 &
tools_pid=$!
# `cargo fetch` also unpacks the TensorRT 10 headers the TensorRT shim compiles against (see
# Cargo.toml); the tests insist that the shim was built.
echo "== cargo fetch"
cargo fetch -q
export TRITONRS_REQUIRE_TRT_SHIM=1
echo "== cargo build"
cargo build --bins
echo "== cargo test"
cargo test
tools_rc=0
wait "$tools_pid" || tools_rc=$?
cat "$tools_log"
if [ "$tools_rc" != 0 ]; then
    echo "npm install azurite (the Azure Blob server of the cloud repository tests) failed" >&2
    exit 1
fi
export PERF_ANALYZER="${PERF_ANALYZER:-$ANCHORS/bin/perf_analyzer}"
echo "== black-box tests (tritonclient)"
TRITONRS_BIN="$PWD/target/debug/tritonrs" python -m pytest tests/python "$@"
echo "== the Python backend's tests again, with the stubs' fork server off"
TRITONRS_TEST_PYTHON_ZYGOTE=0 TRITONRS_BIN="$PWD/target/debug/tritonrs" python -m pytest tests/python/test_python_backend.py "$@"
