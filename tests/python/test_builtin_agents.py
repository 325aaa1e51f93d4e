"""The built-in repository agents: `checksum` (MD5 and SHA256 digests of a model's files) and `decrypt`
(a model encrypted by `tritonrs encrypt-model`, decrypted into a private folder while it is loaded), on
the example repository's ONNX `simple` model."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from helpers import copy_models, run_cli


def simple_infer(c) -> list:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    i0 = httpclient.InferInput("INPUT0", [1, 16], "INT32")
    i0.set_data_from_numpy(a)
    i1 = httpclient.InferInput("INPUT1", [1, 16], "INT32")
    i1.set_data_from_numpy(np.ones((1, 16), np.int32))
    return c.infer("simple", [i0, i1]).as_numpy("OUTPUT0").tolist()


EXPECTED = [list(range(1, 17))]


def add_agents(model: Path, agents: str) -> None:
    cfg = model / "config.pbtxt"
    cfg.write_text(cfg.read_text() + f"\nmodel_repository_agents {{ agents [ {agents} ] }}\n")


def checksum_agent(**digests: str) -> str:
    params = ", ".join(f'{{ key: "{k}" value: "{v}" }}' for k, v in digests.items())
    return f'{{ name: "checksum" parameters [ {params} ] }}'


def digests(path: Path) -> tuple[str, str]:
    data = path.read_bytes()
    return hashlib.md5(data).hexdigest(), hashlib.sha256(data).hexdigest()


def reason(s, name: str) -> str:
    row = s.wait_until(lambda: next((r for r in s.index() if r["name"] == name and r.get("state") == "UNAVAILABLE"),
                                    None), what=f"{name} UNAVAILABLE")
    return row["reason"]


# ---- checksum ----------------------------------------------------------------------------------


def test_checksum_good_tampered_and_missing(start_server, repo):
    copy_models(repo, "simple")
    md5, sha = digests(repo / "simple/1/model.onnx")
    add_agents(repo / "simple", checksum_agent(**{"MD5:1/model.onnx": md5, "SHA256:1/model.onnx": sha.upper()}))
    for name, digest in (("tampered", "0" * 32), ("missing", md5)):
        shutil.copytree(repo / "simple", repo / name)
        cfg = repo / name / "config.pbtxt"
        cfg.write_text(cfg.read_text().replace('name: "simple"', f'name: "{name}"').replace(md5, digest))
    (repo / "missing/1/model.onnx").unlink()
    s = start_server("--model-repository", repo, wait="live")
    s.wait_until(s.settled, what="every model settled")
    assert simple_infer(s.client()) == EXPECTED
    why = reason(s, "tampered")
    assert "1/model.onnx" in why and md5 in why and "0" * 32 in why, why
    assert "repository agent 'checksum'" in why, why
    assert "cannot read '1/model.onnx'" in reason(s, "missing")


def test_checksum_refuses_bad_parameters_and_paths_outside_the_model(start_server, repo):
    copy_models(repo, "simple")
    md5, _ = digests(repo / "simple/1/model.onnx")
    add_agents(repo / "simple", checksum_agent(**{"MD5:../simple/1/model.onnx": md5}))
    s = start_server("--model-repository", repo, wait="live")
    assert "'..' is not allowed" in reason(s, "simple")
    assert s.is_live()


# ---- decrypt -----------------------------------------------------------------------------------


@pytest.fixture
def key(tmp_path) -> Path:
    k = tmp_path / "model.key"
    k.write_bytes(os.urandom(32))
    k.chmod(0o600)
    return k


def encrypted_repo(tmp_path: Path, repo: Path, key: Path, name: str = "simple") -> Path:
    """The example `simple` model, encrypted into `repo/<name>` with the decrypt agent configured."""
    plain = tmp_path / "plain"
    copy_models(plain, "simple")
    add_agents(plain / "simple", '{ name: "decrypt" }')
    r = run_cli("encrypt-model", str(plain / "simple"), "--key-file", str(key), "--output", str(repo / name))
    assert r.returncode == 0, r.stderr
    assert "Encrypted 1 files" in r.stdout
    return repo / name


def own_folder(work: Path) -> Path:
    """The decrypt agent's own folder in a work folder given with `work-dir=`."""
    return work / f"tritonrs-decrypt-{os.geteuid()}"


