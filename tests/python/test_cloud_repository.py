"""Cloud model repositories: S3 (moto's server on loopback, also behind a proxy that cuts downloads
off) and Azure (Azurite from npm). The server caches each model under --repository-cache-dir, follows
the bucket in poll mode, loads from it on request in explicit mode, loads from the cache after a
restart without downloading, and keeps serving when the storage fails."""

from __future__ import annotations

import http.client
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from helpers import EXAMPLES, REPO_ROOT, copy_models, run_cli, wait_port

boto3 = pytest.importorskip("boto3")
moto_server = pytest.importorskip("moto.server")

AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
POLL = 20  # seconds to wait for a poll (1 s interval) to act


def simple_infer(c, version: str = "") -> list:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    i0 = httpclient.InferInput("INPUT0", [1, 16], "INT32")
    i0.set_data_from_numpy(a)
    i1 = httpclient.InferInput("INPUT1", [1, 16], "INT32")
    i1.set_data_from_numpy(np.ones((1, 16), np.int32))
    return c.infer("simple", [i0, i1], model_version=version).as_numpy("OUTPUT0").tolist()


EXPECTED = [list(range(1, 17))]


def free_port() -> int:
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        return so.getsockname()[1]


# ---- S3 --------------------------------------------------------------------------------------


@pytest.fixture
def s3(monkeypatch):
    """moto's S3 server on a loopback port, and a boto3 client for it."""
    import logging

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    # moto keeps its buckets per process, not per server: each test starts from none.
    reset = urllib.request.Request(f"http://{host}:{port}/moto-api/reset", method="POST")
    urllib.request.urlopen(reset, timeout=10).read()
    for k, v in AWS_ENV.items():
        monkeypatch.setenv(k, v)
    client = boto3.client("s3", endpoint_url=f"http://{host}:{port}", region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
    client.endpoint = f"{host}:{port}"
    yield client
    server.stop()


def upload(s3, bucket: str, prefix: str, name: str, src: Path = EXAMPLES, as_name: str | None = None):
    for f in sorted((src / name).rglob("*")):
        if f.is_file():
            key = f"{prefix}/{as_name or name}/{f.relative_to(src / name)}"
            s3.put_object(Bucket=bucket, Key=key, Body=f.read_bytes())


def delete_model(s3, bucket: str, prefix: str, name: str):
    for o in s3.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/{name}/").get("Contents", []):
        s3.delete_object(Bucket=bucket, Key=o["Key"])


@pytest.fixture
def bucket(s3):
    s3.create_bucket(Bucket="fleet")
    upload(s3, "fleet", "models", "simple")
    return "fleet"


def serve(start_server, url, cache, *extra, **kw):
    return start_server("--model-repository", url, "--repository-cache-dir", cache, "--allow-metrics=true",
                        "--metrics-port", "0", *extra, env=AWS_ENV, **kw)


def test_s3_repository_is_served_and_followed_in_poll_mode(start_server, s3, bucket, tmp_path):
    upload(s3, bucket, "models", "vlen_scale")
    url = f"s3://{s3.endpoint}/{bucket}/models"
    s = serve(start_server, url, tmp_path / "cache", "--model-control-mode=poll", "--repository-poll-secs=1")
    c = s.client()
    assert simple_infer(c) == EXPECTED
    assert c.is_model_ready("vlen_scale")
    m = s.metrics()
    label = f'{{repository="{url}"}}'
    files = sum(1 for p in (EXAMPLES / "simple").rglob("*") if p.is_file()) + \
        sum(1 for p in (EXAMPLES / "vlen_scale").rglob("*") if p.is_file())
    assert m[f"tritonrs_repository_download_files_total{label}"] == files
    assert m[f"tritonrs_repository_download_bytes_total{label}"] > 0
    assert m[f"tritonrs_repository_download_pending_bytes{label}"] == 0
    assert m[f"tritonrs_repository_sync_failures_total{label}"] == 0
    s.wait_for_log(r"Downloaded model 'simple' from 's3://[^']+': \d+ files")

    # Added, changed (a new version) and removed models are noticed.
    upload(s3, bucket, "models", "multi_version")
    s.wait_until(lambda: c.is_model_ready("multi_version"), timeout=POLL, what="multi_version READY")
    s3.put_object(Bucket=bucket, Key="models/simple/2/model.onnx", Body=(EXAMPLES / "simple/1/model.onnx").read_bytes())
    s.wait_until(lambda: c.is_model_ready("simple", "2"), timeout=POLL, what="simple version 2 READY")
    assert simple_infer(c, "2") == EXPECTED
    delete_model(s3, bucket, "models", "vlen_scale")
    s.wait_until(lambda: not c.is_model_ready("vlen_scale"), timeout=POLL, what="vlen_scale unloaded")
    assert simple_infer(c) == EXPECTED


def test_a_restart_loads_from_the_cache_without_downloading(start_server, s3, bucket, tmp_path):
    url = f"s3://{s3.endpoint}/{bucket}/models"
    cache = tmp_path / "cache"
    s = serve(start_server, url, cache)
    assert simple_infer(s.client()) == EXPECTED
    assert s.metrics()[f'tritonrs_repository_download_bytes_total{{repository="{url}"}}'] > 0
    s.stop()
    s = serve(start_server, url, cache)
    assert simple_infer(s.client()) == EXPECTED
    assert s.metrics()[f'tritonrs_repository_download_bytes_total{{repository="{url}"}}'] == 0
    # The cache holds one generation per model behind a link; the core reads the generation.
    view = next((cache / "repositories").iterdir()) / "models"
    assert (view / "simple").is_symlink() and (view / "simple" / "1" / "model.onnx").is_file()


def test_explicit_mode_loads_from_the_bucket_on_request(start_server, s3, bucket, tmp_path):
    upload(s3, bucket, "models", "vlen_scale")
    url = f"s3://{s3.endpoint}/{bucket}/models"
    s = serve(start_server, url, tmp_path / "cache", "--model-control-mode=explicit", "--load-model=vlen_scale")
    c = s.client()
    assert c.is_model_ready("vlen_scale")
    # The index lists what the bucket holds, downloaded or not.
    names = {r["name"]: r for r in c.get_model_repository_index()}
    assert set(names) == {"simple", "vlen_scale"}
    assert names["simple"].get("state", "") == ""
    c.load_model("simple")
    assert simple_infer(c) == EXPECTED
    with pytest.raises(InferenceServerException, match="no model folder of that name"):
        c.load_model("absent")
    # A model added after start-up loads on request too.
    upload(s3, bucket, "models", "multi_version")
    c.load_model("multi_version")
    assert c.is_model_ready("multi_version")


def test_unreachable_storage_does_not_stop_the_server(start_server, tmp_path, repo):
    copy_models(repo, "simple")
    url = f"s3://127.0.0.1:{free_port()}/fleet/models"
    s = start_server("--model-repository", repo, "--model-repository", url, "--repository-cache-dir",
                     tmp_path / "cache", "--model-control-mode=explicit", "--load-model=*", env=AWS_ENV, timeout=60)
    assert simple_infer(s.client()) == EXPECTED
    line = s.wait_for_log(rf"cannot list the model repository '{url}': .*", timeout=30).group(0)
    assert "onnect" in line, line  # the cause: connection refused
    c = s.client()
    with pytest.raises(InferenceServerException, match=f"cannot list the model repository '{url}'"):
        c.load_model("elsewhere")
    assert s.is_running()


def test_missing_bucket_and_prefix_are_named(start_server, s3, bucket, tmp_path):
    no_bucket = f"s3://{s3.endpoint}/absent-bucket/models"
    no_prefix = f"s3://{s3.endpoint}/{bucket}/nothing-here"
    s = serve(start_server, no_bucket, tmp_path / "c1", "--model-repository", no_prefix, "--strict-readiness=false")
    s.wait_for_log(rf"cannot list the model repository '{no_bucket}': .*NoSuchBucket", timeout=30)
    s.wait_for_log(rf"the model repository '{no_prefix}' holds no objects", timeout=30)
    assert s.client().get_model_repository_index() == []


# Keys that no file path may have: a '..', '.' or empty part, a control character. Each used to stop
# every listing of the repository ("illegal character sequence").
BAD_KEYS = ["models/simple/../../../escape.txt", "models/simple/./dot.txt", "models/simple//empty.txt",
            "models/simple/tab\there.txt", "models/elsewhere/../../up.txt"]


def skipped_log(key: str) -> str:
    """The warning that names a skipped key (control characters escaped as Rust's escape_debug does)."""
    return re.escape(f"'{key.replace(chr(9), chr(92) + 't')}'") + r" of 's3://[^']+' is skipped"


def test_a_bad_object_key_is_skipped_and_the_rest_syncs(start_server, s3, bucket, tmp_path):
    for k in BAD_KEYS:
        s3.put_object(Bucket=bucket, Key=k, Body=b"not a model file")
    url = f"s3://{s3.endpoint}/{bucket}/models"
    s = serve(start_server, url, tmp_path / "cache", "--model-control-mode=poll", "--repository-poll-secs=1")
    c = s.client()
    assert simple_infer(c) == EXPECTED
    for k in BAD_KEYS:
        s.wait_for_log(skipped_log(k), timeout=POLL)
    # The rest keeps syncing: a model added later is brought in, and no poll fails.
    upload(s3, bucket, "models", "vlen_scale")
    s.wait_until(lambda: c.is_model_ready("vlen_scale"), timeout=POLL, what="vlen_scale READY")
    assert s.metrics()[f'tritonrs_repository_sync_failures_total{{repository="{url}"}}'] == 0
    assert "illegal character sequence" not in s.log
    # Named once, not at every poll.
    assert len(re.findall(skipped_log(BAD_KEYS[0]), s.log)) == 1
    # Nothing of a skipped key reached the disk, in the cache or beside it.
    assert not [p for p in tmp_path.rglob("*") if p.name in ("escape.txt", "dot.txt", "empty.txt", "up.txt")]


def test_object_names_with_url_characters_are_fetched_under_their_own_name(start_server, s3, bucket, tmp_path):
    # Characters object_store encodes in a path of its own making ('~', '%', '#') were encoded twice.
    files = {"notes~1.txt": b"tilde", "100%.txt": b"percent", "a#b.txt": b"hash", "x%7E.txt": b"encoded-looking",
             "sp ace+plus.txt": b"space"}
    for name, body in files.items():
        s3.put_object(Bucket=bucket, Key=f"models/simple/{name}", Body=body)
    url = f"s3://{s3.endpoint}/{bucket}/models"
    cache = tmp_path / "cache"
    s = serve(start_server, url, cache)
    assert simple_infer(s.client()) == EXPECTED
    view = next((cache / "repositories").iterdir()) / "models" / "simple"
    assert {n: (view / n).read_bytes() for n in files} == files
    assert s.metrics()[f'tritonrs_repository_sync_failures_total{{repository="{url}"}}'] == 0


def big_config(dest: Path, name: str, size: int):
    """A copy of `simple` named `name` whose config.pbtxt is padded with comments to `size` bytes."""
    copy_models(dest, "simple")
    (dest / "simple").rename(dest / name)
    cfg = dest / name / "config.pbtxt"
    text = cfg.read_text().replace('name: "simple"', f'name: "{name}"')
    line = "# " + "x" * 1021 + "\n"
    cfg.write_text(text + line * ((size - len(text)) // len(line) + 1))


def test_oversized_configs_and_labels_are_refused_from_their_listed_size(start_server, s3, bucket, tmp_path):
    src = tmp_path / "src"
    big_config(src, "bigcfg", 2 << 20)
    copy_models(src, "simple")
    (src / "simple").rename(src / "biglabels")
    cfg = src / "biglabels" / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace('name: "simple"', 'name: "biglabels"')
                   .replace('name: "OUTPUT0"', 'name: "OUTPUT0"\n    label_filename: "labels.txt"', 1))
    (src / "biglabels" / "labels.txt").write_bytes(b"label\n" * ((16 << 20) // 6 + 1000))
    upload(s3, bucket, "models", "bigcfg", src=src)
    upload(s3, bucket, "models", "biglabels", src=src)
    url = f"s3://{s3.endpoint}/{bucket}/models"
    s = serve(start_server, url, tmp_path / "cache", "--model-control-mode=explicit", "--load-model=simple")
    c = s.client()
    assert simple_infer(c) == EXPECTED
    with pytest.raises(InferenceServerException,
                       match=r"bigcfg/config.pbtxt' is listed at \d+ bytes, over the limit of 1048576 bytes"):
        c.load_model("bigcfg")
    with pytest.raises(InferenceServerException,
                       match=r"biglabels/labels.txt' is listed at \d+ bytes, over the limit of 16777216 bytes"):
        c.load_model("biglabels")
    # Neither big file was downloaded: only simple's files and biglabels' small config were.
    assert s.metrics()[f'tritonrs_repository_download_bytes_total{{repository="{url}"}}'] < 1 << 20
    assert simple_infer(c) == EXPECTED


def test_model_files_are_bounded_by_repository_max_file_mb(start_server, s3, bucket, tmp_path):
    src = tmp_path / "src"
    copy_models(src, "simple")
    (src / "simple").rename(src / "bigfile")
    cfg = src / "bigfile" / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace('name: "simple"', 'name: "bigfile"'))
    (src / "bigfile" / "1" / "weights.bin").write_bytes(b"\0" * (2 << 20))
    upload(s3, bucket, "models", "bigfile", src=src)
    url = f"s3://{s3.endpoint}/{bucket}/models"
    s = serve(start_server, url, tmp_path / "cache", "--model-control-mode=explicit", "--load-model=simple",
              "--repository-max-file-mb=1")
    c = s.client()
    assert simple_infer(c) == EXPECTED
    with pytest.raises(InferenceServerException, match=r"bigfile/1/weights.bin' is listed at 2097152 bytes, over "
                       r"the limit of 1 MiB for a model file \(--repository-max-file-mb\)"):
        c.load_model("bigfile")
    assert s.metrics()[f'tritonrs_repository_download_bytes_total{{repository="{url}"}}'] < 1 << 20
    # A bound is a number of MiB; zero or a word stops the server with the flag's name.
    r = run_cli("--model-repository", url, "--repository-max-file-mb", "0", "--http-port", "0")
    assert r.returncode != 0 and "--repository-max-file-mb" in r.stderr, r.stderr


class CuttingProxy:
    """An HTTP proxy in front of moto that, while `cut` is set, answers a GET of a `model.onnx` object
    with its full Content-Length but only half the body, then closes the connection."""

    def __init__(self, upstream: str):
        self.upstream = upstream
        self.cut = False
        self.cuts = 0
        # While `stall` is set, half of a model.onnx body is sent and the rest waits for `release`.
        self.stall = False
        self.stalled = threading.Event()
        self.release = threading.Event()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _forward(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else None
                conn = http.client.HTTPConnection(proxy.upstream, timeout=30)
                conn.request(self.command, self.path, body=body,
                             headers={k: v for k, v in self.headers.items() if k.lower() != "connection"})
                r = conn.getresponse()
                data = r.read()
                model_get = self.command == "GET" and self.path.split("?")[0].endswith("model.onnx")
                cutting = (proxy.cut or proxy.stall) and model_get
                self.send_response(r.status)
                for k, v in r.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                if cutting:
                    proxy.cuts += 1
                    self.send_header("Connection", "close")
                    self.end_headers()
                    self.wfile.write(data[: len(data) // 2])
                    self.wfile.flush()
                    if proxy.stall:
                        proxy.stalled.set()
                        proxy.release.wait(60)
                    self.close_connection = True
                    return
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = _forward

        class Server(ThreadingHTTPServer):
            def handle_error(self, request, client_address):
                pass  # a client that hangs up on a cut body is the point, not a failure

        self.server = Server(("127.0.0.1", 0), Handler)
        self.endpoint = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()


def test_a_download_cut_off_never_reaches_the_served_model(start_server, s3, bucket, tmp_path):
    proxy = CuttingProxy(s3.endpoint)
    try:
        url = f"s3://{proxy.endpoint}/{bucket}/models"
        s = serve(start_server, url, tmp_path / "cache", "--model-control-mode=poll", "--repository-poll-secs=1")
        c = s.client()
        assert simple_infer(c) == EXPECTED
        proxy.cut = True
        s3.put_object(Bucket=bucket, Key="models/simple/2/model.onnx",
                      Body=(EXAMPLES / "simple/1/model.onnx").read_bytes())
        s.wait_for_log(rf"the download of '{url}/simple/2/model.onnx' was cut off after \d+ of \d+ bytes", timeout=POLL)
        assert proxy.cuts >= 1
        # Version 1 serves throughout; version 2 never appears half-written.
        assert simple_infer(c) == EXPECTED
        assert not c.is_model_ready("simple", "2")
        assert s.metrics()[f'tritonrs_repository_sync_failures_total{{repository="{url}"}}'] >= 1
        proxy.cut = False
        s.wait_until(lambda: c.is_model_ready("simple", "2"), timeout=POLL, what="simple version 2 READY")
        assert simple_infer(c, "2") == EXPECTED
    finally:
        proxy.close()


def test_wrong_credentials_are_named(start_server, tmp_path):
    # moto in its own process with authentication on (INITIAL_NO_AUTH_ACTION_COUNT=0): an unknown key
    # is refused, as AWS refuses it.
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            env={**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "0"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port, proc, "moto")
        url = f"s3://127.0.0.1:{port}/fleet/models"
        s = start_server("--model-repository", url, "--repository-cache-dir", tmp_path / "cache",
                         "--strict-readiness=false", env={**AWS_ENV, "AWS_ACCESS_KEY_ID": "not-a-key"})
        s.wait_for_log(rf"cannot list the model repository '{url}': .*InvalidAccessKeyId", timeout=30)
        assert s.client().get_model_repository_index() == []
    finally:
        proc.kill()
        proc.wait(10)


def test_a_server_killed_mid_download_loads_no_partial_model(start_server, s3, bucket, tmp_path):
    proxy = CuttingProxy(s3.endpoint)
    try:
        url = f"s3://{proxy.endpoint}/{bucket}/models"
        cache = tmp_path / "cache"
        proxy.stall = True
        s = serve(start_server, url, cache, wait="live")
        s.wait_until(lambda: proxy.stalled.is_set(), timeout=30, what="a download under way")
        s.proc.kill()
        s.proc.wait(10)
        root = next((cache / "repositories").iterdir())
        assert list((root / "store" / "simple").glob("g*.partial")), "the download was under way"
        assert not (root / "models" / "simple").exists(), "no link to a partial model"
        proxy.stall = False
        proxy.release.set()
        s = serve(start_server, url, cache)
        assert simple_infer(s.client()) == EXPECTED
        assert not list((root / "store" / "simple").glob("g*.partial"))
    finally:
        proxy.release.set()
        proxy.close()


def test_the_credential_file_is_tritonservers_layout(start_server, s3, bucket, tmp_path):
    creds = tmp_path / "cloud_credential.json"
    creds.write_text('{"s3": {"": {"key_id": "testing", "secret_key": "testing", "region": "us-east-1"}}}')
    url = f"s3://{s3.endpoint}/{bucket}/models"
    env = {k: "" for k in AWS_ENV}
    s = start_server("--model-repository", url, "--repository-cache-dir", tmp_path / "cache",
                     env={**env, "TRITON_CLOUD_CREDENTIAL_PATH": str(creds)})
    assert simple_infer(s.client()) == EXPECTED
    # A file that is not JSON stops the server with a clear message (and none of its contents).
    creds.write_text("secret-value-not-json")
    r = run_cli("--model-repository", url, "--cloud-credential-path", str(creds), "--http-port", "0",
                "--grpc-port", "0", "--allow-metrics=false")
    assert r.returncode != 0
    assert "not in tritonserver's layout" in r.stderr and "secret-value" not in r.stderr, r.stderr


def test_validate_skips_cloud_repositories():
    # The systemd unit runs validate before the server: a cloud repository must not fail it.
    r = run_cli("validate", "--model-repository", str(EXAMPLES), "--model-repository", "s3://fleet/models")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SKIP  's3://fleet/models' is a cloud repository" in r.stdout
    assert "OK    simple" in r.stdout


# ---- Azure (Azurite) ----------------------------------------------------------------------------

AZURITE = REPO_ROOT / ".npm" / "node_modules" / ".bin" / "azurite-blob"
AZURITE_ACCOUNT = "devstoreaccount1"
# Azurite's published development key.
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


@pytest.fixture
def azurite(tmp_path):
    if not AZURITE.exists():
        pytest.fail(f"Azurite is not installed at {AZURITE}: scripts/test.sh installs it with npm")
    port = free_port()
    proc = subprocess.Popen([str(AZURITE), "--silent", "--inMemoryPersistence", "--disableTelemetry",
                             "--skipApiVersionCheck", "--loose", "--blobHost", "127.0.0.1", "--blobPort", str(port)],
                            cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wait_port(port, proc, "Azurite")
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(10)


def container_with_simple(azurite: str):
    """A "models" container in Azurite holding the example `simple` under `repo/`."""
    from azure.storage.blob import BlobServiceClient

    conn = (f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
            f"BlobEndpoint={azurite}/{AZURITE_ACCOUNT};")
    container = BlobServiceClient.from_connection_string(conn).create_container("models")
    for f in sorted((EXAMPLES / "simple").rglob("*")):
        if f.is_file():
            container.upload_blob(f"repo/simple/{f.relative_to(EXAMPLES / 'simple')}", f.read_bytes())
    return container


def test_azure_repository_through_azurite(start_server, azurite, tmp_path):
    container = container_with_simple(azurite)
    url = f"as://{AZURITE_ACCOUNT}/models/repo"
    env = {"AZURE_STORAGE_USE_EMULATOR": "true", "AZURITE_BLOB_STORAGE_URL": azurite}
    s = start_server("--model-repository", url, "--repository-cache-dir", tmp_path / "cache", env=env)
    assert simple_infer(s.client()) == EXPECTED

    # A wrong account key: access is denied, the server says so and keeps serving its local models.
    repo = tmp_path / "local"
    copy_models(repo, "vlen_scale")
    wrong = "d3Jvbmcta2V5LW5vdC10aGUtYWNjb3VudHM="
    s2 = start_server("--model-repository", repo, "--model-repository", url, "--repository-cache-dir",
                      tmp_path / "cache2", env={**env, "AZURE_STORAGE_KEY": wrong}, timeout=60)
    s2.wait_for_log(rf"cannot list the model repository '{url}': .*(403|uthoriz)", timeout=30)
    assert s2.client().is_model_ready("vlen_scale")
    assert not s2.client().is_model_ready("simple")


def test_azure_skips_bad_names_and_fetches_url_characters(start_server, azurite, tmp_path):
    container = container_with_simple(azurite)
    container.upload_blob("repo/simple/tab\tname.txt", b"bad")
    container.upload_blob("repo/simple//empty.txt", b"bad")
    container.upload_blob("repo/simple/notes~1.txt", b"tilde")
    url = f"as://{AZURITE_ACCOUNT}/models/repo"
    env = {"AZURE_STORAGE_USE_EMULATOR": "true", "AZURITE_BLOB_STORAGE_URL": azurite}
    cache = tmp_path / "cache"
    s = start_server("--model-repository", url, "--repository-cache-dir", cache, env=env)
    assert simple_infer(s.client()) == EXPECTED
    s.wait_for_log(re.escape(r"'repo/simple/tab\tname.txt' of 'as://") + r"[^']+' is skipped")
    s.wait_for_log(re.escape("'repo/simple//empty.txt' of 'as://") + r"[^']+' is skipped")
    view = next((cache / "repositories").iterdir()) / "models" / "simple"
    assert (view / "notes~1.txt").read_bytes() == b"tilde"


def test_repository_agents_run_on_cloud_models(start_server, s3, tmp_path):
    """checksum and decrypt on models that come from S3: the agents see the cached download."""
    import hashlib

    s3.create_bucket(Bucket="agents")
    local = tmp_path / "src"
    copy_models(local, "simple")
    digest = hashlib.md5((local / "simple/1/model.onnx").read_bytes()).hexdigest()
    cfg = local / "simple/config.pbtxt"
    cfg.write_text(cfg.read_text() + '\nmodel_repository_agents { agents [ { name: "checksum" parameters [ '
                   f'{{ key: "MD5:1/model.onnx" value: "{digest}" }} ] }} ] }}\n')
    upload(s3, "agents", "models", "simple", src=local)
    # The same model encrypted, as "secret".
    plain = tmp_path / "plain"
    copy_models(plain, "simple")
    pc = plain / "simple/config.pbtxt"
    pc.write_text(pc.read_text().replace('name: "simple"', 'name: "secret"')
                  + '\nmodel_repository_agents { agents [ { name: "decrypt" } ] }\n')
    key = tmp_path / "key"
    key.write_bytes(os.urandom(32))
    key.chmod(0o600)
    r = run_cli("encrypt-model", str(plain / "simple"), "--key-file", str(key), "--output", str(tmp_path / "enc" / "secret"))
    assert r.returncode == 0, r.stderr
    upload(s3, "agents", "models", "secret", src=tmp_path / "enc")
    url = f"s3://{s3.endpoint}/agents/models"
    s = serve(start_server, url, tmp_path / "cache",
              f"--repoagent-config=decrypt,key-file={key};decrypt,work-dir={tmp_path / 'work'}")
    c = s.client()
    assert simple_infer(c) == EXPECTED
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    i0 = httpclient.InferInput("INPUT0", [1, 16], "INT32")
    i0.set_data_from_numpy(a)
    i1 = httpclient.InferInput("INPUT1", [1, 16], "INT32")
    i1.set_data_from_numpy(np.ones((1, 16), np.int32))
    assert c.infer("secret", [i0, i1]).as_numpy("OUTPUT0").tolist() == EXPECTED
