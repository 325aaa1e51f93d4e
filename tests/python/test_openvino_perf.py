"""perf_analyzer (Triton's own load generator, from the anchors: $PERF_ANALYZER, else
$ANCHORS/bin/perf_analyzer) against an OpenVINO IR model served by the built-in openvino backend, over
HTTP and gRPC. perf_analyzer checks every response it gets; the server's own statistics must count
exactly the requests it sent."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from helpers import copy_models
from test_openvino import OV_MODELS

ANCHORS = Path(os.environ.get("ANCHORS", Path.home() / ".cache/anchors"))
PERF_ANALYZER = Path(os.environ.get("PERF_ANALYZER", ANCHORS / "bin/perf_analyzer"))
REQUESTS = 200
BATCH = 2


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_perf_analyzer_against_an_openvino_model(start_server, repo, protocol):
    if not PERF_ANALYZER.exists():
        pytest.skip(f"perf_analyzer is not installed ({PERF_ANALYZER}; scripts/test-tools.sh)")
    copy_models(repo, "ov_affine", src=OV_MODELS)
    s = start_server("--model-repository", repo)
    port = s.port if protocol == "http" else s.grpc_port
    # --request-count: exactly this many requests, then the report (no time windows to stabilise).
    p = subprocess.run([str(PERF_ANALYZER), "-m", "ov_affine", "-u", f"127.0.0.1:{port}", "-i", protocol,
                        "-b", str(BATCH), "--concurrency-range", "4", "--request-count", str(REQUESTS)],
                       capture_output=True, text=True, timeout=180)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert "error" not in out.lower(), out
    throughput = float(re.search(r"Throughput: ([\d.]+) infer/sec", out).group(1))
    assert throughput > 0, out
    assert int(re.search(r"Request count: (\d+)", out).group(1)) == REQUESTS, out

    stats = s.client().get_inference_statistics("ov_affine")["model_stats"][0]
    inference = stats["inference_stats"]
    assert int(inference["success"]["count"]) == REQUESTS, stats
    assert int(inference["fail"]["count"]) == 0, stats
    assert int(stats["inference_count"]) == REQUESTS * BATCH, stats
    # Four requests in flight on a model with dynamic batching: some ran together.
    assert 0 < int(stats["execution_count"]) < REQUESTS, stats
