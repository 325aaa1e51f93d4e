"""Issue 35, nothing silently ignored: refused configuration fields, `unload_dependents`,
`--model-load-retry-count` and `--host-policy`; where tritonserver 2.51 serves the same thing, the
test runs both and compares."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from helpers import BIN, copy_models, python_sleep_model, stub_processes

PY = Path(__file__).resolve().parents[2] / "model-repos" / "python"

ENSEMBLE = """name: "ens"
platform: "ensemble"
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
ensemble_scheduling { step [ {
  model_name: "add_sub" model_version: -1
  input_map { key: "INPUT0" value: "INPUT0" } input_map { key: "INPUT1" value: "INPUT1" }
  output_map { key: "OUTPUT0" value: "OUTPUT0" } } ] }
"""


def ensemble_repo(root: Path) -> Path:
    copy_models(root, "add_sub", src=PY)
    (root / "ens" / "1").mkdir(parents=True)
    (root / "ens" / "config.pbtxt").write_text(ENSEMBLE)
    return root


def states(server) -> list[tuple]:
    return sorted((r["name"], r.get("version", ""), r.get("state", ""), r.get("reason", "")) for r in server.index())


def unload_then_reload(server, protocol: str) -> tuple[list[tuple], list[tuple]]:
    """Loads the ensemble (and add_sub with it), unloads add_sub with unload_dependents, loads add_sub
    again; returns the index after the unload and once every model has settled after the load."""
    if protocol == "http":
        assert server.post("/v2/repository/models/ens/load", b"{}").status == 200
        r = server.post("/v2/repository/models/add_sub/unload", json.dumps({"parameters": {"unload_dependents": True}}))
        assert r.status == 200, r
    else:
        c = server.grpc_client()
        c.load_model("ens")
        c.unload_model("add_sub", unload_dependents=True)
    server.wait_until(lambda: states(server)[0][2] == "UNAVAILABLE", what="add_sub unloaded")
    after_unload = states(server)
    assert server.post("/v2/repository/models/add_sub/load", b"{}").status == 200
    server.wait_until(server.settled, what="settled")
    return after_unload, states(server)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_unload_dependents_leaves_the_same_index_as_tritonserver(start_server, start_tritonserver, tmp_path,
                                                                 protocol):
    ours = start_server("--model-repository", str(ensemble_repo(tmp_path / "a")), "--model-control-mode=explicit")
    theirs = start_tritonserver("--model-repository", str(ensemble_repo(tmp_path / "b")),
                                "--model-control-mode=explicit")
    expected = unload_then_reload(theirs, protocol)
    assert ("ens", "1", "UNAVAILABLE", "unloaded") in expected[0], expected
    assert unload_then_reload(ours, protocol) == expected


def flaky_model(root: Path) -> Path:
    """A Python model whose initialize fails on its first attempt (it counts attempts in a file)."""
    copy_models(root, "add_sub", src=PY)
    model = root / "add_sub" / "1" / "model.py"
    text = model.read_text()
    marker = "    def initialize(self, args):\n"
    assert marker in text
    count = ("        import os\n"
             "        path = os.path.join(os.path.dirname(__file__), 'attempts')\n"
             "        n = int(open(path).read()) + 1 if os.path.exists(path) else 1\n"
             "        open(path, 'w').write(str(n))\n"
             "        if n == 1:\n"
             "            raise RuntimeError('first attempt fails')\n")
    model.write_text(text.replace(marker, marker + count, 1))
    return root


@pytest.mark.parametrize("retries", [0, 1])
def test_model_load_retry_count_as_tritonserver(start_server, start_tritonserver, tmp_path, retries):
    flag = f"--model-load-retry-count={retries}"
    ours = start_server("--model-repository", str(flaky_model(tmp_path / "a")), flag, wait="live")
    theirs = start_tritonserver("--model-repository", str(flaky_model(tmp_path / "b")), flag, "--exit-on-error=false",
                                wait="live")
    for s in (ours, theirs):
        s.wait_until(lambda s=s: s.settled() and s.index(), what="settled")
    state = {s: s.index_row("add_sub")["state"] for s in (ours, theirs)}
    assert state[ours] == state[theirs] == ("READY" if retries else "UNAVAILABLE")
    attempts = [(tmp_path / d / "add_sub" / "1" / "attempts").read_text() for d in ("a", "b")]
    assert attempts[0] == attempts[1] == str(1 + retries)


def test_a_refused_field_makes_the_model_unavailable_naming_it(start_server, repo):
    python_sleep_model(repo, "passive")
    cfg = repo / "passive" / "config.pbtxt"
    cfg.write_text(cfg.read_text() + "instance_group [ { kind: KIND_CPU passive: true } ]\n")
    s = start_server("--model-repository", str(repo), "--strict-readiness=false")
    s.wait_until(s.settled, what="settled")
    row = s.index_row("passive")
    assert row["state"] == "UNAVAILABLE", row
    assert "instance_group.passive" in row["reason"], row


def thread_list(pid: int) -> list[tuple[str, str]]:
    """(name, Cpus_allowed_list) of each thread, from /proc/<pid>/task/*/status."""
    out = []
    for status in Path(f"/proc/{pid}/task").glob("*/status"):
        try:
            fields = dict(line.split(":\t", 1) for line in status.read_text().splitlines() if ":\t" in line)
        except OSError:
            continue  # the thread ended meanwhile
        out.append((fields["Name"].strip(), fields["Cpus_allowed_list"].strip()))
    return out


