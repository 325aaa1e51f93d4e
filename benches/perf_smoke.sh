#!/usr/bin/env bash
# perf_analyzer smoke run against tritonrs: a few seconds each over HTTP and gRPC on the example
# `simple` model, failing if perf_analyzer reports an error. Not in CI: perf_analyzer 2.60 needs the
# glibc 2.38 shim that ../shared/anchors/install.sh sets up.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ../shared/anchors/install.sh >/dev/null
source scripts/env.sh >/dev/null
cargo build --release --bin tritonrs -q
PA=${ANCHORS:-$HOME/.cache/anchors}/bin/perf_analyzer
log=$(mktemp)
./target/release/tritonrs --model-repository model-repos/examples --http-port 0 --grpc-port 0 --metrics-port 0 >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; rm -f "$log"' EXIT
port_of() { sed -n "s/.*Started $1 at [0-9.]*:\([0-9]*\).*/\1/p" "$log" | head -1; }
for _ in $(seq 1 100); do [ -n "$(port_of HTTPService)" ] && curl -sf "localhost:$(port_of HTTPService)/v2/health/ready" >/dev/null && break; sleep 0.1; done
for proto in http grpc; do
  service=$([ $proto = http ] && echo HTTPService || echo GRPCInferenceService)
  port=$(port_of $service)
  if [ -z "$port" ]; then echo "skipping $proto: this build does not serve it"; continue; fi
  echo "== perf_analyzer -i $proto (port $port)"
  "$PA" -m simple -u "localhost:$port" -i $proto --concurrency-range 1:2 --measurement-interval 1000 \
        --stability-percentage 50 --max-trials 10 | grep -E "Concurrency:|Throughput|p99"
done
echo "perf_analyzer smoke run passed"
