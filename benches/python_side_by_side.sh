#!/usr/bin/env bash
# Side-by-side benchmark of tritonrs and the real Triton on Python-backend models (see
# python_side_by_side.py). Not part of CI.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ../shared/anchors/install.sh >/dev/null
cargo build --release --bin tritonrs -q
exec "${ANCHORS:-$HOME/.cache/anchors}/venv/bin/python" benches/python_side_by_side.py "$@"