def thread_cores(pid: int) -> dict[str, str]:
    """Each thread's name -> its Cpus_allowed_list (one of them where several share a name)."""
    return dict(thread_list(pid))


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to tell the pinning apart")
def test_host_policy_pins_instance_threads(start_server, repo):
    for name, policy in (("pin_a", "one"), ("pin_b", "zero")):
        python_sleep_model(repo, name)
        cfg = repo / name / "config.pbtxt"
        cfg.write_text(cfg.read_text() + f'instance_group [ {{ kind: KIND_CPU count: 2 host_policy: "{policy}" }} ]\n')
    python_sleep_model(repo, "free")
    s = start_server("--model-repository", str(repo), "--host-policy=one,cpu-cores=1",
                     "--host-policy=zero,cpu-cores=0")
    cores = s.wait_until(lambda: (lambda t: t if "inst-pin_b_0_1" in t else None)(thread_cores(s.proc.pid)),
                         what="instance threads")
    for i in (0, 1):
        assert cores[f"inst-pin_a_0_{i}"] == "1", cores
        assert cores[f"inst-pin_b_0_{i}"] == "0", cores
    # An instance without a policy keeps the process's cores.
    assert cores["inst-free_0"] == cores["tritonrs"] != "1", cores


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to tell the pinning apart")
def test_io_cpu_cores_pins_the_io_workers_only(start_server, repo):
    """--io-cpu-cores pins the I/O runtime's worker threads (--http-thread-count of them), not its
    blocking threads nor the main thread; requests are served as before."""
    python_sleep_model(repo, "pinned_io")
    s = start_server("--model-repository", str(repo), "--io-cpu-cores=1", "--http-thread-count=2")
    s.wait_until(lambda: sum(c == "1" for _, c in thread_list(s.proc.pid)) == 2, what="two pinned I/O workers")
    threads = thread_list(s.proc.pid)
    assert all(name == "tritonrs-io" for name, cores in threads if cores == "1"), threads
    assert next(c for n, c in threads if n == "tritonrs") != "1", threads
    assert s.client().is_model_ready("pinned_io")


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to tell the pinning apart")
def test_io_cpu_cores_without_a_thread_count_runs_one_worker_per_listed_core(start_server, repo):
    """Without --http-thread-count, --io-cpu-cores=1 gives the I/O runtime one worker (two on one core
    never run at once; the second only adds wake-ups), and it serves HTTP and gRPC alike."""
    python_sleep_model(repo, "one_io")
    s = start_server("--model-repository", str(repo), "--io-cpu-cores=1")
    s.wait_until(lambda: sum(c == "1" for _, c in thread_list(s.proc.pid)) >= 1, what="a pinned I/O worker")
    assert s.client().is_model_ready("one_io")
    assert s.grpc_client().is_model_ready("one_io")
    time.sleep(0.5)  # a second worker, were there one, parks (and pins itself) as soon as it starts
    pinned = [n for n, c in thread_list(s.proc.pid) if c == "1"]
    assert pinned == ["tritonrs-io"], thread_list(s.proc.pid)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to tell the pinning apart")
