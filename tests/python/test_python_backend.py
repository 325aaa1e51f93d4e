"""The Python backend: Triton `model.py` models in stub processes (model-repos/python and
model-repos/python_faults), driven with tritonclient over HTTP and gRPC."""

from __future__ import annotations

import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from helpers import EXAMPLES, REPO_ROOT, TritonServer, ZYGOTE, cmdline_of, copy_models, parent_pid, stub_processes

PYTHON_REPO = REPO_ROOT / "model-repos" / "python"
FAULTS_REPO = REPO_ROOT / "model-repos" / "python_faults"
# The interpreter running these tests has numpy; the stubs use it whatever PATH says.
PY = f"--backend-config=python,python-executable={sys.executable}"
STUB_TIMEOUT = 2


def python_server(repo, *args) -> TritonServer:
    return TritonServer(["--model-repository", repo, PY, *args], name="python").start()


@pytest.fixture(scope="module")
def py_server():
    # With the ONNX examples: BLS and the ensemble use `simple`.
    s = python_server(EXAMPLES, "--model-repository", PYTHON_REPO)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def faults_server():
    s = TritonServer(["--model-repository", FAULTS_REPO, PY,
                      f"--backend-config=python,stub-timeout-seconds={STUB_TIMEOUT}"], name="faults")
    s.start(wait="live")
    for m in ("faulty", "faulty_decoupled"):
        s.wait_until(lambda: s.index_rows(m) and s.index_rows(m)[0].get("state") == "READY", what=f"{m} READY")
    yield s
    s.stop()


def http_inputs(**arrays):
    out = []
    for name, a in arrays.items():
        dt = "BYTES" if a.dtype == np.object_ else {np.float32: "FP32", np.int32: "INT32"}[a.dtype.type]
        i = httpclient.InferInput(name, list(a.shape), dt)
        i.set_data_from_numpy(a)
        out.append(i)
    return out


def grpc_inputs(**arrays):
    out = []
    for name, a in arrays.items():
        dt = "BYTES" if a.dtype == np.object_ else {np.float32: "FP32", np.int32: "INT32"}[a.dtype.type]
        i = grpcclient.InferInput(name, list(a.shape), dt)
        i.set_data_from_numpy(a)
        out.append(i)
    return out


A = np.array([1, 2, 3, 4], np.float32)
B = np.array([10, 20, 30, 40], np.float32)


# ---- basics --------------------------------------------------------------------------------------


def test_add_sub_over_http(py_server):
    r = py_server.client().infer("add_sub", http_inputs(INPUT0=A, INPUT1=B))
    assert r.as_numpy("OUTPUT0").tolist() == [11, 22, 33, 44]
    assert r.as_numpy("OUTPUT1").tolist() == [-9, -18, -27, -36]


def test_add_sub_over_grpc(py_server):
    c = py_server.grpc_client()
    r = c.infer("add_sub", grpc_inputs(INPUT0=A, INPUT1=B), outputs=[grpcclient.InferRequestedOutput("OUTPUT1")])
    assert r.as_numpy("OUTPUT1").tolist() == [-9, -18, -27, -36]
    assert r.as_numpy("OUTPUT0") is None, "only the requested output comes back"


def test_python_model_metadata_and_config(py_server):
    c = py_server.client()
    meta = c.get_model_metadata("add_sub")
    assert meta["platform"] == "python" and [i["name"] for i in meta["inputs"]] == ["INPUT0", "INPUT1"]
    cfg = c.get_model_config("add_sub")
    assert cfg["backend"] == "python" and cfg["default_model_filename"] == "model.py"
    assert cfg["instance_group"][0]["name"] == "add_sub_0"


@pytest.mark.parametrize("n", [3, 1000, 3_000_000])
def test_tensors_inline_in_shared_memory_and_too_large_for_it(py_server, n):
    # 12 bytes travel in the frame, 4 kB in shared memory, 12 MB do not fit the default 8 MiB file.
    x = np.arange(n, dtype=np.float32)
    r = py_server.client().infer("identity", http_inputs(INPUT0=x))
    assert np.array_equal(r.as_numpy("OUTPUT0"), x)


def test_concurrent_requests_each_get_their_own_answer(py_server):
    """Requests queued for one instance are sent to its stub ahead of time; every answer must still go
    to its own request."""
    def worker(w):
        c = py_server.grpc_client()
        for i in range(25):
            a = np.full(4, w * 100 + i, np.float32)
            b = np.arange(4, dtype=np.float32)
            r = c.infer("add_sub", grpc_inputs(INPUT0=a, INPUT1=b))
            assert r.as_numpy("OUTPUT0").tolist() == (a + b).tolist()
            assert r.as_numpy("OUTPUT1").tolist() == (a - b).tolist()
        return True

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(worker, range(8)))


def test_concurrent_requests_of_mixed_sizes_each_get_their_own_answer(py_server):
    """Up to 32 KiB of small requests go to the stub ahead of the one it runs; a larger one waits until
    the stub is free. With eight clients mixing tensors inline in frames (16 B, 12 KB, 30 KB), in
    shared memory (400 KB) and too large for it (12 MB, both ways through the socket), every request
    gets its own answer and nothing blocks."""
    sizes = [4, 3_000, 7_500, 100_000, 4, 3_000_000, 7_500, 3_000]

    def worker(w):
        c = py_server.grpc_client()
        for i in range(len(sizes)):
            n = sizes[(w + i) % len(sizes)]
            x = np.full(n, w * 1000 + i, np.float32)
            assert np.array_equal(c.infer("identity", grpc_inputs(INPUT0=x)).as_numpy("OUTPUT0"), x)
        return True

    t = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(worker, range(8)))
    assert time.monotonic() - t < 60


def test_many_requests_reuse_shared_memory(py_server):
    c = py_server.client()
    for k in range(200):
        x = np.full(50_000, k, np.float32)
        assert np.array_equal(c.infer("identity", http_inputs(INPUT0=x)).as_numpy("OUTPUT0"), x)


