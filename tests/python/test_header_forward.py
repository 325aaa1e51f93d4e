"""--http-header-forward-pattern / --grpc-header-forward-pattern: headers (gRPC metadata) whose names
match become request parameters, differential against tritonserver 2.51 through the Python model
args_echo, which returns the parameters it sees (`request.parameters()`)."""

import json
import queue

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from helpers import REPO_ROOT, copy_models, run_cli

PY = REPO_ROOT / "model-repos" / "python"
# Matched anywhere in the name and ignoring case (both as tritonserver does): "^X-" matches "x-trace",
# "FOO" matches "my-foo-h".
PATTERNS = ["--http-header-forward-pattern=^X-|FOO", "--grpc-header-forward-pattern=^X-|FOO"]
# HTTP header names are given in lower case: hyper hands tritonrs no other (tritonserver keeps the
# case the client sent; see the README).
HEADERS = {"x-trace": "abc", "x-dup": "from-header", "my-foo-h": "7", "other": "not forwarded"}


def seen_http(server) -> dict:
    body = {"inputs": [{"name": "X", "datatype": "INT32", "shape": [1], "data": [1]}],
            "parameters": {"x-dup": "from-body", "kept": 3}, "outputs": [{"name": "REQUEST"}]}
    r = server.post("/v2/models/args_echo/infer", json.dumps(body).encode(),
                    headers={"Content-Type": "application/json", **HEADERS})
    assert r.status == 200, r.body
    return json.loads(json.loads(r.body)["outputs"][0]["data"][0])["parameters"]


def grpc_input():
    i = grpcclient.InferInput("X", [1], "INT32")
    i.set_data_from_numpy(np.array([1], dtype=np.int32))
    return [i]


def seen_grpc(server) -> dict:
    c = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    try:
        r = c.infer("args_echo", grpc_input(), headers=HEADERS, parameters={"x-dup": "from-body", "kept": 3})
        return json.loads(r.as_numpy("REQUEST")[0])["parameters"]
    finally:
        c.close()


def seen_grpc_stream(server) -> dict:
    c = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    answers: queue.Queue = queue.Queue()
    try:
        c.start_stream(callback=lambda result, error: answers.put((result, error)), headers=HEADERS)
        c.async_stream_infer("args_echo", grpc_input(), parameters={"x-dup": "from-body", "kept": 3})
        result, error = answers.get(timeout=30)
        assert error is None, error
        return json.loads(result.as_numpy("REQUEST")[0])["parameters"]
    finally:
        c.stop_stream()
        c.close()


def test_forwarded_parameters_match_tritonserver(repo, start_server, start_tritonserver):
    copy_models(repo, "args_echo", src=PY)
    ref = start_tritonserver(f"--model-repository={repo}", *PATTERNS)
    expected = [seen_http(ref), seen_grpc(ref), seen_grpc_stream(ref)]
    ref.stop()
    # The forwarding is what the test is about: something was forwarded, not everything.
    assert all("x-trace" in e and "other" not in e for e in expected), expected
    ours = start_server("--model-repository", repo, *PATTERNS)
    assert [seen_http(ours), seen_grpc(ours), seen_grpc_stream(ours)] == expected


def test_without_a_pattern_nothing_is_forwarded(repo, start_server):
    copy_models(repo, "args_echo", src=PY)
    s = start_server("--model-repository", repo)
    assert seen_http(s) == {"x-dup": "from-body", "kept": 3}
    assert seen_grpc(s) == {"x-dup": "from-body", "kept": 3}


@pytest.mark.parametrize("flag", ["--http-header-forward-pattern", "--grpc-header-forward-pattern"])
def test_invalid_pattern_is_a_start_error(repo, flag):
    # tritonserver 2.51 starts and forwards nothing; tritonrs refuses, naming the flag.
    r = run_cli("--model-repository", str(repo), f"{flag}=(")
    assert r.returncode != 0
    assert flag in r.stderr and "regular expression" in r.stderr, r.stderr
