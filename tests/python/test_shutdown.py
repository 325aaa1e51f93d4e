"""Graceful shutdown: SIGTERM lets in-flight requests finish and exits 0; a second signal exits at once."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import numpy as np
import onnx
import tritonclient.http as httpclient
from onnx import TensorProto, helper, numpy_helper

WIDTH = 1024
LAYERS = 48


def write_slow_model(repo: Path) -> None:
    """`slow`: OUTPUT = INPUT @ I @ I ... (LAYERS identity matmuls of WIDTH x WIDTH): exact, but a batch
    of 256 rows costs a noticeable fraction of a second on a small CPU."""
    d = repo / "slow" / "1"
    d.mkdir(parents=True)
    eye = numpy_helper.from_array(np.eye(WIDTH, dtype=np.float32), name="W")
    nodes, prev = [], "INPUT"
    for i in range(LAYERS):
        out = "OUTPUT" if i == LAYERS - 1 else f"h{i}"
        nodes.append(helper.make_node("MatMul", [prev, "W"], [out]))
        prev = out
    graph = helper.make_graph(
        nodes, "slow",
        [helper.make_tensor_value_info("INPUT", TensorProto.FLOAT, ["N", WIDTH])],
        [helper.make_tensor_value_info("OUTPUT", TensorProto.FLOAT, ["N", WIDTH])],
        [eye],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    onnx.save(model, str(d / "model.onnx"))
    (repo / "slow" / "config.pbtxt").write_text(
        'backend: "onnxruntime"\nmax_batch_size: 256\n'
        f'input [ {{ name: "INPUT" data_type: TYPE_FP32 dims: [ {WIDTH} ] }} ]\n'
        f'output [ {{ name: "OUTPUT" data_type: TYPE_FP32 dims: [ {WIDTH} ] }} ]\n'
    )


def run_requests(s, n: int, results: list, started: threading.Event):
    x = np.random.default_rng(0).standard_normal((256, WIDTH)).astype(np.float32)

    def one(i):
        c = httpclient.InferenceServerClient(f"{s.host}:{s.port}", network_timeout=120)
        inp = httpclient.InferInput("INPUT", [256, WIDTH], "FP32")
        inp.set_data_from_numpy(x, binary_data=True)
        started.set()
        try:
            out = c.infer("slow", [inp], outputs=[httpclient.InferRequestedOutput("OUTPUT", binary_data=True)])
            results[i] = (bool(np.allclose(out.as_numpy("OUTPUT"), x, atol=1e-4)), time.monotonic())
        except Exception as e:  # noqa: BLE001 - the test reports what happened
            results[i] = (e, time.monotonic())
        finally:
            c.close()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    return threads


def established(port: int) -> int:
    """Connections the server has on `port` (its side: local port `port`, state ESTABLISHED)."""
    n = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if parts[3] == "01" and int(parts[1].rsplit(":", 1)[1], 16) == port:
                n += 1
    return n


def wait_in_flight(s, n: int, started: threading.Event):
    """Until every client is connected (a loaded machine may start the client threads late), plus a
    moment for the request bodies (1 MB each) to arrive. Short: a request takes well under 0.1 s on a
    fast machine, and the test needs most of them still queued."""
    assert started.wait(30)
    s.wait_until(lambda: established(s.port) >= n, timeout=30, interval=0.01, what=f"{n} connections")
    time.sleep(0.05)


def test_sigterm_finishes_in_flight_requests_and_exits_0(start_server, repo):
    write_slow_model(repo)
    s = start_server("--model-repository", repo)
    results: list = [None] * 4
    started = threading.Event()
    threads = run_requests(s, 4, results, started)
    wait_in_flight(s, 4, started)  # the requests are in the server: one executing, the others queued
    signalled = time.monotonic()
    s.proc.send_signal(signal.SIGTERM)
    for t in threads:
        t.join(120)
    assert [ok for ok, _ in results] == [True] * 4, results
    # The requests really were in flight: at least one finished after the signal.
    assert max(done for _, done in results) > signalled
    assert s.wait_exit(timeout=60) == 0
    assert "Model 'slow' is unloaded." in s.log


def test_second_signal_exits_at_once(start_server, repo):
    write_slow_model(repo)
    s = start_server("--model-repository", repo, "--exit-timeout-secs", "120")
    results: list = [None] * 6
    started = threading.Event()
    threads = run_requests(s, 6, results, started)
    wait_in_flight(s, 6, started)
    s.proc.send_signal(signal.SIGTERM)
    time.sleep(0.1)
    t0 = time.monotonic()
    s.proc.send_signal(signal.SIGTERM)
    assert s.wait_exit(timeout=30) == 0
    assert time.monotonic() - t0 < 5, "the second signal should not wait for the queued requests"
    assert "Second shutdown signal received" in s.log
    for t in threads:
        t.join(60)
    # Queued requests were cut off rather than waited for.
    assert any(isinstance(r, Exception) for r, _ in results), results
