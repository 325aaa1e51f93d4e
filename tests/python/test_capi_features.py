"""The rest of the C API a backend may use, through tests/capi/test_features.c ("features"): the
memory manager, buffer attributes, a custom metric, implicit state under the sequence batcher,
auto-complete through TRITONBACKEND_ModelSetConfig, BLS through the in-process API, a C backend in
an ensemble, and perf_analyzer against it."""

from __future__ import annotations

import shutil
import time
import subprocess
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from helpers import REPO_ROOT
from test_shared_memory import perf_analyzer_cmd

SOURCE = REPO_ROOT / "tests" / "capi" / "test_features.c"

IDENTITY = """
name: "{name}"
backend: "features"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
dynamic_batching {{ }}
"""

ACCUMULATOR = """
name: "acc"
backend: "features"
max_batch_size: 0
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching {
  max_sequence_idle_microseconds: 5000000
  state [ { input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_INT32 dims: [ 1 ]
            initial_state { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true name: "zero" } } ]
}
# Two sequences at once need two slots (a sequence waits in the backlog for a free one).
instance_group [ { count: 2 kind: KIND_CPU } ]
"""

ENSEMBLE = """
name: "ens"
platform: "ensemble"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
ensemble_scheduling { step [
  { model_name: "feat" model_version: -1 input_map { key: "INPUT0" value: "IN" } output_map { key: "OUTPUT0" value: "MID" } },
  { model_name: "feat_auto" model_version: -1 input_map { key: "INPUT0" value: "MID" } output_map { key: "OUTPUT0" value: "OUT" } }
] }
"""


COUNTDOWN = """
name: "{name}"
backend: "features"
max_batch_size: 4
input [ {{ name: "COUNTDOWN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
model_transaction_policy {{ decoupled: true }}
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
{scheduling}
"""

