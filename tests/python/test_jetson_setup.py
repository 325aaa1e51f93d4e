"""jetson/setup.sh on a fake Jetson tree (ROOT=...): it names the JetPack, finds the newest ONNX
Runtime, OpenVINO, CUDA and TensorRT libraries, writes ONNX Runtime and OpenVINO into the configuration
file once, and the file stays valid for the server. The check of cuInit under the service's sandbox needs a real device
(systemd-run as root with a GPU): here, the systemd-run arguments it takes from the unit and the line
that says why it was skipped."""

import os
import shutil
import subprocess

import pytest

from helpers import REPO_ROOT, copy_models, run_cli

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


def fake_openvino(root, layout):
    """OpenVINO's C library as each way of installing it lays it out (empty files: setup.sh only looks
    at names); the path setup.sh should pick, without the root, and the environment it needs."""
    env = {}
    if layout == "pip":
        libs = root / "usr" / "local" / "lib" / "python3.8" / "dist-packages" / "openvino" / "libs"
        names = ["libopenvino_c.so.2540", "libopenvino_c.so.2641", "libopenvino.so.2641"]
        want = "/usr/local/lib/python3.8/dist-packages/openvino/libs/libopenvino_c.so.2641"
    elif layout == "pip-site-packages":
        libs = root / "usr" / "lib" / "python3.10" / "site-packages" / "openvino" / "libs"
        names = ["libopenvino_c.so.2610"]
        want = "/usr/lib/python3.10/site-packages/openvino/libs/libopenvino_c.so.2610"
    elif layout == "archive":
        libs = root / "opt" / "intel" / "openvino_2025.4.0" / "runtime" / "lib" / "aarch64"
        names = ["libopenvino_c.so", "libopenvino_c.so.2540", "libopenvino_c.so.2025.4.0"]
        want = "/opt/intel/openvino_2025.4.0/runtime/lib/aarch64/libopenvino_c.so.2540"
        # An older archive beside it is not the one chosen.
        old = root / "opt" / "intel" / "openvino_2025.1.0" / "runtime" / "lib" / "aarch64"
        old.mkdir(parents=True)
        (old / "libopenvino_c.so.2510").write_bytes(b"")
    elif layout == "INTEL_OPENVINO_DIR":
        libs = root / "srv" / "ov" / "runtime" / "lib" / "arm64"
        names = ["libopenvino_c.so.2641"]
        want = "/srv/ov/runtime/lib/arm64/libopenvino_c.so.2641"
        env["INTEL_OPENVINO_DIR"] = "/srv/ov"
    else:
        raise ValueError(layout)
    libs.mkdir(parents=True)
    for n in names:
        (libs / n).write_bytes(b"")
    return want, env


def validate(config, repo):
    """`tritonrs validate --config`, as setup.sh runs it, over `repo`: the file's backend-config reaches
    the backends (the written paths are the device's, so an OpenVINO model names its library there)."""
    return run_cli("validate", "--config", str(config), "--model-repository", str(repo))


def setup(root, *args, env=None):
    env = {**{k: v for k, v in os.environ.items() if k not in ("PATH", "INTEL_OPENVINO_DIR",
                                                               "OPENVINO_INSTALL_DIR")}, **(env or {})}
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


@pytest.mark.parametrize("layout", ["pip", "pip-site-packages", "archive", "INTEL_OPENVINO_DIR"])
def test_setup_finds_openvino_and_writes_it_beside_onnx_runtime(tmp_path, layout):
    root = tmp_path / "root"
    config = fake_jetson(root, ["1.17.1"])
    want, env = fake_openvino(root, layout)
    r = setup(root, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"setup: OpenVINO: {root}{want}" in r.stdout.splitlines(), r.stdout
    text = config.read_text()
    assert ('backend-config = ["onnxruntime,library=/usr/lib/aarch64-linux-gnu/libonnxruntime.so.1.17.1", '
            f'"openvino,library={want}"]') in text, text
    # The server reads the list: an OpenVINO model is looked for in the library written there (which
    # is on the device, not here), and the other models are fine.
    repo = tmp_path / "models"
    repo.mkdir()
    copy_models(repo, "simple")
    copy_models(repo, "ov_int", src=REPO_ROOT / "model-repos" / "openvino")
    v = validate(config, repo)
    assert v.returncode == 1, v.stdout + v.stderr
    assert "OK    simple" in v.stdout, v.stdout
    fail = next(line for line in v.stdout.splitlines() if line.startswith("FAIL  ov_int"))
    assert f"{want} (not found) (backend-config=openvino,library in the configuration file)" in fail, fail
    # A second run changes nothing.
    r = setup(root, env=env)
    assert r.returncode == 0 and "already sets backend-config" in r.stdout
    assert config.read_text() == text


def test_setup_writes_openvino_alone_and_says_what_is_missing(tmp_path):
    config = fake_jetson(tmp_path, [])
    want, _ = fake_openvino(tmp_path, "pip")
    r = setup(tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "setup: ONNX Runtime: not found (see jetson/README.md: Which ONNX Runtime)" in r.stdout.splitlines()
    text = config.read_text()
    assert f'backend-config = ["openvino,library={want}"]' in text, text
    (tmp_path / "empty").mkdir()
    v = validate(config, tmp_path / "empty")
    assert v.returncode == 0 and "no models found" in v.stdout, v.stdout + v.stderr


def test_setup_says_openvino_is_missing_and_warns_when_it_is_too_old(tmp_path):
    config = fake_jetson(tmp_path, ["1.17.1"])
    r = setup(tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert any(line.startswith("setup: OpenVINO: not found") for line in r.stdout.splitlines()), r.stdout
    assert "openvino,library" not in config.read_text()
    libs = tmp_path / "usr" / "local" / "lib" / "python3.8" / "dist-packages" / "openvino" / "libs"
    libs.mkdir(parents=True)
    (libs / "libopenvino_c.so.2460").write_bytes(b"")
    r = setup(tmp_path)
    assert "OpenVINO 2024.6 is older than 2025.1" in r.stdout, r.stdout
