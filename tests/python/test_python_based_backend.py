"""Python-based backends, as tritonserver 2.51 serves them (vLLM's backend is one): a model whose
`backend` names no built-in backend and no installed library is served by
`<backend-directory>/<backend>/model.py` on the Python backend, with the model's own configuration.
The backend here, `scaler`, is written by the test into its own backend directory (which for
tritonserver also holds a link to its `python` backend); models using it have no model.py of their
own (one that has one is served by the backend's all the same). Each model is checked on tritonrs and
on tritonserver 2.51 where installed: outputs, configurations (`runtime: "model.py"`), metadata,
auto-complete from the backend's `auto_complete_config`, a decoupled model over a gRPC stream, and a
model naming a backend nobody installed."""

from __future__ import annotations

import queue
import re
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from helpers import TRITONSERVER, Tritonserver, TritonServer, both

# The backend: OUT = IN * SCALE, SCALE from the model's own configuration; decoupled models send one
# response per element. It adds the output to configurations that leave it out.
SCALER = '''
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        if not config.as_dict()["output"]:
            config.add_output({"name": "OUT", "data_type": "TYPE_FP32", "dims": [-1]})
            config.add_output({"name": "WHERE", "data_type": "TYPE_STRING", "dims": [1]})
        return config

    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.scale = float(config["parameters"]["SCALE"]["string_value"])
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
        self.where = [args["model_name"], args["model_version"], args["model_repository"].rsplit("/", 1)[-1]]

    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() * self.scale
            if not self.decoupled:
                where = np.array(["/".join(self.where).encode()], np.object_)
                out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x.astype(np.float32)),
                                                       pb_utils.Tensor("WHERE", where)]))
                continue
            sender = r.get_response_sender()
            for k, v in enumerate(x):
                flags = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if k == len(x) - 1 else 0
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([v], np.float32))]), flags=flags)
            if len(x) == 0:
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None if self.decoupled else out
'''

IN = '{ name: "IN" data_type: TYPE_FP32 dims: [ -1 ] }'
OUT = '{ name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] }, { name: "WHERE" data_type: TYPE_STRING dims: [ 1 ] }'


def model(repo, name, scale, outputs=OUT, extra="", own_model_py=None):
    d = repo / name
    (d / "1").mkdir(parents=True)
    if own_model_py is not None:
        (d / "1" / "model.py").write_text(own_model_py)
    out = f"output [ {outputs} ]\n" if outputs else ""
    (d / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "scaler"\nmax_batch_size: 0\ninput [ {IN} ]\n{out}'
        f'instance_group [ {{ kind: KIND_CPU count: 1 }} ]\n'
        f'parameters {{ key: "SCALE" value: {{ string_value: "{scale}" }} }}\n{extra}')


def tritonserver_python_backend() -> Path:
    """tritonserver's own `python` backend folder: in the backend directory its wrapper script passes
    (the anchors' wrapper), else beside its `bin` folder (an /opt/tritonserver layout)."""
    text = TRITONSERVER.read_bytes()[:4096].decode(errors="replace")
    m = re.search(r'--backend-directory="?([^"\s]+)', text)
    return Path(m.group(1) if m else TRITONSERVER.parent.parent / "backends") / "python"


@pytest.fixture(scope="module")
def layout(tmp_path_factory):
    """(backend directory, repository)."""
    root = tmp_path_factory.mktemp("pbb")
    backends = root / "backends"
    (backends / "scaler").mkdir(parents=True)
    (backends / "scaler" / "model.py").write_text(SCALER)
    if TRITONSERVER.exists():
        # tritonserver runs Python-based backends on its Python backend, found in the same directory.
        (backends / "python").symlink_to(tritonserver_python_backend())
    repo = root / "repo"
    model(repo, "double", 2)
    # No output declared: the backend's auto_complete_config adds it.
    model(repo, "triple", 3, outputs=None)
    # Its own model.py is not the one that runs.
    model(repo, "half", 0.5, own_model_py="raise RuntimeError('the model folder\\'s model.py ran')\n")
    model(repo, "spread", 10, extra="model_transaction_policy { decoupled: true }\n")
    return backends, repo


