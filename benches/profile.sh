#!/usr/bin/env bash
# Where tritonrs spends a request's time: perf_analyzer at concurrency 1 on `simple` while `perf record`
# samples the server, then a summary by thread, by library and by symbol. Needs `perf` (linux-perf) and
# the anchors' perf_analyzer (../shared/anchors/install.sh).
# Usage: benches/profile.sh [http|grpc] [seconds] [concurrency] [model] [extra server flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
proto=${1:-http}
secs=${2:-8}
conc=${3:-1}
model=${4:-simple}
shift $(( $# < 4 ? $# : 4 ))
bash ../shared/anchors/install.sh >/dev/null
source scripts/env.sh >/dev/null
# The profiling profile (Cargo.toml): the release build with symbols and line tables (the release
# binary is stripped), in target/profiling.
cargo build --profile profiling --bin tritonrs -q
PA=${ANCHORS:-$HOME/.cache/anchors}/bin/perf_analyzer
work=$(mktemp -d)
./target/profiling/tritonrs --model-repository model-repos/examples --http-port 0 --grpc-port 0 --metrics-port 0 \
  --log-info=true "$@" >"$work/log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; [ -n "${KEEP_PERF:-}" ] && cp "$work/perf.data" "$KEEP_PERF"; rm -rf "$work"' EXIT
service=$([ "$proto" = http ] && echo HTTPService || echo GRPCInferenceService)
port_of() { sed -n "s/.*Started $1 at [0-9.]*:\([0-9]*\).*/\1/p" "$work/log" | head -1; }
for _ in $(seq 1 100); do
  [ -n "$(port_of HTTPService)" ] && curl -sf "localhost:$(port_of HTTPService)/v2/health/ready" >/dev/null && break
  sleep 0.1
done
port=$(port_of $service)
perf record -F 1999 -g -o "$work/perf.data" -p $pid -- sleep "$secs" >/dev/null 2>&1 &
rec=$!
"$PA" -m "$model" -u "localhost:$port" -i "$proto" --concurrency-range "$conc" --measurement-interval 2000 \
  --stability-percentage 50 --max-trials 4 | grep -E "Throughput|p99|Avg request"
wait $rec
summary() { perf report -i "$work/perf.data" --no-children --stdio -g none --sort "$1" 2>/dev/null \
  | grep "%" | sed 's/  */ /g; s/ - - *$//' | cut -c1-110 | head -"$2"; }
echo "== by thread";  summary comm 4
echo "== by library"; summary dso 6
echo "== by symbol";  summary symbol 20
