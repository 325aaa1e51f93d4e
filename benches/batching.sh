#!/usr/bin/env bash
# Dynamic batching benchmark (see batching.py): batched vs unbatched, tritonrs and the real Triton.
# Not part of CI.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ../shared/anchors/install.sh >/dev/null
source scripts/env.sh >/dev/null
cargo build --release --bin tritonrs -q
exec python3 benches/batching.py "$@"
