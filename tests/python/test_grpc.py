"""The gRPC front-end, driven by the official tritonclient.grpc: health, metadata, configuration,
inference (raw contents, BYTES, classification, versions, async, streaming), repository control,
statistics, logging and status codes."""

import queue
import signal
import threading
import time

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tritonclient.utils import InferenceServerException

from helpers import copy_models


@pytest.fixture(scope="module")
def gclient(examples_server):
    c = examples_server.grpc_client()
    yield c
    c.close()


def simple_inputs(batch=1):
    in0 = np.arange(16 * batch, dtype=np.int32).reshape(batch, 16)
    in1 = np.ones((batch, 16), dtype=np.int32)
    i0 = grpcclient.InferInput("INPUT0", [batch, 16], "INT32")
    i0.set_data_from_numpy(in0)
    i1 = grpcclient.InferInput("INPUT1", [batch, 16], "INT32")
    i1.set_data_from_numpy(in1)
    return [i0, i1], in0, in1


def classifier_input(rows):
    x = np.array(rows, dtype=np.float32)
    inp = grpcclient.InferInput("INPUT", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    return inp


def mv_input():
    inp = grpcclient.InferInput("INPUT", [1, 4], "INT32")
    inp.set_data_from_numpy(np.array([[0, 1, 2, 3]], dtype=np.int32))
    return inp


def assert_code(excinfo, code: str):
    assert excinfo.value.status() == f"StatusCode.{code}", excinfo.value


# ---- health and metadata ------------------------------------------------------------------


def test_server_live_ready_metadata(gclient):
    assert gclient.is_server_live()
    assert gclient.is_server_ready()
    md = gclient.get_server_metadata(as_json=True)
    assert md["name"] == "triton"
    assert "classification" in md["extensions"]
    assert md["version"]


def test_grpc_health_check(examples_server):
    with grpc.insecure_channel(examples_server.grpc_url) as ch:
        check = ch.unary_unary("/grpc.health.v1.Health/Check",
                               request_serializer=lambda b: b, response_deserializer=lambda b: b)
        assert check(b"") == b"\x08\x01"  # status: SERVING
        with pytest.raises(grpc.RpcError) as e:
            check(b"\x0a\x03foo")  # service: "foo"
        assert e.value.code() == grpc.StatusCode.NOT_FOUND


SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def health(name: str = "") -> health_pb2.HealthCheckRequest:
    return health_pb2.HealthCheckRequest(service=name)


def test_grpc_health_check_and_watch_with_the_standard_stub(examples_server):
    with grpc.insecure_channel(examples_server.grpc_url) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        for name in ("", "inference.GRPCInferenceService"):
            assert stub.Check(health(name), timeout=10).status == SERVING
            watch = stub.Watch(health(name), timeout=10)
            assert next(watch).status == SERVING
            watch.cancel()
        for call in (lambda r: stub.Check(r, timeout=10), lambda r: next(stub.Watch(r, timeout=10))):
            with pytest.raises(grpc.RpcError) as e:
                call(health("no.such.Service"))
            assert e.value.code() == grpc.StatusCode.NOT_FOUND


def test_grpc_health_watch_follows_readiness_until_shutdown(start_server, repo):
    copy_models(repo, "simple")
    bad = repo / "broken"
    (bad / "1").mkdir(parents=True)
    (bad / "config.pbtxt").write_text('name: "broken"\nbackend: "onnxruntime"\nmax_batch_sizee: 8\n')
    # Strict readiness (the default): a model that failed to load makes the server not ready until
    # it is unloaded.
    s = start_server("--model-repository", repo, "--model-control-mode=explicit", "--load-model", "simple")
    c = s.grpc_client()
    statuses: queue.Queue = queue.Queue()
    with grpc.insecure_channel(s.grpc_url) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        watch = stub.Watch(health())

        def read():
            try:
                for r in watch:
                    statuses.put(r.status)
                statuses.put("end")
            except grpc.RpcError as e:
                statuses.put(e.code())

        threading.Thread(target=read, daemon=True).start()
        assert statuses.get(timeout=10) == SERVING
        with pytest.raises(InferenceServerException):
            c.load_model("broken")
        assert statuses.get(timeout=10) == NOT_SERVING
        assert stub.Check(health("inference.GRPCInferenceService"), timeout=10).status == NOT_SERVING
        c.unload_model("broken")
        assert statuses.get(timeout=10) == SERVING
        assert stub.Check(health(), timeout=10).status == SERVING
        c.close()
        # Shutdown: NOT_SERVING, then the stream ends, so an open Watch does not hold the graceful
        # shutdown until --exit-timeout-secs (30 s).
        start = time.monotonic()
        s.proc.send_signal(signal.SIGTERM)
        assert statuses.get(timeout=10) == NOT_SERVING
        assert statuses.get(timeout=10) == "end"
        assert s.wait_exit(timeout=20) == 0
        assert time.monotonic() - start < 10
        assert statuses.empty()


def test_model_ready(gclient):
    assert gclient.is_model_ready("simple")
    assert gclient.is_model_ready("multi_version", "2")
    assert not gclient.is_model_ready("no_such_model")


def test_model_metadata(gclient):
    m = gclient.get_model_metadata("simple")
    assert m.name == "simple"
    assert list(m.versions) == ["1"]
    assert m.platform == "onnxruntime_onnx"
    assert [(t.name, t.datatype, list(t.shape)) for t in m.inputs] == [
        ("INPUT0", "INT32", [-1, 16]), ("INPUT1", "INT32", [-1, 16])]
    assert [t.name for t in m.outputs] == ["OUTPUT0", "OUTPUT1"]
    mv = gclient.get_model_metadata("multi_version", as_json=True)
    assert sorted(mv["versions"]) == ["1", "2", "3"]


def test_model_config_as_json(gclient):
    cfg = gclient.get_model_config("simple", as_json=True)["config"]
    assert cfg["name"] == "simple"
    assert cfg["max_batch_size"] == 8
    assert [i["name"] for i in cfg["input"]] == ["INPUT0", "INPUT1"]
    assert cfg["input"][0]["data_type"] == "TYPE_INT32"
    assert cfg["output"][1]["dims"] == ["16"]  # int64 is a string in protobuf JSON


# ---- inference ----------------------------------------------------------------------------


def test_infer_simple_raw_contents(gclient):
    inputs, in0, in1 = simple_inputs()
    res = gclient.infer("simple", inputs, request_id="abc")
    np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), in0 + in1)
    np.testing.assert_array_equal(res.as_numpy("OUTPUT1"), in0 - in1)
    r = res.get_response()
    assert r.model_name == "simple" and r.model_version == "1" and r.id == "abc"
    assert len(r.raw_output_contents) == 2
    assert [(o.name, o.datatype, list(o.shape)) for o in r.outputs] == [
        ("OUTPUT0", "INT32", [1, 16]), ("OUTPUT1", "INT32", [1, 16])]


