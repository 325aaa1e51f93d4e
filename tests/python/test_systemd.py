"""The systemd service (issue 11): the unit passes `systemd-analyze verify`, and the server speaks the
notify protocol to a datagram socket standing in for systemd's NOTIFY_SOCKET: STATUS while loading
with EXTEND_TIMEOUT_USEC, READY=1 once start-up is over, RELOADING=1 ... READY=1 around SIGHUP,
STOPPING=1 at shutdown, and WATCHDOG=1 at half of WATCHDOG_USEC, held back while a model instance is
stuck in one job."""

import os
import shutil
import signal
import socket
import subprocess
import threading
import time

import numpy as np
import pytest
import tritonclient.http as httpclient

from helpers import BIN, REPO_ROOT, copy_models, python_sleep_model, run_cli


class FakeSystemd:
    """A datagram socket that records what the server sends, with the time it arrived."""

    def __init__(self, path):
        self.path = str(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.sock.settimeout(0.2)
        self.messages: list[tuple[float, str]] = []
        self._stop = False
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self):
        while not self._stop:
            try:
                data = self.sock.recv(4096)
            except socket.timeout:
                continue
            except OSError:
                return
            for line in data.decode().splitlines():
                self.messages.append((time.monotonic(), line))

    def lines(self):
        return [m for _, m in self.messages]

    def wait_for(self, line, timeout=15.0, after=0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for i, (_, m) in enumerate(self.messages[after:], start=after):
                if m == line or (line.endswith("*") and m.startswith(line[:-1])):
                    return i
            time.sleep(0.05)
        raise AssertionError(f"{line!r} not sent within {timeout}s; got {self.lines()}")

    def close(self):
        self._stop = True
        self.sock.close()


@pytest.fixture
def fake_systemd(tmp_path):
    f = FakeSystemd(tmp_path / "notify.sock")
    yield f
    f.close()


def test_the_unit_passes_systemd_analyze_verify(tmp_path):
    if shutil.which("systemd-analyze") is None:
        pytest.fail("systemd-analyze is missing (Debian package systemd); scripts/test.sh installs it")
    unit = (REPO_ROOT / "systemd" / "tritonrs.service").read_text().replace("/usr/bin/tritonrs", str(BIN))
    path = tmp_path / "tritonrs.service"
    path.write_text(unit)
    r = subprocess.run(["systemd-analyze", "verify", str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stderr.strip() == "", r.stderr


def unit_lines():
    """The unit's lines with continuation lines joined, as systemd reads them."""
    return (REPO_ROOT / "systemd" / "tritonrs.service").read_text().replace("\\\n", " ").splitlines()


def test_the_unit_leaves_device_access_to_permissions_and_loads_nvidia_uvm_first():
    lines = unit_lines()
    # No device list: group video and the nodes' modes decide (newer Tegra nodes, DLA, MIG caps).
    assert not any(line.startswith(("DevicePolicy=", "DeviceAllow=")) for line in lines), lines
    assert "SupplementaryGroups=video" in lines and "PrivateDevices=yes" not in lines
    # The privileged nvidia-modprobe step (+: outside the sandbox; -: never fails the start) comes
    # before validate and the server.
    pre = [line for line in lines if line.startswith("ExecStartPre=")]
    assert len(pre) == 2, pre
    assert pre[0].startswith("ExecStartPre=-+/bin/sh -c '") and "nvidia-modprobe -u -c=0" in pre[0], pre[0]
    assert "command -v nvidia-modprobe" in pre[0] and pre[0].rstrip().endswith("exit 0'"), pre[0]
    assert pre[1] == "ExecStartPre=/usr/bin/tritonrs validate --config /etc/tritonrs/tritonrs.toml"
    # The rest of the hardening stays.
    for directive in ("DynamicUser=yes", "ProtectSystem=strict", "NoNewPrivileges=yes",
                      "ProtectKernelModules=yes"):
        assert directive in lines, directive


def test_the_nvidia_modprobe_step_runs_where_it_exists_and_never_fails(tmp_path):
    pre = next(line for line in unit_lines() if line.startswith("ExecStartPre=") and "nvidia-modprobe" in line)
    # What /bin/sh gets: the quoted argument, with systemd's $$ back to $.
    script = pre[pre.index("'") + 1:pre.rindex("'")].replace("$$", "$")
    calls = tmp_path / "calls"
    fake = tmp_path / "bin" / "nvidia-modprobe"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\necho "$*" >>{calls}\nexit 1\n')
    fake.chmod(0o755)
    r = subprocess.run(["/bin/sh", "-c", script], env={"PATH": f"{fake.parent}:/usr/bin:/bin"},
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    # nvidiactl, then nvidia_uvm with its nodes (one -c per GPU and -f per MIG instance where the
    # driver lists them in /proc).
    made = calls.read_text().splitlines()
    assert made[0] == "-c=255" and "-u -c=0" in made, made
    # Without nvidia-modprobe (Jetson, CPU hosts): nothing, successfully.
    r = subprocess.run(["/bin/sh", "-c", script], env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0 and r.stderr == "", r.stderr


def test_the_shipped_configuration_files_are_valid():
    for path in ("systemd/tritonrs.toml", "jetson/tritonrs.toml"):
        r = run_cli("--config", str(REPO_ROOT / path), "--version")
        assert r.returncode == 0 and r.stdout.startswith("tritonrs "), (path, r)


def test_ready_status_reload_and_stopping(start_server, repo, fake_systemd):
    copy_models(repo, "simple")
    python_sleep_model(repo, "slow_init", initialize_s=2.5)
    s = start_server("--model-repository", repo, wait="live", env={"NOTIFY_SOCKET": fake_systemd.path})
    # While slow_init loads: how far loading is, and more time to start.
    loading = fake_systemd.wait_for("STATUS=loading: 1 of 2 models")
    assert "EXTEND_TIMEOUT_USEC=10000000" in fake_systemd.lines()
    assert "READY=1" not in fake_systemd.lines()[:loading]
    ready = fake_systemd.wait_for("READY=1")
    assert fake_systemd.lines()[ready + 1] == "STATUS=serving: 2 model version(s) ready"
    assert "Server is ready" in s.log and s.get("/v2/health/ready").status == 200

    s.proc.send_signal(signal.SIGHUP)
    reloading = fake_systemd.wait_for("RELOADING=1", after=ready + 1)
    assert fake_systemd.lines()[reloading + 1].startswith("MONOTONIC_USEC=")
    fake_systemd.wait_for("READY=1", after=reloading)

    s.proc.send_signal(signal.SIGTERM)
    fake_systemd.wait_for("STOPPING=1", after=reloading)
    assert s.wait_exit(20) == 0


def test_the_watchdog_is_fed_only_while_instances_make_progress(start_server, repo, fake_systemd):
    python_sleep_model(repo, "stuck", execute_s=3.5)
    s = start_server("--model-repository", repo,
                     env={"NOTIFY_SOCKET": fake_systemd.path, "WATCHDOG_USEC": "1000000"})
    fake_systemd.wait_for("WATCHDOG=1")
    c = httpclient.InferenceServerClient(s.url, network_timeout=30)
    i = httpclient.InferInput("IN", [1], "FP32")
    i.set_data_from_numpy(np.array([1.0], np.float32))
    t0 = time.monotonic()
    result = {}
    worker = threading.Thread(target=lambda: result.update(out=c.infer("stuck", [i]).as_numpy("OUT")))
    worker.start()
    worker.join(30)
    t1 = time.monotonic()
    assert result["out"].tolist() == [1.0]
    time.sleep(1.5)
    feeds = [t for t, m in fake_systemd.messages if m == "WATCHDOG=1"]
    # Fed every 0.5 s before and after; held back while the instance was stuck in its 3.5 s job.
    assert any(t < t0 for t in feeds) and any(t > t1 for t in feeds)
    during = [t for t in feeds if t0 + 1.2 < t < t1 - 0.3]
    assert during == [], (t0, t1, feeds)
    assert "the systemd watchdog is no longer fed" in s.log
    assert "the systemd watchdog is fed again" in s.log
    c.close()


def test_logs_carry_journal_priorities_only_when_stderr_is_the_journal(tmp_path):
    from helpers import server_env

    def first_lines(journal_stream):
        r, w = os.pipe()
        st = os.fstat(w)
        stream = f"{st.st_dev}:{st.st_ino}" if journal_stream == "match" else journal_stream
        env = {**server_env(), "JOURNAL_STREAM": stream}
        p = subprocess.Popen([str(BIN), "--model-repository", str(tmp_path / "nope")], stderr=w,
                             stdout=subprocess.DEVNULL, env=env)
        os.close(w)
        p.wait(20)
        with os.fdopen(r) as f:
            return f.read().splitlines()

    lines = first_lines("match")
    assert lines and lines[-1].startswith("<3>") and "cannot read model repository" in lines[-1], lines
    lines = first_lines("1:1")
    assert lines and not lines[-1].startswith("<"), lines
