"""The ONNX Runtime backend's model settings, with the names of Triton's onnxruntime backend (2.51):
execution_mode, optimization.graph.level, enable_mem_arena, enable_mem_pattern,
memory.enable_memory_arena_shrinkage, session.* config entries, and the CUDA options' validation.

What proves a setting reached ONNX Runtime: the server's RSS after a request whose intermediates are
large (model-repos/onnx_options/big_intermediate), and ONNX Runtime's own "Session Options { ... }"
line, which it logs at info level and tritonrs forwards with --log-verbose=1.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import tritonclient.http as httpclient

from helpers import REPO_ROOT, copy_models

OPTIONS = REPO_ROOT / "model-repos" / "onnx_options"
MODEL = "big_intermediate"
# 64 Mi FP32 elements: two intermediates of 256 MiB each.
BIG = 64 << 20
MIB = 1 << 20


def with_parameters(repo: Path, *pairs: tuple[str, str], extra: str = "") -> None:
    copy_models(repo, MODEL, src=OPTIONS)
    cfg = repo / MODEL / "config.pbtxt"
    params = "".join(f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}\n' for k, v in pairs)
    cfg.write_text(cfg.read_text() + params + extra)


def infer(s, count: int) -> float:
    i = httpclient.InferInput("COUNT", [1], "INT64")
    i.set_data_from_numpy(np.array([count], np.int64))
    return float(s.client().infer(MODEL, [i]).as_numpy("SUM")[0])


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def growth_after_big_request(s) -> int:
    """RSS after a request with 512 MiB of intermediates, minus RSS after a tiny one."""
    assert infer(s, 4) == -4.0
    before = rss(s.proc.pid)
    assert infer(s, BIG) == -float(BIG)
    return rss(s.proc.pid) - before


def unavailable_reason(s, model: str = MODEL) -> str:
    s.wait_until(lambda: any(r.get("state") == "UNAVAILABLE" for r in s.index_rows(model)), what=f"{model} fails")
    return s.index_rows(model)[0]["reason"]


def test_arena_keeps_the_memory_and_enable_mem_arena_0_gives_it_back(start_server, repo, tmp_path):
    with_parameters(repo)
    s = start_server("--model-repository", repo)
    kept = growth_after_big_request(s)
    s.stop()
    # ONNX Runtime's arena keeps what the request needed (the default, as in tritonserver).
    assert kept > 300 * MIB, kept

    other = tmp_path / "off"
    other.mkdir()
    with_parameters(other, ("enable_mem_arena", "0"))
    s = start_server("--model-repository", other)
    assert growth_after_big_request(s) < 100 * MIB


def test_arena_shrinkage_run_option_gives_the_memory_back_after_each_request(start_server, repo):
    with_parameters(repo, ("memory.enable_memory_arena_shrinkage", "cpu:0"))
    s = start_server("--model-repository", repo)
    assert growth_after_big_request(s) < 100 * MIB
    # Again: the arena grows and shrinks each time.
    assert growth_after_big_request(s) < 100 * MIB


def test_arena_shrinkage_without_an_arena_is_onnx_runtimes_error(start_server, repo):
    """The run option is ONNX Runtime's: with the arena off, ONNX Runtime itself refuses it per request."""
    with_parameters(repo, ("enable_mem_arena", "false"), ("memory.enable_memory_arena_shrinkage", "cpu:0"))
    s = start_server("--model-repository", repo)
    try:
        infer(s, 4)
        raise AssertionError("the request succeeded")
    except httpclient.InferenceServerException as e:
        assert "not an arena based allocator" in str(e), e
    assert s.is_live()


def test_session_options_reach_onnx_runtime(start_server, repo):
    with_parameters(repo, ("execution_mode", "1"), ("enable_mem_pattern", "0"), ("enable_mem_arena", "0"),
                    ("session.use_device_allocator_for_initializers", "1"),
                    extra="optimization { graph { level: -1 } }\n")
    s = start_server("--model-repository", repo, "--log-verbose=1")
    line = s.wait_for_log(r"Session Options \{.*").group(0)
    assert "execution_mode:1 " in line, line
    assert "enable_mem_pattern:0 " in line, line
    assert "enable_cpu_mem_arena:0 " in line, line
    # -1 is ONNX Runtime's basic level (ORT_ENABLE_BASIC = 1).
    assert "graph_optimization_level:1 " in line, line
    assert "session.use_device_allocator_for_initializers: 1" in line, line
    assert infer(s, 8) == -8.0


