"""Dynamic batcher: merging, priorities, queue policies (timeouts, max_queue_size), statistics.

Uses `batched_scale` (OUTPUT = INPUT * 2 after a fixed ~2 ms cost per execution, see gen_models.py),
copied into a temporary repository where a test needs another `dynamic_batching` block.
"""

from __future__ import annotations

import queue
import re
import threading
import time
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from helpers import copy_models

MODEL = "batched_scale"


def with_batching(repo, block: str, max_batch_size: int = 16):
    """Copies batched_scale with another dynamic_batching block and max_batch_size."""
    copy_models(repo, MODEL)
    cfg = repo / MODEL / "config.pbtxt"
    text = cfg.read_text()
    start = text.index("dynamic_batching {")
    end = text.index("}\n", start) + 2
    text = text[:start] + block + "\n" + text[end:]
    text = text.replace("max_batch_size: 16", f"max_batch_size: {max_batch_size}")
    cfg.write_text(text)
    return repo


def inputs(mod, value: float, rows: int = 1):
    x = np.full((rows, 16), value, dtype=np.float32)
    i = mod.InferInput("INPUT", list(x.shape), "FP32")
    i.set_data_from_numpy(x)
    return i, x


def stats(client, model=MODEL):
    s = client.get_inference_statistics(model)
    s = s["model_stats"][0] if isinstance(s, dict) else s.model_stats[0]
    return s


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_concurrent_requests_merge_into_batches(start_server, repo, protocol):
    s = start_server("--model-repository", copy_models(repo, MODEL))
    mod = httpclient if protocol == "http" else grpcclient
    errors = []

    def worker(w):
        c = s.client(concurrency=1) if protocol == "http" else s.grpc_client()
        try:
            for k in range(8):
                value = float(w * 100 + k)
                inp, x = inputs(mod, value, rows=1 + (k % 2))
                out = c.infer(MODEL, [inp]).as_numpy("OUTPUT")
                if out.shape != x.shape or not np.array_equal(out, x * 2):
                    errors.append((w, k, out))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
        finally:
            c.close()

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    st = s.client().get_inference_statistics(MODEL)["model_stats"][0]
    inferences = 16 * (4 * 1 + 4 * 2)
    assert st["inference_count"] == inferences
    assert st["execution_count"] < inferences / 2, st
    sizes = {b["batch_size"]: b["compute_infer"]["count"] for b in st["batch_stats"]}
    assert sum(size * n for size, n in sizes.items()) == inferences
    assert max(sizes) > 1 and max(sizes) <= 16
    assert st["inference_stats"]["success"]["count"] == 16 * 8


def test_a_preferred_size_is_sent_without_waiting_for_the_delay(start_server, repo):
    # A 10 s delay with preferred size 4: four concurrent requests must come back long before it ends.
    block = "dynamic_batching { preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 10000000 }"
    s = start_server("--model-repository", with_batching(repo, block, max_batch_size=8))
    c = s.grpc_client()
    results = queue.Queue()
    t0 = time.monotonic()
    for k in range(4):
        inp, _ = inputs(grpcclient, float(k))
        c.async_infer(MODEL, [inp], callback=lambda result, error: results.put((result, error)))
    got = [results.get(timeout=5) for _ in range(4)]
    assert all(e is None for _, e in got), got
    assert time.monotonic() - t0 < 5
    st = stats(c)
    assert st.execution_count == 1 and st.inference_count == 4
    c.close()


def test_delay_collects_a_batch_then_sends_it(start_server, repo):
    block = "dynamic_batching { max_queue_delay_microseconds: 300000 }"
    s = start_server("--model-repository", with_batching(repo, block, max_batch_size=8))
    c = s.grpc_client()
    results = queue.Queue()
    for k in range(3):
        inp, _ = inputs(grpcclient, float(k))
        c.async_infer(MODEL, [inp], callback=lambda result, error: results.put((result, error)))
    got = [results.get(timeout=5) for _ in range(3)]
    assert all(e is None for _, e in got), got
    st = stats(c)
    # All three arrived within the 300 ms delay, so they ran as one batch.
    assert (st.execution_count, st.inference_count) == (1, 3)
    c.close()


