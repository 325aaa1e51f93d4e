#!/usr/bin/env bash
# Runs every test of tritonrs on this machine: Rust unit tests, then the black-box suite that starts
# the real binary on ephemeral ports and talks to it with the official tritonclient.
# Sets up what it needs on a fresh Debian machine (a Python venv with tritonclient and the
# onnxruntime wheel that provides libonnxruntime.so) through scripts/env.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/env.sh
source scripts/env.sh
echo "== cargo build"
cargo build --bins
echo "== cargo test"
cargo test
echo "== black-box tests (tritonclient)"
TRITONRS_BIN="$PWD/target/debug/tritonrs" python -m pytest tests/python "$@"