def test_infer_batched_and_output_subset(gclient):
    inputs, in0, in1 = simple_inputs(batch=3)
    res = gclient.infer("simple", inputs, outputs=[grpcclient.InferRequestedOutput("OUTPUT1")])
    assert [o.name for o in res.get_response().outputs] == ["OUTPUT1"]
    np.testing.assert_array_equal(res.as_numpy("OUTPUT1"), in0 - in1)


def test_infer_typed_contents(examples_server):
    """Typed `contents` instead of raw_input_contents (tritonclient always sends raw)."""
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    with grpc.insecure_channel(examples_server.grpc_url) as ch:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(ch)
        req = service_pb2.ModelInferRequest(model_name="simple")
        for name in ("INPUT0", "INPUT1"):
            t = req.inputs.add(name=name, datatype="INT32", shape=[1, 16])
            t.contents.int_contents.extend(range(16) if name == "INPUT0" else [2] * 16)
        r = stub.ModelInfer(req)
        out = np.frombuffer(r.raw_output_contents[0], dtype=np.int32)
        assert out.tolist() == [i + 2 for i in range(16)]


def test_infer_bytes(gclient):
    # ONNX Runtime string tensors hold UTF-8 text without NUL bytes (see test_infer.py).
    data = np.array([[b"hello", b"", "h\u00e9llo".encode()]], dtype=np.object_)
    inp = grpcclient.InferInput("INPUT", [1, 3], "BYTES")
    inp.set_data_from_numpy(data)
    res = gclient.infer("bytes_identity", [inp])
    assert res.as_numpy("OUTPUT").tolist() == [[b"hello", b"", "h\u00e9llo".encode()]]
    assert res.get_response().outputs[0].datatype == "BYTES"


def test_classification_top2(gclient):
    res = gclient.infer("classifier", [classifier_input([[1, 0, 0, 0]])],
                        outputs=[grpcclient.InferRequestedOutput("OUTPUT", class_count=2)])
    out = res.as_numpy("OUTPUT")
    assert out.shape == (1, 2)
    assert out.tolist() == [[b"4.000000:0:cat", b"3.000000:4:horse"]]
    assert res.get_response().outputs[0].datatype == "BYTES"


