"""Response-cache libraries through TRITONCACHE (`--cache-directory`, issue 35): tests/capi/test_cache.c,
a cache written against the documented API, is built here with the system C compiler, and Triton's
own `libtritoncache_local.so` (tritonserver 2.51's, from the anchors) runs as a second implementation.
Differential: the C cache in tritonserver 2.51 and in tritonrs, on the same Python model and requests,
is asked the same things, gets the same settings and stores the same bytes.
A repeated request is answered from the library: its counters show the hit, the model did not run
again, and statistics and metrics count it. A library that is missing, lacks an entry point or was
built for another API version stops the server at start, as tritonserver stops."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from helpers import BIN, REPO_ROOT, TRITONSERVER, copy_models, free_port, run_cli
from test_cache import MODEL, cached_repo, infer
from test_metrics import scrape

SOURCE = REPO_ROOT / "tests" / "capi" / "test_cache.c"
ANCHORS = Path(os.environ.get("ANCHORS", REPO_ROOT / ".anchors"))
TRITON_LOCAL = ANCHORS / "triton" / "pytriton" / "tritonserver" / "caches" / "local" / "libtritoncache_local.so"


def build_cache(caches: Path, name: str, *defines: str) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.fail("no C compiler (Debian package gcc); scripts/test.sh installs one")
    d = caches / name
    d.mkdir(parents=True, exist_ok=True)
    lib = d / f"libtritoncache_{name}.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-pthread", "-o", str(lib), str(SOURCE),
                    *[f"-D{x}" for x in defines]], check=True, capture_output=True, text=True, timeout=120)
    return lib


def counters(path: Path) -> dict[str, str]:
    return dict(re.findall(r"(\w+)=(\S+)", path.read_text()))


def check_hits_are_served_by_the_cache(s, name: str) -> None:
    """Three identical requests over HTTP and gRPC and one different one: the model runs twice."""
    c = s.client()
    g = s.grpc_client()
    first = infer(c, httpclient, 1.0)
    second = infer(c, httpclient, 1.0)
    third = infer(g, grpcclient, 1.0)
    assert (first == second).all() and (first == third).all()
    infer(c, httpclient, 2.0)
    st = c.get_inference_statistics(MODEL)["model_stats"][0]
    assert st["execution_count"] == 2, st
    assert st["inference_stats"]["cache_hit"]["count"] == 2, st
    assert st["inference_stats"]["cache_miss"]["count"] == 2, st
    port = int(s.wait_for_log(r"Started Metrics Service at [0-9.]+:(\d+)").group(1))
    m = scrape(s.host, port)
    assert m[f'nv_cache_num_hits_per_model{{model="{MODEL}",version="1"}}'] == 2
    assert s.wait_for_log(rf"Loaded response cache '{name}' from")
    g.close()


def test_a_c_cache_library_serves_repeated_requests(start_server, repo, tmp_path):
    caches = tmp_path / "caches"
    build_cache(caches, "memo")
    log = tmp_path / "counters.txt"
    s = start_server("--model-repository", cached_repo(repo), "--cache-directory", caches,
                     f"--cache-config=memo,counters={log}", "--cache-config=memo,size=1048576",
                     "--allow-metrics=true", "--metrics-port", "0")
    check_hits_are_served_by_the_cache(s, "memo")
    n = counters(log)
    # Each request looked up once; the two misses were stored; the two repeats were hits.
    assert (n["lookups"], n["hits"], n["misses"], n["inserts"], n["entries"]) == ("4", "2", "2", "2", "2"), n
    # The settings arrive as tritonserver passes them: a JSON object of strings.
    assert n["config"] == f'{{"counters":"{log}","size":"1048576"}}', n


def test_local_stays_built_in_unless_the_cache_directory_holds_a_local_library(start_server, repo, tmp_path):
    caches = tmp_path / "caches"
    build_cache(caches, "memo")
    s = start_server("--model-repository", cached_repo(repo), "--cache-directory", caches,
                     "--cache-config=local,size=1048576")
    c = s.client()
    infer(c, httpclient, 1.0)
    infer(c, httpclient, 1.0)
    assert c.get_inference_statistics(MODEL)["model_stats"][0]["execution_count"] == 1
    assert "Loaded response cache" not in s.log


def tritons_local_cache(root: Path) -> Path:
    """Lays Triton's local cache out as its RPATH ($ORIGIN/../../../../nvidia_pytriton.libs) expects,
    with tritonrs's libtritonserver.so under the wheel's name for the NEEDED entry."""
    if not TRITON_LOCAL.is_file():
        pytest.skip(f"{TRITON_LOCAL} is not there (scripts/test-tools.sh unpacks the anchors)")
    stub = BIN.parent / "libtritonserver.so"
    assert stub.is_file(), f"{stub} was not built (build.rs builds it next to the binary)"
    caches = root / "a" / "b" / "caches"
    (caches / "local").mkdir(parents=True)
    shutil.copy(TRITON_LOCAL, caches / "local" / TRITON_LOCAL.name)
    needed = re.search(r"libtritonserver[^ \]]*\.so", subprocess.run(
        ["readelf", "-d", str(TRITON_LOCAL)], capture_output=True, text=True, check=True).stdout).group(0)
    (root / "nvidia_pytriton.libs").mkdir()
    shutil.copy(stub, root / "nvidia_pytriton.libs" / needed)
    return caches


def test_tritons_own_local_cache_library_runs_in_tritonrs(start_server, repo, tmp_path):
    caches = tritons_local_cache(tmp_path / "triton")
    s = start_server("--model-repository", cached_repo(repo), "--cache-directory", caches,
                     "--cache-config=local,size=1048576", "--allow-metrics=true", "--metrics-port", "0")
    check_hits_are_served_by_the_cache(s, "local")


@pytest.mark.parametrize("defines, expected", [
    ((), r"response cache 'gone' \(.*libtritoncache_gone\.so\): not found"),
    (("OMIT_INSERT",), r"lacks TRITONCACHE_CacheInsert, which every cache must export"),
    (("WANT_MAJOR=1",), r"TRITONCACHE_CacheInitialize: the test cache was built for TRITONCACHE API 1\.x; "
                        r"this server has 0\.1"),
])
def test_a_cache_that_cannot_run_stops_the_server_at_start(repo, tmp_path, defines, expected):
    caches = tmp_path / "caches"
    if defines:
        build_cache(caches, "gone", *defines)
    r = run_cli("--model-repository", str(cached_repo(repo)), "--http-port", "0", "--grpc-port", "0",
                "--cache-directory", str(caches), "--cache-config=gone,size=1024", timeout=60)
    assert r.returncode != 0, r.stderr
    assert re.search(expected, r.stderr), r.stderr
    # tritonserver 2.51 refuses the same library at start too.
    if TRITONSERVER.exists():
        t = subprocess.run([str(TRITONSERVER), "--model-repository", str(repo), "--cache-directory", str(caches),
                            "--cache-config=gone,size=1024", f"--http-port={free_port()}", f"--grpc-port={free_port()}",
                            "--allow-metrics=false"], capture_output=True, text=True, timeout=120)
        assert t.returncode != 0 and "error: creating server" in t.stderr and "cache" in t.stderr, t.stderr


def settled_statistics(c, model: str, requests: int) -> dict:
    """The model's statistics once all `requests` are in them: tritonserver records a request's
    statistics after its response is sent, so they can lag the response by a moment."""
    deadline = time.monotonic() + 30
    while True:
        st = c.get_inference_statistics(model)["model_stats"][0]
        done = st["inference_stats"]["success"]["count"]
        if done >= requests and st["execution_count"] + st["inference_stats"]["cache_hit"]["count"] >= requests:
            return st
        if time.monotonic() > deadline:
            return st
        time.sleep(0.1)


def test_the_same_cache_library_sees_the_same_calls_settings_and_bytes_in_both_servers(
        start_server, start_tritonserver, repo, tmp_path):
    caches = tmp_path / "caches"
    build_cache(caches, "memo")
    copy_models(repo, "add_sub", src=REPO_ROOT / "model-repos" / "python")
    cfg = repo / "add_sub" / "config.pbtxt"
    cfg.write_text(cfg.read_text() + "response_cache { enable: true }\n")
    a = np.array([1, 2, 3, 4], np.float32)
    seen = {}
    for who, start, extra in (("tritonserver", start_tritonserver, []),
                              ("tritonrs", start_server, [f"--backend-config=python,python-executable={sys.executable}"])):
        log, dump = tmp_path / f"{who}.counters", tmp_path / f"{who}.dump"
        s = start("--model-repository", repo, "--cache-directory", caches, *extra,
                  f"--cache-config=memo,counters={log}", f"--cache-config=memo,dump={dump}")
        c = s.client()
        answers = []
        for b in (a, a, a * 2):
            inputs = []
            for name, x in (("INPUT0", a), ("INPUT1", b)):
                i = httpclient.InferInput(name, [4], "FP32")
                i.set_data_from_numpy(x)
                inputs.append(i)
            r = c.infer("add_sub", inputs)
            answers.append((r.as_numpy("OUTPUT0").tolist(), r.as_numpy("OUTPUT1").tolist()))
        st = settled_statistics(c, "add_sub", 3)
        s.stop()
        n = counters(log)
        config = n.pop("config").replace(str(log), "LOG").replace(str(dump), "DUMP")
        seen[who] = (answers, n, config, dump.read_text().splitlines(), st["execution_count"],
                     st["inference_stats"]["cache_hit"]["count"])
    assert seen["tritonrs"][1] == {"lookups": "3", "hits": "1", "misses": "2", "inserts": "2", "entries": "2"}
    assert len(seen["tritonrs"][3]) == 2 and all(seen["tritonrs"][3]), seen["tritonrs"][3]
    # Outputs, counters, settings JSON, the packed entries byte for byte, executions and hits.
    assert seen["tritonrs"] == seen["tritonserver"]
