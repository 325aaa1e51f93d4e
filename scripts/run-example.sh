#!/usr/bin/env bash
# Builds tritonrs and serves the bundled example repository on the default ports (HTTP 8000), in the
# foreground (Ctrl-C stops it). Extra arguments go to tritonrs, e.g. scripts/run-example.sh --http-port 9000
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/env.sh
source scripts/env.sh
# Unpacks the TensorRT 10 headers the TensorRT shim compiles against (see Cargo.toml).
cargo fetch
# Not quiet: a cold release build takes about 15-20 minutes on 2 cores, and cargo's lines show it moves.
echo "run-example.sh: cargo build --release (cold: about 15-20 minutes on 2 cores; at once when nothing changed)" >&2
cargo build --release --bin tritonrs
bin="$PWD/target/release/tritonrs"
cat >&2 <<MSG

run-example.sh: built $bin
  It serves below, in the foreground (Ctrl-C stops it); run other commands in a second terminal.
  The README's \`tritonrs ...\` commands need it on the PATH there:
      export PATH="$(dirname "$bin"):\$PATH"
  (it finds ONNX Runtime by itself, in this checkout's .ort/ when nothing else has it)

MSG
exec "$bin" --model-repository model-repos/examples "$@"
