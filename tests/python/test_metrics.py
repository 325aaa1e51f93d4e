"""Prometheus metrics: Triton's nv_* names and labels, counters matching a known request history."""

from __future__ import annotations

import re
import urllib.request

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from helpers import copy_models


def scrape(host: str, port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10).read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            samples[key] = float(value)
    return samples


def simple_inputs(shape=(1, 16)):
    a = np.ones(shape, np.int32)
    i0 = httpclient.InferInput("INPUT0", list(shape), "INT32")
    i0.set_data_from_numpy(a)
    i1 = httpclient.InferInput("INPUT1", list(shape), "INT32")
    i1.set_data_from_numpy(a)
    return [i0, i1]


@pytest.fixture
def metrics_server(start_server, repo):
    copy_models(repo, "simple")
    s = start_server("--model-repository", repo, "--allow-metrics=true", "--metrics-port", "0",
                     "--metrics-interval-ms", "200")
    port = int(s.wait_for_log(r"Started Metrics Service at [0-9.]+:(\d+)").group(1))
    return s, port


def test_counters_follow_requests(metrics_server):
    s, port = metrics_server
    c = s.client()
    for _ in range(5):
        c.infer("simple", simple_inputs())
    c.infer("simple", simple_inputs((3, 16)))  # one request, batch of 3
    for _ in range(2):
        with pytest.raises(InferenceServerException):
            c.infer("simple", simple_inputs((1, 15)))  # shape mismatch: a failure with reason OTHER
    m = scrape(s.host, port)
    lbl = '{model="simple",version="1"}'
    assert m[f"nv_inference_request_success{lbl}"] == 6
    assert m['nv_inference_request_failure{model="simple",version="1",reason="OTHER"}'] == 2
    assert m['nv_inference_request_failure{model="simple",version="1",reason="REJECTED"}'] == 0
    assert m['nv_inference_request_failure{model="simple",version="1",reason="BACKEND"}'] == 0
    assert m[f"nv_inference_count{lbl}"] == 8
    assert m[f"nv_inference_exec_count{lbl}"] == 6
    assert m[f"nv_inference_pending_request_count{lbl}"] == 0
    for name in ["request_duration_us", "queue_duration_us", "compute_input_duration_us",
                 "compute_infer_duration_us", "compute_output_duration_us"]:
        assert m[f"nv_inference_{name}{lbl}"] >= 0
    assert m[f"nv_inference_compute_infer_duration_us{lbl}"] > 0
    assert 0 < m[f"nv_model_load_duration_secs{lbl}"] < 60
    assert 0.0 <= m["nv_cpu_utilization"] <= 1.0
    assert 0 < m["nv_cpu_memory_used_bytes"] <= m["nv_cpu_memory_total_bytes"]


def test_metrics_exposition_format(metrics_server):
    s, port = metrics_server
    resp = urllib.request.urlopen(f"http://{s.host}:{port}/metrics", timeout=10)
    assert resp.headers["Content-Type"].startswith("text/plain")
    text = resp.read().decode()
    assert "# TYPE nv_inference_request_success counter" in text
    assert "# TYPE nv_inference_pending_request_count gauge" in text
    assert re.search(r'^nv_inference_request_success\{model="simple",version="1"\} 0$', text, re.M)


def test_cpu_metrics_can_be_disabled(start_server, repo):
    copy_models(repo, "simple")
    s = start_server("--model-repository", repo, "--allow-metrics=true", "--metrics-port", "0",
                     "--allow-cpu-metrics=false")
    port = int(s.wait_for_log(r"Started Metrics Service at [0-9.]+:(\d+)").group(1))
    m = scrape(s.host, port)
    assert "nv_cpu_utilization" not in m
    assert 'nv_inference_request_success{model="simple",version="1"}' in m
