"""jetson/setup.sh on a fake Jetson tree (ROOT=...): it names the JetPack, finds the newest ONNX
Runtime, CUDA and TensorRT libraries, writes ONNX Runtime into the configuration file once, and the
file stays valid for the server."""

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


def setup(root):
    env = {k: v for k, v in os.environ.items() if k != "PATH"}
    env["PATH"] = "/usr/bin:/bin"  # no tritonrs on PATH: the validate step is skipped
    return subprocess.run(["bash", str(SETUP)], env={**env, "ROOT": str(root)}, capture_output=True, text=True,
                          timeout=30)


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
