#!/usr/bin/env bash
# The one command a device owner runs to check tritonrs's GPU path on a device with TensorRT (a Jetson,
# or an x86 host with a GPU), printing a report to paste into an issue:
#
#   jetson/selftest.sh [path/to/tritonrs]        # default: tritonrs on PATH, else target/release/tritonrs
#
# What it checks, each a line of the report (PASS, FAIL or SKIP with the reason):
#   1. engine      a TensorRT engine built by trtexec from the example ONNX model batched_scale, served
#                  (auto-completed from the engine) beside the ONNX model, gives the same outputs;
#   2. profiles    two instances (instance_group count: 2) of an engine built with two alike
#                  optimization profiles each get their own profile (no "shares optimization profile"
#                  warning) and answer correctly under concurrent requests (needs TensorRT's Python
#                  module to build that engine; JetPack ships it as python3-libnvinfer);
#   3. sharing     two instances of the one-profile engine share its profile: the server warns, and
#                  they take turns, answering correctly under concurrent requests;
#   4. faults      with TRITONRS_TRT_FAULT=enqueue:3,sync:6 (a test hook: those calls report an error
#                  after the real work was queued), requests 3 and 6 fail with a clear error, every other
#                  one is right, the server stays up, and the memory pools are all given back: the runs
#                  that failed synchronized the stream before freeing memory the GPU was using;
#   5. pools       after all that, the pinned and device pools report no memory in use;
#   6. tune        `tritonrs tune` on the engine (one and two instances, concurrency 1 and 4) ends with a
#                  best variant, and on a Jetson reads the board's power (inferences per joule).
#
# Needs: trtexec (JetPack: /usr/src/tensorrt/bin/trtexec), curl, python3 (3.6+, standard library only),
# ONNX Runtime for the reference model (as tritonrs finds it: jetson/setup.sh). On TensorRT 8
# (JetPack 4.6 / 5) run jetson/build-trt8-shim.sh first. Knobs: TRTEXEC, PORT (8000; PORT+2 serves
# the metrics), READY_TIMEOUT (300 s for the models to load), EXTRA_ARGS (more tritonrs flags, e.g.
# --backend-config=onnxruntime,library=...).
# Exit status 0 when every check passed or was skipped; the servers' logs are kept in the report's
# folder when one failed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
say() { printf 'selftest: %s\n' "$*" >&2; }
die() { say "FAILED: $*"; exit 1; }

BIN=${1:-$(command -v tritonrs || echo "$here/../target/release/tritonrs")}
[ -x "$BIN" ] || die "no tritonrs binary at $BIN"
TRTEXEC=${TRTEXEC:-$(command -v trtexec || echo /usr/src/tensorrt/bin/trtexec)}
[ -x "$TRTEXEC" ] || die "trtexec not found (set TRTEXEC)"
command -v curl >/dev/null || die "curl not found"
PORT=${PORT:-8000}
MPORT=$((PORT + 2))
READY_TIMEOUT=${READY_TIMEOUT:-300}
onnx=""
for c in "$here/../model-repos/examples/batched_scale/1/model.onnx" /usr/share/tritonrs/examples/batched_scale/1/model.onnx; do
    [ -f "$c" ] && { onnx=$c; break; }
done
[ -n "$onnx" ] || die "cannot find the example model batched_scale"

work=$(mktemp -d /tmp/tritonrs-selftest.XXXXXX)
pid=""
failed=0
rows=()
record() { # check status detail
    rows+=("| $1 | $2 | $3 |")
    say "$1: $2 ($3)"
    [ "$2" = FAIL ] && failed=1
    return 0
}
# shellcheck disable=SC2317 # run by the trap
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; [ "$failed" = 0 ] && rm -rf "$work"; }
trap cleanup EXIT

repo=$work/repo
mkdir -p "$repo/engine/1" "$repo/reference/1" "$repo/engine_shared/1" "$repo/engine_pair/1"
cp "$onnx" "$repo/reference/1/model.onnx"

say "building the engine with $TRTEXEC (a minute on a Nano)"
if ! "$TRTEXEC" --onnx="$onnx" --saveEngine="$repo/engine/1/model.plan" \
    --minShapes=INPUT:1x16 --optShapes=INPUT:4x16 --maxShapes=INPUT:16x16 >"$work/trtexec.log" 2>&1; then
    tail -n 30 "$work/trtexec.log" >&2
    die "trtexec could not build the engine"
fi
cp "$repo/engine/1/model.plan" "$repo/engine_shared/1/model.plan"
# Two instances of a one-profile engine: they must share profile 0.
cat >"$repo/engine_shared/config.pbtxt" <<'EOF'
platform: "tensorrt_plan"
max_batch_size: 16
instance_group [ { count: 2, kind: KIND_GPU } ]
EOF

