#!/usr/bin/env python3
"""Runs the same Python-backend models on tritonrs and on the real Triton (2.51, from the anchors) and
compares what clients see: outputs, error statuses and messages, streamed responses, load failures,
custom metrics. Not part of CI (it needs ../shared/anchors/install.sh).

  ~/.cache/anchors/venv/bin/python benches/python_compare.py      (debug binary; TRITONRS_BIN=... to pick)

Both servers serve a copy of the models of model-repos/python and model-repos/python_faults that
Triton's reference build can run (no ONNX: it has only the Python backend), and both run the models
with the anchors' Python and numpy. Paths and instance names are normalized before comparing. Cases
where tritonrs differs on purpose are listed in KNOWN and reported, not failed. Exit status 1 on any
other difference.
"""
from __future__ import annotations

import json
import os
import queue
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

REPO = Path(__file__).resolve().parent.parent
ANCHORS = Path(os.environ.get("ANCHORS", Path.home() / ".cache/anchors"))
TRITON = ANCHORS / "bin/tritonserver"
TRITONRS = Path(os.environ.get("TRITONRS_BIN", REPO / "target/debug/tritonrs"))
PY_MODELS = ["add_sub", "identity", "bytes_upper", "args_echo", "add_sub_auto", "batched_double", "bls_sync",
             "bls_async", "bls_decoupled", "repeat", "py_scale", "custom_metrics", "dlpack_roundtrip",
             "stream_until_cancelled"]
FAULT_MODELS = ["faulty", "faulty_decoupled", "syntax_error", "import_error", "init_error"]
# Where tritonrs differs from Triton 2.51 on purpose (see README.md, "Differences from tritonserver").
KNOWN = {
    "bls_sync to a missing model": "a BLS error keeps its status code (as Triton 24.12+ does; 2.51 says INTERNAL) "
                                   "and the server's own message",
    "faulty mode 3 (execute returns None)": "Triton 2.51 never answers; tritonrs answers with a clear error",
    "faulty_decoupled mode 4 (decoupled execute returns a list)":
        "Triton 2.51 reports the stub unhealthy; tritonrs fails the request with Triton's 'must return None' message",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, name: str, cmd: list[str], http: int, grpc: int, metrics: int):
        self.name, self.http, self.grpc, self.metrics = name, http, grpc, metrics
        self.log = tempfile.NamedTemporaryFile(prefix=f"compare-{name}-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{http}/v2/health/live", timeout=1)
                if self.ready(["add_sub", "faulty"]):
                    break
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                sys.exit(f"{name} did not start; log in {self.log.name}")
            time.sleep(0.2)
        self.h = httpclient.InferenceServerClient(f"127.0.0.1:{http}")
        self.g = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc}")

    def ready(self, models) -> bool:
        for m in models:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.http}/v2/models/{m}/ready", timeout=1)
            except OSError:
                return False
        return True

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def norm(text: str, repo: str) -> str:
    """Out of messages: paths, Triton's status prefix in load failure reasons, and what tritonrs adds
    after Triton's "Stub process '...' is not healthy." (why, and that it restarts the stub)."""
    text = text.replace(repo, "<repo>")
    text = text.replace('"Internal: ', '"')
    text = re.sub(r"(Stub process '[^']*' is not healthy\.)[^\"]*", r"\1", text)
    return text


def arr(a):
    return None if a is None else a.tolist()


def http_in(**arrays):
    out = []
    for n, a in arrays.items():
        dt = "BYTES" if a.dtype == np.object_ else {np.float32: "FP32", np.int32: "INT32"}[a.dtype.type]
        i = httpclient.InferInput(n, list(a.shape), dt)
        i.set_data_from_numpy(a)
        out.append(i)
    return out


def grpc_in(**arrays):
    out = []
    for n, a in arrays.items():
        dt = "BYTES" if a.dtype == np.object_ else {np.float32: "FP32", np.int32: "INT32"}[a.dtype.type]
        i = grpcclient.InferInput(n, list(a.shape), dt)
        i.set_data_from_numpy(a)
        out.append(i)
    return out