def private_files(work: Path) -> list[Path]:
    return [p for p in work.rglob("*") if p.is_file()] if work.exists() else []


def test_decrypt_round_trip_and_nothing_left_after_unload(start_server, repo, key, tmp_path):
    model = encrypted_repo(tmp_path, repo, key)
    data = (model / "1/model.onnx").read_bytes()
    assert b"onnx" not in data.lower() and data.startswith(b"TRSENC\0\x02")
    work = tmp_path / "work"
    s = start_server("--model-repository", repo, "--model-control-mode=explicit", "--load-model=simple",
                     f"--repoagent-config=decrypt,key-file={key};decrypt,work-dir={work}")
    assert simple_infer(s.client()) == EXPECTED
    # The plaintext is in one private folder, in the agent's own folder, while the model is loaded.
    own = own_folder(work)
    dirs = list(own.iterdir())
    assert len(dirs) == 1 and (dirs[0].stat().st_mode & 0o777) == 0o700
    assert (own.stat().st_mode & 0o777) == 0o700
    assert private_files(work)
    assert key.read_bytes().hex() not in s.log
    s.client().unload_model("simple")
    s.wait_until(lambda: not private_files(work), what="the decrypted files removed")
    assert list(own.iterdir()) == []
    s.client().load_model("simple")
    assert simple_infer(s.client()) == EXPECTED


def test_decrypt_failures_name_the_cause_and_leave_no_plaintext(start_server, repo, key, tmp_path):
    encrypted_repo(tmp_path, repo, key)
    wrong = encrypted_repo(tmp_path / "w", repo, key, name="wrongkey")
    for name in ("truncated", "tampered"):
        shutil.copytree(repo / "simple", repo / name)
    for name in ("wrongkey", "truncated", "tampered"):
        cfg = repo / name / "config.pbtxt"
        cfg.write_text(cfg.read_text().replace('name: "simple"', f'name: "{name}"'))
    other = tmp_path / "other.key"
    other.write_bytes(os.urandom(32))
    other.chmod(0o600)
    r = run_cli("encrypt-model", str(tmp_path / "plain/simple"), "--key-file", str(other), "--output",
                str(tmp_path / "other"))
    assert r.returncode == 0, r.stderr
    shutil.copy(tmp_path / "other/1/model.onnx", wrong / "1/model.onnx")
    f = repo / "truncated/1/model.onnx"
    f.write_bytes(f.read_bytes()[:-5])
    f = repo / "tampered/1/model.onnx"
    b = bytearray(f.read_bytes())
    b[-1] ^= 1
    f.write_bytes(bytes(b))
    work = tmp_path / "work"
    s = start_server("--model-repository", repo, f"--repoagent-config=decrypt,key-file={key}",
                     f"--repoagent-config=decrypt,work-dir={work}", wait="live")
    s.wait_until(s.settled, what="every model settled")
    assert simple_infer(s.client()) == EXPECTED
    for name in ("wrongkey", "truncated", "tampered"):
        why = reason(s, name)
        assert "authentication failed" in why and "1/model.onnx" in why, why
    assert len(list(own_folder(work).iterdir())) == 1, "only the loaded model's folder"


def test_decrypt_without_a_usable_key_is_a_reason(start_server, repo, key, tmp_path):
    encrypted_repo(tmp_path, repo, key)
    s = start_server("--model-repository", repo, wait="live")
    assert "--repoagent-config=decrypt,key-file=PATH" in reason(s, "simple")
    s.stop()
    key.chmod(0o644)
    s = start_server("--model-repository", repo, f"--repoagent-config=decrypt,key-file={key}", wait="live")
    assert "chmod 600" in reason(s, "simple")


def test_decrypted_files_of_a_killed_server_are_removed_at_start(start_server, repo, key, tmp_path):
    encrypted_repo(tmp_path, repo, key)
    work = tmp_path / "work"
    args = ["--model-repository", repo, f"--repoagent-config=decrypt,key-file={key};decrypt,work-dir={work}"]
    s = start_server(*args)
    assert private_files(work)
    s.proc.send_signal(signal.SIGKILL)
    s.wait_exit()
    assert private_files(work), "a killed server cannot clean up"
    left = list(own_folder(work).iterdir())
    s = start_server(*args, "--model-control-mode=explicit")
    # Removed at start-up, before (and without) any model loading.
    assert all(not d.exists() for d in left)
    assert private_files(work) == []
    assert s.is_live()