def test_no_shared_memory_files_are_left_behind(py_server):
    # The files are unlinked once the stub has mapped them: this server's mappings of them all read
    # "(deleted)". (Only this server's own mappings are checked; other servers may run beside the tests.)
    with open(f"/proc/{py_server.proc.pid}/maps") as f:
        regions = [line for line in f if "tritonrs-python-" in line]
    assert regions, "the server maps no shared-memory region"
    assert all(line.rstrip().endswith("(deleted)") for line in regions), regions


def test_args_and_request_fields_reach_the_model(py_server):
    r = py_server.client().infer("args_echo", http_inputs(X=np.array([1], np.int32)), request_id="rid-1",
                                 parameters={"p1": "v", "p2": 3, "p3": True})
    args = json.loads(r.as_numpy("ARGS")[0])
    assert args["model_name"] == "args_echo" and args["model_version"] == "1"
    assert args["model_instance_kind"] == "CPU" and args["model_instance_device_id"] == "0"
    assert args["model_instance_name"] == "args_echo_0"
    assert args["model_repository"].endswith("args_echo")
    assert args["config_parameters"] == {"custom_key": {"string_value": "custom_value"}}
    req = json.loads(r.as_numpy("REQUEST")[0])
    assert req == {"request_id": "rid-1", "correlation_id": 0, "flags": 0,
                   "parameters": {"p1": "v", "p2": 3, "p3": True},
                   "requested_output_names": ["ARGS", "REQUEST"], "is_cancelled": False}


# What Triton 2.51 hands args_echo for the same requests (checked by hand, and in benches/python_compare.py):
# a model without a sequence batcher still sees the correlation id (an integer, or a string as it was
# sent) and the START (1) / END (2) flags.
@pytest.mark.parametrize("proto", ["http", "grpc"])
@pytest.mark.parametrize("seq,start,end,flags", [
    (7, True, False, 1),
    ("corr-abc", False, True, 2),
    ("s", True, True, 3),
    (2**40, False, False, 0),
])
def test_sequence_fields_and_requested_outputs_reach_the_model(py_server, proto, seq, start, end, flags):
    x = np.array([1], np.int32)
    if proto == "http":
        r = py_server.client().infer("args_echo", http_inputs(X=x), request_id="r2", sequence_id=seq,
                                     sequence_start=start, sequence_end=end,
                                     outputs=[httpclient.InferRequestedOutput("REQUEST")])
    else:
        r = py_server.grpc_client().infer("args_echo", grpc_inputs(X=x), request_id="r2", sequence_id=seq,
                                          sequence_start=start, sequence_end=end,
                                          outputs=[grpcclient.InferRequestedOutput("REQUEST")])
    assert r.as_numpy("ARGS") is None, "only the requested output comes back"
    req = json.loads(r.as_numpy("REQUEST")[0])
    assert req == {"request_id": "r2", "correlation_id": seq, "flags": flags, "parameters": {},
                   "requested_output_names": ["REQUEST"], "is_cancelled": False}
    assert type(req["correlation_id"]) is type(seq)


def test_response_parameters_come_back(py_server):
    c = py_server.grpc_client()
    r = c.infer("response_params", grpc_inputs(INPUT0=A), parameters={"answer": 42, "tag": "x"})
    params = r.get_response().parameters
    assert params["answer"].int64_param == 42 and params["tag"].string_param == "x"


# ---- BYTES ---------------------------------------------------------------------------------------


def test_bytes_in_and_out_over_http_and_grpc(py_server):
    text = np.array([[b"hello", b"", b"\x00bin\xff"]], dtype=np.object_)
    r = py_server.client().infer("bytes_upper", http_inputs(TEXT=text))
    assert r.as_numpy("UPPER").tolist() == [[b"HELLO", b"", b"\x00BIN\xff"]]
    assert r.as_numpy("LENGTH").tolist() == [[5, 0, 5]]
    g = py_server.grpc_client().infer("bytes_upper", grpc_inputs(TEXT=text))
    assert g.as_numpy("UPPER").tolist() == [[b"HELLO", b"", b"\x00BIN\xff"]]


def test_large_bytes_tensor(py_server):
    text = np.array([[b"x" * 1000] * 2000], dtype=np.object_)
    r = py_server.client().infer("bytes_upper", http_inputs(TEXT=text))
    assert r.as_numpy("UPPER")[0][1999] == b"X" * 1000


# ---- DLPack ---------------------------------------------------------------------------------------


def dlpack_inputs(x, y, text=None):
    ins = []
    for name, a, dt in (("X", x, "FP32"), ("Y", y, "INT64"), ("TEXT", text, "BYTES")):
        if a is not None:
            i = httpclient.InferInput(name, list(a.shape), dt)
            i.set_data_from_numpy(a)
            ins.append(i)
    return ins


# 3 elements travel inline, 5000 in shared memory (the input arrays the model exports to DLPack are views
# of the request's buffer), 0 is an empty tensor.
@pytest.mark.parametrize("n", [3, 5000, 0])
def test_to_dlpack_and_from_dlpack_round_trip(py_server, n):
    x = (np.arange(n, dtype=np.float32) - 1.5) * 0.25
    y = np.arange(n, dtype=np.int64) * (2**40 + 1) - 7
    r = py_server.client().infer("dlpack_roundtrip", dlpack_inputs(x, y))
    x_out, x2, y_out = (r.as_numpy(k) for k in ("X_OUT", "X2", "Y_OUT"))
    assert (x_out.dtype, x2.dtype, y_out.dtype) == (np.float32, np.float32, np.int64)
    assert [o["datatype"] for o in r.get_response()["outputs"]] == ["FP32", "FP32", "INT64"]
    assert x_out.shape == x2.shape == y_out.shape == (n,)
    assert np.array_equal(x_out, x) and np.array_equal(x2, 2 * x) and np.array_equal(y_out, y + 1)