@pytest.mark.parametrize("version", ["1", "2", "3"])
def test_versions(gclient, version):
    res = gclient.infer("multi_version", [mv_input()], model_version=version)
    v = int(version)
    assert res.as_numpy("OUTPUT").tolist() == [[v, 1 + v, 2 + v, 3 + v]]
    assert res.get_response().model_version == version


def test_default_version_is_highest(gclient):
    res = gclient.infer("multi_version", [mv_input()])
    assert res.get_response().model_version == "3"


def test_async_infer(gclient):
    results = queue.Queue()
    for _ in range(4):
        inputs, _, _ = simple_inputs()
        gclient.async_infer("simple", inputs, lambda result, error: results.put((result, error)))
    for _ in range(4):
        r, e = results.get(timeout=30)
        assert e is None, e
        assert r.as_numpy("OUTPUT0").tolist() == [list(range(1, 17))]


def test_stream_infer_matches_ids_and_survives_errors(examples_server):
    c = examples_server.grpc_client()
    results = queue.Queue()
    try:
        c.start_stream(callback=lambda result, error: results.put((result, error)))
        for i in range(3):
            inputs, _, _ = simple_inputs()
            c.async_stream_infer("simple", inputs, request_id=f"req-{i}")
        inputs, _, _ = simple_inputs()
        c.async_stream_infer("no_such_model", inputs, request_id="bad")
        for v in (1, 2):
            c.async_stream_infer("multi_version", [mv_input()], model_version=str(v), request_id=f"mv-{v}")
        got, errors = {}, []
        for _ in range(6):
            r, e = results.get(timeout=30)
            if e is not None:
                errors.append(str(e))
            else:
                got[r.get_response().id] = r
        assert len(errors) == 1 and "no_such_model" in errors[0], errors
        assert sorted(got) == ["mv-1", "mv-2", "req-0", "req-1", "req-2"]
        for i in range(3):
            assert got[f"req-{i}"].as_numpy("OUTPUT0").tolist() == [list(range(1, 17))]
        assert got["mv-2"].as_numpy("OUTPUT").tolist() == [[2, 3, 4, 5]]
        # The stream is still open after the error.
        c.async_stream_infer("multi_version", [mv_input()], model_version="3", request_id="after")
        r, e = results.get(timeout=30)
        assert e is None and r.get_response().id == "after"
    finally:
        c.stop_stream()
        c.close()
    assert examples_server.is_live()


# ---- errors -------------------------------------------------------------------------------


def test_unknown_model_is_not_found(gclient, examples_server):
    inputs, _, _ = simple_inputs()
    with pytest.raises(InferenceServerException) as e:
        gclient.infer("no_such_model", inputs)
    assert_code(e, "NOT_FOUND")
    with pytest.raises(InferenceServerException) as e:
        gclient.get_model_metadata("no_such_model")
    assert_code(e, "NOT_FOUND")
    with pytest.raises(InferenceServerException) as e:
        gclient.get_model_config("no_such_model")
    assert_code(e, "NOT_FOUND")
    assert gclient.is_server_live()


def bad_requests():
    wrong_shape = grpcclient.InferInput("INPUT0", [1, 8], "INT32")
    wrong_shape.set_data_from_numpy(np.zeros((1, 8), dtype=np.int32))
    wrong_type = grpcclient.InferInput("INPUT0", [1, 16], "FP32")
    wrong_type.set_data_from_numpy(np.zeros((1, 16), dtype=np.float32))
    unknown = grpcclient.InferInput("NOPE", [1, 16], "INT32")
    unknown.set_data_from_numpy(np.zeros((1, 16), dtype=np.int32))
    good = simple_inputs()[0][1]
    return {"shape": [wrong_shape, good], "datatype": [wrong_type, good], "unknown_input": [unknown, good]}


@pytest.mark.parametrize("case", ["shape", "datatype", "unknown_input"])
def test_bad_requests_are_invalid_argument(gclient, case):
    with pytest.raises(InferenceServerException) as e:
        gclient.infer("simple", bad_requests()[case])
    assert_code(e, "INVALID_ARGUMENT")
    assert gclient.is_server_live()
    inputs, in0, in1 = simple_inputs()
    np.testing.assert_array_equal(gclient.infer("simple", inputs).as_numpy("OUTPUT0"), in0 + in1)


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_compressed_requests(examples_server, algorithm):
    # tritonclient's compression_algorithm compresses the request, and the server answers in kind
    # (tritonserver accepts both; this server refused them with UNIMPLEMENTED before).
    c = examples_server.grpc_client()
    big = np.arange(16, dtype=np.int32).reshape(1, 16)
    ins = []
    for name in ("INPUT0", "INPUT1"):
        i = grpcclient.InferInput(name, [1, 16], "INT32")
        i.set_data_from_numpy(big)
        ins.append(i)
    r = c.infer("simple", ins, compression_algorithm=algorithm)
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), big * 2)
    assert c.get_model_metadata("simple", as_json=True)["name"] == "simple"