def call(fn):
    """An outcome: ("ok", value) or ("error", status, message)."""
    try:
        return ("ok", fn())
    except InferenceServerException as e:
        return ("error", str(e.status()), e.message())


def stream(s: Server, model: str, name: str, values: list[int], empty_final=True, errors_end=True, wait=20.0):
    q: queue.Queue = queue.Queue()
    s.g.start_stream(callback=lambda result, error: q.put((result, error)))
    try:
        i = grpcclient.InferInput(name, [len(values)], "INT32")
        i.set_data_from_numpy(np.array(values, np.int32))
        s.g.async_stream_infer(model, [i], request_id="r", enable_empty_final_response=empty_final)
        out = []
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                r, e = q.get(timeout=0.2)
            except queue.Empty:
                continue
            if e is not None:
                out.append(("error", e.message()))
                if errors_end:
                    break
                continue
            resp = r.get_response()
            final = resp.parameters["triton_final_response"].bool_param
            out.append(("response", resp.id, {o.name: arr(r.as_numpy(o.name)) for o in resp.outputs}, final))
            if final:
                break
        return out
    finally:
        s.g.stop_stream()


def cases(s: Server):
    a = np.array([1, 2, 3, 4], np.float32)
    b = np.array([10, 20, 30, 40], np.float32)
    yield "add_sub http", call(lambda: [arr(x) for x in (lambda r: (r.as_numpy("OUTPUT0"), r.as_numpy("OUTPUT1")))(
        s.h.infer("add_sub", http_in(INPUT0=a, INPUT1=b)))])
    yield "add_sub grpc, one output", call(lambda: [arr(x) for x in (lambda r: (r.as_numpy("OUTPUT0"), r.as_numpy("OUTPUT1")))(
        s.g.infer("add_sub", grpc_in(INPUT0=a, INPUT1=b), outputs=[grpcclient.InferRequestedOutput("OUTPUT1")]))])
    for n in (3, 5000, 2_000_000):
        x = np.arange(n, dtype=np.float32)
        yield f"identity n={n}", call(lambda: bool(np.array_equal(s.h.infer("identity", http_in(INPUT0=x)).as_numpy("OUTPUT0"), x)))
    text = np.array([[b"hello", b"", b"\x00bin\xff"]], dtype=np.object_)
    yield "bytes_upper", call(lambda: (lambda r: (arr(r.as_numpy("UPPER")), arr(r.as_numpy("LENGTH"))))(
        s.h.infer("bytes_upper", http_in(TEXT=text))))

    def echo():
        r = s.h.infer("args_echo", http_in(X=np.array([1], np.int32)), request_id="rid", parameters={"p": "v", "n": 3})
        args = json.loads(r.as_numpy("ARGS")[0])
        args["model_repository"] = os.path.basename(args["model_repository"])
        return args, json.loads(r.as_numpy("REQUEST")[0])
    yield "args_echo", call(echo)
    yield "args_echo gRPC sequence fields", call(lambda: json.loads(s.g.infer(
        "args_echo", grpc_in(X=np.array([1], np.int32)), sequence_id=7, sequence_start=True,
        outputs=[grpcclient.InferRequestedOutput("REQUEST")]).as_numpy("REQUEST")[0]))

    yield "args_echo gRPC string correlation id", call(lambda: json.loads(s.g.infer(
        "args_echo", grpc_in(X=np.array([1], np.int32)), sequence_id="corr-abc", sequence_end=True,
        outputs=[grpcclient.InferRequestedOutput("REQUEST")]).as_numpy("REQUEST")[0]))
    yield "args_echo HTTP string correlation id", call(lambda: json.loads(s.h.infer(
        "args_echo", http_in(X=np.array([1], np.int32)), sequence_id="hs", sequence_start=True,
        sequence_end=True).as_numpy("REQUEST")[0]))

    def auto():
        cfg = s.h.get_model_config("add_sub_auto")
        r = s.h.infer("add_sub_auto", http_in(INPUT0=a.reshape(1, 4), INPUT1=b.reshape(1, 4)))
        return (cfg["max_batch_size"], "dynamic_batching" in cfg, [(i["name"], i["data_type"], i["dims"]) for i in cfg["input"]],
                arr(r.as_numpy("OUTPUT0")))
    yield "auto_complete_config", call(auto)
    yield "batched_double", call(lambda: arr(s.h.infer("batched_double", http_in(X=np.ones((2, 4), np.int32))).as_numpy("Y")))
    yield "bls_sync", call(lambda: arr(s.h.infer("bls_sync", http_in(INPUT0=a, INPUT1=b)).as_numpy("OUTPUT1")))
    yield "bls_sync to a missing model", call(lambda: s.h.infer("bls_sync", http_in(INPUT0=a, INPUT1=b), parameters={"target": "missing"}))
    yield "bls_async", call(lambda: (lambda r: (arr(r.as_numpy("OUTPUT0")), arr(r.as_numpy("OUTPUT1"))))(
        s.g.infer("bls_async", grpc_in(INPUT0=a, INPUT1=b))))
    yield "bls_decoupled", call(lambda: (lambda r: (arr(r.as_numpy("SUM")), arr(r.as_numpy("COUNT"))))(
        s.h.infer("bls_decoupled", http_in(IN=np.array([1, 2, 3, 4], np.int32)))))
    yield "repeat over HTTP", call(lambda: s.h.infer("repeat", http_in(IN=np.array([1], np.int32))))
    yield "repeat over gRPC unary", call(lambda: s.g.infer("repeat", grpc_in(IN=np.array([1], np.int32))))
    yield "repeat stream", stream(s, "repeat", "IN", [5, 6, 7])
    yield "repeat stream, zero responses", stream(s, "repeat", "IN", [])
    for mode, what in [(0, "answers"), (1, "raises"), (2, "error response"), (3, "execute returns None"),
                       (4, "too few responses"), (5, "wrong response type")]:
        name = f"faulty mode {mode} ({what})"
        if name in KNOWN:
            yield name, ("skipped",)
            continue
        yield name, call(lambda: arr(s.h.infer("faulty", http_in(MODE=np.array([mode], np.int32))).as_numpy("OUT")))
    yield "faulty mode 6 (stub exits), first error", call(
        lambda: s.h.infer("faulty", http_in(MODE=np.array([6], np.int32))))
    for mode, what in [(0, "answers"), (1, "raises"), (2, "error response then final"), (3, "stub exits after one response"),
                       (4, "decoupled execute returns a list")]:
        name = f"faulty_decoupled mode {mode} ({what})"
        if name in KNOWN:
            yield name, ("skipped",)
            continue
        yield name, stream(s, "faulty_decoupled", "MODE", [mode], errors_end=mode != 2, wait=10)
    index = {r["name"]: r for r in s.h.get_model_repository_index()}
    for m in ("syntax_error", "import_error", "init_error"):
        yield f"{m} load failure", (index[m].get("state"), index[m].get("reason", "").split("\n\nAt:")[0])

    def dlpack(n, text=None):
        x = (np.arange(n, dtype=np.float32) - 1.5) * 0.25
        y = np.arange(n, dtype=np.int64) * (2**40 + 1) - 7
        ins = []
        for name, v, dt in (("X", x, "FP32"), ("Y", y, "INT64"), ("TEXT", text, "BYTES")):
            if v is not None:
                i = httpclient.InferInput(name, list(v.shape), dt)
                i.set_data_from_numpy(v)
                ins.append(i)
        r = s.h.infer("dlpack_roundtrip", ins)
        return {k: (str(r.as_numpy(k).dtype), arr(r.as_numpy(k))) for k in ("X_OUT", "X2", "Y_OUT")}
    for n in (3, 5000, 0):
        yield f"dlpack_roundtrip n={n}", call(lambda: dlpack(n))
    # tritonrs's traceback also lists the frame of triton_python_backend_utils that raised; compare the rest.
    yield "dlpack_roundtrip to_dlpack of BYTES", (lambda o: o[:2] + (o[2].split("\n\nAt:")[0],) if o[0] == "error" else o)(
        call(lambda: dlpack(1, np.array([b"text"], np.object_))))

    def cancelled(mode, loop, responses):
        q: queue.Queue = queue.Queue()
        s.g.start_stream(callback=lambda result, error: q.put((result, error)))
        i = grpcclient.InferInput("MODE", [1], "INT32")
        i.set_data_from_numpy(np.array([mode], np.int32))
        s.g.async_stream_infer("stream_until_cancelled", [i], request_id="c")
        try:
            got = [(lambda r, e: e.message() if e else arr(r.as_numpy("OUT")))(*q.get(timeout=20))
                   for _ in range(responses)]
        finally:
            s.g.stop_stream(cancel_requests=True)
        deadline = time.monotonic() + 5
        while True:
            text = urllib.request.urlopen(f"http://127.0.0.1:{s.metrics}/metrics", timeout=10).read().decode()
            lines = sorted(l for l in text.splitlines() if l.startswith("stream_until_cancelled"))
            if any(f'loop="{loop}"' in l and 'outcome="cancelled"' in l and l.endswith(" 1") for l in lines) and \
                    any(l.startswith("stream_until_cancelled_running") and l.endswith(" 0") for l in lines):
                break
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        return got, lines
    for mode, loop, responses in ((0, "sender", 3), (1, "request", 3), (2, "idle", 1)):
        yield f"stream_until_cancelled mode {mode} ({loop}), cancelled", call(lambda: cancelled(mode, loop, responses))

    def metrics():
        for x in ([0.5, 2.0], [7.0], [20.0, 1.0]):
            s.h.infer("custom_metrics", http_in(X=np.array(x, np.float32)))
        text = urllib.request.urlopen(f"http://127.0.0.1:{s.metrics}/metrics", timeout=10).read().decode()
        return sorted(l for l in text.splitlines() if l.startswith("example_") or l.startswith("# TYPE example_"))
    yield "custom metrics", call(metrics)


