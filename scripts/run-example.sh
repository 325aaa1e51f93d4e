#!/usr/bin/env bash
# Builds tritonrs and serves the bundled example repository on the default ports (HTTP 8000).
# Extra arguments go to tritonrs, e.g. scripts/run-example.sh --http-port 9000
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/env.sh
source scripts/env.sh
# Unpacks the TensorRT 10 headers the TensorRT shim compiles against (see Cargo.toml).
cargo fetch -q
exec cargo run --release --bin tritonrs -- --model-repository model-repos/examples "$@"
