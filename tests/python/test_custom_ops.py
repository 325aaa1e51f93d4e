"""ONNX Runtime custom operations: `model_operations { op_library_filename: [...] }` registers a library
on the model's session, as Triton's ONNX Runtime backend does. The library is the real one in PyPI's
onnxruntime-extensions wheel, with the generated `string_upper` model (model-repos/custom_ops) that uses
its `StringUpper` operator."""

from __future__ import annotations

import ctypes.util
import importlib.util
import shutil
import sysconfig
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from helpers import REPO_ROOT, copy_models

CUSTOM_OPS = REPO_ROOT / "model-repos" / "custom_ops"


def extensions_library() -> Path:
    """The custom-op library of onnxruntime-extensions (a CPython module that exports RegisterCustomOps)."""
    spec = importlib.util.find_spec("onnxruntime_extensions")
    assert spec and spec.submodule_search_locations, "pip install onnxruntime-extensions (scripts/requirements.txt)"
    libs = sorted(Path(next(iter(spec.submodule_search_locations))).glob("_extensions_pydll*.so"))
    assert libs, "no _extensions_pydll*.so in the onnxruntime-extensions package"
    return libs[0]


def libpython() -> str:
    """The library of this Python: the extensions module needs its symbols in the server process."""
    name = sysconfig.get_config_var("LDLIBRARY") or ""
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    if name.endswith(".so") or ".so." in name:
        p = Path(libdir) / name
        if p.exists():
            return str(p)
    found = ctypes.util.find_library(f"python{sysconfig.get_python_version()}")
    assert found, "libpython3.X is needed (Debian's libpython3.X; scripts/test.sh installs it)"
    return found


def with_ops(repo: Path, *libs: str) -> None:
    cfg = repo / "string_upper" / "config.pbtxt"
    names = ", ".join(f'"{lib}"' for lib in libs)
    cfg.write_text(cfg.read_text() + f"model_operations {{ op_library_filename: [ {names} ] }}\n")


def upper(c, words: list[bytes]) -> list[bytes]:
    i = httpclient.InferInput("INPUT", [len(words)], "BYTES")
    i.set_data_from_numpy(np.array(words, dtype=np.object_))
    return c.infer("string_upper", [i]).as_numpy("OUTPUT").tolist()


def reason(s, name: str) -> str:
    row = s.wait_until(lambda: next((r for r in s.index() if r["name"] == name and r.get("state") == "UNAVAILABLE"),
                                    None), what=f"{name} UNAVAILABLE")
    return row["reason"]


@pytest.fixture
def preload() -> dict:
    return {"LD_PRELOAD": libpython()}


def test_a_registered_library_serves_its_operator(start_server, repo, preload):
    copy_models(repo, "string_upper", src=CUSTOM_OPS)
    with_ops(repo, str(extensions_library()))
    s = start_server("--model-repository", repo, env=preload)
    assert upper(s.client(), [b"abc", b"MiXed 1", b""]) == [b"ABC", b"MIXED 1", b""]


def test_a_relative_library_is_found_in_the_model_folder(start_server, repo, preload):
    copy_models(repo, "string_upper", src=CUSTOM_OPS)
    shutil.copy(extensions_library(), repo / "string_upper" / "libortx.so")
    with_ops(repo, "libortx.so")
    s = start_server("--model-repository", repo, env=preload)
    assert upper(s.client(), [b"edge"]) == [b"EDGE"]


def test_libraries_that_cannot_serve_fail_only_their_model(start_server, repo):
    names = {"missing": "nowhere/libops.so", "noregister": "", "notelf": "notelf.so", "outside": "../libops.so",
             "none": None}
    zlib = ctypes.util.find_library("z")
    assert zlib
    for name, lib in names.items():
        copy_models(repo, "string_upper", src=CUSTOM_OPS)
        (repo / "string_upper").rename(repo / name)
        cfg = repo / name / "config.pbtxt"
        cfg.write_text(cfg.read_text().replace('"string_upper"', f'"{name}"'))
    (repo / "notelf" / "notelf.so").write_text("not a shared library\n")
    # A real shared library without RegisterCustomOps.
    zpath = next(Path(d) / zlib for d in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu",
                                          "/usr/lib/aarch64-linux-gnu", "/lib", "/usr/lib") if (Path(d) / zlib).exists())
    names["noregister"] = str(zpath)
    for name, lib in names.items():
        if lib is not None:
            cfg = repo / name / "config.pbtxt"
            cfg.write_text(cfg.read_text() + f'model_operations {{ op_library_filename: [ "{lib}" ] }}\n')
    copy_models(repo, "simple")
    s = start_server("--model-repository", repo, wait="live")
    s.wait_until(s.settled, what="every model settled")
    why = reason(s, "missing")
    assert "custom operation library" in why and "nowhere/libops.so" in why and "not found" in why, why
    why = reason(s, "noregister")
    assert str(zpath) in why and "RegisterCustomOps" in why, why
    why = reason(s, "notelf")
    assert "notelf.so" in why and "cannot register the custom operations" in why, why
    assert "'..' is not allowed" in reason(s, "outside")
    # Without the library, ONNX Runtime knows no StringUpper.
    assert "StringUpper" in reason(s, "none")
    assert s.index_row("simple")["state"] == "READY"