def test_compressed_request_over_the_limit_once_decompressed(start_server, repo):
    # 256 KiB of zeros compresses to a few hundred bytes; the limit applies to the decompressed size.
    s = start_server("--model-repository", copy_models(repo, "bytes_identity"), "--grpc-max-message-size", "65536")
    c = s.grpc_client()
    i = grpcclient.InferInput("INPUT", [1, 1], "BYTES")
    i.set_data_from_numpy(np.array([[b"\0" * (256 << 10)]], dtype=np.object_))
    with pytest.raises(InferenceServerException) as e:
        c.infer("bytes_identity", [i], compression_algorithm="gzip")
    assert_code(e, "RESOURCE_EXHAUSTED")
    assert c.is_server_live()


def vlen_input(n, seed=0):
    x = np.random.default_rng(seed).standard_normal((1, n)).astype(np.float32)
    i = grpcclient.InferInput("INPUT", [1, n], "FP32")
    i.set_data_from_numpy(x)
    return i, x


@pytest.mark.parametrize("request_id", ["", "abc", "r" * 1001])
def test_large_raw_inputs_arrive_whole(gclient, request_id):
    # ModelInfer messages from 64 KiB up are read ahead of tonic into one buffer where the tensor is
    # aligned (src/frontend/grpc/align.rs); the request id's length moves the tensor within the message.
    for n in (16_385, 100_003, 300_000):
        i, x = vlen_input(n, n)
        r = gclient.infer("vlen_scale", [i], request_id=request_id)
        np.testing.assert_array_equal(r.as_numpy("OUTPUT"), x * 2)
        assert r.get_response().id == request_id


def test_large_compressed_and_oversized_raw_inputs(start_server, repo):
    s = start_server("--model-repository", copy_models(repo, "vlen_scale"), "--grpc-max-message-size", "200000")
    c = s.grpc_client()
    i, x = vlen_input(40_000)  # 160 KB: read into the aligned buffer
    np.testing.assert_array_equal(c.infer("vlen_scale", [i]).as_numpy("OUTPUT"), x * 2)
    # Compressed messages are tonic's to decompress, whatever their size.
    r = c.infer("vlen_scale", [i], compression_algorithm="gzip")
    np.testing.assert_array_equal(r.as_numpy("OUTPUT"), x * 2)
    big, _ = vlen_input(60_000)  # 240 KB, over the limit: refused as before
    with pytest.raises(InferenceServerException) as e:
        c.infer("vlen_scale", [big])
    assert_code(e, "RESOURCE_EXHAUSTED")
    np.testing.assert_array_equal(c.infer("vlen_scale", [i]).as_numpy("OUTPUT"), x * 2)
    c.close()


def test_shared_memory_rpcs_answer(gclient):
    """The shared-memory RPCs are implemented (tests/python/test_shared_memory.py covers them); on the
    shared examples server only read-only calls and harmless failures are made."""
    assert len(gclient.get_system_shared_memory_status().regions) == 0
    assert len(gclient.get_cuda_shared_memory_status().regions) == 0
    with pytest.raises(InferenceServerException) as e:
        gclient.register_system_shared_memory("r", "/tritonrs-no-such-key", 16)
    assert_code(e, "INVALID_ARGUMENT")
    gclient.unregister_system_shared_memory("r")
    assert gclient.is_server_live()


def test_load_in_mode_none_is_unavailable(gclient):
    with pytest.raises(InferenceServerException) as e:
        gclient.load_model("simple")
    assert_code(e, "UNAVAILABLE")


# ---- logging ------------------------------------------------------------------------------


def test_log_settings_read_and_update(start_server, repo):
    s = start_server("--model-repository", copy_models(repo, "simple"))
    c = s.grpc_client()
    got = c.get_log_settings(as_json=True)["settings"]
    assert got["log_info"] == {"bool_param": True}
    assert got["log_verbose_level"] == {"uint32_param": 0}
    got = c.update_log_settings({"log_verbose_level": 1, "log_warning": False}, as_json=True)["settings"]
    assert got["log_verbose_level"] == {"uint32_param": 1}
    assert got["log_warning"] == {"bool_param": False}
    assert s.get("/v2/logging").json()["log_verbose_level"] == 1
    with pytest.raises(InferenceServerException) as e:
        c.update_log_settings({"log_file": "/tmp/elsewhere.log"})
    assert_code(e, "INVALID_ARGUMENT")
    c.close()


