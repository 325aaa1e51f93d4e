"""`--metrics-config` (issue 35), differential against tritonserver 2.51: after the same requests to the
same Python models, both servers export the same per-model families (names, HELP, TYPE), label sets,
quantile labels and counts; and the model statistics' `response_stats` and `memory_usage` hold what
tritonserver's hold, over HTTP and gRPC."""

from __future__ import annotations

import math
import queue
import re
import shutil
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from google.protobuf.json_format import MessageToDict

from helpers import REPO_ROOT, run_cli

PYTHON_MODELS = REPO_ROOT / "model-repos" / "python"
MODELS = ("add_sub", "repeat")
SAMPLE_RE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def python_repo(repo):
    for name in MODELS:
        shutil.copytree(PYTHON_MODELS / name, repo / name)
    return repo


def parse(text: str) -> dict:
    """{family: {"help", "type", "samples": [(name, {labels}, value)]}} of a scrape."""
    families: dict = {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name, _, help_ = line[7:].partition(" ")
            families.setdefault(name, {"samples": []})["help"] = help_
        elif line.startswith("# TYPE "):
            name, _, kind = line[7:].partition(" ")
            families.setdefault(name, {"samples": []})["type"] = kind
        elif line and not line.startswith("#"):
            m = SAMPLE_RE.match(line)
            assert m, f"not a sample line: {line!r}"
            name, labels, value = m.group(1), dict(LABEL_RE.findall(m.group(2) or "")), float(m.group(3))
            family = next((f for f in (name, re.sub(r"_(sum|count)$", "", name)) if f in families), name)
            families.setdefault(family, {"samples": []})["samples"].append((name, labels, value))
    return families


def per_model(families: dict) -> dict:
    """The families with a `model` label (the per-model statistics), as tritonserver 2.51 has them."""
    return {k: v for k, v in families.items()
            if k.startswith(("nv_inference_", "nv_cache_")) and any("model" in s[1] for s in v["samples"])}


def run_requests(s) -> None:
    """The same request history on either server: 5 add_sub requests over HTTP, 3 streams to repeat."""
    c = s.client()
    a = np.arange(4, dtype=np.float32)
    for _ in range(5):
        ins = [httpclient.InferInput("INPUT0", [4], "FP32"), httpclient.InferInput("INPUT1", [4], "FP32")]
        ins[0].set_data_from_numpy(a)
        ins[1].set_data_from_numpy(a)
        c.infer("add_sub", ins)
    g = s.grpc_client()
    done: queue.Queue = queue.Queue()
    g.start_stream(callback=lambda result, error: done.put((result, error)))
    for n in (3, 2, 1):
        inp = grpcclient.InferInput("IN", [n], "INT32")
        inp.set_data_from_numpy(np.arange(n, dtype=np.int32))
        g.async_stream_infer("repeat", [inp], enable_empty_final_response=True)
    finals = 0
    while finals < 3:
        result, error = done.get(timeout=30)
        assert error is None, error
        if result.get_response().parameters["triton_final_response"].bool_param:
            finals += 1
    g.stop_stream()


def scrape(url: str) -> dict:
    return parse(urllib.request.urlopen(url, timeout=10).read().decode())


def both(start_server, start_tritonserver, repo, *flags: str) -> tuple[dict, dict]:
    """Runs the request history through tritonrs and tritonserver with `flags`; both scrapes."""
    python_repo(repo)
    common = ("--model-repository", str(repo), "--allow-metrics=true", "--allow-gpu-metrics=false",
              "--allow-cpu-metrics=false", *flags)
    t = start_tritonserver(*common)
    run_requests(t)
    theirs = scrape(f"http://{t.host}:{t.metrics_port}/metrics")
    s = start_server(*common, "--metrics-port=0")
    run_requests(s)
    port = int(s.wait_for_log(r"Started Metrics Service at [0-9.]+:(\d+)").group(1))
    ours = scrape(f"http://{s.host}:{port}/metrics")
    return per_model(ours), per_model(theirs)


def shape(families: dict) -> dict:
    """What must match exactly: per family its HELP and TYPE, and per sample name its label sets
    (quantile labels included)."""
    out = {}
    for name, f in families.items():
        labels = sorted({(n, tuple(sorted(ls.items()))) for n, ls, _ in f["samples"]})
        out[name] = (f.get("help"), f.get("type"), labels)
    return out


def counts(families: dict) -> dict:
    """Every count: the counters that count requests, and every summary's `_count`."""
    return {(n, tuple(sorted(ls.items()))): v for name, f in families.items() for n, ls, v in f["samples"]
            if n.endswith("_count") or n in ("nv_inference_request_success", "nv_inference_request_failure",
                                              "nv_inference_count", "nv_inference_exec_count")}


def check_summaries(families: dict, names: list[str]) -> None:
    """Values are plausible: sums > 0 where the stage takes time, quantiles not NaN and ordered."""
    for name in names:
        f = families[name]
        by_model: dict = {}
        for n, ls, v in f["samples"]:
            if "quantile" in ls:
                by_model.setdefault(ls["model"], []).append((float(ls["quantile"]), v))
            elif n.endswith("_sum"):
                assert v >= 0, (n, ls, v)
        for model, qs in by_model.items():
            values = [v for _, v in sorted(qs)]
            assert all(not math.isnan(v) and v >= 0 for v in values), (name, model, values)
            assert values == sorted(values), (name, model, values)
    req = {ls["model"]: v for n, ls, v in families["nv_inference_request_summary_us"]["samples"]
           if n == "nv_inference_request_summary_us_sum"}
    assert req and all(v > 0 for v in req.values()), req


SUMMARIES = ["nv_inference_request_summary_us", "nv_inference_queue_summary_us",
             "nv_inference_compute_input_summary_us", "nv_inference_compute_infer_summary_us",
             "nv_inference_compute_output_summary_us"]


def test_summary_latencies_match_tritonserver(start_server, start_tritonserver, repo):
    ours, theirs = both(start_server, start_tritonserver, repo, "--metrics-config=summary_latencies=true")
    assert set(SUMMARIES) <= set(theirs)
    assert shape(ours) == shape(theirs)
    assert counts(ours) == counts(theirs)
    check_summaries(ours, SUMMARIES)


def test_summary_quantiles_and_no_counters_match_tritonserver(start_server, start_tritonserver, repo):
    ours, theirs = both(start_server, start_tritonserver, repo, "--metrics-config", "summary_latencies=true",
                        "--metrics-config=summary_quantiles=0.5:0.05,0.9:0.01,0.99:0.001",
                        "--metrics-config=counter_latencies=false")
    assert "nv_inference_request_duration_us" not in theirs
    quantiles = {ls["quantile"] for _, ls, _ in theirs["nv_inference_queue_summary_us"]["samples"] if "quantile" in ls}
    assert quantiles == {"0.5", "0.9", "0.99"}
    assert shape(ours) == shape(theirs)
    # The summaries count alike. tritonserver 2.51 also stops nv_inference_request_success,
    # nv_inference_count and nv_inference_exec_count with counter_latencies=false (they read 0); tritonrs
    # keeps counting them (README, differences), so they equal its summaries' counts.
    summary_counts = lambda f: {k: v for k, v in counts(f).items() if k[0].endswith("_summary_us_count")}
    assert summary_counts(ours) == summary_counts(theirs)
    ok = {ls["model"]: v for _, ls, v in ours["nv_inference_request_success"]["samples"]}
    assert ok == {ls["model"]: v for n, ls, v in ours["nv_inference_request_summary_us"]["samples"]
                  if n.endswith("_count")}
    check_summaries(ours, SUMMARIES)


def test_default_metrics_match_tritonserver(start_server, start_tritonserver, repo):
    """Without --metrics-config: the counters only, no summary."""
    ours, theirs = both(start_server, start_tritonserver, repo)
    assert not any(k.endswith("_summary_us") for k in theirs)
    assert shape(ours) == shape(theirs)
    assert counts(ours) == counts(theirs)


def test_metrics_config_without_value_stops_both(start_tritonserver, repo):
    """A setting without `=` stops both servers at start."""
    with pytest.raises(RuntimeError, match="--metrics-config option format is <setting>=<value>"):
        start_tritonserver("--model-repository", str(repo), "--metrics-config=summary_latencies")
    r = run_cli("--model-repository", str(repo), "--metrics-config=summary_latencies")
    assert r.returncode != 0
    assert "--metrics-config option format is <setting>=<value>" in r.stderr


def test_unknown_metrics_setting_is_accepted_with_a_warning(start_server, start_tritonserver, repo):
    """tritonserver 2.51 starts with a setting it does not know (and ignores it); tritonrs starts too
    and says in its log that it ignores it."""
    start_tritonserver("--model-repository", str(repo), "--metrics-config=no_such_setting=true")
    s = start_server("--model-repository", str(repo), "--metrics-config=no_such_setting=true")
    s.wait_for_log(r"no_such_setting.*ignore")


def histogram_lines(text: str, model: str) -> dict:
    """{sample name with its labels but `model`/`version`: value} of the first-response histogram."""
    out = {}
    for line in text.splitlines():
        if line.startswith("nv_inference_first_response_histogram_ms") and f'model="{model}"' in line:
            name, value = line.rsplit(" ", 1)
            le = re.search(r'le="([^"]*)"', name)
            out[name.split("{")[0] + (f"[{le.group(1)}]" if le else "")] = float(value)
    return out


def test_histogram_latencies_time_decoupled_models_first_responses(start_server, repo):
    """`histogram_latencies=true` (tritonserver 24.10+; 2.51 ignores it): a histogram of the time to the
    first response of each request to a decoupled model, with tritonserver's family name, HELP, type,
    labels and default buckets; a model's `model_metrics` overrides the buckets; not for other models."""
    python_repo(repo)
    shutil.copytree(repo / "repeat", repo / "repeat_buckets")
    cfg = (repo / "repeat_buckets" / "config.pbtxt").read_text().replace('name: "repeat"', 'name: "repeat_buckets"')
    cfg += ('model_metrics { metric_control [ { metric_identifier { family: '
            '"nv_inference_first_response_histogram_ms" } histogram_options { buckets: [ -1, 0, 1, 2.5 ] } } ] }\n')
    (repo / "repeat_buckets" / "config.pbtxt").write_text(cfg)
    s = start_server("--model-repository", str(repo), "--allow-metrics=true", "--metrics-port=0",
                     "--metrics-config=histogram_latencies=true")
    run_requests(s)
    g = s.grpc_client()
    done: queue.Queue = queue.Queue()
    g.start_stream(callback=lambda result, error: done.put((result, error)))
    inp = grpcclient.InferInput("IN", [2], "INT32")
    inp.set_data_from_numpy(np.arange(2, dtype=np.int32))
    g.async_stream_infer("repeat_buckets", [inp])
    assert [done.get(timeout=30)[1] for _ in range(2)] == [None, None]
    g.stop_stream()
    port = int(s.wait_for_log(r"Started Metrics Service at [0-9.]+:(\d+)").group(1))
    text = urllib.request.urlopen(f"http://{s.host}:{port}/metrics", timeout=10).read().decode()
    name = "nv_inference_first_response_histogram_ms"
    assert f"# HELP {name} Duration from request to first response in milliseconds\n# TYPE {name} histogram" in text
    h = histogram_lines(text, "repeat")
    assert sorted(h) == sorted([f"{name}_bucket[{le}]" for le in ("100", "500", "2000", "5000", "+Inf")]
                               + [f"{name}_sum", f"{name}_count"]), h
    assert h[f"{name}_count"] == 3 and h[f"{name}_bucket[+Inf]"] == 3
    buckets = [h[f"{name}_bucket[{le}]"] for le in ("100", "500", "2000", "5000", "+Inf")]
    assert buckets == sorted(buckets) and h[f"{name}_sum"] >= 0
    assert f'{name}_count{{model="repeat",version="1"}} 3' in text
    o = histogram_lines(text, "repeat_buckets")
    assert sorted(k for k in o if "[" in k) == sorted(f"{name}_bucket[{le}]" for le in ("-1", "0", "1", "2.5", "+Inf"))
    assert o[f"{name}_count"] == 1 and o[f"{name}_bucket[-1]"] == 0
    assert not histogram_lines(text, "add_sub"), "only decoupled models have the histogram"


def test_no_histogram_without_the_setting(start_server, repo):
    python_repo(repo)
    s = start_server("--model-repository", str(repo), "--allow-metrics=true", "--metrics-port=0")
    run_requests(s)
    assert "nv_inference_first_response_histogram_ms" not in "\n".join(s.metrics())


def stats(s, model: str) -> tuple[dict, dict]:
    """The model's statistics over HTTP and over gRPC (as JSON)."""
    http_stats = s.client().get_inference_statistics(model)["model_stats"][0]
    grpc_stats = MessageToDict(s.grpc_client().get_inference_statistics(model).model_stats[0],
                               preserving_proto_field_name=True)
    return http_stats, grpc_stats


def response_counts(stats: dict) -> dict:
    """{index: {stage: count}} of a model's `response_stats` (stages with a count only)."""
    return {idx: {stage: int(v.get("count", 0)) for stage, v in entry.items() if int(v.get("count", 0))}
            for idx, entry in stats.get("response_stats", {}).items()}


def test_response_stats_and_memory_usage(start_server, start_tritonserver, repo):
    """tritonserver 2.51 fills `response_stats` only from what a C API backend reports, and its Python
    backend reports nothing, so it answers `{}` for the decoupled Python model; tritonrs counts every
    decoupled model's responses itself, per response index (README, Differences). `memory_usage` is
    empty in both (the Python backend reports no memory; test_capi_features.py has a C backend that does). Non-decoupled models have no
    `response_stats` in either."""
    python_repo(repo)
    common = ("--model-repository", str(repo))
    t = start_tritonserver(*common)
    run_requests(t)
    s = start_server(*common)
    run_requests(s)
    # Streams of 3, 2 and 1 responses, each followed by the final flag alone.
    expected = {
        "0": {"compute_infer": 3, "compute_output": 3, "success": 3},
        "1": {"compute_infer": 3, "compute_output": 2, "success": 2, "empty_response": 1},
        "2": {"compute_infer": 2, "compute_output": 1, "success": 1, "empty_response": 1},
        "3": {"compute_infer": 1, "empty_response": 1},
    }
    for model in MODELS:
        (theirs_http, theirs_grpc), (ours_http, ours_grpc) = stats(t, model), stats(s, model)
        for ours, theirs in ((ours_http, theirs_http), (ours_grpc, theirs_grpc)):
            assert response_counts(theirs) == {}, (model, theirs)
            assert response_counts(ours) == (expected if model == "repeat" else {}), (model, ours)
            assert ours.get("memory_usage", []) == theirs.get("memory_usage", []) == [], model
    http = s.client().get_inference_statistics("repeat")["model_stats"][0]["response_stats"]
    for entry in http.values():
        for stage in ("success", "empty_response"):
            assert (entry[stage]["count"] == 0) == (entry[stage]["ns"] == 0), entry
        assert entry["success"]["ns"] == entry["compute_infer"]["ns"] - (
            entry["empty_response"]["ns"]) + entry["compute_output"]["ns"], entry
