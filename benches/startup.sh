#!/usr/bin/env bash
# Measures tritonrs start-to-ready time and idle RSS on the example repository.
# Usage: benches/startup.sh [runs]   (builds the release binary first)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh >/dev/null
cargo build --release --bin tritonrs -q
runs=${1:-5}
port=18950
for i in $(seq 1 "$runs"); do
  start=$(date +%s%N)
  ./target/release/tritonrs --model-repository model-repos/examples --http-port $port --log-info=false &
  pid=$!
  until curl -sf "localhost:$port/v2/health/ready" >/dev/null 2>&1; do sleep 0.002; done
  ready=$(( ($(date +%s%N) - start) / 1000000 ))
  sleep 1
  rss=$(awk '/VmRSS/{print $2}' "/proc/$pid/status")
  kill -TERM $pid; wait $pid || true
  echo "run $i: start-to-ready ${ready} ms, idle RSS ${rss} KiB"
done