def test_graph_levels_map_as_in_tritonserver(start_server, repo):
    """Triton: 1 = extended (ORT level 2), 2 = everything off (0), no level = all, which ONNX Runtime logs
    as its highest transformer level (3 in 1.22, above extended)."""
    logged = {}
    for level in ("1", "2", None):
        d = repo / f"l{level}"
        d.mkdir()
        with_parameters(d, extra=f"optimization {{ graph {{ level: {level} }} }}\n" if level else "")
        s = start_server("--model-repository", d, "--log-verbose=1")
        line = s.wait_for_log(r"Session Options \{.*").group(0)
        logged[level] = int(re.search(r"graph_optimization_level:(\d+) ", line).group(1))
        s.stop()
    assert logged["1"] == 2 and logged["2"] == 0 and logged[None] > 2, logged


def test_bad_values_fail_the_load_naming_the_parameter(start_server, repo):
    cases = {
        "execution_mode": ("execution_mode", "2"),
        "enable_mem_arena": ("enable_mem_arena", "maybe"),
        "enable_mem_pattern": ("enable_mem_pattern", "2"),
        "gpu_mem_limit": ("gpu_mem_limit", "lots"),
        "arena_extend_strategy": ("arena_extend_strategy", "3"),
        "cudnn_conv_algo_search": ("cudnn_conv_algo_search", "7"),
        "do_copy_in_default_stream": ("do_copy_in_default_stream", "yes please"),
        "memory.enable_memory_arena_shrinkage": ("memory.enable_memory_arena_shrinkage", "disk:0"),
    }
    for name, pair in cases.items():
        d = repo / name
        d.mkdir()
        with_parameters(d, pair)
        s = start_server("--model-repository", d, wait="live")
        reason = unavailable_reason(s)
        assert name in reason and pair[1] in reason, (name, reason)
        s.stop()
    d = repo / "level"
    d.mkdir()
    with_parameters(d, extra="optimization { graph { level: 5 } }\n")
    s = start_server("--model-repository", d, wait="live")
    assert "graph" in unavailable_reason(s) and "5" in unavailable_reason(s)


def test_cuda_options_are_checked_and_left_to_gpu_instances(start_server, repo):
    """gpu_mem_limit and the other CUDA settings apply to KIND_GPU instances (as in tritonserver); on a
    KIND_CPU instance they are checked and the model serves, and the log says they do not apply."""
    with_parameters(repo, ("gpu_mem_limit", "1073741824"), ("arena_extend_strategy", "1"),
                    ("cudnn_conv_algo_search", "1"), ("do_copy_in_default_stream", "0"))
    s = start_server("--model-repository", repo)
    assert infer(s, 3) == -3.0
    assert "gpu_mem_limit" in s.log and "KIND_CPU" in s.log, s.log


def test_unknown_parameter_is_a_warning(start_server, repo):
    with_parameters(repo, ("enable_mem_arenna", "0"))
    s = start_server("--model-repository", repo)
    s.wait_for_log(r"enable_mem_arenna")
    assert infer(s, 2) == -2.0


def thread_count(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/task").iterdir()))


def test_global_thread_pool_is_shared_by_every_session(start_server, repo, tmp_path):
    """--backend-config=onnxruntime,enable-global-threadpool=1: one intra-op pool for all sessions, sized by
    the backend config; the models' own thread counts are not used (as in tritonserver)."""
    instances = 'instance_group [ { count: 3 kind: KIND_CPU } ]\n'
    with_parameters(repo, ("intra_op_thread_count", "4"), extra=instances)
    s = start_server("--model-repository", repo)
    own_pools = thread_count(s.proc.pid)
    s.stop()

    shared = tmp_path / "shared"
    shared.mkdir()
    with_parameters(shared, ("intra_op_thread_count", "4"), extra=instances)
    s = start_server("--model-repository", shared, "--log-verbose=1",
                     "--backend-config=onnxruntime,enable-global-threadpool=1",
                     "--backend-config=onnxruntime,intra_op_thread_count=4")
    line = s.wait_for_log(r"Session Options \{.*").group(0)
    assert "use_per_session_threads:0 " in line, line
    # Three sessions with their own pools of 4 have 3 helper threads each; the shared pool has 3 in all.
    assert own_pools - thread_count(s.proc.pid) >= 6, (own_pools, thread_count(s.proc.pid))
    assert infer(s, 5) == -5.0
    assert "enable-global-threadpool is on" in s.log


def test_bad_global_thread_pool_setting_makes_onnx_models_unavailable(start_server, repo):
    with_parameters(repo)
    s = start_server("--model-repository", repo, "--backend-config=onnxruntime,enable-global-threadpool=sure",
                     wait="live")
    assert "enable-global-threadpool=sure" in unavailable_reason(s)