CACHED_AND_WARMED = """
response_cache { enable: true }
model_warmup [ { name: "zeros" batch_size: 1 count: 2
                 inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } } } ]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from helpers import TritonServer

    root = tmp_path_factory.mktemp("features")
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.fail("no C compiler (Debian package gcc); scripts/test.sh installs one")
    lib = root / "backends" / "features" / "libtriton_features.so"
    lib.parent.mkdir(parents=True)
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-pthread", "-o", str(lib), str(SOURCE)],
                   check=True, capture_output=True, text=True, timeout=120)
    repo = root / "repo"
    cached = IDENTITY.format(name="feat_cached") + CACHED_AND_WARMED
    for name, text in (("feat", IDENTITY.format(name="feat")), ("acc", ACCUMULATOR), ("ens", ENSEMBLE),
                       ("feat_auto", 'backend: "features"\n'), ("feat_cached", cached),
                       ("countdown", COUNTDOWN.format(name="countdown", scheduling="sequence_batching { iterative_sequence: true }")),
                       ("countdown_dyn", COUNTDOWN.format(name="countdown_dyn", scheduling="dynamic_batching { }"))):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(text)
    s = TritonServer(["--model-repository", repo, "--backend-directory", root / "backends", "--allow-metrics=true",
                      "--cache-config", "local,size=1048576",
                      "--metrics-port", "0"], name="features").start(timeout=60)
    yield s
    s.stop()


def x(batch=1, start=0.0):
    return (np.arange(batch * 4, dtype=np.float32).reshape(batch, 4) + start)


def infer(s, model, data, proto="http", parameters=None):
    mod = httpclient if proto == "http" else grpcclient
    i = mod.InferInput("INPUT0" if model != "ens" else "IN", list(data.shape), "FP32")
    i.set_data_from_numpy(data)
    c = s.client() if proto == "http" else s.grpc_client()
    r = c.infer(model, [i], parameters=parameters)
    return r.as_numpy("OUTPUT0" if model != "ens" else "OUT")


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_identity_through_the_memory_manager_and_buffer_attributes(server, proto):
    assert infer(server, "feat", x(3, 1.5), proto).tolist() == x(3, 1.5).tolist()


def test_auto_complete_through_model_set_config(server):
    cfg = server.client().get_model_config("feat_auto")
    assert cfg["max_batch_size"] == 8
    assert [i["name"] for i in cfg["input"]] == ["INPUT0"] and [o["name"] for o in cfg["output"]] == ["OUTPUT0"]
    assert "dynamic_batching" in cfg
    assert infer(server, "feat_auto", x(2)).tolist() == x(2).tolist()


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_bls_from_a_c_backend_goes_through_the_server(server, proto):
    c = server.client()
    before = c.get_inference_statistics("feat_auto")["model_stats"][0]["inference_count"]
    assert infer(server, "feat", x(2, 1.0), proto, parameters={"bls": "feat_auto"}).tolist() == (2 * x(2, 1.0)).tolist()
    assert c.get_inference_statistics("feat_auto")["model_stats"][0]["inference_count"] == before + 2


def test_bls_to_a_missing_model_is_an_error_response(server):
    with pytest.raises(InferenceServerException) as e:
        infer(server, "feat", x(1), parameters={"bls": "nowhere"})
    assert "not ready" in e.value.message(), e.value.message()
    assert infer(server, "feat", x(1)).tolist() == x(1).tolist()


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_the_backend_sweeps_every_other_api_function(server, proto):
    # The backend checks each answer itself (tests/capi/test_features.c, sweep()) and fails the request
    # naming the line of the first surprise.
    assert infer(server, "feat", x(1, 4.0), proto, parameters={"sweep": "1"}).tolist() == x(1, 4.0).tolist()
    assert server.client().is_server_ready()


def test_implicit_state_accumulates_per_sequence(server):
    c = server.grpc_client()

    def step(seq, value, start=False, end=False):
        i = grpcclient.InferInput("INPUT", [1], "INT32")
        i.set_data_from_numpy(np.array([value], np.int32))
        r = c.infer("acc", [i], sequence_id=seq, sequence_start=start, sequence_end=end)
        return int(r.as_numpy("OUTPUT")[0])

    assert step(7, 1, start=True) == 1
    assert step(8, 10, start=True) == 10
    assert step(7, 2) == 3
    assert step(8, 5, end=True) == 15
    assert step(7, 3, end=True) == 6
    assert step(7, 4, start=True, end=True) == 4, "a new sequence starts from the initial state"


def test_a_c_backend_in_an_ensemble(server):
    assert infer(server, "ens", x(2, 3.0)).tolist() == x(2, 3.0).tolist()


def test_custom_metric_counts_requests(server):
    port = int(server.wait_for_log(r"Started Metrics Service at [0-9.]+:(\d+)").group(1))
    infer(server, "feat", x(1))
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    assert "# TYPE features_requests_total counter" in text
    line = next(ln for ln in text.splitlines() if ln.startswith('features_requests_total{model="feat",version="1"}'))
    assert float(line.split()[-1]) >= 1


def test_warmup_and_the_response_cache_work_for_c_backends(server):
    port = int(server.wait_for_log(r"Started Metrics Service at [0-9.]+:(\d+)").group(1))

    def executed():
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        line = next((ln for ln in text.splitlines()
                     if ln.startswith('features_requests_total{model="feat_cached",version="1"}')), None)
        return 0 if line is None else float(line.split()[-1])

    assert executed() == 2, "the two warmup runs reached the backend before the model was ready"
    data = x(1, 9.0)
    assert infer(server, "feat_cached", data).tolist() == data.tolist()
    assert infer(server, "feat_cached", data).tolist() == data.tolist()
    assert executed() == 3, "the second, identical request came from the response cache"
    stats = server.client().get_inference_statistics("feat_cached")["model_stats"][0]["inference_stats"]
    assert stats["cache_hit"]["count"] == 1 and stats["cache_miss"]["count"] == 1, stats


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_perf_analyzer_against_a_c_backend(server, protocol, tmp_path: Path):
    pa = perf_analyzer_cmd(tmp_path)
    if pa is None:
        pytest.skip("perf_analyzer is not installed (../shared/anchors/install.sh)")
    port = server.port if protocol == "http" else server.grpc_port
    p = subprocess.run([*pa, "-m", "feat", "-u", f"127.0.0.1:{port}", "-i", protocol, "-b", "2",
                        "--concurrency-range", "4", "--measurement-interval", "500", "--stability-percentage", "90",
                        "--max-trials", "10"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "Throughput:" in p.stdout, p.stdout


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_memory_the_backend_reports_is_in_the_statistics(server, proto):
    """The model's report (1 MiB on GPU 0, 512 pinned bytes, at TRITONBACKEND_ModelInitialize) and each
    instance's (4096 bytes of CPU memory on device 3, in sweep()) make the version's `memory_usage`; a
    repeated report replaces the reporter's last one instead of adding to it."""
    infer(server, "feat", x(1), proto, parameters={"sweep": "1"})
    infer(server, "feat", x(1), proto, parameters={"sweep": "1"})
    if proto == "http":
        usage = server.client().get_inference_statistics("feat")["model_stats"][0]["memory_usage"]
        got = {(u["type"], int(u["id"]), int(u["byte_size"])) for u in usage}
    else:
        stats = server.grpc_client().get_inference_statistics("feat").model_stats[0]
        got = {(u.type, u.id, u.byte_size) for u in stats.memory_usage}
    assert ("GPU", 0, 1 << 20) in got and ("CPU_PINNED", 0, 512) in got, got
    # Each instance that swept reports its 4096 bytes once, however often it swept.
    [cpu] = [b for t, i, b in got if (t, i) == ("CPU", 3)]
    instances = len(server.client().get_model_config("feat")["instance_group"][0].get("count", 1) * [0])
    assert cpu % 4096 == 0 and 4096 <= cpu <= 4096 * instances, (got, instances)
    assert len(got) == 3, got


