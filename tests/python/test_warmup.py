"""Model warmup: samples run on every instance before READY; a failed warmup is a failed load."""

from __future__ import annotations

import numpy as np

from helpers import copy_models

MODEL = "batched_scale"


def with_warmup(repo, warmup: str, instances: int = 1):
    copy_models(repo, MODEL)
    cfg = repo / MODEL / "config.pbtxt"
    text = cfg.read_text().replace("count: 1", f"count: {instances}")
    cfg.write_text(text + warmup)
    return repo


def warmup_block(name: str, batch: int, data: str, dims: str = "16", count: int = 1) -> str:
    return (
        f'model_warmup {{ name: "{name}" batch_size: {batch} count: {count} '
        f'inputs {{ key: "INPUT" value: {{ data_type: TYPE_FP32 dims: [ {dims} ] {data} }} }} }}\n'
    )


def unavailable(s) -> dict:
    s.wait_until(lambda: any(r.get("state") == "UNAVAILABLE" for r in s.index_rows(MODEL)), what="UNAVAILABLE")
    return s.index_rows(MODEL)[0]


def test_warmup_runs_before_ready_and_is_not_counted(start_server, repo):
    block = warmup_block("zeros", 4, "zero_data: true", count=3) + warmup_block("random", 1, "random_data: true")
    s = start_server("--model-repository", with_warmup(repo, block, instances=2))
    # Ready over HTTP may come before the log reader has the lines: wait for the later one.
    s.wait_for_log(f"Model '{MODEL}' version 1 is READY")
    log = s.log
    warm = log.index("ran 2 warmup sample(s) on each instance")
    assert warm < log.index(f"Model '{MODEL}' version 1 is READY"), log
    c = s.client()
    st = c.get_inference_statistics(MODEL)["model_stats"][0]
    assert st["execution_count"] == 0 and st["inference_count"] == 0
    x = np.ones((1, 16), np.float32)
    from tritonclient.http import InferInput

    i = InferInput("INPUT", [1, 16], "FP32")
    i.set_data_from_numpy(x)
    assert np.array_equal(c.infer(MODEL, [i]).as_numpy("OUTPUT"), x * 2)


def test_warmup_from_a_data_file(start_server, repo):
    with_warmup(repo, warmup_block("file", 2, 'input_data_file: "input.bin"'))
    (repo / MODEL / "warmup").mkdir()
    (repo / MODEL / "warmup" / "input.bin").write_bytes(np.arange(16, dtype=np.float32).tobytes())
    s = start_server("--model-repository", repo)
    assert s.index_rows(MODEL)[0]["state"] == "READY"


def test_failed_warmup_is_a_failed_load(start_server, repo):
    copy_models(repo, "simple")
    # The model takes [N, 16]: a warmup with 8 elements per item fails in ONNX Runtime.
    with_warmup(repo, warmup_block("bad dims", 1, "zero_data: true", dims="8"))
    s = start_server("--model-repository", repo, wait="live")
    row = unavailable(s)
    assert row["state"] == "UNAVAILABLE" and "model warmup 'bad dims' failed" in row["reason"], row
    # The rest keep serving.
    s.wait_until(lambda: s.client().is_model_ready("simple"), what="simple READY")


def test_missing_warmup_file_is_a_clear_reason(start_server, repo):
    with_warmup(repo, warmup_block("file", 1, 'input_data_file: "nope.bin"'))
    s = start_server("--model-repository", repo, wait="live")
    row = unavailable(s)
    assert row["state"] == "UNAVAILABLE" and "nope.bin" in row["reason"], row


def test_warmup_batch_size_beyond_max_is_refused(start_server, repo):
    with_warmup(repo, warmup_block("big", 64, "zero_data: true"))
    s = start_server("--model-repository", repo, wait="live")
    row = unavailable(s)
    assert row["state"] == "UNAVAILABLE" and "max_batch_size" in row["reason"], row


def test_random_warmup_data_is_plausible(start_server, repo):
    """random_data fills FP32 inputs with normal numbers in [0, 1): not zeros, and not the subnormals
    (one low byte per element) it used to write, which no real input looks like and which CPUs run
    slowly. A Python model keeps what its warmup saw."""
    d = repo / "seen"
    (d / "1").mkdir(parents=True)
    (d / "1" / "model.py").write_text(
        "import os\n"
        "import numpy as np\n"
        "import triton_python_backend_utils as pb_utils\n"
        "class TritonPythonModel:\n"
        "    def execute(self, requests):\n"
        "        out = []\n"
        "        for r in requests:\n"
        "            x = pb_utils.get_input_tensor_by_name(r, 'INPUT').as_numpy()\n"
        "            np.save(os.path.join(os.path.dirname(__file__), 'seen.npy'), x)\n"
        "            out.append(pb_utils.InferenceResponse([pb_utils.Tensor('OUTPUT', x)]))\n"
        "        return out\n")
    (d / "config.pbtxt").write_text(
        'name: "seen"\nbackend: "python"\nmax_batch_size: 4\n'
        'input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 64 ] } ]\n'
        'output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 64 ] } ]\n'
        'model_warmup { name: "r" batch_size: 2 inputs { key: "INPUT" value: '
        '{ data_type: TYPE_FP32 dims: [ 64 ] random_data: true } } }\n')
    s = start_server("--model-repository", repo, "--model-control-mode", "explicit", "--load-model", "seen")
    assert s.client().is_model_ready("seen")
    x = np.load(d / "1" / "seen.npy")
    assert x.shape == (2, 64) and x.dtype == np.float32
    assert ((x >= 0) & (x < 1)).all(), x
    assert ((x == 0) | (np.abs(x) >= np.finfo(np.float32).tiny)).all(), "subnormal values in the warmup"
    assert len(np.unique(x)) > 32, x