def test_encrypt_model_refuses_an_existing_output_and_a_bad_key(repo, key, tmp_path):
    copy_models(repo, "simple")
    out = tmp_path / "out"
    out.mkdir()
    r = run_cli("encrypt-model", str(repo / "simple"), "--key-file", str(key), "--output", str(out))
    assert r.returncode == 1 and "exists" in r.stderr
    bad = tmp_path / "bad.key"
    bad.write_bytes(b"short")
    bad.chmod(0o600)
    r = run_cli("encrypt-model", str(repo / "simple"), "--key-file", str(bad))
    assert r.returncode == 1 and "32 bytes or 64 hex digits" in r.stderr
    r = run_cli("encrypt-model", str(repo / "simple"), "--key-file", str(key))
    assert r.returncode == 0, r.stderr
    assert (repo / "simple.encrypted/1/model.onnx").read_bytes().startswith(b"TRSENC")
    assert (repo / "simple.encrypted/config.pbtxt").read_text() == (repo / "simple/config.pbtxt").read_text()


def encrypted_with_extra_file(tmp_path: Path, repo: Path, key: Path, names: list[str]) -> None:
    """The `simple` model with a second file, `1/labels.txt`, that the backend does not read, encrypted
    once and copied into `repo/<name>` for each name (each config renamed): an altered `labels.txt` is
    then caught by the agent alone, as nothing else would notice it."""
    plain = tmp_path / "plain-extra"
    copy_models(plain, "simple")
    add_agents(plain / "simple", '{ name: "decrypt" }')
    (plain / "simple/1/labels.txt").write_text("zero\none\n")
    enc = tmp_path / "enc-extra"
    r = run_cli("encrypt-model", str(plain / "simple"), "--key-file", str(key), "--output", str(enc))
    assert r.returncode == 0, r.stderr
    assert "Encrypted 2 files" in r.stdout
    for name in names:
        shutil.copytree(enc, repo / name)
        cfg = repo / name / "config.pbtxt"
        cfg.write_text(cfg.read_text().replace('name: "simple"', f'name: "{name}"'))


def test_decrypt_requires_every_file_to_be_ciphertext_for_its_own_path(start_server, repo, key, tmp_path):
    names = ["intact", "magic", "emptied", "plaintext", "moved", "version1"]
    encrypted_with_extra_file(tmp_path, repo, key, names)
    labels = lambda name: repo / name / "1/labels.txt"  # noqa: E731
    b = bytearray(labels("magic").read_bytes())
    b[2] ^= 0x10  # one bit of the magic
    labels("magic").write_bytes(bytes(b))
    labels("emptied").write_bytes(b"")
    labels("plaintext").write_text("zero\none\n")
    # A valid ciphertext for the same key, but of another file of the model.
    shutil.copy(repo / "moved/1/model.onnx", labels("moved"))
    # A file of the first format (the version is the magic's last byte): it must be encrypted again.
    b = bytearray(labels("version1").read_bytes())
    assert b[:7] == b"TRSENC\0" and b[7] >= 2
    b[7] = 1
    labels("version1").write_bytes(bytes(b))
    s = start_server("--model-repository", repo, f"--repoagent-config=decrypt,key-file={key}",
                     f"--repoagent-config=decrypt,work-dir={tmp_path / 'work'}", wait="live")
    s.wait_until(s.settled, what="every model settled")
    c = s.client()
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    i0 = httpclient.InferInput("INPUT0", [1, 16], "INT32")
    i0.set_data_from_numpy(a)
    i1 = httpclient.InferInput("INPUT1", [1, 16], "INT32")
    i1.set_data_from_numpy(np.ones((1, 16), np.int32))
    assert c.infer("intact", [i0, i1]).as_numpy("OUTPUT0").tolist() == EXPECTED
    expected = {
        "magic": "not a file encrypted by tritonrs encrypt-model",
        "emptied": "not a file encrypted by tritonrs encrypt-model",
        "plaintext": "not a file encrypted by tritonrs encrypt-model",
        "moved": "authentication failed",
        "version1": "format version 1",
    }
    for name, words in expected.items():
        why = reason(s, name)
        assert "1/labels.txt" in why and words in why, (name, why)
        assert "repository agent 'decrypt'" in why, why
    why = reason(s, "version1")
    assert "tritonrs encrypt-model" in why, why
    assert not c.is_model_ready("magic")


