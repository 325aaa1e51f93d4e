"""Hardening of the model-repository paths (issue 10): configuration values that would size huge
allocations, file names that lead out of a model's folder, oversized and malformed `config`
overrides, `file:` names the filesystem cannot hold, configurations that do not fit their model file,
and the messages a new user meets. Each case is one a single request (or one file in a repository)
could use to abort the server, read any file on the machine, or get a 500 for a client mistake."""

import base64
import json
import os
import queue
import resource
import shutil
import sys

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from helpers import EXAMPLES, REPO_ROOT, copy_models, run_cli, simple_inputs

# An address-space cap: an allocation sized from a hostile configuration fails the test (the process
# aborts) instead of pushing the machine into swap. The server itself maps about 1.2 GiB.
MEMORY_CAP = {resource.RLIMIT_AS: (4 << 30, 4 << 30)}

SIMPLE_IO = {
    "backend": "onnxruntime",
    "max_batch_size": 8,
    "input": [{"name": n, "data_type": "TYPE_INT32", "dims": [16]} for n in ("INPUT0", "INPUT1")],
    "output": [{"name": n, "data_type": "TYPE_INT32", "dims": [16]} for n in ("OUTPUT0", "OUTPUT1")],
}


def simple_config(**extra) -> str:
    return json.dumps({**SIMPLE_IO, **extra})


def load(server, name, config=None, files=None):
    params = {}
    if config is not None:
        params["config"] = config
    for path, data in (files or {}).items():
        params[f"file:{path}"] = base64.b64encode(data).decode()
    return server.post(f"/v2/repository/models/{name}/load", {"parameters": params})


def infer_simple(server):
    c = server.client()
    out = c.infer("simple", simple_inputs(httpclient, 2)).as_numpy("OUTPUT0")
    c.close()
    return out


@pytest.fixture
def explicit(start_server, repo):
    """A server in explicit mode over a copy of `simple` and `classify_logits`, under the memory cap."""
    copy_models(repo, "simple", "classify_logits")
    return start_server("--model-repository", repo, "--model-control-mode=explicit", "--load-model=simple",
                        rlimits=MEMORY_CAP)


# ---- 1. values that size allocations ----------------------------------------------------------


HUGE = [
    # warmup filler of 4 TiB (aborted the server in 0.1 s)
    ("model_warmup[0].inputs[\"INPUT0\"].dims", dict(model_warmup=[{
        "name": "w", "batch_size": 1,
        "inputs": {"INPUT0": {"data_type": "TYPE_INT32", "dims": [1099511627776], "zero_data": True}}}])),
    # random BYTES warmup whose element count overflows
    ("model_warmup[0].inputs[\"INPUT0\"].dims", dict(model_warmup=[{
        "name": "w", "batch_size": 2,
        "inputs": {"INPUT0": {"data_type": "TYPE_STRING", "dims": [9223372036854775807], "random_data": True}}}])),
    # instance specs past 16 GiB
    ("instance_group[0].count", dict(instance_group=[{"count": 2147483647, "kind": "KIND_CPU"}])),
    ("max_batch_size", dict(max_batch_size=2147483647)),
    ("sequence_batching.oldest.max_candidate_sequences",
     dict(sequence_batching={"oldest": {"max_candidate_sequences": 2147483647}})),
    ("dynamic_batching.priority_levels", dict(dynamic_batching={"priority_levels": "18446744073709551615"})),
]


@pytest.mark.parametrize("field,extra", HUGE, ids=[f for f, _ in HUGE])
def test_allocation_sizing_values_fail_the_load_not_the_server(explicit, field, extra):
    r = load(explicit, "simple", simple_config(**extra))
    assert r.status == 400, r
    msg = r.json()["error"]
    assert msg.startswith("failed to load 'simple'") and field in msg and "limit" in msg, msg
    assert explicit.is_running()
    # The version that served before keeps serving, and a sane reload still works.
    assert infer_simple(explicit)[0][0] == 4
    assert load(explicit, "simple", simple_config()).status == 200


