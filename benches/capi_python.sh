#!/usr/bin/env bash
# Triton's libtriton_python.so hosted by tritonrs vs inside Triton 2.51 vs tritonrs's built-in Python
# backend (see capi_python.py). Not part of CI.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ../shared/anchors/install.sh >/dev/null
cargo build --release --bin tritonrs -q
exec "${ANCHORS:-$HOME/.cache/anchors}/venv/bin/python" benches/capi_python.py "$@"