@pytest.fixture(scope="module")
def servers(layout):
    backends, repo = layout
    args = ["--model-repository", str(repo), f"--backend-directory={backends}"]
    ours = TritonServer([*args, "--allow-metrics=true", "--metrics-port=0",
                         "--metrics-config=histogram_latencies=true"], name="tritonrs").start()
    theirs = Tritonserver(args, name="tritonserver").start() if TRITONSERVER.exists() else None
    yield ours, theirs
    ours.stop()
    if theirs:
        theirs.stop()



def infer(s, name, values):
    i = grpcclient.InferInput("IN", [len(values)], "FP32")
    i.set_data_from_numpy(np.array(values, np.float32))
    r = s.grpc_client().infer(name, [i])
    return r.as_numpy("OUT").tolist(), r.as_numpy("WHERE")[0].decode()


def test_models_run_on_the_backends_model_py_with_their_own_configuration(servers):
    got = both(servers, lambda s: [infer(s, m, [1.0, 2.0]) for m in ("double", "triple", "half")])
    # args["model_repository"] is the model's folder, as for any Python model.
    assert got == [([2.0, 4.0], "double/1/double"), ([3.0, 6.0], "triple/1/triple"), ([0.5, 1.0], "half/1/half")]


def test_the_configuration_names_the_python_runtime(servers):
    # The whole configuration and metadata, as tritonserver reports them.
    got = both(servers, lambda s: {m: (s.get(f"/v2/models/{m}/config").json(), s.get(f"/v2/models/{m}").json())
                                   for m in ("double", "triple", "spread")})
    cfg, meta = got["triple"]
    assert (cfg["backend"], cfg["runtime"], meta["platform"]) == ("scaler", "model.py", "scaler")
    assert [o["name"] for o in cfg["output"]] == ["OUT", "WHERE"], "completed by the backend's auto_complete_config"
    assert got["spread"][0]["model_transaction_policy"] == {"decoupled": True}


def test_a_decoupled_model_of_the_backend_streams(servers):
    def stream(s):
        q: queue.Queue = queue.Queue()
        c = s.grpc_client()
        c.start_stream(callback=lambda result, error: q.put((result, error)))
        try:
            i = grpcclient.InferInput("IN", [3], "FP32")
            i.set_data_from_numpy(np.array([1, 2, 3], np.float32))
            c.async_stream_infer("spread", [i], request_id="s")
            got = []
            while True:
                result, error = q.get(timeout=20)
                assert error is None, error
                final = result.get_response().parameters["triton_final_response"].bool_param
                got.append((result.as_numpy("OUT").tolist(), final))
                if final:
                    return got
        finally:
            c.stop_stream()

    assert both(servers, stream) == [([10.0], False), ([20.0], False), ([30.0], True)]
    # The first response of each request is timed, as for every decoupled model.
    m = servers[0].metrics()
    assert m['nv_inference_first_response_histogram_ms_count{model="spread",version="1"}'] >= 1


def test_a_backend_nobody_installed_fails_to_load(layout, tmp_path, start_server, start_tritonserver):
    backends, _ = layout
    repo = tmp_path / "repo"
    model(repo, "lost", 1)
    (repo / "lost" / "config.pbtxt").write_text(
        (repo / "lost" / "config.pbtxt").read_text().replace('backend: "scaler"', 'backend: "nowhere"'))
    model(repo, "double", 2)
    args = ["--model-repository", str(repo), f"--backend-directory={backends}"]
    ours = start_server(*args, wait="live")
    ours.wait_until(ours.settled, what="every model tried")
    assert ours.index_row("lost")["state"] == "UNAVAILABLE"
    assert "nowhere" in ours.index_row("lost")["reason"]
    assert ours.index_row("double")["state"] == "READY"
    try:
        theirs = start_tritonserver(*args, "--exit-on-error=false", wait="live")
    except pytest.skip.Exception:
        return
    theirs.wait_until(lambda: theirs.get("/v2/models/double/ready").status == 200, what="double ready")
    assert theirs.get("/v2/models/lost/ready").status != 200
    with pytest.raises(InferenceServerException):
        infer(ours, "lost", [1.0])
