"""Response cache: `--cache-config local,size=N` plus `response_cache { enable: true }` in a model."""

from __future__ import annotations

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from helpers import copy_models, run_cli
from test_metrics import scrape

MODEL = "batched_scale"


def cached_repo(repo, enable: bool = True):
    copy_models(repo, MODEL, "simple")
    if enable:
        cfg = repo / MODEL / "config.pbtxt"
        cfg.write_text(cfg.read_text() + "response_cache { enable: true }\n")
    return repo


def infer(c, mod, value: float):
    x = np.full((1, 16), value, np.float32)
    i = mod.InferInput("INPUT", [1, 16], "FP32")
    i.set_data_from_numpy(x)
    out = c.infer(MODEL, [i]).as_numpy("OUTPUT")
    assert np.array_equal(out, x * 2)
    return out


def test_hits_skip_execution_and_are_counted(start_server, repo):
    s = start_server("--model-repository", cached_repo(repo), "--cache-config", "local,size=1048576",
                     "--allow-metrics=true", "--metrics-port", "0")
    port = int(s.wait_for_log(r"Started Metrics Service at [0-9.]+:(\d+)").group(1))
    c = s.client()
    g = s.grpc_client()
    for _ in range(3):
        infer(c, httpclient, 1.0)
    for _ in range(2):
        infer(g, grpcclient, 1.0)  # same request over gRPC: the same cache entry
    infer(c, httpclient, 2.0)  # different contents: a miss
    st = c.get_inference_statistics(MODEL)["model_stats"][0]
    assert st["execution_count"] == 2, st
    assert st["inference_stats"]["success"]["count"] == 6
    assert st["inference_stats"]["cache_hit"]["count"] == 4
    assert st["inference_stats"]["cache_miss"]["count"] == 2
    m = scrape(s.host, port)
    lbl = f'{{model="{MODEL}",version="1"}}'
    assert m[f"nv_cache_num_hits_per_model{lbl}"] == 4
    assert m[f"nv_cache_num_misses_per_model{lbl}"] == 2
    assert f"nv_cache_hit_duration_per_model{lbl}" in m
    # A model that does not enable the cache gets no cache metrics.
    assert not any(k.startswith("nv_cache") and 'model="simple"' in k for k in m)
    g.close()


def test_requested_outputs_are_part_of_the_key(start_server, repo):
    copy_models(repo, "simple")
    cfg = repo / "simple" / "config.pbtxt"
    cfg.write_text(cfg.read_text() + "response_cache { enable: true }\n")
    s = start_server("--model-repository", repo, "--cache-config", "local,size=1048576")
    c = s.client()
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        i = httpclient.InferInput(name, [1, 16], "INT32")
        i.set_data_from_numpy(a)
        inputs.append(i)
    r1 = c.infer("simple", inputs, outputs=[httpclient.InferRequestedOutput("OUTPUT0")])
    r2 = c.infer("simple", inputs, outputs=[httpclient.InferRequestedOutput("OUTPUT1")])
    assert np.array_equal(r1.as_numpy("OUTPUT0"), a * 2) and r1.as_numpy("OUTPUT1") is None
    assert np.array_equal(r2.as_numpy("OUTPUT1"), a * 0) and r2.as_numpy("OUTPUT0") is None
    st = c.get_inference_statistics("simple")["model_stats"][0]
    assert st["execution_count"] == 2


def test_no_cache_without_the_model_opting_in_or_the_server_flag(start_server, repo):
    s = start_server("--model-repository", cached_repo(repo, enable=False), "--cache-config", "local,size=1048576")
    c = s.client()
    for _ in range(3):
        infer(c, httpclient, 1.0)
    assert c.get_inference_statistics(MODEL)["model_stats"][0]["execution_count"] == 3
    s.stop()


def test_model_opt_in_without_a_server_cache_executes(start_server, tmp_path):
    repo = tmp_path / "r"
    repo.mkdir()
    s = start_server("--model-repository", cached_repo(repo))
    c = s.client()
    for _ in range(3):
        infer(c, httpclient, 1.0)
    st = c.get_inference_statistics(MODEL)["model_stats"][0]
    assert st["execution_count"] == 3 and st["inference_stats"]["cache_hit"]["count"] == 0


def test_small_cache_evicts_least_recently_used(start_server, repo):
    # Room for one 64-byte result only: alternating two inputs always misses.
    s = start_server("--model-repository", cached_repo(repo), "--cache-config", "local,size=200")
    c = s.client()
    for v in (1.0, 2.0, 1.0, 2.0):
        infer(c, httpclient, v)
    infer(c, httpclient, 2.0)  # the most recent entry is still there
    st = c.get_inference_statistics(MODEL)["model_stats"][0]
    assert st["execution_count"] == 4 and st["inference_stats"]["cache_hit"]["count"] == 1


def test_bad_cache_config_stops_the_server():
    # A cache other than `local` and `redis` (test_redis_cache.py) is a library in --cache-directory
    # (test_capi_cache.py); none is here.
    r = run_cli("--model-repository", "/nonexistent", "--cache-config", "memcached,host=x", "--http-port", "0")
    assert r.returncode != 0 and "response cache 'memcached'" in r.stderr and "not found" in r.stderr, r.stderr
    r = run_cli("--model-repository", "/nonexistent", "--cache-config", "local,colour=red", "--http-port", "0")
    assert r.returncode != 0 and "unknown setting 'colour' for the local cache" in r.stderr, r.stderr