def test_a_model_loaded_through_the_api_does_not_inherit_the_io_workers_setting(start_server, repo):
    """A load asked for over HTTP runs on a blocking thread that a pinned SCHED_BATCH I/O worker starts
    (none was idle yet). The model's threads (its instance thread, the stub's readers) take their
    setting from the main thread, not from that worker (a CI run once found them pinned and batched)."""
    python_sleep_model(repo, "late")
    s = start_server("--model-repository", str(repo), "--model-control-mode=explicit", "--io-cpu-cores=1",
                     "--http-thread-count=2")
    s.wait_until(lambda: sum(c == "1" for _, c in thread_list(s.proc.pid)) == 2, what="two pinned I/O workers")
    r = s.post("/v2/repository/models/late/load")
    assert r.status == 200, r
    threads = thread_list(s.proc.pid)
    main_cores = next(c for n, c in threads if n == "tritonrs")
    assert main_cores != "1", threads
    assert [n for n, c in threads if c == "1"] == ["tritonrs-io"] * 2, threads
    assert any(n.startswith("inst-late") for n, _ in threads), threads
    policies = thread_policies(s.proc.pid)
    assert {p for n, p in policies if n.startswith("py-")} == {SCHED_OTHER}, policies


def thread_policies(pid: int) -> list[tuple[str, int]]:
    """(name, scheduling policy) of each thread: field 41 of /proc/<pid>/task/*/stat."""
    out = []
    for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
        try:
            name, rest = stat.read_text().rsplit(")", 1)
        except OSError:
            continue  # the thread ended meanwhile
        out.append((name.split("(", 1)[1], int(rest.split()[38])))
    return out


SCHED_OTHER, SCHED_BATCH = 0, 3


def test_io_workers_and_instance_threads_do_not_preempt_each_other(start_server, repo):
    """The I/O runtime's workers (--http-thread-count of them) and the instance threads run SCHED_BATCH,
    so one waking the other does not take its core at once; the main thread, the runtime's blocking
    threads (model loads) and the Python stub keep SCHED_OTHER."""
    python_sleep_model(repo, "batched_policy")
    s = start_server("--model-repository", str(repo), "--http-thread-count=2")
    s.wait_until(lambda: sum(p == SCHED_BATCH for n, p in thread_policies(s.proc.pid) if n == "tritonrs-io") == 2,
                 what="two SCHED_BATCH I/O workers")
    assert s.client().is_model_ready("batched_policy")
    threads = thread_policies(s.proc.pid)
    assert dict(threads).get("inst-batched_po") == SCHED_BATCH, threads
    assert dict(threads)["tritonrs"] == SCHED_OTHER, threads
    assert sum(p == SCHED_BATCH for n, p in threads if n == "tritonrs-io") == 2, threads
    assert {p for n, p in threads if not n.startswith(("inst-", "tritonrs-io"))} == {SCHED_OTHER}, threads
    # Requests go through both kinds of thread as before.
    r = s.post("/v2/models/batched_policy/infer",
               {"inputs": [{"name": "IN", "shape": [1], "datatype": "FP32", "data": [2.5]}]})
    assert r.status == 200, r
    assert r.json()["outputs"][0]["data"] == [2.5], r
    # The Python stub and the fork server starting it are processes of their own: they keep SCHED_OTHER.
    zygotes, stubs = stub_processes(s.proc.pid)
    assert stubs, "the model's stub is running"
    for pid in zygotes + stubs:
        assert {p for _, p in thread_policies(pid)} == {SCHED_OTHER}, thread_policies(pid)