def test_to_dlpack_of_a_bytes_tensor_is_an_error_response(py_server):
    c = py_server.client()
    x, y = np.array([1.0], np.float32), np.array([1], np.int64)
    with pytest.raises(InferenceServerException) as e:
        c.infer("dlpack_roundtrip", dlpack_inputs(x, y, np.array([b"text"], np.object_)))
    assert e.value.status() == "500"
    # Triton's wording (TritonModelException: DLPack does not have support for string tensors.).
    assert e.value.message().startswith(
        "Failed to process the request(s) for model 'dlpack_roundtrip_0', message: TritonModelException: "
        "DLPack does not have support for string tensors.\n\nAt:\n"), e.value.message()
    assert "dlpack_roundtrip/1/model.py(" in e.value.message()
    # Only the model's own frames, as in Triton: none of pb_utils'.
    assert "triton_python_backend_utils.py" not in e.value.message(), e.value.message()
    assert c.infer("dlpack_roundtrip", dlpack_inputs(x, y)).as_numpy("Y_OUT").tolist() == [2]


# ---- faults --------------------------------------------------------------------------------------


def faulty(s: TritonServer, mode: int, proto: str = "http"):
    if proto == "http":
        return s.client().infer("faulty", http_inputs(MODE=np.array([mode], np.int32)))
    return s.grpc_client().infer("faulty", grpc_inputs(MODE=np.array([mode], np.int32)))


def faulty_error(s: TritonServer, mode: int, proto: str = "http") -> InferenceServerException:
    with pytest.raises(InferenceServerException) as e:
        faulty(s, mode, proto)
    return e.value


def test_exception_in_execute_is_an_error_response_and_the_model_keeps_serving(faults_server):
    e = faulty_error(faults_server, 1)
    assert e.status() == "500"
    msg = e.message()
    assert msg.startswith("Failed to process the request(s) for model 'faulty_0_0', message: "
                          "TritonModelException: faulty: raised on purpose\n\nAt:\n"), msg
    assert "faulty/1/model.py(" in msg and "): execute" in msg
    assert faulty(faults_server, 0).as_numpy("OUT").tolist() == [0]


def test_error_response_keeps_its_code(faults_server):
    e = faulty_error(faults_server, 2)
    assert (e.status(), e.message()) == ("400", "faulty: error response")
    g = faulty_error(faults_server, 2, "grpc")
    assert g.status() == "StatusCode.INVALID_ARGUMENT"


@pytest.mark.parametrize("mode,text", [
    (3, "Expected a list in the execute return, found type '<class 'NoneType'>'."),
    (4, "Number of InferenceResponse objects do not match the number of InferenceRequest objects. "
        "InferenceRequest(s) size is:1, and InferenceResponse(s) size is:0"),
    (5, "Expected an 'InferenceResponse' object in the execute function return list, found type "
        "'<class 'str'>'."),
])
def test_wrong_execute_return_is_a_clear_error(faults_server, mode, text):
    e = faulty_error(faults_server, mode)
    assert e.status() == "500" and text in e.message(), e.message()
    assert faulty(faults_server, 0).as_numpy("OUT").tolist() == [0]


@pytest.mark.parametrize("model,words", [
    ("syntax_error", ["SyntaxError: ", "(model.py, line 5)"]),
    ("import_error", ["ModuleNotFoundError: No module named 'no_such_module_tritonrs'", "import_error/1/model.py(2): <module>"]),
    ("init_error", ["TritonModelException: init_error: cannot initialize\n\nAt:\n", "init_error/1/model.py(6): initialize"]),
])
def test_broken_model_is_unavailable_with_the_python_error(faults_server, model, words):
    row = faults_server.wait_until(
        lambda: next((r for r in faults_server.index_rows(model) if r.get("state") == "UNAVAILABLE"), None),
        what=f"{model} UNAVAILABLE")
    for w in words:
        assert w in row["reason"], row
    assert faulty(faults_server, 0).as_numpy("OUT").tolist() == [0]


def test_crashed_stub_fails_its_request_and_is_restarted(faults_server):
    e = faulty_error(faults_server, 6)
    assert e.status() == "500"
    assert e.message().startswith("Stub process 'faulty_0_0' is not healthy."), e.message()
    assert "exited unexpectedly" in e.message() and "it will be restarted" in e.message()
    assert faulty(faults_server, 0).as_numpy("OUT").tolist() == [0]
    assert faults_server.is_running()


def test_requests_sent_ahead_to_a_stub_that_crashes_get_an_error_or_their_answer(faults_server):
    """While a request runs, the server sends queued ones to the stub ahead of time (pipelining). When
    the stub dies, each of those fails with the stub's error or, once it restarts, gets its own answer:
    never a wrong answer, never none."""
    def call(mode):
        try:
            return faulty(faults_server, mode).as_numpy("OUT").tolist()
        except InferenceServerException as e:
            return e

    modes = [0, 0, 8] + [0] * 9
    with ThreadPoolExecutor(len(modes)) as pool:
        results = list(pool.map(call, modes))
    crash = results[2]
    assert isinstance(crash, InferenceServerException), crash
    assert crash.message().startswith("Stub process 'faulty_0_0' is not healthy."), crash.message()
    for r in results[:2] + results[3:]:
        if isinstance(r, InferenceServerException):
            assert r.message().startswith("Stub process 'faulty_0_0' is not healthy."), r.message()
        else:
            assert r == [0]
    assert faulty(faults_server, 0).as_numpy("OUT").tolist() == [0]


def test_hung_stub_is_killed_after_the_timeout_and_restarted(faults_server):
    t = time.monotonic()
    e = faulty_error(faults_server, 7)
    took = time.monotonic() - t
    assert STUB_TIMEOUT <= took < STUB_TIMEOUT + 5, took
    assert "is not healthy. It did not answer within 2 s while executing the request" in e.message(), e.message()
    assert faulty(faults_server, 0, "grpc").as_numpy("OUT").tolist() == [0]


def test_unload_runs_finalize_and_stops_the_stub(start_server, repo):
    copy_models(repo, "add_sub", src=PYTHON_REPO)
    s = start_server("--model-repository", repo, PY, "--model-control-mode=explicit", "--load-model=add_sub")
    c = s.client()
    assert c.infer("add_sub", http_inputs(INPUT0=A, INPUT1=B)).as_numpy("OUTPUT0").tolist() == [11, 22, 33, 44]
    c.unload_model("add_sub")
    s.wait_for_log(r"add_sub: finalize")
    assert not c.is_model_ready("add_sub")
    c.load_model("add_sub")
    assert c.infer("add_sub", http_inputs(INPUT0=A, INPUT1=B)).as_numpy("OUTPUT1").tolist() == [-9, -18, -27, -36]


