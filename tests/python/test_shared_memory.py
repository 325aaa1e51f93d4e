"""System shared memory (Triton's `system_shared_memory` extension) through the official clients:
tritonclient.utils.shared_memory creates the regions, tritonclient.http / .grpc register them and name
them in requests, and perf_analyzer runs with `--shared-memory system` when it is installed. CUDA shared
memory is checked for its clear refusal on this machine (no GPU)."""

from __future__ import annotations

import base64
import glob
import os
import subprocess
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException, serialize_byte_tensor, serialized_byte_size

from helpers import EXAMPLES, TritonServer, copy_models, python_sleep_model

PROTOCOLS = ["http", "grpc"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repo = copy_models(tmp_path_factory.mktemp("repo"), "simple", "bytes_identity")
    python_sleep_model(repo, "slow_identity", execute_s=1.5)
    s = TritonServer(["--model-repository", repo], name="shm")
    s.start(timeout=60)
    yield s
    s.stop()


@pytest.fixture
def regions():
    """Factory for shared-memory regions (tritonclient's own helper), destroyed at the end of the test."""
    made = []

    def _make(byte_size: int):
        key = f"/tritonrs-test-{uuid.uuid4().hex[:12]}"
        h = shm.create_shared_memory_region(key.strip("/"), key, byte_size)
        made.append(h)
        return key, h

    yield _make
    for h in made:
        shm.destroy_shared_memory_region(h)


def client_for(server, protocol):
    return server.client() if protocol == "http" else server.grpc_client()


def module_for(protocol):
    return httpclient if protocol == "http" else grpcclient


@pytest.fixture(autouse=True)
def clean_registrations(server):
    yield
    server.client().unregister_system_shared_memory()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_inputs_and_outputs_in_shared_memory(server, regions, protocol):
    """tritonclient's simple_*_shm_client flow: both inputs in one region, both outputs in another."""
    c, m = client_for(server, protocol), module_for(protocol)
    in0 = np.arange(16, dtype=np.int32).reshape(1, 16)
    in1 = np.full((1, 16), 3, dtype=np.int32)
    in_key, in_h = regions(128)
    out_key, out_h = regions(128)
    shm.set_shared_memory_region(in_h, [in0, in1])
    c.register_system_shared_memory("input_data", in_key, 128)
    c.register_system_shared_memory("output_data", out_key, 128)

    inputs = [m.InferInput("INPUT0", [1, 16], "INT32"), m.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_shared_memory("input_data", 64)
    inputs[1].set_shared_memory("input_data", 64, offset=64)
    outputs = [m.InferRequestedOutput("OUTPUT0"), m.InferRequestedOutput("OUTPUT1")]
    outputs[0].set_shared_memory("output_data", 64)
    outputs[1].set_shared_memory("output_data", 64, offset=64)
    result = c.infer("simple", inputs, outputs=outputs)

    np.testing.assert_array_equal(shm.get_contents_as_numpy(out_h, np.int32, [1, 16]), in0 + in1)
    np.testing.assert_array_equal(shm.get_contents_as_numpy(out_h, np.int32, [1, 16], offset=64), in0 - in1)
    # The response carries the outputs' names and shapes, and no data.
    out = result.get_output("OUTPUT0")
    if protocol == "http":
        assert out == {"name": "OUTPUT0", "datatype": "INT32", "shape": [1, 16]}
    else:
        assert out.name == "OUTPUT0" and list(out.shape) == [1, 16]
        assert result.get_response().raw_output_contents == [b"", b""]

    # The same regions again with new input values: the server reads them in place each time.
    shm.set_shared_memory_region(in_h, [in0 * 2, in1])
    c.infer("simple", inputs, outputs=outputs)
    np.testing.assert_array_equal(shm.get_contents_as_numpy(out_h, np.int32, [1, 16]), in0 * 2 + in1)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_mixed_shared_memory_and_socket_tensors(server, regions, protocol):
    """One input in shared memory and one sent inline; one output in shared memory and one returned."""
    c, m = client_for(server, protocol), module_for(protocol)
    key, h = regions(64)
    out_key, out_h = regions(64)
    shm.set_shared_memory_region(h, [np.full((1, 16), 10, dtype=np.int32)])
    c.register_system_shared_memory("in", key, 64)
    c.register_system_shared_memory("out", out_key, 64)
    a = m.InferInput("INPUT0", [1, 16], "INT32")
    a.set_shared_memory("in", 64)
    b = m.InferInput("INPUT1", [1, 16], "INT32")
    b.set_data_from_numpy(np.arange(16, dtype=np.int32).reshape(1, 16))
    o0 = m.InferRequestedOutput("OUTPUT0")
    o0.set_shared_memory("out", 64)
    o1 = m.InferRequestedOutput("OUTPUT1")
    r = c.infer("simple", [a, b], outputs=[o0, o1])
    np.testing.assert_array_equal(shm.get_contents_as_numpy(out_h, np.int32, [1, 16])[0], 10 + np.arange(16))
    np.testing.assert_array_equal(r.as_numpy("OUTPUT1")[0], 10 - np.arange(16))


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_bytes_tensors_in_shared_memory(server, regions, protocol):
    c, m = client_for(server, protocol), module_for(protocol)
    data = np.array([[b"camera-0", b"", "h\u00e9llo".encode(), b"x" * 300]], dtype=np.object_)
    serialized = serialize_byte_tensor(data)
    size = serialized_byte_size(serialized)
    key, h = regions(size)
    out_key, out_h = regions(size)
    shm.set_shared_memory_region(h, [serialized])
    c.register_system_shared_memory("strings_in", key, size)
    c.register_system_shared_memory("strings_out", out_key, size)
    i = m.InferInput("INPUT", [1, 4], "BYTES")
    i.set_shared_memory("strings_in", size)
    o = m.InferRequestedOutput("OUTPUT")
    o.set_shared_memory("strings_out", size)
    c.infer("bytes_identity", [i], outputs=[o])
    got = shm.get_contents_as_numpy(out_h, np.object_, [1, 4])
    assert got.tolist() == data.tolist()


def test_status_lists_regions_and_unregister_removes_them(server, regions):
    c, g = server.client(), server.grpc_client()
    k1, _ = regions(256)
    k2, _ = regions(4096 + 64)
    c.register_system_shared_memory("first", k1, 256)
    g.register_system_shared_memory("second", k2, 64, offset=4096)
    status = {r["name"]: r for r in c.get_system_shared_memory_status()}
    assert status == {
        "first": {"name": "first", "key": k1, "offset": 0, "byte_size": 256},
        "second": {"name": "second", "key": k2, "offset": 4096, "byte_size": 64},
    }
    gs = g.get_system_shared_memory_status(as_json=True)["regions"]
    assert gs["second"] == {"name": "second", "key": k2, "offset": "4096", "byte_size": "64"}
    assert [r["name"] for r in c.get_system_shared_memory_status("first")] == ["first"]

    g.unregister_system_shared_memory("first")
    assert [r["name"] for r in c.get_system_shared_memory_status()] == ["second"]
    with pytest.raises(InferenceServerException) as e:
        c.get_system_shared_memory_status("first")
    assert "Unable to find system shared memory region: 'first'" in e.value.message()
    # Unregistering a name that is not registered is not an error (as in Triton); no name means all.
    c.unregister_system_shared_memory("never-registered")
    c.unregister_system_shared_memory()
    assert c.get_system_shared_memory_status() == []

    meta = c.get_server_metadata()
    assert {"system_shared_memory", "cuda_shared_memory"} <= set(meta["extensions"])


def test_many_regions(server, regions):
    """Fifty regions at once, each used by its own request, then all unregistered in one call."""
    g = server.grpc_client()
    made = []
    for n in range(50):
        key, h = regions(128)
        shm.set_shared_memory_region(h, [np.full((1, 16), n, dtype=np.int32), np.full((1, 16), 1, dtype=np.int32)])
        g.register_system_shared_memory(f"r{n}", key, 128)
        made.append(h)
    for n, h in enumerate(made):
        ins = [grpcclient.InferInput("INPUT0", [1, 16], "INT32"), grpcclient.InferInput("INPUT1", [1, 16], "INT32")]
        ins[0].set_shared_memory(f"r{n}", 64)
        ins[1].set_shared_memory(f"r{n}", 64, offset=64)
        # The output goes over the input bytes of the same region (OUTPUT0 = n + 1).
        out = grpcclient.InferRequestedOutput("OUTPUT0")
        out.set_shared_memory(f"r{n}", 64)
        g.infer("simple", ins, outputs=[out])
    for n, h in enumerate(made):
        assert (shm.get_contents_as_numpy(h, np.int32, [16]) == n + 1).all(), n
    assert len(g.get_system_shared_memory_status().regions) == 50
    g.unregister_system_shared_memory()
    assert len(g.get_system_shared_memory_status().regions) == 0


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_unregister_while_a_request_uses_the_region(server, regions, protocol):
    """The mapping lives until the request in flight is done: its output still lands in the region."""
    c, m = client_for(server, protocol), module_for(protocol)
    key, h = regions(8)
    shm.set_shared_memory_region(h, [np.array([[2.5]], dtype=np.float32)])
    c.register_system_shared_memory("busy", key, 8)
    i = m.InferInput("IN", [1], "FP32")
    i.set_shared_memory("busy", 4)
    o = m.InferRequestedOutput("OUT")
    o.set_shared_memory("busy", 4, offset=4)
    result = {}

    def run():
        try:
            result["r"] = client_for(server, protocol).infer("slow_identity", [i], outputs=[o])
        except Exception as e:  # noqa: BLE001 - reported by the assertion below
            result["e"] = e

    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.5)  # the model sleeps 1.5 s in execute
    c.unregister_system_shared_memory("busy")
    assert c.get_system_shared_memory_status() == [] if protocol == "http" else True
    t.join(30)
    assert "e" not in result, result.get("e")
    assert shm.get_contents_as_numpy(h, np.float32, [1], offset=4)[0] == 2.5
    # A new request cannot name the region any more.
    with pytest.raises(InferenceServerException) as e:
        c.infer("slow_identity", [i], outputs=[o])
    assert "Unable to find shared memory region: 'busy'" in e.value.message()


def http_error(server, method, path, body=None):
    r = server.request(method, path, body=body) if body is None or isinstance(body, bytes) else server.post(path, body)
    return r.status, r.json().get("error") if r.body else None


def test_bad_registrations_are_client_errors(server, regions):
    key, _ = regions(128)
    g = server.grpc_client()
    cases = [
        ({"key": "/tritonrs-test-missing", "offset": 0, "byte_size": 16},
         "Unable to open shared memory region: '/tritonrs-test-missing'"),
        ({"key": key, "offset": 0, "byte_size": 4096}, f"Invalid shared memory region: '{key}'"),
        ({"key": key, "offset": 120, "byte_size": 16}, f"Invalid shared memory region: '{key}'"),
        ({"key": "/../../etc/passwd", "offset": 0, "byte_size": 16}, "Unable to open shared memory region"),
        ({"offset": 0, "byte_size": 16}, "Shared memory register request has no 'key' field"),
        ({"key": key, "offset": 0}, "Shared memory register request has no 'byte_size' field"),
        ({"key": key, "offset": -1, "byte_size": 16}, "must be a non-negative integer"),
    ]
    for body, message in cases:
        r = server.post("/v2/systemsharedmemory/region/bad/register", body)
        assert r.status == 400 and message in r.json()["error"], (body, r)
    for args, message in [(("bad", "/tritonrs-test-missing", 16), "Unable to open shared memory region"),
                          (("bad", key, 4096), f"Invalid shared memory region: '{key}'")]:
        with pytest.raises(InferenceServerException) as e:
            g.register_system_shared_memory(*args)
        assert e.value.status() == "StatusCode.INVALID_ARGUMENT" and message in e.value.message()
    server.client().register_system_shared_memory("dup", key, 128)
    r = server.post("/v2/systemsharedmemory/region/dup/register", {"key": key, "offset": 0, "byte_size": 128})
    assert r.status == 409 and r.json()["error"] == "shared memory region 'dup' already in manager"
    with pytest.raises(InferenceServerException) as e:
        g.register_system_shared_memory("dup", key, 128)
    assert e.value.status() == "StatusCode.ALREADY_EXISTS"
    r = server.get("/v2/systemsharedmemory/region/nope/status")
    assert r.status == 404 and r.json()["error"] == "Unable to find system shared memory region: 'nope'"
    assert server.client().is_server_live()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_bad_tensor_references_are_client_errors(server, regions, protocol):
    c, m = client_for(server, protocol), module_for(protocol)
    key, h = regions(128)
    c.register_system_shared_memory("r", key, 128)

    def attempt(in_region="r", in_size=64, in_offset=0, out_region=None, out_size=64, out_offset=0):
        ins = [m.InferInput("INPUT0", [1, 16], "INT32"), m.InferInput("INPUT1", [1, 16], "INT32")]
        ins[0].set_shared_memory("r", 64)
        ins[1].set_shared_memory(in_region, in_size, offset=in_offset)
        outs = None
        if out_region:
            o = m.InferRequestedOutput("OUTPUT0")
            o.set_shared_memory(out_region, out_size, offset=out_offset)
            outs = [o]
        with pytest.raises(InferenceServerException) as e:
            c.infer("simple", ins, outputs=outs)
        status = e.value.status()
        assert status in ("400", "StatusCode.INVALID_ARGUMENT"), (status, e.value.message())
        return e.value.message()

    assert "Invalid offset + byte size for shared memory region: 'r'" in attempt(in_offset=100)
    assert "Unable to find shared memory region: 'nope'" in attempt(in_region="nope")
    assert "expecting 64" in attempt(in_size=32)
    assert "Invalid offset + byte size for shared memory region: 'r'" in attempt(out_region="r", out_offset=100)
    assert "Unable to find shared memory region: 'gone'" in attempt(out_region="gone")
    assert ("shared memory size specified with the request for output 'OUTPUT0' (32 bytes) should be at "
            "least 64 bytes to hold the results") in attempt(out_region="r", out_size=32)
    # The server still serves.
    shm.set_shared_memory_region(h, [np.ones((1, 16), dtype=np.int32), np.ones((1, 16), dtype=np.int32)])
    ins = [m.InferInput("INPUT0", [1, 16], "INT32"), m.InferInput("INPUT1", [1, 16], "INT32")]
    ins[0].set_shared_memory("r", 64)
    ins[1].set_shared_memory("r", 64, offset=64)
    assert (c.infer("simple", ins).as_numpy("OUTPUT0") == 2).all()


def test_http_conflicting_parameters(server, regions):
    key, _ = regions(128)
    server.client().register_system_shared_memory("r", key, 128)
    shm_in = {"shared_memory_region": "r", "shared_memory_byte_size": 64}
    base = [{"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "parameters": shm_in}]
    cases = [
        ({"inputs": [base[0], {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "parameters": shm_in,
                               "data": list(range(16))}]},
         "Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', "
         "'shared_memory_region' in 'parameters'. But set 'data' 'shared_memory_region'"),
        ({"inputs": base, "outputs": [{"name": "OUTPUT0", "parameters": {**shm_in, "binary_data": True}}]},
         "Output can't set both 'shared_memory_region' and 'binary_data'"),
        ({"inputs": base, "outputs": [{"name": "OUTPUT0", "parameters": {**shm_in, "classification": 2}}]},
         "Output can't set both 'shared_memory_region' and 'classification'"),
        ({"inputs": [{**base[0], "parameters": {"shared_memory_region": 5, "shared_memory_byte_size": 64}}]},
         "invalid value type for 'shared_memory_region' parameter for tensor 'INPUT0'"),
        ({"inputs": [{**base[0], "parameters": {"shared_memory_byte_size": 64}}]},
         "'shared_memory_byte_size' can not be specified without 'shared_memory_region' parameter for tensor 'INPUT0'"),
    ]
    for body, message in cases:
        r = server.post("/v2/models/simple/infer", body)
        assert r.status == 400 and message in r.json()["error"], (body, r)


def test_cuda_shared_memory_is_refused_clearly_without_a_gpu(server):
    c, g = server.client(), server.grpc_client()
    assert c.get_cuda_shared_memory_status() == []
    handle = base64.b64encode(b"\0" * 64).decode()  # a well-formed cudaIpcMemHandle_t, but there is no GPU
    r = server.post("/v2/cudasharedmemory/region/gpu/register",
                    {"raw_handle": {"b64": handle}, "device_id": 0, "byte_size": 1024})
    assert r.status == 503, r
    assert r.json()["error"].startswith("failed to register CUDA shared memory region 'gpu': "), r
    assert "no CUDA driver could be loaded (libcuda.so.1" in r.json()["error"], r
    r = server.post("/v2/cudasharedmemory/region/gpu/register",
                    {"raw_handle": {"b64": "AAAA"}, "device_id": 0, "byte_size": 1024})
    assert r.status == 400 and "cudaIpcMemHandle_t" in r.json()["error"], r
    with pytest.raises(InferenceServerException) as e:
        # tritonclient takes the handle base64-encoded, as cuda_shared_memory.get_raw_handle returns it.
        g.register_cuda_shared_memory("gpu", handle.encode(), 0, 1024)
    assert e.value.status() == "StatusCode.UNAVAILABLE", e.value
    assert len(g.get_cuda_shared_memory_status().regions) == 0
    g.unregister_cuda_shared_memory()
    assert c.is_server_ready()


ANCHORS = Path(os.environ.get("ANCHORS", Path.home() / ".cache/anchors"))


def perf_analyzer_cmd(tmp: Path) -> list[str] | None:
    """perf_analyzer as ../shared/anchors/install.sh installs it (the binary behind its own glibc), with
    a libcudart.so beside it: perf_analyzer 2.60 dlopens the CUDA runtime for any --shared-memory, even
    `system`. The runtime comes from the anchors' Triton wheel; no GPU is needed to load it."""
    glibc = ANCHORS / "glibc/usr/lib/x86_64-linux-gnu"
    binary = ANCHORS / "pa/perf_analyzer/bin/perf_analyzer"
    cudart = sorted(glob.glob(str(ANCHORS / "triton/nvidia_pytriton.libs/libcudart*.so*")))
    if not (binary.exists() and (glibc / "ld-linux-x86-64.so.2").exists() and cudart):
        return None
    (tmp / "libcudart.so").symlink_to(cudart[0])
    return [str(glibc / "ld-linux-x86-64.so.2"), "--library-path", f"{glibc}:{tmp}", str(binary)]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_perf_analyzer_with_system_shared_memory(server, protocol, tmp_path):
    pa = perf_analyzer_cmd(tmp_path)
    if pa is None:
        pytest.skip("perf_analyzer is not installed (../shared/anchors/install.sh)")
    port = server.port if protocol == "http" else server.grpc_port
    cmd = [*pa, "-m", "simple", "-u", f"127.0.0.1:{port}", "-i", protocol,
           "--shared-memory", "system", "--output-shared-memory-size", "64",
           "--concurrency-range", "2", "--measurement-interval", "500", "--stability-percentage", "90",
           "--max-trials", "10"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "Throughput:" in p.stdout, p.stdout
    # Every request succeeded on the server, and perf_analyzer unregistered its regions when done.
    assert "Successful request count" in p.stdout, p.stdout
    assert server.client().get_system_shared_memory_status() == []