say "building an engine with two alike optimization profiles (TensorRT's Python module)"
pair_skip=""
if python3 - "$onnx" "$repo/engine_pair/1/model.plan" >"$work/pair.log" 2>&1 <<'PY'; then
import sys
import tensorrt as trt
onnx, out = sys.argv[1], sys.argv[2]
logger = trt.Logger(trt.Logger.WARNING)
builder = trt.Builder(logger)
flags = 0
if hasattr(trt.NetworkDefinitionCreationFlag, "EXPLICIT_BATCH"):  # TensorRT 8; ignored by 10
    flags = 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)
network = builder.create_network(flags)
parser = trt.OnnxParser(network, logger)
with open(onnx, "rb") as f:
    if not parser.parse(f.read()):
        sys.exit("cannot parse the model: " + "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors)))
config = builder.create_builder_config()
for _ in range(2):
    profile = builder.create_optimization_profile()
    profile.set_shape("INPUT", (1, 16), (4, 16), (16, 16))
    config.add_optimization_profile(profile)
plan = builder.build_serialized_network(network, config)
if plan is None:
    sys.exit("TensorRT could not build the engine")
with open(out, "wb") as f:
    f.write(plan)
PY
    cat >"$repo/engine_pair/config.pbtxt" <<'EOF'
platform: "tensorrt_plan"
max_batch_size: 16
instance_group [ { count: 2, kind: KIND_GPU } ]
EOF
else
    pair_skip="no engine with two profiles: $(tail -n 1 "$work/pair.log")"
    record profiles SKIP "$pair_skip"
    rm -rf "$repo/engine_pair"
fi

# start_server LOG [VAR=VALUE...]: serves $repo on $PORT; sets $pid.
start_server() {
    local log=$1
    shift
    # shellcheck disable=SC2086
    env "$@" "$BIN" --model-repository "$repo" --http-port "$PORT" --grpc-port 0 --metrics-port "$MPORT" \
        --min-supported-compute-capability=5.3 ${EXTRA_ARGS:-} >"$log" 2>&1 &
    pid=$!
    for _ in $(seq 1 $((READY_TIMEOUT * 2))); do
        curl -sf "localhost:$PORT/v2/health/ready" >/dev/null && return 0
        kill -0 "$pid" 2>/dev/null || { pid=""; return 1; }
        sleep 0.5
    done
    return 1
}
# Why a server did not become ready: its exit, or the first errors it logged.
not_ready() {
    local why
    why=$(grep -E -m 3 'UNAVAILABLE|ERROR|error|failed' "$1" | tr '\n' ' ' | cut -c1-400)
    echo "the server did not become ready within ${READY_TIMEOUT} s: ${why:-$(tail -n 3 "$1" | tr '\n' ' ')}"
}
stop_server() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    pid=""
}

# The client side of every check: python3 with the standard library only.
cat >"$work/client.py" <<'PY'
import json, sys, threading, urllib.error, urllib.request
port, mport, what = sys.argv[1], sys.argv[2], sys.argv[3]

def infer(model, batch):
    body = json.dumps({"inputs": [{"name": "INPUT", "datatype": "FP32", "shape": [len(batch), 16],
                                   "data": [v for row in batch for v in row]}]}).encode()
    req = urllib.request.Request("http://localhost:%s/v2/models/%s/infer" % (port, model), data=body,
                                 headers={"Content-Type": "application/json"})
    try:
        out = json.load(urllib.request.urlopen(req, timeout=60))["outputs"][0]
        return out["shape"], out["data"], None
    except urllib.error.HTTPError as e:
        return None, None, "HTTP %d: %s" % (e.code, e.read().decode(errors="replace"))

def batch_of(n, seed):
    return [[((i * 16 + j + seed) % 97) / 7.0 - 5.0 for j in range(16)] for i in range(n)]

def agree(model, n, seed):
    """None when the model's answer matches the reference's, else why not."""
    b = batch_of(n, seed)
    s1, d1, e1 = infer(model, b)
    s2, d2, e2 = infer("reference", b)
    if e1 or e2:
        return e1 or e2
    worst = max(abs(x - y) for x, y in zip(d1, d2))
    if s1 != s2 or worst > 1e-3:
        return "shape %s vs %s, largest difference %.3g" % (s1, s2, worst)
    return None

def pools():
    text = urllib.request.urlopen("http://localhost:%s/metrics" % mport, timeout=10).read().decode()
    used = 0.0
    for line in text.splitlines():
        if line.startswith(("nv_pinned_memory_pool_used_bytes", "tritonrs_cuda_memory_pool_used_bytes")):
            used += float(line.rsplit(" ", 1)[1])
    return used

if what == "engine":
    why = agree("engine", 4, 0)
    print(why or "outputs agree with ONNX Runtime")
    sys.exit(1 if why else 0)
