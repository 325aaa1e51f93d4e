#!/usr/bin/env python3
"""Lays out Triton 2.51's own Python backend, from PyPI's nvidia-pytriton 0.7.0 wheel, as a
--backend-directory for tritonrs:

  scripts/pytriton-backend.py <dest> [--wheel <nvidia_pytriton-0.7.0-*.whl>] [--libtritonserver <path>]

writes <dest>/x/y/backends/python/ (libtriton_python.so, triton_python_backend_utils.py and the stub
for the system python3's version) and <dest>/nvidia_pytriton.libs/ (the wheel's libraries), and prints
the backend directory. The library finds its libraries through its RPATH,
$ORIGIN/../../../../nvidia_pytriton.libs; it lists auditwheel's libtritonserver-717102f0.so as NEEDED,
and that name is made a link to tritonrs's libtritonserver.so (default: the one next to
target/debug/tritonrs). Without --wheel, the wheel is downloaded with pip into
~/.cache/tritonrs-tests (TRITONRS_TEST_CACHE).

Then: tritonrs --backend-directory <printed dir> --backend-config=python,use-shared-library=true ...
Triton's stub embeds the system interpreter (isolated), so it needs the system's shared libpython and
numpy (Debian: libpython3.X, python3-numpy).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

WHEEL = "nvidia-pytriton==0.7.0"
REPO = Path(__file__).resolve().parent.parent


def system_python_version(python: str = "/usr/bin/python3") -> str:
    out = subprocess.run([python, "-c", "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')"],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def fetch_wheel() -> Path:
    cache = Path(os.environ.get("TRITONRS_TEST_CACHE", Path.home() / ".cache" / "tritonrs-tests"))
    cache.mkdir(parents=True, exist_ok=True)
    wheels = sorted(cache.glob("nvidia_pytriton-0.7.0-*.whl"))
    if not wheels:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(cache), WHEEL],
                       check=True, timeout=900)
        wheels = sorted(cache.glob("nvidia_pytriton-0.7.0-*.whl"))
    return wheels[0]


def lay_out(dest: Path, wheel: Path, libtritonserver: Path, version: str) -> Path:
    """Writes the layout under `dest` and returns the backend directory."""
    unpacked = dest / "wheel"
    with zipfile.ZipFile(wheel) as z:
        members = [m for m in z.namelist() if m.startswith((
            "nvidia_pytriton.libs/", "pytriton/tritonserver/backends/python/",
            f"pytriton/tritonserver/python_backend_stubs/{version}/"))]
        z.extractall(unpacked, members)
    stub = unpacked / "pytriton/tritonserver/python_backend_stubs" / version / "triton_python_backend_stub"
    if not stub.exists():
        raise SystemExit(f"the wheel has no Python backend stub for Python {version}")
    backends = dest / "x" / "y" / "backends"
    py = backends / "python"
    py.mkdir(parents=True, exist_ok=True)
    for f in (unpacked / "pytriton/tritonserver/backends/python").iterdir():
        shutil.copy(f, py / f.name)
    shutil.copy(stub, py / stub.name)
    (py / stub.name).chmod(0o755)
    libs = dest / "nvidia_pytriton.libs"
    libs.mkdir(exist_ok=True)
    for f in (unpacked / "nvidia_pytriton.libs").iterdir():
        link = libs / f.name
        if link.is_symlink() or link.exists():
            link.unlink()
        # The library names Triton's core as NEEDED: tritonrs's libtritonserver.so stands in for it.
        os.symlink(libtritonserver.resolve() if f.name.startswith("libtritonserver-") else f.resolve(), link)
    return backends


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dest", type=Path)
    ap.add_argument("--wheel", type=Path)
    ap.add_argument("--libtritonserver", type=Path, default=REPO / "target/debug/libtritonserver.so")
    args = ap.parse_args()
    if not args.libtritonserver.is_file():
        raise SystemExit(f"{args.libtritonserver} does not exist (cargo build writes it next to the binary)")
    print(lay_out(args.dest, args.wheel or fetch_wheel(), args.libtritonserver, system_python_version()))


if __name__ == "__main__":
    main()
