"""Restricted APIs (issue 11), as tritonserver does them: --http-restricted-api and
--grpc-restricted-protocol. For every group, a request without the key gets 403 / PERMISSION_DENIED
with tritonserver's message, and the same request with the key (tritonclient's `headers=`) is served;
groups that are not restricted need no key."""

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from helpers import copy_models, simple_inputs

GROUPS = "health,metadata,inference,model-config,model-repository,statistics,trace,logging"
KEY = {"admin-key": "s3cret"}


@pytest.fixture
def restricted(start_server, repo):
    copy_models(repo, "simple")
    return start_server("--model-repository", repo, "--model-control-mode=explicit", "--load-model=simple",
                        f"--http-restricted-api={GROUPS}:admin-key=s3cret",
                        "--grpc-restricted-protocol=model-repository,inference:admin-key=s3cret",
                        wait=None)


def http_calls(c, h):
    return {
        "health": lambda: c.is_server_ready(headers=h),
        "health (model)": lambda: c.is_model_ready("simple", headers=h),
        "metadata": lambda: c.get_server_metadata(headers=h),
        "metadata (model)": lambda: c.get_model_metadata("simple", headers=h),
        "inference": lambda: c.infer("simple", simple_inputs(httpclient, 1), headers=h),
        "model-config": lambda: c.get_model_config("simple", headers=h),
        "model-repository": lambda: c.get_model_repository_index(headers=h),
        "model-repository (load)": lambda: c.load_model("simple", headers=h),
        "statistics": lambda: c.get_inference_statistics("simple", headers=h),
        "trace": lambda: c.get_trace_settings(headers=h),
        "logging": lambda: c.get_log_settings(headers=h),
    }


def test_every_http_group_needs_its_header(restricted):
    restricted.wait_until(lambda: restricted.get("/v2/health/ready", headers=KEY).status == 200, what="ready")
    c = httpclient.InferenceServerClient(restricted.url)
    for name, call in http_calls(c, None).items():
        if name.startswith("health"):
            # tritonclient turns any non-200 health answer into False.
            assert call() is False, name
            continue
        with pytest.raises(InferenceServerException) as e:
            call()
        assert e.value.status() == "403" and "This API is restricted, expecting header 'admin-key'" in e.value.message(), name
    assert restricted.get("/v2/health/ready").json() == {"error": "This API is restricted, expecting header 'admin-key'"}
    for name, call in http_calls(c, KEY).items():
        assert call() is not False, name
    wrong = {"admin-key": "guess"}
    assert restricted.get("/v2/health/live", headers=wrong).status == 403
    r = restricted.post("/v2/models/simple/infer", '{"inputs": []}')
    assert r.status == 403 and r.json() == {"error": "This API is restricted, expecting header 'admin-key'"}
    c.close()


def test_grpc_protocols_need_their_metadata_and_others_do_not(restricted):
    restricted.wait_until(lambda: restricted.get("/v2/health/ready", headers=KEY).status == 200, what="ready")
    c = grpcclient.InferenceServerClient(restricted.grpc_url)
    h = {"triton-grpc-protocol-admin-key": "s3cret"}
    for call in (lambda hh: c.infer("simple", simple_inputs(grpcclient, 1), headers=hh),
                 lambda hh: c.get_model_repository_index(headers=hh)):
        with pytest.raises(InferenceServerException) as e:
            call(None)
        assert e.value.status() == "StatusCode.PERMISSION_DENIED"
        assert e.value.message() == "This protocol is restricted, expecting header 'triton-grpc-protocol-admin-key'"
    assert c.infer("simple", simple_inputs(grpcclient, 1), headers=h).as_numpy("OUTPUT0")[0][0] == 2
    assert c.get_model_repository_index(headers=h).models
    # Not restricted on gRPC: health, metadata, config, statistics.
    assert c.is_server_live() and c.get_server_metadata().name
    assert c.get_model_config("simple").config.name == "simple"
    c.close()


def test_a_bad_restriction_flag_stops_the_start(tmp_path):
    from helpers import run_cli

    r = run_cli("--model-repository", str(tmp_path), "--http-restricted-api=helth:k=v", timeout=10)
    assert r.returncode == 1 and "unknown API 'helth'" in r.stderr, r.stderr