if what == "concurrent":  # model name in argv[4]: 4 clients x 40 requests of batch 1 to 8
    model, errors = sys.argv[4], []
    def client(k):
        for i in range(40):
            why = agree(model, 1 + (i + k) % 8, k * 100 + i)
            if why:
                errors.append(why)
    threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    print("%d of 160 concurrent requests wrong%s" % (len(errors), (": " + errors[0]) if errors else ""))
    sys.exit(1 if errors else 0)
if what == "faults":  # 10 requests in a row; 3 and 6 must fail, the rest agree
    bad = []
    for i in range(1, 11):
        why = agree("engine", 4, i)
        expect_fail = i in (3, 6)
        if expect_fail and (not why or "injected by TRITONRS_TRT_FAULT" not in why):
            bad.append("request %d: expected the injected failure, got %s" % (i, why or "a right answer"))
        if not expect_fail and why:
            bad.append("request %d: %s" % (i, why))
    print("; ".join(bad) or "requests 3 and 6 failed as injected, the other 8 agree")
    sys.exit(1 if bad else 0)
if what == "pools":
    import time
    for _ in range(20):
        used = pools()
        if used == 0:
            break
        time.sleep(0.1)
    print("%d bytes of pooled memory in use" % used)
    sys.exit(1 if used else 0)
PY
client() { python3 "$work/client.py" "$PORT" "$MPORT" "$@" 2>&1 | tail -n 1; return "${PIPESTATUS[0]}"; }
run_check() { # name, then the client's arguments
    local name=$1 out
    shift
    if out=$(client "$@"); then record "$name" PASS "$out"; else record "$name" FAIL "$out"; fi
}

say "serving with $BIN"
if start_server "$work/server.log"; then
    trt_version=$(sed -n 's/.*\(TensorRT [0-9.]* loaded[^.]*\).*/\1/p' "$work/server.log" | head -n 1)
    run_check engine engine
    if [ -z "$pair_skip" ]; then
        run_check profiles concurrent engine_pair
        if grep -q "model 'engine_pair'.*shares optimization profile" "$work/server.log"; then
            record profiles FAIL "the two-profile engine's instances share a profile"
        fi
    fi
    run_check sharing concurrent engine_shared
    if ! grep -q "model 'engine_shared'.*shares optimization profile 0" "$work/server.log"; then
        record sharing FAIL "no warning that the instances share profile 0"
    fi
    run_check pools pools
    stop_server
else
    record engine FAIL "$(not_ready "$work/server.log")"
    stop_server
fi

say "serving with injected faults"
if start_server "$work/faults.log" TRITONRS_TRT_FAULT=enqueue:3,sync:6; then
    run_check faults faults
    if curl -sf "localhost:$PORT/v2/health/ready" >/dev/null; then :; else record faults FAIL "the server is no longer ready"; fi
    run_check "pools after faults" pools
    stop_server
else
    record faults FAIL "$(not_ready "$work/faults.log")"
    stop_server
fi

say "tuning the engine with tritonrs tune (about 20 s)"
printf 'instance_count = [1, 2]\n' >"$work/space.toml"
if "$BIN" tune --model-repository "$repo" --model engine --search "custom:$work/space.toml" --concurrency 1,4 \
    --measurement-interval-ms 500 --stability-percentage 30 --output-dir "$work/tune" --quiet \
    --min-supported-compute-capability=5.3 >"$work/tune.log" 2>&1; then
    best=$(sed -n 's/^engine: best is \(.*\) at concurrency.*/\1/p' "$work/tune.log" | head -n 1)
    power=$(python3 - "$work/tune/metrics-model-inference.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
print(next((f"{r['Power Usage (W)']} W, {r['Efficiency']} {r['Efficiency Unit']}" for r in rows if r["Power Usage (W)"]), ""))
PY
)
    if [ -r /etc/nv_tegra_release ] && [ -z "$power" ]; then
        record tune FAIL "best ${best:-?}, but no power reading from the board's rails"
    else
        record tune PASS "best ${best:-?}${power:+; $power}"
    fi
else
    record tune FAIL "$(tail -n 3 "$work/tune.log" | tr '\n' ' ')"
fi

# The report.
{
    echo
    echo "### tritonrs GPU self-test"
    echo
    echo "- tritonrs: $("$BIN" --version 2>&1 | head -n 1)"
    echo "- machine: $(uname -srm)"
    [ -r /etc/nv_tegra_release ] && echo "- L4T: $(head -n 1 /etc/nv_tegra_release | tr -s ' ')"
    command -v nvidia-smi >/dev/null && echo "- GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1)"
    echo "- ${trt_version:-TensorRT: not loaded}"
    echo "- trtexec: $TRTEXEC"
    echo
    echo "| check | result | detail |"
    echo "|---|---|---|"
    printf '%s\n' "${rows[@]}"
    echo
    if [ "$failed" = 0 ]; then
        echo "All checks passed or were skipped."
    else
        echo "Some checks failed; the servers' logs are in $work (server.log, faults.log)."
    fi
}
exit "$failed"
