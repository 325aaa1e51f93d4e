"""jetson/setup.sh on a fake Jetson tree (ROOT=...): it names the JetPack, finds the newest ONNX
Runtime, CUDA and TensorRT libraries, writes ONNX Runtime into the configuration file once, and the
file stays valid for the server. The check of cuInit under the service's sandbox needs a real device
(systemd-run as root with a GPU): here, the systemd-run arguments it takes from the unit and the line
that says why it was skipped."""

import os
import shutil
import subprocess

from helpers import REPO_ROOT, run_cli

SETUP = REPO_ROOT / "jetson" / "setup.sh"


def fake_jetson(root, ort_versions):
    (root / "etc" / "tritonrs").mkdir(parents=True)
    shutil.copy(REPO_ROOT / "systemd" / "tritonrs.toml", root / "etc" / "tritonrs" / "tritonrs.toml")
    (root / "etc" / "nv_tegra_release").write_text("# R32 (release), REVISION: 7.1, GCID: 29818004, BOARD: t210ref, EABI: aarch64\n")
    lib = root / "usr" / "lib" / "aarch64-linux-gnu"
    lib.mkdir(parents=True)
    for v in ort_versions:
        (lib / f"libonnxruntime.so.{v}").write_bytes(b"")
    (lib / "libnvinfer.so.8.2.1").write_bytes(b"")
    cuda = root / "usr" / "local" / "cuda" / "lib64"
    cuda.mkdir(parents=True)
    (cuda / "libcudart.so.10.2.300").write_bytes(b"")
    return root / "etc" / "tritonrs" / "tritonrs.toml"


def setup(root, *args):
    env = {k: v for k, v in os.environ.items() if k != "PATH"}
    env["PATH"] = "/usr/bin:/bin"  # no tritonrs on PATH: the validate step is skipped
    return subprocess.run(["bash", str(SETUP), *args], env={**env, "ROOT": str(root)}, capture_output=True,
                          text=True, timeout=30)


def test_setup_finds_the_libraries_and_writes_the_config_once(tmp_path):
    config = fake_jetson(tmp_path, ["1.16.3", "1.17.1"])
    r = setup(tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "L4T R32.7.1: JetPack 4.x" in r.stdout
    assert "ONNX Runtime: " + str(tmp_path / "usr/lib/aarch64-linux-gnu/libonnxruntime.so.1.17.1") in r.stdout
    text = config.read_text()
    assert 'backend-config = ["onnxruntime,library=/usr/lib/aarch64-linux-gnu/libonnxruntime.so.1.17.1"]' in text
    assert "# Found by jetson/setup.sh: /usr/local/cuda/lib64/libcudart.so.10.2.300" in text
    assert "# Found by jetson/setup.sh: /usr/lib/aarch64-linux-gnu/libnvinfer.so.8.2.1" in text
    # The server accepts the file it wrote.
    v = run_cli("--config", str(config), "--version")
    assert v.returncode == 0, v.stderr
    # A second run changes nothing.
    r = setup(tmp_path)
    assert r.returncode == 0 and "already sets backend-config" in r.stdout
    assert config.read_text() == text


def test_setup_warns_about_a_library_too_old_for_tritonrs(tmp_path):
    fake_jetson(tmp_path, ["1.11.0"])
    r = setup(tmp_path)
    assert r.returncode == 0 and "ONNX Runtime 1.11.0 is older than 1.17" in r.stdout, r.stdout


def test_setup_skips_the_sandbox_check_off_the_device(tmp_path):
    fake_jetson(tmp_path, ["1.17.1"])
    r = setup(tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"setup: sandbox check skipped: ROOT={tmp_path} is not this machine's root" in r.stdout.splitlines()
    # The check on its own: only that line, exit status 2.
    r = setup(tmp_path, "--check-sandbox")
    assert r.returncode == 2 and r.stdout.splitlines() == [
        f"setup: sandbox check skipped: ROOT={tmp_path} is not this machine's root"], r.stdout + r.stderr


def test_setup_passes_the_units_hardening_to_systemd_run():
    r = setup("/", "--print-sandbox-properties", str(REPO_ROOT / "systemd" / "tritonrs.service"))
    assert r.returncode == 0, r.stderr
    props = r.stdout.splitlines()
    for p in ("DynamicUser=yes", "SupplementaryGroups=video", "ProtectSystem=strict", "ProtectHome=yes",
              "PrivateTmp=yes", "NoNewPrivileges=yes", "ProtectKernelTunables=yes", "ProtectKernelModules=yes",
              "ProtectControlGroups=yes", "RestrictNamespaces=yes", "RestrictRealtime=yes", "LockPersonality=yes",
              "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK"):
        assert "--property=" + p in props, (p, props)
    # Only hardening: no commands, no service type, nothing from [Unit] or [Install].
    assert all(p.startswith("--property=") for p in props), props
    names = {p.split("=")[1] for p in props}
    assert not names & {"Type", "ExecStart", "ExecStartPre", "StateDirectory", "LimitNOFILE", "WantedBy",
                        "StartLimitBurst", "DevicePolicy", "DeviceAllow"}, names


def test_sandbox_properties_follow_drop_ins_comments_and_continuations(tmp_path):
    unit = tmp_path / "tritonrs.service"
    unit.write_text("""# /lib/systemd/system/tritonrs.service
[Unit]
ProtectSystem=not-in-service
[Service]
Type=notify
DynamicUser=yes
  # a comment
; another
RestrictAddressFamilies=AF_UNIX \\
    AF_INET
ExecStartPre=-+/bin/sh -c 'nvidia-modprobe -u -c=0; \\
    ProtectHome=no'

# /etc/systemd/system/tritonrs.service.d/devices.conf
[Service]
DevicePolicy=closed
DeviceAllow=char-nvhost rw
DeviceAllow=/dev/nvmap rw
PrivateDevices=no
[Install]
WantedBy=multi-user.target
""")
    r = setup("/", "--print-sandbox-properties", str(unit))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "--property=DynamicUser=yes",
        "--property=RestrictAddressFamilies=AF_UNIX      AF_INET",
        "--property=DevicePolicy=closed",
        "--property=DeviceAllow=char-nvhost rw",
        "--property=DeviceAllow=/dev/nvmap rw",
        "--property=PrivateDevices=no",
    ]
