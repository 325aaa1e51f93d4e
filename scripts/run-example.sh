#!/usr/bin/env bash
# Builds tritonrs and serves the bundled example repository on the default ports (HTTP 8000), in the
# foreground (Ctrl-C stops it). Extra arguments go to tritonrs, e.g. scripts/run-example.sh --http-port 9000
#
# It builds the `example` profile (target/example/tritonrs: the whole server, unoptimised but for the
# image decoders), whose cold build takes about 0.4 of the release profile's; `cargo build --release`
# gives the optimised binary (about 3x the throughput) the packages and benchmarks use. The Python environment (scripts/env.sh: the
# onnxruntime wheel whose library the server loads) is set up while cargo builds.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p target
env_log="target/env-setup.log"
scripts/env.sh true >"$env_log" 2>&1 &
env_pid=$!
# Unpacks the TensorRT 10 headers the TensorRT shim compiles against (see Cargo.toml).
cargo fetch
# Not quiet: a cold build takes minutes on 2 cores, and cargo's lines show it moves.
echo "run-example.sh: cargo build --profile example (cold: about 4 minutes on 2 cores; at once when nothing changed)" >&2
cargo build --profile example --bin tritonrs
if ! wait "$env_pid"; then
    cat "$env_log" >&2
    echo "run-example.sh: setting up the Python environment failed (above; scripts/env.sh)" >&2
    exit 1
fi
bin="$PWD/target/example/tritonrs"
cat >&2 <<MSG

run-example.sh: built $bin
  It serves below, in the foreground (Ctrl-C stops it); run other commands in a second terminal.
  The README's \`tritonrs ...\` commands need it on the PATH there:
      export PATH="$(dirname "$bin"):\$PATH"
  (it finds ONNX Runtime by itself, in this checkout's .ort/ when nothing else has it)

MSG
exec "$bin" --model-repository model-repos/examples "$@"