def test_the_same_values_in_config_pbtxt_make_only_those_models_unavailable(start_server, repo):
    copy_models(repo, "simple")
    for name, extra in (("huge_warmup", HUGE[0][1]), ("huge_instances", HUGE[2][1])):
        shutil.copytree(EXAMPLES / "simple", repo / name)
        (repo / name / "config.pbtxt").write_text(to_pbtxt({**SIMPLE_IO, "name": name, **extra}))
    s = start_server("--model-repository", repo, "--strict-readiness=false", rlimits=MEMORY_CAP)
    rows = {r["name"]: r for r in s.index()}
    assert rows["simple"]["state"] == "READY"
    for name, field in (("huge_warmup", "model_warmup[0]"), ("huge_instances", "instance_group[0].count")):
        assert rows[name]["state"] == "UNAVAILABLE" and field in rows[name]["reason"], rows[name]
        assert "limit" in rows[name]["reason"]
    assert infer_simple(s)[0][0] == 4
    out = run_cli("validate", "--model-repository", str(repo))
    assert out.returncode == 1, out
    assert "OK    simple" in out.stdout
    assert "FAIL  huge_warmup" in out.stdout and "FAIL  huge_instances" in out.stdout, out.stdout


def to_pbtxt(cfg: dict) -> str:
    """Just enough of protobuf text format for the configurations these tests write."""
    def value(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return str(v)
        if isinstance(v, str):
            return v if v.startswith(("TYPE_", "KIND_")) else json.dumps(v)
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{ " + " ".join(field(k, x) for k, x in v.items()) + " }"
        raise TypeError(v)

    def field(k, v):
        if isinstance(v, dict) and k == "inputs":  # a map: key/value entries
            return " ".join(f"inputs {{ key: {json.dumps(mk)} value: {value(mv)} }}" for mk, mv in v.items())
        return f"{k}: {value(v)}"

    return "\n".join(field(k, v) for k, v in cfg.items()) + "\n"


# ---- 2. file names that lead out of the model's folder ----------------------------------------


def classify_config(**extra):
    base = {
        "backend": "onnxruntime", "max_batch_size": 4,
        "input": [{"name": "FEATURES", "data_type": "TYPE_FP32", "dims": [4]}],
        "output": [{"name": "LOGITS", "data_type": "TYPE_FP32", "dims": [5]}],
    }
    return json.dumps({**base, **extra})


@pytest.mark.parametrize("name", ["/etc/passwd", "../../../../../../../../etc/passwd", "../config.pbtxt"])
def test_label_file_outside_the_model_folder_is_refused(explicit, name):
    out = {"name": "LOGITS", "data_type": "TYPE_FP32", "dims": [5], "label_filename": name}
    r = load(explicit, "classify_logits", classify_config(output=[out]))
    assert r.status == 400, r
    msg = r.json()["error"]
    assert msg.startswith("failed to load 'classify_logits'") and "output.label_filename" in msg, msg
    assert "root:" not in msg
    # Nothing was loaded, so classification cannot return the file's lines.
    assert explicit.get("/v2/models/classify_logits/ready").status != 200


CONFINED = [
    ("default_model_filename", dict(default_model_filename="/etc/passwd")),
    ("default_model_filename", dict(default_model_filename="../../simple/1/model.onnx")),
    ("model_warmup.inputs.input_data_file", dict(model_warmup=[{
        "name": "w", "batch_size": 1,
        "inputs": {"INPUT0": {"data_type": "TYPE_INT32", "dims": [16], "input_data_file": "/etc/passwd"},
                   "INPUT1": {"data_type": "TYPE_INT32", "dims": [16], "zero_data": True}}}])),
    ("model_warmup.inputs.input_data_file", dict(model_warmup=[{
        "name": "w", "batch_size": 1,
        "inputs": {"INPUT0": {"data_type": "TYPE_INT32", "dims": [16], "input_data_file": "../../../../etc/passwd"},
                   "INPUT1": {"data_type": "TYPE_INT32", "dims": [16], "zero_data": True}}}])),
    ("EXECUTION_ENV_PATH", dict(parameters={"EXECUTION_ENV_PATH": {"string_value": "/usr"}})),
    ("EXECUTION_ENV_PATH", dict(parameters={"EXECUTION_ENV_PATH": {"string_value": "$$TRITON_MODEL_DIRECTORY/../../x"}})),
]


@pytest.mark.parametrize("field,extra", CONFINED, ids=[f"{f}:{i}" for i, (f, _) in enumerate(CONFINED)])
def test_config_named_files_are_confined_to_the_model_folder(explicit, field, extra):
    r = load(explicit, "simple", simple_config(**extra))
    assert r.status == 400, r
    msg = r.json()["error"]
    assert msg.startswith("failed to load 'simple'") and field in msg, msg
    assert infer_simple(explicit)[0][0] == 4


SEQUENCE_STATE = {
    "backend": "onnxruntime", "max_batch_size": 0,
    "input": [{"name": "INPUT", "data_type": "TYPE_INT32", "dims": [1]}],
    "output": [{"name": "OUTPUT", "data_type": "TYPE_INT32", "dims": [1]}],
}


@pytest.mark.parametrize("data_file", ["../../../../../../etc/passwd", "/etc/passwd"])
def test_initial_state_data_file_is_confined(start_server, repo, data_file):
    copy_models(repo, "sequence_state")
    s = start_server("--model-repository", repo, "--model-control-mode=explicit")
    state = {
        "input_name": "STATE_IN", "output_name": "STATE_OUT", "data_type": "TYPE_INT32", "dims": [1],
        "initial_state": [{"name": "init", "data_type": "TYPE_INT32", "dims": [1], "data_file": data_file}],
    }
    r = load(s, "sequence_state", json.dumps({**SEQUENCE_STATE, "sequence_batching": {"state": [state]}}))
    assert r.status == 400, r
    msg = r.json()["error"]
    assert msg.startswith("failed to load 'sequence_state'") and "initial_state.data_file" in msg, msg
    # The same file name in a repository's config.pbtxt is refused by `tritonrs validate` too.
    p = repo / "sequence_state" / "config.pbtxt"
    p.write_text(p.read_text().replace("zero_data: true", f"data_file: {json.dumps(data_file)}"))
    out = run_cli("validate", "--model-repository", str(repo))
    assert out.returncode == 1 and "initial_state.data_file" in out.stdout, out.stdout


def test_a_symlink_leading_out_of_the_model_folder_is_refused(start_server, repo, tmp_path):
    copy_models(repo, "classify_logits", "simple")
    secret = tmp_path / "secret.txt"
    secret.write_text("root:x:0:0\n" * 5)
    os.symlink(secret, repo / "classify_logits" / "labels.txt")
    cfg = (repo / "classify_logits" / "config.pbtxt").read_text()
    cfg = cfg.replace("dims: [ 5 ]", 'dims: [ 5 ]\n    label_filename: "labels.txt"')
    (repo / "classify_logits" / "config.pbtxt").write_text(cfg)
    s = start_server("--model-repository", repo, "--strict-readiness=false")
    row = s.index_rows("classify_logits")[0]
    assert row["state"] == "UNAVAILABLE" and "symbolic link" in row["reason"], row
    assert str(secret) not in row["reason"]
    assert s.index_rows("simple")[0]["state"] == "READY"


# ---- 4. oversized config overrides --------------------------------------------------------------


@pytest.mark.parametrize("entries", [15_000, 100_000], ids=["1.3MiB", "8.6MiB"])
def test_an_oversized_config_override_is_refused_before_parsing(explicit, entries):
    # Over 1 MiB of JSON (a 50 MiB one once peaked at 1.1 GB of RSS while it was converted); the larger
    # one is refused by the HTTP front-end before it is even unescaped, the smaller one by the core.
    big = json.dumps({**SIMPLE_IO, "parameters": {f"p{i}": {"string_value": "x" * 64} for i in range(entries)}})
    assert len(big) > 1 << 20
    r = load(explicit, "simple", big)
    assert r.status == 400, r
    msg = r.json()["error"]
    assert msg.startswith("failed to load 'simple'") and "over the limit of 1048576 bytes" in msg, msg
    with open(f"/proc/{explicit.proc.pid}/status") as f:
        hwm_kib = int(next(line for line in f if line.startswith("VmHWM")).split()[1])
    # The request body itself is held twice at most (the raw body and its parsed JSON string).
    assert hwm_kib < 200 * 1024, f"peak RSS {hwm_kib} KiB"
    assert infer_simple(explicit)[0][0] == 4


# ---- 5. client mistakes are 400s with the right words --------------------------------------------


@pytest.mark.parametrize("path,why", [
    ("1/mo\0del.onnx", "NUL"),
    ("1/" + "m" * 300, "longer than 255 bytes"),
    ("/".join(["d"] * 600), "longer than 1024 bytes"),
])
def test_bad_file_parameter_names_are_client_errors(explicit, path, why):
    model = (EXAMPLES / "simple" / "1" / "model.onnx").read_bytes()
    r = load(explicit, "simple", simple_config(), {path: model, "1/model.onnx": model})
    assert r.status == 400, r
    msg = r.json()["error"]
    assert why in msg and "/tmp" not in msg and "tritonrs-model-" not in msg, msg


def test_colliding_file_parameters_are_client_errors(explicit):
    model = (EXAMPLES / "simple" / "1" / "model.onnx").read_bytes()
    r = load(explicit, "simple", simple_config(), {"1": b"x", "1/model.onnx": model})
    assert r.status == 400, r
    msg = r.json()["error"]
    assert "collide" in msg and "/tmp" not in msg, msg
    r = load(explicit, "simple", simple_config(), {"1/model.onnx": model, "./1/model.onnx": model})
    assert r.status == 400 and "the same file" in r.json()["error"], r


def test_errors_of_file_loads_show_no_server_path(explicit):
    r = load(explicit, "simple", simple_config(), {"2/model.onnx": b"not an onnx model"})
    assert r.status == 400, r
    msg = r.json()["error"]
    assert msg.startswith("failed to load 'simple'") and "/tmp" not in msg, msg


def test_a_malformed_config_override_says_failed_to_load(explicit):
    c = explicit.client()
    with pytest.raises(InferenceServerException) as e:
        c.load_model("simple", config="{not json")
    assert "failed to load 'simple'" in str(e.value) and "invalid 'config' parameter" in str(e.value)
    g = explicit.grpc_client()
    with pytest.raises(InferenceServerException) as e:
        g.load_model("simple", config='{"input": "not a list"}')
    assert e.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert e.value.message().startswith("failed to load 'simple'"), e.value.message()


def test_dims_that_disagree_with_the_model_fail_the_load_naming_both(explicit, repo):
    cfg = json.loads(simple_config())
    cfg["input"][0]["dims"] = [8]
    r = load(explicit, "simple", json.dumps(cfg))
    assert r.status == 400, r
    msg = r.json()["error"]
    assert "input 'INPUT0'" in msg and "[8]" in msg and "[-1,16]" in msg, msg
    assert infer_simple(explicit)[0][0] == 4
    # `tritonrs validate` reads the ONNX file's I/O and says the same.
    text = (repo / "simple" / "config.pbtxt").read_text().replace("dims: [ 16 ]", "dims: [ 8 ]", 1)
    (repo / "simple" / "config.pbtxt").write_text(text)
    out = run_cli("validate", "--model-repository", str(repo))
    assert out.returncode == 1
    line = next(line for line in out.stdout.splitlines() if "simple" in line)
    assert line.startswith("FAIL") and "[8]" in line and "[-1,16]" in line, out.stdout


def test_a_model_without_version_folder_says_so(start_server, repo):
    # A configuration that leaves its tensors to auto-complete (which is on), and no version folder:
    # the message once blamed auto-complete.
    (repo / "simple").mkdir()
    (repo / "simple" / "config.pbtxt").write_text('platform: "onnxruntime_onnx"\nmax_batch_size: 8\n')
    s = start_server("--model-repository", repo, "--strict-readiness=false")
    row = s.index_rows("simple")[0]
    assert row["state"] == "UNAVAILABLE" and "no version folder" in row["reason"], row
    assert "auto-complete" not in row["reason"]
    out = run_cli("validate", "--model-repository", str(repo))
    assert "no version folder" in out.stdout, out.stdout


def test_a_misspelt_datatype_gets_the_nearest_suggestion(repo):
    copy_models(repo, "simple")
    p = repo / "simple" / "config.pbtxt"
    p.write_text(p.read_text().replace("TYPE_INT32", "TYPE_INT23", 1))
    out = run_cli("validate", "--model-repository", str(repo))
    assert "did you mean 'TYPE_INT32'?" in out.stdout and "TYPE_INT8" not in out.stdout, out.stdout


def test_a_broken_model_file_is_listed_per_version_as_triton_does(start_server, repo):
    (repo / "broken" / "1").mkdir(parents=True)
    (repo / "broken" / "1" / "model.onnx").write_bytes(b"\xff\xff\xff this is not an ONNX model")
    copy_models(repo, "simple")
    s = start_server("--model-repository", repo, "--strict-readiness=false")
    rows = s.index_rows("broken")
    assert len(rows) == 1, rows
    row = rows[0]
    assert row["version"] == "1" and row["state"] == "UNAVAILABLE" and "not a valid ONNX model" in row["reason"], row
    g = s.grpc_client()
    idx = [m for m in g.get_model_repository_index(as_json=True)["models"] if m["name"] == "broken"]
    assert idx == [{"name": "broken", "version": "1", "state": "UNAVAILABLE", "reason": row["reason"]}], idx
    # Readiness of the rest is unaffected.
    assert s.index_rows("simple")[0]["state"] == "READY"
    with pytest.raises(InferenceServerException):
        g.get_model_metadata("broken")
    g.close()


# ---- 6. a response over the gRPC message limit ---------------------------------------------------

PY = f"--backend-config=python,python-executable={sys.executable}"
LIMIT = 4096


def bytes_upper_input(n):
    i = grpcclient.InferInput("TEXT", [1, n], "BYTES")
    i.set_data_from_numpy(np.array([[b"a"] * n], dtype=np.object_))
    return i


@pytest.fixture
def small_messages(start_server, repo):
    """`bytes_upper` answers a request of n one-character strings (5n bytes) with 9n bytes (UPPER and
    LENGTH), so with a 4 KiB limit a request of 600 fits and its response does not."""
    copy_models(repo, "bytes_upper", src=REPO_ROOT / "model-repos" / "python")
    return start_server("--model-repository", repo, PY, f"--grpc-max-message-size={LIMIT}")


def test_an_oversized_unary_response_is_resource_exhausted(small_messages):
    g = small_messages.grpc_client()
    assert g.infer("bytes_upper", [bytes_upper_input(10)]).as_numpy("UPPER")[0][0] == b"A"
    with pytest.raises(InferenceServerException) as e:
        g.infer("bytes_upper", [bytes_upper_input(600)])
    assert e.value.status() == "StatusCode.RESOURCE_EXHAUSTED", e.value
    assert "over the gRPC message limit of 4096 bytes" in e.value.message()
    assert g.infer("bytes_upper", [bytes_upper_input(10)]).as_numpy("UPPER")[0][0] == b"A"
    g.close()


def test_an_oversized_stream_response_fails_that_request_only(small_messages):
    g = small_messages.grpc_client()
    answers = queue.Queue()
    g.start_stream(callback=lambda result, error: answers.put((result, error)))
    for i, n in enumerate((10, 600, 20)):
        g.async_stream_infer("bytes_upper", [bytes_upper_input(n)], request_id=str(i))
        # One at a time, so the answers come back in order.
        result, error = answers.get(timeout=20)
        if n == 600:
            assert result is None and "over the gRPC message limit" in str(error), (result, error)
        else:
            assert error is None, error
            assert result.get_response().id == str(i)
            assert result.as_numpy("LENGTH").tolist() == [[1] * n]
    g.stop_stream()
    g.close()


# ---- 8. the example models keep nothing per request ----------------------------------------------


def test_the_repeat_example_keeps_no_finished_threads(monkeypatch):
    """Runs model-repos/python/repeat's model.py in this process against a stand-in for pb_utils:
    after many requests, the model holds only the threads still sending (it once kept every thread it
    ever started, 2.3 KB per request)."""
    import importlib.util
    import threading
    import types

    sent = []
    fake = types.ModuleType("triton_python_backend_utils")
    fake.TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
    fake.Tensor = lambda name, value: (name, value)
    fake.InferenceResponse = lambda tensors: tensors
    fake.get_input_tensor_by_name = lambda request, name: types.SimpleNamespace(as_numpy=lambda: request)

    class Sender:
        def send(self, response=None, flags=0):
            sent.append(flags)

    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", fake)
    spec = importlib.util.spec_from_file_location("repeat_model", REPO_ROOT / "model-repos/python/repeat/1/model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.TritonPythonModel()
    model.initialize({})

    class Request(np.ndarray):
        def get_response_sender(self):
            return Sender()

    for _ in range(200):
        model.execute([np.array([1, 2, 3], dtype=np.int32).view(Request)])
    for t in threading.enumerate():
        if t is not threading.current_thread() and t.name.startswith("Thread-"):
            t.join(5)
    model.execute([np.array([4], dtype=np.int32).view(Request)])
    assert len(model.threads) <= 1, len(model.threads)
    model.finalize()
    assert sent.count(1) == 201  # every request got its final flag


# ---- 7. a BLS request back into a model that waits for it -----------------------------------------

# Two models that call each other: ping's execute waits on pong, whose execute calls ping again. Each
# forwards the request parameter "to" one hop, and an async variant uses async_exec.
CALLER = '''
import asyncio, json
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    {kw}def execute(self, requests):
        out = []
        for request in requests:
            hops = json.loads(request.parameters()).get("to", "")
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            if not hops:
                out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x.as_numpy() + 1)]))
                continue
            target, rest = hops.split(",", 1) if "," in hops else (hops, "")
            bls = pb_utils.InferenceRequest(model_name=target, requested_output_names=["OUTPUT0"], inputs=[x],
                                            parameters={{"to": rest}} if rest else {{}})
            r = {call}
            if r.has_error():
                out.append(pb_utils.InferenceResponse(error=r.error()))
            else:
                out.append(pb_utils.InferenceResponse([pb_utils.get_output_tensor_by_name(r, "OUTPUT0")]))
        return out
'''
CALLER_CONFIG = '''backend: "python"
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
instance_group [ {{ count: {count} kind: KIND_CPU }} ]
'''


@pytest.fixture
def callers(start_server, repo):
    for name, kw, call, count in (("ping", "", "bls.exec()", 1), ("pong", "", "bls.exec()", 1),
                                  ("aping", "async ", "await bls.async_exec()", 1),
                                  ("twin", "", "bls.exec()", 2)):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "1" / "model.py").write_text(CALLER.format(kw=kw, call=call))
        (repo / name / "config.pbtxt").write_text(CALLER_CONFIG.format(count=count))
    copy_models(repo, "bls_sync", "add_sub", src=REPO_ROOT / "model-repos" / "python")
    return start_server("--model-repository", repo, PY)


def call(server, model, to=None, timeout=20):
    c = httpclient.InferenceServerClient(server.url, network_timeout=timeout, connection_timeout=timeout)
    i = httpclient.InferInput("INPUT0", [4], "FP32")
    i.set_data_from_numpy(np.zeros(4, dtype=np.float32))
    try:
        return c.infer(model, [i], parameters={"to": to} if to else None).as_numpy("OUTPUT0").tolist()
    finally:
        c.close()


def test_bls_sync_calling_itself_fails_clearly_and_the_model_keeps_serving(callers):
    c = callers.client(network_timeout=20)
    x = np.ones(4, dtype=np.float32)
    ins = []
    for n in ("INPUT0", "INPUT1"):
        i = httpclient.InferInput(n, [4], "FP32")
        i.set_data_from_numpy(x)
        ins.append(i)
    with pytest.raises(InferenceServerException) as e:
        c.infer("bls_sync", ins, parameters={"target": "bls_sync"})
    assert e.value.status() == "400", e.value
    assert "call chain: bls_sync (v1) -> bls_sync (v1)" in e.value.message(), e.value.message()
    # Not deadlocked: the next request to bls_sync is served (Triton 2.51 hangs here for good).
    assert c.infer("bls_sync", ins).as_numpy("OUTPUT0").tolist() == [2.0] * 4
    c.close()


@pytest.mark.parametrize("model,to,chain", [
    ("ping", "pong,ping", "ping (v1) -> pong (v1) -> ping (v1)"),
    ("aping", "aping", "aping (v1) -> aping (v1)"),
    ("twin", "twin", "twin (v1) -> twin (v1)"),
])
def test_bls_cycles_are_refused_through_any_path(callers, model, to, chain):
    with pytest.raises(InferenceServerException) as e:
        call(callers, model, to)
    assert chain in e.value.message(), e.value.message()
    assert call(callers, model) == [1.0] * 4
    # Calls that do not come back are fine, however deep.
    assert call(callers, "ping", "pong") == [1.0] * 4
    assert call(callers, "pong", "ping,aping") == [1.0] * 4


@pytest.mark.parametrize("name", ["..%2F..%2Fetc", "a%2Fb", "%00x", "a%5Cb", "%0Aname", "x" * 256])
def test_model_names_with_path_characters_never_reach_the_file_system(explicit, name):
    """A load request's model name is checked before anything is written or read for it, even with
    file: overrides that would otherwise be written to a folder named after it."""
    r = explicit.post(f"/v2/repository/models/{name}/load",
                      {"parameters": {"config": simple_config(), "file:1/model.onnx": base64.b64encode(b"x").decode()}})
    assert r.status == 400, r
    assert "is not a valid model name" in r.json()["error"], r
    assert explicit.is_running()
