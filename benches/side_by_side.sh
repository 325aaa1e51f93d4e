#!/usr/bin/env bash
# Side-by-side benchmark of tritonrs and the real Triton (see side_by_side.py). Not part of CI.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ../shared/anchors/install.sh >/dev/null
source scripts/env.sh >/dev/null
cargo build --release --bin tritonrs -q
exec python3 benches/side_by_side.py "$@"