def metric(server, name: str, labels: str) -> float:
    port = int(server.wait_for_log(r"Started Metrics Service at [0-9.]+:(\d+)").group(1))
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    line = next((ln for ln in text.splitlines() if ln.startswith(f"{name}{{") and all(
        f'{kv}' in ln for kv in labels.split(","))), None)
    return 0.0 if line is None else float(line.split()[-1])


def test_a_c_backend_sees_its_grpc_client_go_away(server):
    """TRITONBACKEND_RequestIsCancelled and TRITONBACKEND_ResponseFactoryIsCancelled say so once the
    client's deadline passes; the request counts as CANCELED."""
    seen = metric(server, "features_cancelled_total", 'model="feat"')
    canceled = metric(server, "nv_inference_request_failure", 'model="feat",reason="CANCELED"')
    i = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
    i.set_data_from_numpy(x(1))
    with pytest.raises(InferenceServerException, match="Deadline"):
        server.grpc_client().infer("feat", [i], parameters={"wait_cancel": "10"}, client_timeout=1.0)
    server.wait_until(lambda: metric(server, "features_cancelled_total", 'model="feat"') == seen + 1, timeout=5,
                      what="the backend sees the cancellation")
    assert metric(server, "nv_inference_request_failure", 'model="feat",reason="CANCELED"') == canceled + 1


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_an_in_process_request_is_cancelled_with_the_c_api(server, proto):
    """A backend's in-process request, cancelled with TRITONSERVER_InferenceRequestCancel, is answered
    CANCELLED, and the model it was running on sees the cancellation (tests/capi/test_features.c,
    bls_cancel)."""
    seen = metric(server, "features_cancelled_total", 'model="feat_auto"')
    canceled = metric(server, "nv_inference_request_failure", 'model="feat_auto",reason="CANCELED"')
    with pytest.raises(InferenceServerException) as e:
        infer(server, "feat", x(1), proto, parameters={"bls_cancel": "feat_auto"})
    assert "TRITONSERVER_InferenceRequestCancel" in str(e.value), e.value
    assert ("400" if proto == "http" else "CANCELLED") in str(e.value.status()), e.value.status()
    server.wait_until(lambda: metric(server, "features_cancelled_total", 'model="feat_auto"') == seen + 1,
                      timeout=5, what="the target sees the cancellation")
    assert metric(server, "nv_inference_request_failure", 'model="feat_auto",reason="CANCELED"') == canceled + 1


def countdown_stream(server, model, starts: dict[str, int]) -> dict[str, list]:
    """Sends each request (id: COUNTDOWN value) on one gRPC stream, 0.1 s apart, and collects each one's
    responses as (OUT, final) or the error message, until every one has had its final response."""
    import queue

    got = queue.Queue()
    c = server.grpc_client()
    c.start_stream(callback=lambda result, error: got.put((result, error)))
    for rid, value in starts.items():
        i = grpcclient.InferInput("COUNTDOWN", [1, 1], "INT32")
        i.set_data_from_numpy(np.array([[value]], np.int32))
        c.async_stream_infer(model, [i], request_id=rid)
        time.sleep(0.1)
    out: dict[str, list] = {rid: [] for rid in starts}
    open_ = set(starts)
    while open_:
        result, error = got.get(timeout=20)
        if error is not None:
            # Errors carry no id here: there is one request per error test.
            (rid,) = starts
            out[rid].append(str(error))
            open_.discard(rid)
            continue
        r = result.get_response()
        final = r.parameters["triton_final_response"].bool_param
        out[r.id].append((int(result.as_numpy("OUT").reshape(-1)[0]), final))
        if final:
            open_.discard(r.id)
    c.stop_stream()
    return out


def test_a_c_backend_reschedules_an_iterative_sequence(server):
    """TRITONBACKEND_RequestRelease with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE runs the same request
    again (START on its first execution only), one response per execution, until the backend releases
    it with ALL; two sequences share the batches meanwhile."""
    got = countdown_stream(server, "countdown", {"a": 3, "b": 2})
    assert got == {"a": [(2, False), (1, False), (0, True)], "b": [(1, False), (0, True)]}
    stats = server.client().get_inference_statistics("countdown")["model_stats"][0]
    assert stats["inference_count"] == 5 and stats["inference_stats"]["success"]["count"] == 2, stats


def test_a_c_backend_cannot_reschedule_outside_an_iterative_sequence(server):
    got = countdown_stream(server, "countdown_dyn", {"c": 3})
    assert got == {"c": ["Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is "
                         "not configured to handle such a flag."]}
