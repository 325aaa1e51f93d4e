#!/usr/bin/env bash
# On a device with TensorRT (a Jetson, or an x86 host with a GPU): builds a TensorRT engine from the
# example ONNX model batched_scale with trtexec, serves it (auto-completed from the engine) beside the
# ONNX model through tritonrs, runs the same batch through both over HTTP, and compares the outputs.
#
#   jetson/selftest.sh [path/to/tritonrs]        # default: tritonrs on PATH, else target/release/tritonrs
#
# Needs: trtexec (JetPack: /usr/src/tensorrt/bin/trtexec), curl, python3 (any 3.6+: only the standard
# library is used), ONNX Runtime for the reference model (as tritonrs finds it: jetson/setup.sh).
# On TensorRT 8 (JetPack 4.6 / 5) run jetson/build-trt8-shim.sh first. Knobs: TRTEXEC, PORT (8000),
# EXTRA_ARGS (more tritonrs flags, e.g. --backend-config=onnxruntime,library=...).
# Exit status 0 when the outputs agree within 1e-3; the log of the server is printed otherwise.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
say() { printf 'selftest: %s\n' "$*" >&2; }
die() { say "FAILED: $*"; exit 1; }

BIN=${1:-$(command -v tritonrs || echo "$here/../target/release/tritonrs")}
[ -x "$BIN" ] || die "no tritonrs binary at $BIN"
TRTEXEC=${TRTEXEC:-$(command -v trtexec || echo /usr/src/tensorrt/bin/trtexec)}
[ -x "$TRTEXEC" ] || die "trtexec not found (set TRTEXEC)"
PORT=${PORT:-8000}
onnx=""
for c in "$here/../model-repos/examples/batched_scale/1/model.onnx" /usr/share/tritonrs/examples/batched_scale/1/model.onnx; do
    [ -f "$c" ] && { onnx=$c; break; }
done
[ -n "$onnx" ] || die "cannot find the example model batched_scale"

work=$(mktemp -d)
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
mkdir -p "$work/repo/engine/1" "$work/repo/reference/1"
cp "$onnx" "$work/repo/reference/1/model.onnx"

say "building the engine with $TRTEXEC (a minute on a Nano)"
"$TRTEXEC" --onnx="$onnx" --saveEngine="$work/repo/engine/1/model.plan" \
    --minShapes=INPUT:1x16 --optShapes=INPUT:4x16 --maxShapes=INPUT:16x16 >"$work/trtexec.log" 2>&1 \
    || { tail -n 30 "$work/trtexec.log" >&2; die "trtexec could not build the engine"; }

say "serving with $BIN"
# shellcheck disable=SC2086
"$BIN" --model-repository "$work/repo" --http-port "$PORT" --grpc-port 0 --metrics-port 0 \
    --min-supported-compute-capability=5.3 ${EXTRA_ARGS:-} >"$work/server.log" 2>&1 &
pid=$!
for _ in $(seq 1 600); do
    curl -sf "localhost:$PORT/v2/health/ready" >/dev/null && break
    kill -0 "$pid" 2>/dev/null || { cat "$work/server.log" >&2; die "tritonrs exited"; }
    sleep 0.5
done
curl -sf "localhost:$PORT/v2/health/ready" >/dev/null || { cat "$work/server.log" >&2; die "not ready after 5 minutes"; }
curl -sf "localhost:$PORT/v2/models/engine/config" | grep -q '"platform":"tensorrt_plan"' \
    || { cat "$work/server.log" >&2; die "the engine's configuration is not tensorrt_plan"; }

python3 - "$PORT" <<'PY' || { cat "$work/server.log" >&2; die "outputs differ"; }
import json, sys, urllib.request
port = sys.argv[1]
batch = [[(i * 16 + j) / 7.0 - 5.0 for j in range(16)] for i in range(4)]
body = json.dumps({"inputs": [{"name": "INPUT", "datatype": "FP32", "shape": [4, 16],
                               "data": [v for row in batch for v in row]}]}).encode()
def infer(model):
    req = urllib.request.Request("http://localhost:%s/v2/models/%s/infer" % (port, model), data=body,
                                 headers={"Content-Type": "application/json"})
    out = json.load(urllib.request.urlopen(req, timeout=60))["outputs"][0]
    return out["shape"], out["data"]
shape_t, trt = infer("engine")
shape_o, ort = infer("reference")
worst = max(abs(a - b) for a, b in zip(trt, ort))
print("selftest: TensorRT shape %s, ONNX Runtime shape %s, largest difference %.3g" % (shape_t, shape_o, worst))
sys.exit(0 if shape_t == shape_o and worst <= 1e-3 else 1)
PY
say "OK: the TensorRT engine and ONNX Runtime agree"