# ---- repository and statistics ------------------------------------------------------------


def test_repository_index_load_unload(start_server, repo):
    copy_models(repo, "simple", "multi_version")
    s = start_server("--model-repository", repo, "--model-control-mode=explicit", "--load-model=simple")
    c = s.grpc_client()
    idx = {(m.name, m.version): m.state for m in c.get_model_repository_index().models}
    assert idx[("simple", "1")] == "READY"
    assert "multi_version" in {name for name, _ in idx}

    assert not c.is_model_ready("multi_version")
    c.load_model("multi_version")
    assert c.is_model_ready("multi_version")
    assert c.infer("multi_version", [mv_input()]).as_numpy("OUTPUT").tolist() == [[3, 4, 5, 6]]
    c.unload_model("simple")
    assert not c.is_model_ready("simple")
    inputs, _, _ = simple_inputs()
    with pytest.raises(InferenceServerException) as e:
        c.infer("simple", inputs)
    assert e.value.status() in ("StatusCode.NOT_FOUND", "StatusCode.UNAVAILABLE")
    with pytest.raises(InferenceServerException) as e:
        c.load_model("no_such_model")
    assert_code(e, "NOT_FOUND")
    assert c.is_server_live()
    c.close()


def test_statistics_after_inferences(start_server, repo):
    s = start_server("--model-repository", copy_models(repo, "simple", "classifier"))
    c = s.grpc_client()
    for _ in range(3):
        c.infer("simple", simple_inputs()[0])
    st = c.get_inference_statistics("simple")
    [m] = st.model_stats
    assert (m.name, m.version) == ("simple", "1")
    assert m.inference_count == 3 and m.execution_count == 3
    assert m.inference_stats.success.count == 3 and m.inference_stats.fail.count == 0
    assert m.inference_stats.success.ns > 0
    assert m.last_inference > 0
    assert [b.batch_size for b in m.batch_stats] == [1]
    every = c.get_inference_statistics()
    assert sorted(x.name for x in every.model_stats) == ["classifier", "simple"]
    with pytest.raises(InferenceServerException) as e:
        c.get_inference_statistics("no_such_model")
    assert_code(e, "NOT_FOUND")
    c.close()


def test_grpc_disabled(start_server, repo):
    s = start_server("--model-repository", copy_models(repo, "simple"), "--allow-grpc=false")
    assert s.grpc_port is None
    assert "GRPCInferenceService" not in s.log


def test_message_size_limit(start_server, repo):
    s = start_server("--model-repository", copy_models(repo, "bytes_identity"), "--grpc-max-message-size=4096")
    c = s.grpc_client()
    small = grpcclient.InferInput("INPUT", [1, 1], "BYTES")
    small.set_data_from_numpy(np.array([[b"x" * 100]], dtype=np.object_))
    assert c.infer("bytes_identity", [small]).as_numpy("OUTPUT").tolist() == [[b"x" * 100]]
    big = grpcclient.InferInput("INPUT", [1, 1], "BYTES")
    big.set_data_from_numpy(np.array([[b"x" * 10000]], dtype=np.object_))
    with pytest.raises(InferenceServerException) as e:
        c.infer("bytes_identity", [big])
    # The code gRPC C++ (and so tritonserver) gives; tonic's own OUT_OF_RANGE is rewritten.
    assert_code(e, "RESOURCE_EXHAUSTED")
    assert c.is_server_live()
    c.close()


def test_message_size_limit_in_stream(start_server, repo):
    s = start_server("--model-repository", copy_models(repo, "bytes_identity"), "--grpc-max-message-size=4096")
    c = s.grpc_client()
    results = queue.Queue()
    c.start_stream(callback=lambda result, error: results.put((result, error)))
    big = grpcclient.InferInput("INPUT", [1, 1], "BYTES")
    big.set_data_from_numpy(np.array([[b"x" * 10000]], dtype=np.object_))
    c.async_stream_infer("bytes_identity", [big], request_id="big")
    result, error = results.get(timeout=10)
    assert result is None and error is not None
    assert error.status() == "StatusCode.RESOURCE_EXHAUSTED", error
    c.stop_stream()
    assert c.is_server_live()
    c.close()