def main():
    if not TRITON.exists():
        sys.exit(f"{TRITON} not found: run ../shared/anchors/install.sh")
    if not TRITONRS.exists():
        sys.exit(f"{TRITONRS} not found: cargo build")
    work = Path(tempfile.mkdtemp(prefix="python-compare-"))
    repo = work / "repo"
    repo.mkdir()
    for m in PY_MODELS:
        shutil.copytree(REPO / "model-repos/python" / m, repo / m)
    for m in FAULT_MODELS:
        shutil.copytree(REPO / "model-repos/python_faults" / m, repo / m)
    python = ANCHORS / "venv/bin/python"
    ports = [free_port() for _ in range(6)]
    common = ["--model-repository", str(repo), "--exit-on-error=false", "--backend-config=python,stub-timeout-seconds=5"]
    servers = []
    try:
        servers.append(Server("triton", [str(TRITON), *common, "--http-port", str(ports[0]), "--grpc-port", str(ports[1]),
                                         "--metrics-port", str(ports[2])], *ports[:3]))
        servers.append(Server("tritonrs", [str(TRITONRS), *common, f"--backend-config=python,python-executable={python}",
                                           "--http-port", str(ports[3]), "--grpc-port", str(ports[4]),
                                           "--metrics-port", str(ports[5])], *ports[3:]))
        results = [dict((k, norm(json.dumps(v, sort_keys=True, default=str), str(repo))) for k, v in cases(s))
                   for s in servers]
    finally:
        for s in servers:
            s.stop()
        shutil.rmtree(work, ignore_errors=True)
    triton, ours = results
    same = differ = known = 0
    for name in triton:
        if name in KNOWN:
            known += 1
            print(f"KNOWN   {name}: {KNOWN[name]}")
        elif triton[name] == ours.get(name):
            same += 1
            print(f"same    {name}")
        else:
            differ += 1
            print(f"DIFFER  {name}\n  triton:   {triton[name][:600]}\n  tritonrs: {ours.get(name, '')[:600]}")
    print(f"\n{same} same, {differ} different, {known} known differences")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
