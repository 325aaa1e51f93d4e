"""The Redis response cache (issue 37): `--cache-config redis,host=...` with tritonserver's redis cache
settings, against Debian's redis-server started here on loopback ports. Hits come from Redis and are
counted; two servers share them; password, ACL user and db; a wrong setting stops the start; a Redis
that is down at start, killed under load or hung never fails a request (a hung one costs a request at
most `socket_timeout`), and hits resume when it is back; TLS with a client certificate."""

from __future__ import annotations

import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
import trustme

from helpers import copy_models, free_port, run_cli, simple_inputs

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None,
                                reason="redis-server is not installed (scripts/test.sh installs it)")

MODEL = "simple"
PREFIX = "tritonrs:cache:"


class Redis:
    """One redis-server on a loopback port, without persistence, stopped by `stop()` (or SIGKILL)."""

    def __init__(self, workdir: Path, port: int | None = None, password: str | None = None,
                 tls: dict | None = None):
        self.workdir, self.port, self.password, self.tls = workdir, port or free_port(), password, tls
        self.proc: subprocess.Popen | None = None

    def start(self) -> "Redis":
        self.workdir.mkdir(parents=True, exist_ok=True)
        args = ["redis-server", "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                "--dir", str(self.workdir), "--databases", "16"]
        if self.tls:
            args += ["--port", "0", "--tls-port", str(self.port), "--tls-cert-file", self.tls["cert"],
                     "--tls-key-file", self.tls["key"], "--tls-ca-cert-file", self.tls["ca"]]
        else:
            args += ["--port", str(self.port)]
        if self.password:
            args += ["--requirepass", self.password]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.cli("PING").strip() == b"PONG":
                return self
            time.sleep(0.05)
        raise AssertionError(f"redis-server on port {self.port} did not answer PING")

    def cli(self, *args: str, db: int = 0) -> bytes:
        cmd = ["redis-cli", "-h", "127.0.0.1", "-p", str(self.port), "-n", str(db), "--raw"]
        if self.password:
            cmd += ["--no-auth-warning", "-a", self.password]
        if self.tls:
            cmd += ["--tls", "--cacert", self.tls["ca"], "--cert", self.tls["client_cert"],
                    "--key", self.tls["client_key"]]
        return subprocess.run(cmd + list(args), capture_output=True, timeout=10).stdout

    def keys(self, db: int = 0) -> list[str]:
        return [k for k in self.cli("KEYS", PREFIX + "*", db=db).decode().split() if k]

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


@pytest.fixture
def redis_factory(tmp_path):
    started: list[Redis] = []

    def make(**kw) -> Redis:
        r = Redis(tmp_path / f"redis{len(started)}", **kw)
        started.append(r)
        return r.start()

    yield make
    for r in started:
        r.kill()


def cached_repo(tmp_path: Path) -> Path:
    repo = copy_models(tmp_path / "repo", MODEL)
    cfg = repo / MODEL / "config.pbtxt"
    cfg.write_text(cfg.read_text() + "response_cache { enable: true }\n")
    return repo


def redis_flags(port: int, *settings: str) -> list[str]:
    flags = ["--cache-config", "redis,host=127.0.0.1", "--cache-config", f"redis,port={port}"]
    for s in settings:
        flags += ["--cache-config", f"redis,{s}"]
    return flags


def infer(client, value: int):
    r = client.infer(MODEL, simple_inputs(httpclient, value))
    assert np.array_equal(r.as_numpy("OUTPUT0"), np.full((1, 16), 2 * value, np.int32))
    return r


def stats(client) -> dict:
    s = client.get_inference_statistics(MODEL)["model_stats"][0]
    return {"executions": s["execution_count"], "hits": s["inference_stats"]["cache_hit"]["count"],
            "misses": s["inference_stats"]["cache_miss"]["count"],
            "success": s["inference_stats"]["success"]["count"]}


def wait_for(predicate, what: str, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = predicate()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"{what} not reached within {timeout}s")


def test_hits_come_from_redis_are_counted_and_shared_between_servers(start_server, redis_factory, tmp_path):
    redis = redis_factory()
    repo = cached_repo(tmp_path)
    a = start_server("--model-repository", repo, *redis_flags(redis.port, "socket_timeout=1000"),
                     "--allow-metrics=true", "--metrics-port", "0")
    ca = a.client()
    infer(ca, 3)  # a miss: the model runs, and the result goes to Redis after the response
    keys = wait_for(redis.keys, "the entry in Redis")
    assert len(keys) == 1 and len(keys[0]) == len(PREFIX) + 32, keys
    stored = redis.cli("GET", keys[0])
    assert stored[0] == 1, stored[:8]  # the layout's version byte
    infer(ca, 3)
    infer(ca, 3)
    assert stats(ca) == {"executions": 1, "hits": 2, "misses": 1, "success": 3}
    m = a.metrics()
    lbl = f'{{model="{MODEL}",version="1"}}'
    assert m[f"nv_cache_num_hits_per_model{lbl}"] == 2 and m[f"nv_cache_num_misses_per_model{lbl}"] == 1
    assert m[f"nv_cache_hit_duration_per_model{lbl}"] > 0
    # A second server with the same model: its very first request is a hit from the first one's run.
    # `redis` is built in: a library of that name in --cache-directory (here not even a library) is not
    # loaded.
    caches = tmp_path / "caches"
    (caches / "redis").mkdir(parents=True)
    (caches / "redis" / "libtritoncache_redis.so").write_text("not a library")
    b = start_server("--model-repository", repo, *redis_flags(redis.port, "socket_timeout=1000"),
                     "--cache-directory", caches)
    b.wait_for_log("own Redis cache serves; .*libtritoncache_redis.so' is not loaded")
    cb = b.client()
    infer(cb, 3)
    assert stats(cb) == {"executions": 0, "hits": 1, "misses": 0, "success": 1}
    # And what it computes, the first server then finds.
    infer(cb, 4)
    wait_for(lambda: len(redis.keys()) == 2, "the second entry in Redis")
    infer(ca, 4)
    assert stats(ca)["executions"] == 1 and stats(ca)["hits"] == 3


def test_password_user_and_db(start_server, redis_factory, tmp_path):
    redis = redis_factory(password="s3cret")
    repo = cached_repo(tmp_path)
    s = start_server("--model-repository", repo,
                     *redis_flags(redis.port, "user=default", "password=s3cret", "db=5", "socket_timeout=1000"))
    c = s.client()
    infer(c, 7)
    wait_for(lambda: redis.keys(db=5), "the entry in db 5")
    assert redis.keys(db=0) == []
    infer(c, 7)
    assert stats(c)["hits"] == 1
    # tritonserver's environment variable carries the password as well.
    t = start_server("--model-repository", repo, *redis_flags(redis.port, "db=5", "socket_timeout=1000"),
                     env={"TRITONCACHE_REDIS_PASSWORD": "s3cret"})
    infer(t.client(), 7)
    assert stats(t.client()) == {"executions": 0, "hits": 1, "misses": 0, "success": 1}


def test_settings_redis_refuses_stop_the_start(redis_factory, tmp_path):
    redis = redis_factory(password="s3cret")
    repo = cached_repo(tmp_path)

    def start(*settings):
        r = run_cli("--model-repository", str(repo), "--http-port", "0", "--grpc-port", "0",
                    *redis_flags(redis.port, *settings))
        assert r.returncode != 0, r.stderr
        return r.stderr

    err = start("password=wrong")
    assert "Failed to initialize the Redis cache at 127.0.0.1:" in err, err
    assert "authentication failed" in err.lower(), err
    assert "DB index is out of range" in start("password=s3cret", "db=99")
    assert "unknown setting 'pool' for the redis cache" in start("pool=2")
    r = run_cli("--model-repository", str(repo), "--http-port", "0", "--cache-config", "redis,host=127.0.0.1")
    assert r.returncode != 0 and "needs at least 'host' and 'port'" in r.stderr, r.stderr


def test_redis_down_at_start_serves_and_connects_when_it_comes(start_server, redis_factory, tmp_path):
    port = free_port()
    s = start_server("--model-repository", cached_repo(tmp_path), *redis_flags(port, "socket_timeout=1000"))
    s.wait_for_log(r"Redis cache at 127\.0\.0\.1:\d+ is unreachable")
    c = s.client()
    for _ in range(3):
        infer(c, 5)  # misses: the model runs every time
    assert stats(c) == {"executions": 3, "hits": 0, "misses": 3, "success": 3}
    redis_factory(port=port)
    # Within the reconnection pause (at most 2 s), results are stored and then served from Redis.
    wait_for(lambda: infer(c, 5) and stats(c)["hits"] > 0, "a hit after Redis came up")
    s.wait_for_log(r"Redis cache at 127\.0\.0\.1:\d+ answers again")


def test_redis_killed_and_restarted_under_load(start_server, redis_factory, tmp_path):
    redis = redis_factory()
    s = start_server("--model-repository", cached_repo(tmp_path), *redis_flags(redis.port))
    failures: list[str] = []
    sent = [0]
    stop = threading.Event()

    def load():
        c = s.client()
        while not stop.is_set() and sent[0] < 20000:
            try:
                infer(c, sent[0] % 4)
            except Exception as e:  # noqa: BLE001 - any failed request is the test's failure
                failures.append(repr(e))
            sent[0] += 1

    worker = threading.Thread(target=load, daemon=True)
    worker.start()
    try:
        c = s.client()
        wait_for(lambda: stats(c)["hits"] > 20, "hits before the kill")
        redis.kill()
        killed = stats(c)
        wait_for(lambda: stats(c)["misses"] > killed["misses"] + 20, "requests served while Redis is down")
        down = stats(c)
        redis.start()  # the same port, empty
        wait_for(lambda: stats(c)["hits"] > down["hits"] + 20, "hits after the restart", timeout=15)
        s.wait_for_log(r"Redis cache at 127\.0\.0\.1:\d+ is unreachable")
        s.wait_for_log(r"answers again")
    finally:
        stop.set()
        worker.join(30)
    assert not failures, failures[:5]
    final = stats(s.client())
    assert final["success"] == sent[0] and final["hits"] + final["misses"] == sent[0], (final, sent)


def test_a_hung_redis_costs_a_request_at_most_its_socket_timeout(start_server, redis_factory, tmp_path):
    redis = redis_factory()
    s = start_server("--model-repository", cached_repo(tmp_path), *redis_flags(redis.port, "socket_timeout=100"))
    c = s.client()
    infer(c, 1)
    wait_for(redis.keys, "the entry in Redis")
    wait_for(lambda: infer(c, 1) and stats(c)["hits"] > 0, "a hit")
    redis.proc.send_signal(signal.SIGSTOP)  # connections stay open; nothing answers
    try:
        before = stats(c)
        for _ in range(10):
            t = time.monotonic()
            infer(c, 1)
            assert time.monotonic() - t < 1.0
        after = stats(c)
        assert after["hits"] == before["hits"] and after["executions"] == before["executions"] + 10, (before, after)
        assert after["success"] == before["success"] + 10
    finally:
        redis.proc.send_signal(signal.SIGCONT)
    wait_for(lambda: infer(c, 1) and stats(c)["hits"] > after["hits"], "a hit once Redis answers again")


@pytest.fixture
def certs(tmp_path):
    ca = trustme.CA()
    server = ca.issue_cert("localhost", "127.0.0.1")
    client = ca.issue_cert("tritonrs.client")
    files = {}
    for name, blob in [("ca", ca.cert_pem), ("key", server.private_key_pem), ("client_key", client.private_key_pem)]:
        files[name] = str(tmp_path / f"{name}.pem")
        blob.write_to_path(files[name])
    for name, issued in [("cert", server), ("client_cert", client)]:
        files[name] = str(tmp_path / f"{name}.pem")
        Path(files[name]).write_bytes(b"".join(b.bytes() for b in issued.cert_chain_pems))
    return files


def test_tls_with_a_client_certificate(start_server, redis_factory, tmp_path, certs):
    # Redis asks TLS clients for a certificate by default (tls-auth-clients yes).
    redis = redis_factory(tls=certs)
    tls = ["tls_enabled=true", f"cacert={certs['ca']}", f"cert={certs['client_cert']}",
           f"key={certs['client_key']}", "sni=localhost", "socket_timeout=1000"]
    s = start_server("--model-repository", cached_repo(tmp_path), *redis_flags(redis.port, *tls))
    c = s.client()
    infer(c, 9)
    wait_for(redis.keys, "the entry in Redis over TLS")
    infer(c, 9)
    assert stats(c)["hits"] == 1
    # A certificate not signed by the CA given: Redis answered, and the start stops saying why.
    other = trustme.CA()
    other.cert_pem.write_to_path(str(tmp_path / "other.pem"))
    bad = [t if not t.startswith("cacert=") else f"cacert={tmp_path / 'other.pem'}" for t in tls]
    r = run_cli("--model-repository", str(tmp_path / "repo"), "--http-port", "0", "--grpc-port", "0",
                *redis_flags(redis.port, *bad))
    assert r.returncode != 0 and "Failed to initialize the Redis cache" in r.stderr and "TLS" in r.stderr, r.stderr