def test_a_bad_io_cpu_cores_value_is_refused_at_start(tmp_path):
    r = subprocess.run([str(BIN), "--model-repository", str(tmp_path), "--io-cpu-cores=x"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "--io-cpu-cores" in r.stderr, r.stderr


def test_an_unknown_host_policy_fails_the_load(start_server, repo):
    python_sleep_model(repo, "pin_x")
    cfg = repo / "pin_x" / "config.pbtxt"
    cfg.write_text(cfg.read_text() + 'instance_group [ { kind: KIND_CPU host_policy: "fast" } ]\n')
    s = start_server("--model-repository", str(repo), "--host-policy=slow,cpu-cores=0", "--strict-readiness=false")
    s.wait_until(s.settled, what="settled")
    row = s.index_row("pin_x")
    assert row["state"] == "UNAVAILABLE" and "host policy 'fast'" in row["reason"], row


def instance_args(server) -> dict:
    """What args_echo's initialize was told about its instance."""
    import numpy as np
    import tritonclient.http as httpclient
    c = server.client()
    x = httpclient.InferInput("X", [1], "INT32")
    x.set_data_from_numpy(np.array([1], dtype=np.int32))
    args = json.loads(c.infer("args_echo", [x]).as_numpy("ARGS")[0])
    return {k: args[k] for k in ("model_instance_kind", "model_instance_device_id", "model_instance_name")}


def test_kind_model_python_instance_is_told_what_tritonserver_tells_it(start_server, start_tritonserver, tmp_path):
    repos = []
    for d in ("a", "b"):
        root = copy_models(tmp_path / d, "args_echo", src=PY)
        cfg = root / "args_echo" / "config.pbtxt"
        cfg.write_text(cfg.read_text() + "instance_group [ { kind: KIND_MODEL } ]\n")
        repos.append(root)
    ours = start_server("--model-repository", str(repos[0]))
    theirs = start_tritonserver("--model-repository", str(repos[1]))
    expected = instance_args(theirs)
    assert expected["model_instance_kind"] == "MODEL", expected
    assert instance_args(ours) == expected


def test_model_load_gpu_limit_without_a_gpu_says_it_has_nothing_to_limit(start_server, repo):
    import subprocess
    if shutil.which("nvidia-smi") and subprocess.run(["nvidia-smi"], capture_output=True).returncode == 0:
        pytest.skip("this machine has a GPU")
    python_sleep_model(repo, "m")
    s = start_server("--model-repository", str(repo), "--model-load-gpu-limit=0:0.5")
    s.wait_for_log(r"--model-load-gpu-limit has nothing to limit: this machine has no GPU")
    assert s.index_row("m")["state"] == "READY"


def test_kind_model_onnx_runs_with_the_cpu_execution_providers(start_server, repo):
    import numpy as np
    from helpers import simple_inputs
    import tritonclient.http as httpclient
    copy_models(repo, "simple")
    cfg = repo / "simple" / "config.pbtxt"
    cfg.write_text(cfg.read_text() + "instance_group [ { kind: KIND_MODEL } ]\n")
    s = start_server("--model-repository", str(repo))
    s.wait_for_log(r"Instance 'simple_0_0' is KIND_MODEL: ONNX Runtime places it with the CPU execution providers")
    r = s.client().infer("simple", simple_inputs(httpclient, 3))
    assert (r.as_numpy("OUTPUT0") == np.full((1, 16), 6, dtype=np.int32)).all()
