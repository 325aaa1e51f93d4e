"""Rate limiter: `--rate-limit execution_count` with `rate_limiter` resources in instance groups."""

from __future__ import annotations

import threading
import time

import numpy as np
import tritonclient.http as httpclient

from helpers import copy_models, run_cli

MODEL = "batched_scale"


def limited_copy(repo, name: str, resources: str, priority: int = 1, count: int = 1, max_batch_size: int = 16):
    copy_models(repo, MODEL)
    (repo / MODEL).rename(repo / name)
    cfg = repo / name / "config.pbtxt"
    text = cfg.read_text().replace(f'name: "{MODEL}"', f'name: "{name}"')
    text = text.replace("max_batch_size: 16", f"max_batch_size: {max_batch_size}")
    text = text.replace("preferred_batch_size: [ 4, 8, 16 ]", "")
    text = text.replace(
        "instance_group [ { count: 1, kind: KIND_CPU } ]",
        f"instance_group [ {{ count: {count}, kind: KIND_CPU, "
        f"rate_limiter {{ resources [ {resources} ] priority: {priority} }} }} ]",
    )
    cfg.write_text(text)


def busy_time_ns(client, name) -> int:
    st = client.get_inference_statistics(name)["model_stats"][0]
    return sum(b["compute_infer"]["ns"] for b in st["batch_stats"])


def hammer(s, names, per_thread=15, threads_per_model=3):
    errors = []

    def worker(name, w):
        c = s.client()
        try:
            for k in range(per_thread):
                x = np.full((1, 16), float(w * 100 + k), np.float32)
                i = httpclient.InferInput("INPUT", [1, 16], "FP32")
                i.set_data_from_numpy(x)
                out = c.infer(name, [i]).as_numpy("OUTPUT")
                if not np.array_equal(out, x * 2):
                    errors.append((name, out))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
        finally:
            c.close()

    ts = [threading.Thread(target=worker, args=(n, w)) for n in names for w in range(threads_per_model)]
    start = time.monotonic_ns()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return time.monotonic_ns() - start, errors


def flood(s, names, n=40):
    """Queues n requests per model at once over gRPC so every instance always has work; returns the
    elapsed time until the last answer."""
    import queue

    import tritonclient.grpc as grpcclient

    c = s.grpc_client()
    results = queue.Queue()
    start = time.monotonic_ns()
    for k in range(n):
        for name in names:
            x = np.full((1, 16), float(k), np.float32)
            i = grpcclient.InferInput("INPUT", [1, 16], "FP32")
            i.set_data_from_numpy(x)
            c.async_infer(name, [i], callback=lambda result, error: results.put(error))
    errors = [e for e in (results.get(timeout=60) for _ in range(n * len(names))) if e is not None]
    wall = time.monotonic_ns() - start
    c.close()
    return wall, errors


def test_a_shared_resource_serialises_executions_across_models(start_server, repo):
    # One request per execution, so the three instances always have separate work to overlap.
    limited_copy(repo, "a", '{ name: "R" count: 1 }', max_batch_size=1)
    limited_copy(repo, "b", '{ name: "R" count: 1 }', count=2, max_batch_size=1)
    s = start_server("--model-repository", repo, "--rate-limit", "execution_count")
    wall, errors = flood(s, ["a", "b"])
    assert not errors, errors[:3]
    c = s.client()
    busy = busy_time_ns(c, "a") + busy_time_ns(c, "b")
    # One unit of R exists, so executions never overlap: together they fit in the elapsed time.
    assert busy <= wall, (busy, wall)


def test_global_resources_and_priorities_still_serve_everything(start_server, repo):
    limited_copy(repo, "a", '{ name: "G" global: true count: 2 }', priority=1)
    limited_copy(repo, "b", '{ name: "G" global: true count: 1 }', priority=3, count=2)
    s = start_server("--model-repository", repo, "--rate-limit", "execution_count",
                     "--rate-limit-resource", "G:2")
    _, errors = hammer(s, ["a", "b"], per_thread=8)
    assert not errors, errors[:3]


def test_without_rate_limit_the_resources_are_ignored(start_server, repo):
    limited_copy(repo, "a", '{ name: "R" count: 5 }')
    s = start_server("--model-repository", repo, "--rate-limit-resource", "R:1")
    _, errors = hammer(s, ["a"], per_thread=3)
    assert not errors


def test_a_need_beyond_the_fixed_pool_fails_the_load(start_server, repo):
    limited_copy(repo, "a", '{ name: "R" count: 4 }')
    copy_models(repo, "simple")
    s = start_server("--model-repository", repo, "--rate-limit", "execution_count",
                     "--rate-limit-resource", "R:2", wait="live")
    s.wait_until(lambda: any(r.get("state") == "UNAVAILABLE" for r in s.index_rows("a")), what="a UNAVAILABLE")
    reason = s.index_rows("a")[0]["reason"]
    assert "needs 4 of resource 'R'" in reason, reason
    s.wait_until(lambda: s.client().is_model_ready("simple"), what="simple READY")


def test_bad_rate_limit_flags_stop_the_server():
    r = run_cli("--model-repository", "/nonexistent", "--rate-limit", "sometimes")
    assert r.returncode != 0 and "--rate-limit" in r.stdout + r.stderr
    r = run_cli("--model-repository", "/nonexistent", "--rate-limit", "execution_count",
                "--rate-limit-resource", "R")
    assert r.returncode != 0 and "--rate-limit-resource" in r.stdout + r.stderr