# ---- log lines name their request ------------------------------------------------------------------

TALKER = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            pb_utils.Logger.log_warn(f"working on {r.request_id()}")
            x = pb_utils.get_input_tensor_by_name(r, "X").as_numpy()
            out.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("Y", x)]))
        return out
"""


def talker(repo, name, config):
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "1" / "model.py").write_text(TALKER)
    (repo / name / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "python"\n{config}\n'
        'input [ { name: "X" data_type: TYPE_INT32 dims: [ 4 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_INT32 dims: [ 4 ] } ]\n'
        'instance_group [ { count: 1 kind: KIND_CPU } ]\n')


@pytest.mark.parametrize("log_format", ["default", "ISO8601"])
def test_a_model_log_line_during_execute_names_its_request(start_server, repo, log_format):
    # One request alone: the line is written in the request's span (model, version, request id); two
    # requests the dynamic batcher runs as one execution: in the batch's span, which names both ids.
    talker(repo, "talker", "")
    talker(repo, "talker_batch", "max_batch_size: 8\n"
           "dynamic_batching { preferred_batch_size: [ 2 ] max_queue_delay_microseconds: 5000000 }")
    s = start_server("--model-repository", repo, PY, f"--log-format={log_format}")
    c = s.client(concurrency=2)
    x = np.arange(4, dtype=np.int32)
    assert c.infer("talker", http_inputs(X=x), request_id="req-42").as_numpy("Y").tolist() == x.tolist()
    s.wait_for_log(r"WARN request\{model=talker version=1 id=req-42\}: model\.py:\d+\] working on req-42\n")
    xb = x.reshape(1, 4)
    pending = [c.async_infer("talker_batch", http_inputs(X=xb), request_id=i) for i in ("b-1", "b-2")]
    for p in pending:
        assert p.get_result().as_numpy("Y").tolist() == xb.tolist()
    for i in ("b-1", "b-2"):
        s.wait_for_log(r"WARN batch\{model=talker_batch size=2 ids=(b-1,b-2|b-2,b-1)\}: model\.py:\d+\] "
                       rf"working on {i}\n")


def test_at_verbose_level_a_request_line_also_names_the_front_end_hop(start_server, repo):
    # The front-ends' async hops carry DEBUG spans: off at the default level (no cost), and at
    # --log-verbose=1 the request's span sits inside the HTTP or gRPC one.
    talker(repo, "talker", "")
    s = start_server("--model-repository", repo, PY, "--log-verbose=1")
    x = np.arange(4, dtype=np.int32)
    assert s.client().infer("talker", http_inputs(X=x), request_id="h-1").as_numpy("Y").tolist() == x.tolist()
    s.wait_for_log(r"WARN http_infer:request\{model=talker version=1 id=h-1\}: model\.py:\d+\] working on h-1\n")
    g = s.grpc_client()
    inp = grpcclient.InferInput("X", [4], "INT32")
    inp.set_data_from_numpy(x)
    assert g.infer("talker", [inp], request_id="g-1").as_numpy("Y").tolist() == x.tolist()
    s.wait_for_log(r"WARN grpc_infer:request\{model=talker version=1 id=g-1\}: model\.py:\d+\] working on g-1\n")


# ---- auto-complete, readiness ----------------------------------------------------------------------


def test_auto_complete_config_builds_the_configuration(py_server):
    c = py_server.client()
    cfg = c.get_model_config("add_sub_auto")
    assert cfg["max_batch_size"] == 8 and "dynamic_batching" in cfg
    assert [(i["name"], i["data_type"], i["dims"]) for i in cfg["input"]] == [
        ("INPUT0", "TYPE_FP32", [4]), ("INPUT1", "TYPE_FP32", [4])]
    r = c.infer("add_sub_auto", http_inputs(INPUT0=A.reshape(1, 4), INPUT1=B.reshape(1, 4)))
    assert r.as_numpy("OUTPUT0").tolist() == [[11, 22, 33, 44]]


def test_auto_complete_conflict_is_a_load_error(start_server, repo):
    copy_models(repo, "add_sub_auto", src=PYTHON_REPO)
    (repo / "add_sub_auto" / "config.pbtxt").write_text('backend: "python"\nmax_batch_size: 16\n')
    s = start_server("--model-repository", repo, PY, wait="live")
    row = s.wait_until(lambda: next((r for r in s.index_rows("add_sub_auto") if r.get("state") == "UNAVAILABLE"), None),
                       what="UNAVAILABLE")
    assert ("ValueError: configuration specified max_batch_size 16, but in auto-complete-config function for "
            "model 'add_sub_auto' specified max_batch_size 8") in row["reason"], row


def test_tritonrs_validate_runs_auto_complete(repo):
    from helpers import run_cli

    copy_models(repo, "add_sub_auto", src=PYTHON_REPO)
    r = run_cli("validate", "--model-repository", str(repo), PY, "--print-config")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "INPUT1" in r.stdout


def test_model_readiness_follows_is_model_ready(start_server, repo):
    copy_models(repo, "readiness", src=PYTHON_REPO)
    s = start_server("--model-repository", repo, PY)
    c, g = s.client(), s.grpc_client()
    assert c.is_model_ready("readiness") and g.is_model_ready("readiness")
    (repo / "readiness" / "NOT_READY").write_text("")
    assert not c.is_model_ready("readiness") and not g.is_model_ready("readiness")
    (repo / "readiness" / "NOT_READY").unlink()
    assert c.is_model_ready("readiness")


def test_a_stub_that_dies_while_idle_is_restarted_without_a_request(start_server, repo):
    import signal

    copy_models(repo, "add_sub", src=PYTHON_REPO)
    s = start_server("--model-repository", repo, PY)
    zygotes, stubs = stub_processes(s.proc.pid)
    assert len(stubs) == 1, stubs
    os.kill(stubs[0], signal.SIGKILL)
    s.wait_for_log(r"The Python stub of model 'add_sub' instance 'add_sub_0_0' is running again")
    assert s.client().is_model_ready("add_sub")
    r = s.client().infer("add_sub", http_inputs(INPUT0=A, INPUT1=B))
    assert r.as_numpy("OUTPUT0").tolist() == [11, 22, 33, 44]
    # With the fork server on (the default), the new stub is forked from the same fork server.
    zygotes_after, stubs_after = stub_processes(s.proc.pid)
    assert len(stubs_after) == 1 and stubs_after != stubs, (stubs, stubs_after)
    assert zygotes_after == zygotes
    if ZYGOTE:
        assert len(zygotes) == 1 and parent_pid(stubs_after[0]) == zygotes[0]
    else:
        assert zygotes == [] and parent_pid(stubs_after[0]) == s.proc.pid


@pytest.mark.skipif(not ZYGOTE, reason="the stubs' fork server is off (TRITONRS_TEST_PYTHON_ZYGOTE=0)")
def test_a_dead_fork_server_is_started_again(start_server, repo):
    import signal

    copy_models(repo, "add_sub", src=PYTHON_REPO)
    s = start_server("--model-repository", repo, PY)
    zygotes, stubs = stub_processes(s.proc.pid)
    assert len(zygotes) == 1 and len(stubs) == 1, (zygotes, stubs)
    # The stubs it forked live on without it.
    os.kill(zygotes[0], signal.SIGKILL)
    r = s.client().infer("add_sub", http_inputs(INPUT0=A, INPUT1=B))
    assert r.as_numpy("OUTPUT0").tolist() == [11, 22, 33, 44]
    # The next stub to start comes from a new fork server.
    os.kill(stubs[0], signal.SIGKILL)
    s.wait_for_log(r"The Python stub of model 'add_sub' instance 'add_sub_0_0' is running again")
    zygotes_after, stubs_after = stub_processes(s.proc.pid)
    assert len(zygotes_after) == 1 and zygotes_after != zygotes
    assert len(stubs_after) == 1 and parent_pid(stubs_after[0]) == zygotes_after[0]
    r = s.client().infer("add_sub", http_inputs(INPUT0=A, INPUT1=B))
    assert r.as_numpy("OUTPUT0").tolist() == [11, 22, 33, 44]


@pytest.mark.parametrize("zygote", ["forked", "direct"])
def test_each_stub_names_its_model_and_instance_in_ps(start_server, repo, zygote):
    import re

    if zygote == "forked" and not ZYGOTE:
        pytest.skip("the stubs' fork server is off (TRITONRS_TEST_PYTHON_ZYGOTE=0)")
    copy_models(repo, "add_sub", src=PYTHON_REPO)
    cfg = repo / "add_sub/config.pbtxt"
    cfg.write_text(cfg.read_text().replace(
        "instance_group [ { count: 1 kind: KIND_CPU } ]",
        'instance_group [ { count: 2 kind: KIND_CPU }, { name: "spare" count: 1 kind: KIND_CPU } ]'))
    extra = ["--backend-config=python,zygote=false"] if zygote == "direct" else []
    s = start_server("--model-repository", repo, PY, *extra)
    zygotes, stubs = stub_processes(s.proc.pid)
    assert len(stubs) == 3, (zygotes, stubs)
    if zygote == "forked":
        assert len(zygotes) == 1 and all(parent_pid(p) == zygotes[0] for p in stubs)
    else:
        assert zygotes == [] and all(parent_pid(p) == s.proc.pid for p in stubs)
    # As `ps -o args` and `ps -o comm` show them: the interpreter running the stub script, which model
    # and instance, and the model's folders (added to sys.path); the name is the instance's, with the
    # model's name in front when the instance's name does not start with it.
    line = re.compile(rf"{re.escape(sys.executable)} /\S+/tritonrs_stub\.py --model add_sub --instance (\S+) -- "
                      rf"{re.escape(str(repo))}/add_sub/1 {re.escape(str(repo))}/add_sub")
    seen = {}
    for pid in stubs:
        args = cmdline_of(pid).strip()
        m = line.fullmatch(args)
        assert m, (pid, args)
        with open(f"/proc/{pid}/comm") as f:
            seen[m.group(1)] = f.read().strip()
    assert seen == {"add_sub_0_0": "add_sub_0_0", "add_sub_0_1": "add_sub_0_1", "spare_0": "add_sub:spare_0"}
    r = s.client().infer("add_sub", http_inputs(INPUT0=A, INPUT1=B))
    assert r.as_numpy("OUTPUT0").tolist() == [11, 22, 33, 44]


# ---- dynamic batching --------------------------------------------------------------------------------


def test_dynamic_batching_hands_execute_a_list_of_requests(py_server):
    c = py_server.client(concurrency=8)
    before = c.get_inference_statistics("batched_double")["model_stats"][0]
    xs, pending = [], []
    for k in range(8):
        x = np.full((1 + k % 2, 4), k, np.int32)
        i = httpclient.InferInput("X", list(x.shape), "INT32")
        i.set_data_from_numpy(x)
        xs.append(x)
        pending.append(c.async_infer("batched_double", [i]))
    counts = []
    for x, p in zip(xs, pending):
        r = p.get_result()
        assert r.as_numpy("Y").tolist() == (2 * x).tolist()
        counts.append(int(r.as_numpy("REQUESTS")[0][0]))
    assert max(counts) > 1, counts
    after = c.get_inference_statistics("batched_double")["model_stats"][0]
    executions = after["execution_count"] - before["execution_count"]
    inferences = after["inference_count"] - before["inference_count"]
    assert inferences == 12 and executions < 8, (executions, inferences)


# ---- BLS and ensembles -----------------------------------------------------------------------------


def test_bls_calls_another_python_model(py_server):
    c = py_server.client()
    before = c.get_inference_statistics("add_sub")["model_stats"][0]["inference_count"]
    r = c.infer("bls_sync", http_inputs(INPUT0=A, INPUT1=B))
    assert r.as_numpy("OUTPUT0").tolist() == [11, 22, 33, 44]
    assert r.as_numpy("OUTPUT1").tolist() == [-9, -18, -27, -36]
    # The BLS request went through add_sub's own scheduler and statistics.
    assert c.get_inference_statistics("add_sub")["model_stats"][0]["inference_count"] == before + 1


def test_bls_error_comes_back_as_a_response_error(py_server):
    with pytest.raises(InferenceServerException) as e:
        py_server.client().infer("bls_sync", http_inputs(INPUT0=A, INPUT1=B), parameters={"target": "missing"})
    assert e.value.status() == "404" and "'missing'" in e.value.message()


def test_async_bls_runs_requests_concurrently(py_server):
    r = py_server.grpc_client().infer("bls_async", grpc_inputs(INPUT0=A, INPUT1=B))
    assert r.as_numpy("OUTPUT0").tolist() == [11, 22, 33, 44]
    assert r.as_numpy("OUTPUT1").tolist() == [9, 18, 27, 36]


def test_bls_calls_an_onnx_model(py_server):
    a = np.arange(16, dtype=np.int32)
    b = np.full(16, 2, np.int32)
    r = py_server.client().infer("bls_onnx", http_inputs(INPUT0=a, INPUT1=b))
    assert r.as_numpy("OUTPUT0").tolist() == (a + b).tolist()
    assert r.as_numpy("OUTPUT1").tolist() == (a - b).tolist()


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_ensemble_mixes_onnx_and_python_steps(py_server, proto):
    a = np.arange(32, dtype=np.int32).reshape(2, 16)
    b = np.ones((2, 16), np.int32)
    if proto == "http":
        r = py_server.client().infer("ensemble_mixed", http_inputs(INPUT0=a, INPUT1=b))
    else:
        r = py_server.grpc_client().infer("ensemble_mixed", grpc_inputs(INPUT0=a, INPUT1=b))
    assert r.as_numpy("OUT").tolist() == (3 * (a + b)).tolist()
    assert r.as_numpy("DIFF").tolist() == (a - b).tolist()


def test_many_concurrent_bls_requests(py_server):
    c = py_server.client(concurrency=16)
    pending = [c.async_infer("bls_async", http_inputs(INPUT0=A * k, INPUT1=B)) for k in range(32)]
    for k, p in enumerate(pending):
        assert p.get_result().as_numpy("OUTPUT0").tolist() == (A * k + B).tolist()


# ---- decoupled -------------------------------------------------------------------------------------


def stream(s: TritonServer, model: str, requests: list[tuple[str, str, np.ndarray]], empty_final: bool = False,
           finals: int | None = None, timeout: float = 20.0, errors_end: bool = True) -> list:
    """Sends (id, input name, array) requests on one gRPC stream; returns (result, error) pairs in
    arrival order once `finals` requests (default: all) ended with a final response (or an error,
    with `errors_end`)."""
    import queue

    q: queue.Queue = queue.Queue()
    c = s.grpc_client()
    c.start_stream(callback=lambda result, error: q.put((result, error)))
    try:
        for rid, name, arr in requests:
            i = grpcclient.InferInput(name, list(arr.shape), "INT32")
            i.set_data_from_numpy(arr)
            c.async_stream_infer(model, [i], request_id=rid, enable_empty_final_response=empty_final)
        want = len(requests) if finals is None else finals
        out, ended = [], 0
        deadline = time.monotonic() + timeout
        while ended < want:
            result, error = q.get(timeout=max(0.1, deadline - time.monotonic()))
            out.append((result, error))
            if (error is not None and errors_end) or (
                    error is None and result.get_response().parameters["triton_final_response"].bool_param):
                ended += 1
        return out
    finally:
        c.stop_stream()


def test_http_refuses_decoupled_models_as_triton_does(py_server):
    with pytest.raises(InferenceServerException) as e:
        py_server.client().infer("repeat", http_inputs(IN=np.array([1, 2], np.int32)))
    assert e.value.status() == "501"
    assert e.value.message() == "HTTP end point doesn't support models with decoupled transaction policy"


def test_grpc_unary_refuses_decoupled_models_as_triton_does(py_server):
    with pytest.raises(InferenceServerException) as e:
        py_server.grpc_client().infer("repeat", grpc_inputs(IN=np.array([1, 2], np.int32)))
    assert e.value.status() == "StatusCode.UNIMPLEMENTED"
    assert e.value.message() == "ModelInfer RPC doesn't support models with decoupled transaction policy"


def test_decoupled_model_streams_n_responses(py_server):
    got = stream(py_server, "repeat", [("a", "IN", np.array([5, 6, 7], np.int32))], empty_final=True)
    assert all(e is None for _, e in got)
    responses = [r.get_response() for r, _ in got]
    assert [r.id for r in responses] == ["a"] * 4
    assert [r.parameters["triton_final_response"].bool_param for r in responses] == [False, False, False, True]
    assert [int(r.as_numpy("OUT")[0]) for r, _ in got[:3]] == [5, 6, 7]
    assert [int(r.as_numpy("IDX")[0]) for r, _ in got[:3]] == [0, 1, 2]
    assert responses[3].outputs == [], "the final flag alone is an empty response"


def test_decoupled_zero_responses_and_interleaved_requests(py_server):
    got = stream(py_server, "repeat", [("none", "IN", np.array([], np.int32)),
                                       ("two", "IN", np.array([1, 2], np.int32)),
                                       ("three", "IN", np.array([7, 8, 9], np.int32))], empty_final=True)
    by_id: dict = {}
    for r, e in got:
        assert e is None, e
        resp = r.get_response()
        by_id.setdefault(resp.id, []).append(None if not resp.outputs else int(r.as_numpy("OUT")[0]))
    assert by_id == {"none": [None], "two": [1, 2, None], "three": [7, 8, 9, None]}


def test_decoupled_without_empty_final_sends_only_responses(py_server):
    import queue

    q: queue.Queue = queue.Queue()
    c = py_server.grpc_client()
    c.start_stream(callback=lambda result, error: q.put((result, error)))
    i = grpcclient.InferInput("IN", [2], "INT32")
    i.set_data_from_numpy(np.array([3, 4], np.int32))
    c.async_stream_infer("repeat", [i], request_id="x")
    first, second = q.get(timeout=20), q.get(timeout=20)
    time.sleep(0.3)
    c.stop_stream()
    assert q.empty()
    assert [int(r.as_numpy("OUT")[0]) for r, _ in (first, second)] == [3, 4]


def test_non_decoupled_models_on_a_stream_say_final(py_server):
    c = py_server.grpc_client()
    import queue

    q: queue.Queue = queue.Queue()
    c.start_stream(callback=lambda result, error: q.put((result, error)))
    c.async_stream_infer("add_sub", grpc_inputs(INPUT0=A, INPUT1=B), request_id="y")
    r, e = q.get(timeout=20)
    c.stop_stream()
    assert e is None and r.get_response().parameters["triton_final_response"].bool_param is True
    assert r.as_numpy("OUTPUT0").tolist() == [11, 22, 33, 44]


def test_bls_to_a_decoupled_model_iterates_its_responses(py_server):
    r = py_server.client().infer("bls_decoupled", http_inputs(IN=np.array([1, 2, 3, 4], np.int32)))
    assert (int(r.as_numpy("SUM")[0]), int(r.as_numpy("COUNT")[0])) == (10, 4)
    r = py_server.client().infer("bls_decoupled", http_inputs(IN=np.array([], np.int32)))
    assert (int(r.as_numpy("SUM")[0]), int(r.as_numpy("COUNT")[0])) == (0, 0)


def faulty_stream(s, mode, errors_end=True):
    return stream(s, "faulty_decoupled", [(f"m{mode}", "MODE", np.array([mode], np.int32))], empty_final=True,
                  errors_end=errors_end)


def test_decoupled_exception_is_an_error_and_ends_the_request(faults_server):
    got = faulty_stream(faults_server, 1)
    assert len(got) == 1 and got[0][0] is None
    assert got[0][1].message().startswith(
        "Failed to process the request(s) for model 'faulty_decoupled_0', message: TritonModelException: "
        "faulty_decoupled: raised on purpose"), got[0][1].message()


def test_decoupled_error_response_then_final(faults_server):
    got = faulty_stream(faults_server, 2, errors_end=False)
    assert got[0][1].message() == "faulty_decoupled: error response"
    last = got[1][0].get_response()
    assert last.outputs == [] and last.parameters["triton_final_response"].bool_param


def test_decoupled_stub_crash_ends_the_request_with_an_error(faults_server):
    got = faulty_stream(faults_server, 3)
    assert int(got[0][0].as_numpy("OUT")[0]) == 3
    assert got[1][1].message().startswith("Stub process 'faulty_decoupled_0' is not healthy."), got[1][1].message()
    # Restarted: the next request is answered.
    got = faulty_stream(faults_server, 0)
    assert int(got[0][0].as_numpy("OUT")[0]) == 0 and got[1][0].get_response().parameters["triton_final_response"].bool_param


def test_decoupled_execute_must_return_none(faults_server):
    got = faulty_stream(faults_server, 4)
    assert got[0][1] is None, [(r and r.get_response(), e and e.message()) for r, e in got]
    assert int(got[0][0].as_numpy("OUT")[0]) == 4
    assert "is using the decoupled mode and the execute function must return None." in got[1][1].message()


# ---- cancellation ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cancel_server(tmp_path_factory):
    repo = copy_models(tmp_path_factory.mktemp("cancel") / "repo", "stream_until_cancelled", "args_echo",
                       src=PYTHON_REPO)
    s = python_server(repo, "--allow-metrics=true", "--metrics-port", "0")
    s.metrics_port = int(s.wait_for_log(r"Started Metrics Service at [0-9.]+:(\d+)").group(1))
    yield s
    s.stop()


def stream_metrics(s: TritonServer) -> dict:
    """stream_until_cancelled's custom metrics: {(loop, outcome): count} and {"running": gauge}."""
    import re
    import urllib.request

    text = urllib.request.urlopen(f"http://127.0.0.1:{s.metrics_port}/metrics", timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        m = re.match(r'stream_until_cancelled_total\{loop="(\w+)",.*outcome="(\w+)".*\} (\S+)$', line)
        if m:
            out[(m.group(1), m.group(2))] = float(m.group(3))
        m = re.match(r"stream_until_cancelled_running\{.*\} (\S+)$", line)
        if m:
            out["running"] = float(m.group(1))
    return out


def stream_then_cancel(s: TritonServer, mode: int, responses: int) -> list:
    """Starts a stream_until_cancelled request on a gRPC stream, waits for `responses` responses, then
    cancels the stream (tritonclient cancels the call); returns the responses' OUT values."""
    import queue

    q: queue.Queue = queue.Queue()
    c = s.grpc_client()
    c.start_stream(callback=lambda result, error: q.put((result, error)))
    try:
        i = grpcclient.InferInput("MODE", [1], "INT32")
        i.set_data_from_numpy(np.array([mode], np.int32))
        c.async_stream_infer("stream_until_cancelled", [i], request_id=f"mode{mode}")
        got = []
        for _ in range(responses):
            result, error = q.get(timeout=20)
            assert error is None, error
            got.append(int(result.as_numpy("OUT")[0]))
    finally:
        c.stop_stream(cancel_requests=True)
    return got


# MODE 0 streams from a thread and asks response_sender.is_cancelled(); MODE 1 streams from execute and
# asks request.is_cancelled(); MODE 2 sends one response, then waits asking the response sender, so the
# server must pass the cancellation on without a response to send. Triton 2.51 sees all three at once.
@pytest.mark.parametrize("mode,loop,responses", [(0, "sender", 3), (1, "request", 3), (2, "idle", 1)])
def test_cancelling_a_stream_cancels_its_request_in_the_model(cancel_server, mode, loop, responses):
    s = cancel_server
    s.wait_until(lambda: stream_metrics(s).get("running") == 0, timeout=15, what="no loop running")
    before = stream_metrics(s)
    t = time.monotonic()
    assert stream_then_cancel(s, mode, responses) == list(range(responses))
    after = s.wait_until(lambda: (lambda m: m if m[(loop, "cancelled")] == before[(loop, "cancelled")] + 1
                                  and m["running"] == 0 else None)(stream_metrics(s)),
                         timeout=5, interval=0.05, what=f"the {loop} loop sees the cancellation")
    assert time.monotonic() - t < 3, "seen well before the model's own 10 s limit"
    assert after[(loop, "limit")] == before[(loop, "limit")] == 0
    s.wait_for_log(rf"stream_until_cancelled: {loop} loop cancelled after \d+ responses")
    # The instance is free again (MODE 1 held it in execute) and the server keeps serving.
    assert stream_then_cancel(s, mode, responses) == list(range(responses))
    r = s.grpc_client().infer("args_echo", grpc_inputs(X=np.array([1], np.int32)))
    assert json.loads(r.as_numpy("REQUEST")[0])["is_cancelled"] is False


# ---- custom metrics, model control -----------------------------------------------------------------


def test_custom_metrics_are_exported(start_server, repo):
    import urllib.request

    copy_models(repo, "custom_metrics", src=PYTHON_REPO)
    s = start_server("--model-repository", repo, PY, "--allow-metrics=true", "--metrics-port", "0")
    port = int(s.wait_for_log(r"Started Metrics Service at [0-9.]+:(\d+)").group(1))
    c = s.client()
    counts = [float(c.infer("custom_metrics", http_inputs(X=np.array(x, np.float32))).as_numpy("COUNT")[0])
              for x in ([0.5, 2.0], [7.0], [20.0, 1.0])]
    assert counts == [1, 2, 3]
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    labels = 'model="custom_metrics",version="1"'
    for line in [
        "# TYPE example_requests_total counter",
        f"example_requests_total{{{labels}}} 3",
        f"example_last_input_sum{{{labels}}} 21",
        "# TYPE example_input_values histogram",
        f'example_input_values_bucket{{{labels},le="1"}} 2',
        f'example_input_values_bucket{{{labels},le="5"}} 3',
        f'example_input_values_bucket{{{labels},le="10"}} 4',
        f'example_input_values_bucket{{{labels},le="+Inf"}} 5',
        f"example_input_values_count{{{labels}}} 5",
        f"example_input_values_sum{{{labels}}} 30.5",
    ]:
        assert line in text.splitlines(), f"{line!r} not in:\n{text}"
    # Unloading the model takes its metrics away.
    c2 = s.client()
    assert c2.is_model_ready("custom_metrics")


def check_model_control(c, load_missing: bool = True) -> None:
    """model_control (a Python model) asks whether add_sub is ready, loads it, then unloads it, and (with
    `load_missing`) fails to load a model that does not exist."""

    def control(op, name="add_sub"):
        r = c.infer("model_control", http_inputs(OP=np.array([op.encode()], np.object_),
                                                  NAME=np.array([name.encode()], np.object_)))
        return bool(r.as_numpy("READY")[0])

    assert control("ready") is False
    assert control("load") is True
    assert c.infer("add_sub", http_inputs(INPUT0=A, INPUT1=B)).as_numpy("OUTPUT0").tolist() == [11, 22, 33, 44]
    assert control("unload") is False
    assert not c.is_model_ready("add_sub")
    if not load_missing:
        return
    with pytest.raises(InferenceServerException) as e:
        control("load", "no_such_model")
    assert "Failed to load model" in e.value.message(), e.value.message()


def test_models_load_and_unload_models(start_server, repo):
    copy_models(repo, "model_control", "add_sub", src=PYTHON_REPO)
    s = start_server("--model-repository", repo, PY, "--model-control-mode=explicit", "--load-model=model_control")
    check_model_control(s.client())


# ---- execution environments --------------------------------------------------------------------------


def _env_model(repo, env_path: str):
    copy_models(repo, "add_sub", src=PYTHON_REPO)
    cfg = repo / "add_sub" / "config.pbtxt"
    cfg.write_text(cfg.read_text() + f'parameters {{ key: "EXECUTION_ENV_PATH" value: {{ string_value: "{env_path}" }} }}\n')


def test_execution_env_path_folder_is_the_interpreter(start_server, repo):
    # The server's own interpreter setting is wrong on purpose: only the model's environment works.
    _env_model(repo, sys.prefix)
    s = start_server("--model-repository", repo, "--backend-config=python,python-executable=/nonexistent/python3")
    r = s.client().infer("add_sub", http_inputs(INPUT0=A, INPUT1=B))
    assert r.as_numpy("OUTPUT0").tolist() == [11, 22, 33, 44]


def test_execution_env_path_archive_is_unpacked(start_server, repo, tmp_path):
    import sysconfig
    import tarfile

    # A conda-pack-like archive of a tiny environment: an interpreter, its pyvenv.cfg, and (linked) the
    # site-packages holding numpy.
    env = tmp_path / "env"
    (env / "bin").mkdir(parents=True)
    os.symlink(os.path.realpath(sys.executable), env / "bin" / "python3")
    base = os.path.dirname(os.path.realpath(sys.executable))
    (env / "pyvenv.cfg").write_text(f"home = {base}\ninclude-system-site-packages = false\n")
    site = env / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    site.mkdir(parents=True)
    os.symlink(sysconfig.get_paths()["purelib"], site / "site-packages")
    archive = repo.parent / "env.tar.gz"
    with tarfile.open(archive, "w:gz") as t:
        t.add(env, arcname=".")
    _env_model(repo, "$$TRITON_MODEL_DIRECTORY/../../env.tar.gz")
    s = start_server("--model-repository", repo, "--backend-config=python,python-executable=/nonexistent/python3")
    r = s.client().infer("add_sub", http_inputs(INPUT0=A, INPUT1=B))
    assert r.as_numpy("OUTPUT1").tolist() == [-9, -18, -27, -36]


def test_missing_interpreter_is_a_clear_load_error(start_server, repo):
    copy_models(repo, "add_sub", src=PYTHON_REPO)
    s = start_server("--model-repository", repo, "--backend-config=python,python-executable=/nonexistent/python3",
                     wait="live")
    row = s.wait_until(lambda: next((r for r in s.index_rows("add_sub") if r.get("state") == "UNAVAILABLE"), None),
                       what="UNAVAILABLE")
    assert "cannot start the Python stub" in row["reason"] and "/nonexistent/python3" in row["reason"], row