def test_higher_priority_runs_first(start_server, repo):
    block = "dynamic_batching { priority_levels: 2 default_priority_level: 2 }"
    s = start_server("--model-repository", with_batching(repo, block, max_batch_size=1))
    c = s.grpc_client()
    order = []
    lock = threading.Lock()
    done = threading.Semaphore(0)

    def cb(tag):
        def f(result, error):
            with lock:
                order.append((tag, error))
            done.release()
        return f

    n_low = 12
    for k in range(n_low):
        inp, _ = inputs(grpcclient, float(k))
        c.async_infer(MODEL, [inp], callback=cb(f"low{k}"))
    inp, _ = inputs(grpcclient, 99.0)
    c.async_infer(MODEL, [inp], callback=cb("high"), priority=1)
    for _ in range(n_low + 1):
        assert done.acquire(timeout=10)
    assert all(e is None for _, e in order), order
    tags = [t for t, _ in order]
    # Submitted last, the high-priority request overtakes the low ones still queued.
    assert tags.index("high") < n_low // 2, tags
    c.close()


def test_full_queue_rejects_at_once_and_nothing_is_lost(start_server, repo):
    block = "dynamic_batching { default_queue_policy { max_queue_size: 2 } }"
    s = start_server("--model-repository", with_batching(repo, block, max_batch_size=1))
    c = s.grpc_client()
    results = queue.Queue()
    n = 24
    for k in range(n):
        inp, _ = inputs(grpcclient, float(k))
        c.async_infer(MODEL, [inp], callback=lambda result, error: results.put((result, error)))
    got = [results.get(timeout=20) for _ in range(n)]
    ok = [r for r, e in got if e is None]
    rejected = [e for _, e in got if e is not None]
    assert len(ok) + len(rejected) == n
    assert len(ok) >= 3 and rejected, (len(ok), len(rejected))
    for e in rejected:
        assert e.status() == "StatusCode.UNAVAILABLE", e
        assert "maximum queue size" in e.message(), e
    st = stats(c)
    assert st.inference_stats.success.count == len(ok)
    assert st.inference_stats.fail.count == len(rejected)
    c.close()
    # Over HTTP a full queue is 503 with a JSON error.
    codes = []
    body = {"inputs": [{"name": "INPUT", "shape": [1, 16], "datatype": "FP32", "data": [1.0] * 16}]}

    def post():
        r = s.post(f"/v2/models/{MODEL}/infer", body)
        codes.append((r.status, r.json()))

    threads = [threading.Thread(target=post) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    statuses = [code for code, _ in codes]
    assert 503 in statuses and 200 in statuses and set(statuses) <= {200, 503}, statuses
    assert all("maximum queue size" in j["error"] for code, j in codes if code == 503)


def test_timeout_rejects_requests_that_wait_too_long(start_server, repo):
    block = (
        "dynamic_batching { default_queue_policy { timeout_action: REJECT allow_timeout_override: true "
        "max_queue_size: 100 } }"
    )
    s = start_server("--model-repository", with_batching(repo, block, max_batch_size=1), "--allow-metrics=true",
                     "--metrics-port", "0", "--metrics-address", "127.0.0.1")
    metrics_port = int(s.wait_for_log(r"Started Metrics Service at \S+:(\d+)").group(1))
    c = s.grpc_client()
    results = queue.Queue()
    for k in range(30):
        inp, _ = inputs(grpcclient, float(k))
        c.async_infer(MODEL, [inp], callback=lambda result, error: results.put(("plain", result, error)))

    def pending() -> int:
        text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
        m = re.search(r'^nv_inference_pending_request_count\{model="%s",version="1"\} (\d+)' % MODEL, text, re.M)
        return int(m.group(1)) if m else 0

    # On a loaded machine the client may send slower than the model drains: wait until requests queue.
    deadline = time.monotonic() + 10
    while pending() < 5 and time.monotonic() < deadline:
        time.sleep(0.002)
    inp, _ = inputs(grpcclient, 7.0)
    # 1 ms is far less than 30 executions ahead of it take.
    c.async_infer(MODEL, [inp], callback=lambda result, error: results.put(("timed", result, error)), timeout=1000)
    got = [results.get(timeout=20) for _ in range(31)]
    plain = [e for tag, _, e in got if tag == "plain"]
    timed = [e for tag, _, e in got if tag == "timed"]
    assert all(e is None for e in plain), plain
    assert timed[0] is not None and "timed out" in timed[0].message(), timed
    assert timed[0].status() == "StatusCode.UNAVAILABLE"
    c.close()


def test_timeout_override_is_ignored_unless_allowed(start_server, repo):
    block = "dynamic_batching { default_queue_policy { timeout_action: REJECT } }"
    s = start_server("--model-repository", with_batching(repo, block, max_batch_size=1))
    c = s.grpc_client()
    results = queue.Queue()
    for k in range(20):
        inp, _ = inputs(grpcclient, float(k))
        c.async_infer(MODEL, [inp], callback=lambda result, error: results.put(error), timeout=1)
    errors = [results.get(timeout=20) for _ in range(20)]
    assert all(e is None for e in errors), errors
    c.close()


def test_delay_action_keeps_timed_out_requests(start_server, repo):
    block = (
        "dynamic_batching { default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 1 } }"
    )
    s = start_server("--model-repository", with_batching(repo, block, max_batch_size=2))
    c = s.grpc_client()
    results = queue.Queue()
    for k in range(20):
        inp, x = inputs(grpcclient, float(k))
        c.async_infer(MODEL, [inp], callback=lambda result, error, x=x: results.put((result, error, x)))
    for _ in range(20):
        r, e, x = results.get(timeout=20)
        assert e is None, e
        assert np.array_equal(r.as_numpy("OUTPUT"), x * 2)
    c.close()


def test_preserve_ordering_answers_every_request(start_server, repo):
    block = "dynamic_batching { preserve_ordering: true max_queue_delay_microseconds: 500 }"
    copy = with_batching(repo, block, max_batch_size=4)
    cfg = copy / MODEL / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace("count: 1", "count: 2"))
    s = start_server("--model-repository", copy)
    c = s.grpc_client()
    results = queue.Queue()
    for k in range(16):
        inp, x = inputs(grpcclient, float(k))
        c.async_infer(MODEL, [inp], callback=lambda result, error, x=x: results.put((result, error, x)))
    for _ in range(16):
        r, e, x = results.get(timeout=20)
        assert e is None, e
        assert np.array_equal(r.as_numpy("OUTPUT"), x * 2)
    c.close()


def test_mismatched_shapes_are_not_merged(start_server, repo):
    # vlen_scale has a variable dimension: requests of different lengths run in separate batches.
    copy_models(repo, "vlen_scale")
    cfg = repo / "vlen_scale" / "config.pbtxt"
    cfg.write_text(cfg.read_text() + "dynamic_batching { max_queue_delay_microseconds: 200000 }\n")
    s = start_server("--model-repository", repo)
    c = s.grpc_client()
    results = queue.Queue()
    for length in (3, 5, 3):
        x = np.arange(length, dtype=np.float32).reshape(1, length)
        i = grpcclient.InferInput("INPUT", [1, length], "FP32")
        i.set_data_from_numpy(x)
        c.async_infer("vlen_scale", [i], callback=lambda result, error, x=x: results.put((result, error, x)))
    for _ in range(3):
        r, e, x = results.get(timeout=10)
        assert e is None, e
        assert np.array_equal(r.as_numpy("OUTPUT"), x * 2)
    st = stats(c, "vlen_scale")
    assert st.inference_count == 3 and st.execution_count >= 2
    c.close()