def test_decrypt_leaves_a_shared_work_dir_and_other_programs_entries_alone(start_server, repo, key, tmp_path):
    encrypted_repo(tmp_path, repo, key)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    other = shared / "424242-other-app-data"
    (other / "sub").mkdir(parents=True)
    (other / "sub/state.db").write_bytes(b"another program's data")
    other.chmod(0o755)

    def snapshot():
        return (shared.stat().st_mode & 0o7777, sorted(
            (str(p.relative_to(other)), p.stat().st_mode, p.read_bytes() if p.is_file() else b"")
            for p in [other, *other.rglob("*")]))

    before = snapshot()
    args = ["--model-repository", repo, "--model-control-mode=explicit",
            f"--repoagent-config=decrypt,key-file={key};decrypt,work-dir={shared}"]
    s = start_server(*args)
    assert snapshot() == before, "at start, with no model loaded"
    s.client().load_model("simple")
    assert simple_infer(s.client()) == EXPECTED
    assert snapshot() == before, "with a decrypted model loaded"
    # The plaintext is in a folder of the agent's own, mode 0700, inside the shared folder.
    mine = [d for d in shared.iterdir() if d != other]
    assert len(mine) == 1 and mine[0].name.startswith("tritonrs-decrypt"), mine
    assert (mine[0].stat().st_mode & 0o777) == 0o700
    assert private_files(mine[0])
    s.client().unload_model("simple")
    s.wait_until(lambda: not private_files(mine[0]), what="the decrypted files removed")
    assert snapshot() == before, "after unload"
    s.stop()
    # The next start sweeps its own folder only.
    s = start_server(*args)
    assert snapshot() == before, "after a second start"


def test_decrypt_default_work_dir_is_the_users_runtime_dir(start_server, repo, key, tmp_path):
    encrypted_repo(tmp_path, repo, key)
    runtime = tmp_path / "xdg"
    runtime.mkdir(mode=0o700)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    s = start_server("--model-repository", repo, "--model-control-mode=explicit", "--load-model=simple",
                     f"--repoagent-config=decrypt,key-file={key}",
                     env={"XDG_RUNTIME_DIR": str(runtime), "RUNTIME_DIRECTORY": "", "TMPDIR": str(tmp)})
    assert simple_infer(s.client()) == EXPECTED
    assert private_files(runtime), "the plaintext is in $XDG_RUNTIME_DIR"
    assert not [p for p in tmp.rglob("*") if "decrypt" in p.name], "nothing in $TMPDIR"
    s.client().unload_model("simple")
    s.wait_until(lambda: not private_files(runtime), what="the decrypted files removed")


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="this machine has no /dev/shm")
def test_decrypt_default_work_dir_is_dev_shm_without_a_runtime_dir(start_server, repo, key, tmp_path):
    encrypted_repo(tmp_path, repo, key)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    s = start_server("--model-repository", repo, "--model-control-mode=explicit", "--load-model=simple",
                     f"--repoagent-config=decrypt,key-file={key}",
                     env={"XDG_RUNTIME_DIR": "", "RUNTIME_DIRECTORY": "", "TMPDIR": str(tmp)})
    assert simple_infer(s.client()) == EXPECTED
    ours = lambda: [d for d in Path("/dev/shm").glob(f"tritonrs-decrypt*/{s.proc.pid}-*")  # noqa: E731
                    if private_files(d)]
    assert ours(), "the plaintext is under /dev/shm"
    assert not [p for p in tmp.rglob("*") if "decrypt" in p.name], "nothing in $TMPDIR"
    s.client().unload_model("simple")
    s.wait_until(lambda: not ours(), what="the decrypted files removed")
