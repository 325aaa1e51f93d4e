"""The sequence batcher (`sequence_batching`) with the official clients over HTTP and gRPC: per-sequence
state under interleaving from concurrent clients for the direct and oldest strategies, control input
values, string and integer sequence ids, idle expiry, the errors Triton gives (checked against Triton
2.51), implicit state with zero and file initial state, the backlog, and batching statistics."""

from __future__ import annotations

import struct
import threading
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from helpers import EXAMPLES, copy_models

PROTOCOLS = ["http", "grpc"]
ACC = "sequence_accumulate"
STATE = "sequence_state"


def module(protocol):
    return httpclient if protocol == "http" else grpcclient


def make_client(server, protocol):
    return server.client(network_timeout=30) if protocol == "http" else server.grpc_client()


def acc_infer(client, protocol, value, **seq):
    """One request to sequence_accumulate: returns (running sum, [START, END, READY], CORRID)."""
    m = module(protocol)
    i = m.InferInput("INPUT", [1, 1], "INT32")
    i.set_data_from_numpy(np.array([[value]], dtype=np.int32))
    r = client.infer(ACC, [i], **seq)
    return int(r.as_numpy("OUTPUT")[0][0]), r.as_numpy("SIGNALS")[0].tolist(), int(r.as_numpy("CORRID_OUT")[0][0])


def state_infer(client, protocol, value, model=STATE, outputs=None, **seq):
    m = module(protocol)
    i = m.InferInput("INPUT", [1], "INT32")
    i.set_data_from_numpy(np.array([value], dtype=np.int32))
    req = None
    if outputs:
        req = [m.InferRequestedOutput(o) for o in outputs]
    r = client.infer(model, [i], outputs=req, **seq)
    if outputs:
        return [r.as_numpy(o).tolist() for o in outputs]
    return int(r.as_numpy("OUTPUT")[0])


def error_of(f) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as e:
        f()
    return e.value


def expect_invalid(e: InferenceServerException, protocol):
    assert e.status() == ("400" if protocol == "http" else "StatusCode.INVALID_ARGUMENT"), (e.status(), e.message())


def run_sequences(server, protocol, ids, length, send):
    """Runs one sequence per id on its own thread and client, all at once; `send(client, i, value, seq)`
    does one request. Returns {id: [results]} and re-raises the first failure."""
    results, errors = {}, []
    barrier = threading.Barrier(len(ids))

    def worker(k, sid):
        try:
            c = make_client(server, protocol)
            barrier.wait(10)
            out = []
            for i in range(length):
                seq = {"sequence_id": sid, "sequence_start": i == 0, "sequence_end": i == length - 1}
                out.append(send(c, i, value_of(k, i), seq))
            results[sid] = out
        except BaseException as ex:  # noqa: BLE001 - reported below
            errors.append(ex)

    threads = [threading.Thread(target=worker, args=(k, sid)) for k, sid in enumerate(ids)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    if errors:
        raise errors[0]
    assert set(results) == set(ids)
    return results


def value_of(k, i):
    return (k + 1) * 100 + i


def running_sums(k, length, start=0):
    out, total = [], start
    for i in range(length):
        total += value_of(k, i)
        out.append(total)
    return out


def stats_of(client, model):
    st = client.get_inference_statistics(model)
    return st["model_stats"][0]


def with_config(repo, name, src_name, edit):
    """Copies an example model to `repo/name` with its config edited by `edit(text) -> text`."""
    copy_models(repo, src_name)
    if name != src_name:
        (repo / src_name).rename(repo / name)
    cfg = repo / name / "config.pbtxt"
    text = edit(cfg.read_text()).replace(f'name: "{src_name}"', f'name: "{name}"')
    cfg.write_text(text)
    return repo / name


OLDEST = "oldest { max_candidate_sequences: 4 preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 20000 }"
DIRECT_WAIT = "direct { max_queue_delay_microseconds: 20000 minimum_slot_utilization: 1.0 }"


# ---- per-sequence state under interleaving -----------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_direct_keeps_each_sequence_apart_under_concurrency(examples_server, protocol):
    # Six concurrent sequences over four slots: two wait in the backlog until a sequence ends.
    base = 1000 if protocol == "http" else 2000
    ids = [base + k for k in range(6)]
    length = 6
    res = run_sequences(examples_server, protocol, ids, length,
                        lambda c, i, v, seq: acc_infer(c, protocol, v, **seq))
    for k, sid in enumerate(ids):
        sums = [r[0] for r in res[sid]]
        assert sums == running_sums(k, length), (sid, sums)
        signals = [r[1] for r in res[sid]]
        assert signals[0] == [1, 0, 1] and signals[-1] == [0, 1, 1], signals
        assert all(s == [0, 0, 1] for s in signals[1:-1]), signals
        assert all(r[2] == sid for r in res[sid]), res[sid]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_oldest_keeps_each_sequence_apart_and_batches_across_sequences(start_server, repo, protocol):
    with_config(repo, "acc_oldest", ACC, lambda t: t.replace("direct { }", OLDEST))
    s = start_server("--model-repository", repo)
    c = s.client()
    assert c.get_model_config("acc_oldest")["sequence_batching"]["oldest"]["max_candidate_sequences"] == 4

    def send(cl, i, v, seq):
        m = module(protocol)
        x = m.InferInput("INPUT", [1, 1], "INT32")
        x.set_data_from_numpy(np.array([[v]], dtype=np.int32))
        r = cl.infer("acc_oldest", [x], **seq)
        return int(r.as_numpy("OUTPUT")[0][0]), r.as_numpy("SIGNALS")[0].tolist(), int(r.as_numpy("CORRID_OUT")[0][0])

    ids = [7, 8, 9, 10, 11]  # five sequences, four candidates: one waits in the backlog
    length = 8
    res = run_sequences(s, protocol, ids, length, send)
    for k, sid in enumerate(ids):
        assert [r[0] for r in res[sid]] == running_sums(k, length), (sid, res[sid])
        assert res[sid][0][1] == [1, 0, 1] and res[sid][-1][1] == [0, 1, 1]
        assert all(r[2] == sid for r in res[sid])
    m = stats_of(c, "acc_oldest")
    assert m["inference_count"] == len(ids) * length
    # With a queue delay and four candidates, requests of different sequences share executions.
    assert m["execution_count"] < m["inference_count"], m
    assert any(b["batch_size"] > 1 for b in m["batch_stats"]), m["batch_stats"]
    # Oldest never pads: batch sizes add up to the inferences.
    assert sum(b["batch_size"] * b["compute_infer"]["count"] for b in m["batch_stats"]) == m["inference_count"]


def test_direct_statistics_show_batching_across_sequences(start_server, repo):
    with_config(repo, ACC, ACC, lambda t: t.replace("direct { }", DIRECT_WAIT))
    s = start_server("--model-repository", repo)
    c = s.client()
    ids = [31, 32, 33, 34]
    length = 6
    res = run_sequences(s, "http", ids, length, lambda cl, i, v, seq: acc_infer(cl, "http", v, **seq))
    for k, sid in enumerate(ids):
        assert [r[0] for r in res[sid]] == running_sums(k, length)
    m = stats_of(c, ACC)
    assert m["inference_count"] == len(ids) * length
    assert m["inference_stats"]["success"]["count"] == len(ids) * length
    assert m["execution_count"] < m["inference_count"], m
    assert any(b["batch_size"] > 1 for b in m["batch_stats"]), m["batch_stats"]
    # Queue and compute times are counted per request.
    assert m["inference_stats"]["queue"]["count"] == len(ids) * length
    assert m["inference_stats"]["compute_infer"]["count"] == len(ids) * length
    # Every execution is in a batch bucket (direct pads idle slots below the last ready one).
    assert sum(b["compute_infer"]["count"] for b in m["batch_stats"]) == m["execution_count"]
    assert all(1 <= b["batch_size"] <= 4 for b in m["batch_stats"])


# ---- control inputs ------------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_control_inputs_carry_start_end_ready_and_corrid(examples_server, protocol):
    c = make_client(examples_server, protocol)
    # Over HTTP the whole uint64 range reaches CORRID; tritonclient.grpc sends ids as int64.
    sid = 2**63 + 12345 if protocol == "http" else 2**62 + 12345
    assert acc_infer(c, protocol, 5, sequence_id=sid, sequence_start=True) == (5, [1, 0, 1], sid)
    assert acc_infer(c, protocol, 6, sequence_id=sid) == (11, [0, 0, 1], sid)
    # START again on a running sequence restarts it in its slot (as Triton does).
    assert acc_infer(c, protocol, 7, sequence_id=sid, sequence_start=True) == (7, [1, 0, 1], sid)
    assert acc_infer(c, protocol, 1, sequence_id=sid, sequence_end=True) == (8, [0, 1, 1], sid)
    # A one-request sequence has START and END together.
    assert acc_infer(c, protocol, 9, sequence_id=sid + 1, sequence_start=True, sequence_end=True) == (9, [1, 1, 1], sid + 1)


def test_control_and_state_tensors_are_hidden_from_clients(examples_server, client):
    md = client.get_model_metadata(ACC)
    assert [i["name"] for i in md["inputs"]] == ["INPUT"]
    assert [o["name"] for o in md["outputs"]] == ["OUTPUT", "SIGNALS", "CORRID_OUT"]
    cfg = client.get_model_config(ACC)
    sb = cfg["sequence_batching"]
    assert sb["max_sequence_idle_microseconds"] == 5000000
    assert [ci["name"] for ci in sb["control_input"]] == ["START", "END", "READY", "CORRID"]
    assert sb["state"][0]["input_name"] == "ACC_IN"
    # A client cannot feed a control input itself.
    i = httpclient.InferInput("INPUT", [1, 1], "INT32")
    i.set_data_from_numpy(np.array([[1]], dtype=np.int32))
    start = httpclient.InferInput("START", [1, 1], "INT32")
    start.set_data_from_numpy(np.array([[1]], dtype=np.int32))
    e = error_of(lambda: client.infer(ACC, [i, start], sequence_id=77, sequence_start=True))
    assert e.status() == "400" and "START" in e.message()


# ---- errors ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_tritons_errors_for_bad_sequence_requests(examples_server, protocol):
    c = make_client(examples_server, protocol)
    # No sequence id (Triton 2.51 answers with exactly these messages).
    e = error_of(lambda: acc_infer(c, protocol, 1))
    expect_invalid(e, protocol)
    assert e.message() == f"inference request to model '{ACC}' must specify a non-zero or non-empty correlation ID"
    # An unknown sequence without START.
    e = error_of(lambda: acc_infer(c, protocol, 1, sequence_id=424242))
    expect_invalid(e, protocol)
    assert e.message() == (f"inference request for sequence 424242 to model '{ACC}' must specify the START flag "
                           "on the first request of the sequence")
    e = error_of(lambda: state_infer(c, protocol, 1, sequence_id="nobody"))
    expect_invalid(e, protocol)
    assert e.message().startswith(f"inference request for sequence nobody to model '{STATE}' must specify the START")
    # A request on an ended sequence.
    acc_infer(c, protocol, 1, sequence_id=4243, sequence_start=True, sequence_end=True)
    e = error_of(lambda: acc_infer(c, protocol, 1, sequence_id=4243))
    expect_invalid(e, protocol)
    assert "must specify the START flag" in e.message()
    # A batch of more than one request.
    m = module(protocol)
    i = m.InferInput("INPUT", [2, 1], "INT32")
    i.set_data_from_numpy(np.array([[1], [2]], dtype=np.int32))
    e = error_of(lambda: c.infer(ACC, [i], sequence_id=4244, sequence_start=True))
    expect_invalid(e, protocol)
    assert e.message() == (f"inference request to model '{ACC}' must specify batch-size 1 due to requirements "
                           "of sequence batcher")
    # A string id where CORRID is UINT64 (Triton would feed the string's bytes as the integer).
    e = error_of(lambda: acc_infer(c, protocol, 1, sequence_id="text", sequence_start=True))
    expect_invalid(e, protocol)
    assert "'text' is a string" in e.message() and "CORRID" in e.message()


# ---- string and integer ids, implicit state, backlog -----------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_string_and_integer_ids_keep_separate_state(examples_server, protocol):
    # sequence_state has two instances and no batching: two sequences run, the third waits in the backlog.
    ids = [f"{protocol}-seq-a", f"{protocol}-seq-b", 987654321 if protocol == "http" else 987654322]
    length = 5
    res = run_sequences(examples_server, protocol, ids, length,
                        lambda c, i, v, seq: state_infer(c, protocol, v, **seq))
    for k, sid in enumerate(ids):
        assert res[sid] == running_sums(k, length), (sid, res[sid])


def test_same_number_as_string_and_integer_are_different_sequences(examples_server, client):
    state_infer(client, "http", 5, sequence_id=555, sequence_start=True)
    e = error_of(lambda: state_infer(client, "http", 5, sequence_id="555"))
    assert e.status() == "400"
    assert state_infer(client, "http", 5, sequence_id=555, sequence_end=True) == 10


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_initial_state_from_a_data_file_and_the_state_output_on_request(start_server, repo, protocol):
    def edit(text):
        text = text.replace("zero_data: true", 'data_file: "start_at_1000"')
        # Listing the state output lets clients ask for it (Triton's debugging aid).
        return text.replace('output [\n', 'output [\n  {\n    name: "STATE_OUT"\n    data_type: TYPE_INT32\n'
                                          '    dims: [ 1 ]\n  },\n', 1)

    d = with_config(repo, "state_file", STATE, edit)
    (d / "initial_state").mkdir()
    (d / "initial_state" / "start_at_1000").write_bytes(struct.pack("<i", 1000))
    s = start_server("--model-repository", repo)
    c = make_client(s, protocol)
    assert state_infer(c, protocol, 1, model="state_file", sequence_id=1, sequence_start=True) == 1001
    assert state_infer(c, protocol, 2, model="state_file", sequence_id=1) == 1003
    assert state_infer(c, protocol, 3, model="state_file", outputs=["OUTPUT", "STATE_OUT"],
                       sequence_id=1, sequence_end=True) == [[1006], [1006]]
    # A new sequence starts again from the file's value.
    assert state_infer(c, protocol, 5, model="state_file", sequence_id=1, sequence_start=True,
                       sequence_end=True) == 1005


def test_a_missing_initial_state_file_fails_the_load_with_a_reason(start_server, repo):
    with_config(repo, "state_nofile", STATE, lambda t: t.replace("zero_data: true", 'data_file: "missing.bin"'))
    s = start_server("--model-repository", repo, "--strict-readiness=false")
    c = s.client()
    rows = [r for r in c.get_model_repository_index() if r["name"] == "state_nofile"]
    assert rows and rows[0]["state"] == "UNAVAILABLE", rows
    assert "missing.bin" in rows[0]["reason"], rows


def test_zero_initial_state_restarts_each_sequence(examples_server, client):
    assert state_infer(client, "http", 4, sequence_id="z", sequence_start=True) == 4
    assert state_infer(client, "http", 4, sequence_id="z") == 8
    assert state_infer(client, "http", 4, sequence_id="z", sequence_end=True) == 12
    assert state_infer(client, "http", 4, sequence_id="z", sequence_start=True, sequence_end=True) == 4


# ---- idle expiry ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_idle_sequences_are_released_and_later_requests_fail_clearly(start_server, repo, protocol):
    with_config(repo, "state_idle", STATE, lambda t: t.replace("max_sequence_idle_microseconds: 5000000",
                                                               "max_sequence_idle_microseconds: 300000"))
    s = start_server("--model-repository", repo)
    c = make_client(s, protocol)
    # Both slots (two instances) are taken by sequences that are then abandoned.
    assert state_infer(c, protocol, 1, model="state_idle", sequence_id=1, sequence_start=True) == 1
    assert state_infer(c, protocol, 2, model="state_idle", sequence_id="two", sequence_start=True) == 2
    # A third sequence waits in the backlog until an abandoned one is released.
    t0 = time.monotonic()
    assert state_infer(c, protocol, 3, model="state_idle", sequence_id=3, sequence_start=True) == 3
    assert time.monotonic() - t0 >= 0.2
    time.sleep(0.9)
    for sid in (1, "two"):
        e = error_of(lambda: state_infer(c, protocol, 1, model="state_idle", sequence_id=sid))
        expect_invalid(e, protocol)
        assert "must specify the START flag on the first request of the sequence" in e.message(), e.message()
        assert "max_sequence_idle_microseconds" in e.message(), e.message()
    # The released slots serve new sequences at once.
    t0 = time.monotonic()
    assert state_infer(c, protocol, 10, model="state_idle", sequence_id=4, sequence_start=True) == 10
    assert state_infer(c, protocol, 20, model="state_idle", sequence_id=5, sequence_start=True) == 20
    assert time.monotonic() - t0 < 5


def test_a_busy_sequence_does_not_expire(start_server, repo):
    with_config(repo, "state_busy", STATE, lambda t: t.replace("max_sequence_idle_microseconds: 5000000",
                                                               "max_sequence_idle_microseconds: 400000"))
    s = start_server("--model-repository", repo)
    c = s.client()
    total = state_infer(c, "http", 1, model="state_busy", sequence_id=9, sequence_start=True)
    for _ in range(8):
        time.sleep(0.1)
        total = state_infer(c, "http", 1, model="state_busy", sequence_id=9)
    assert total == 9
    assert state_infer(c, "http", 1, model="state_busy", sequence_id=9, sequence_end=True) == 10


def test_backlogged_sequence_waits_for_a_free_slot(start_server, repo):
    # One instance, no batching: one slot; a second sequence waits until the first ends.
    with_config(repo, "state_one", STATE, lambda t: t.replace("count: 2", "count: 1"))
    s = start_server("--model-repository", repo)
    c1, c2 = s.client(), s.client(network_timeout=30)
    assert state_infer(c1, "http", 1, model="state_one", sequence_id=1, sequence_start=True) == 1
    got = {}

    def second():
        got["v"] = state_infer(c2, "http", 5, model="state_one", sequence_id=2, sequence_start=True)

    t = threading.Thread(target=second)
    t.start()
    time.sleep(0.5)
    assert "v" not in got  # waiting in the backlog
    st = c1.get_inference_statistics("state_one")["model_stats"][0]
    assert st["inference_count"] == 1
    assert state_infer(c1, "http", 1, model="state_one", sequence_id=1, sequence_end=True) == 2
    t.join(10)
    assert got.get("v") == 5


def test_a_grpc_stream_keeps_each_sequences_requests_in_order(examples_server):
    # Triton's stream sequence example sends a sequence's requests back to back without waiting; the
    # server must still apply them in stream order. Two sequences are interleaved on one stream.
    results, done = {}, threading.Event()
    n = 12

    def callback(result, error):
        if error is not None:
            results[("error", len(results))] = str(error)
        else:
            results[result.get_response().id] = int(result.as_numpy("OUTPUT")[0][0])
        if len(results) == 2 * n:
            done.set()

    c = examples_server.grpc_client()
    c.start_stream(callback=callback)
    try:
        for i in range(n):
            for sid in (501, 502):
                x = grpcclient.InferInput("INPUT", [1, 1], "INT32")
                x.set_data_from_numpy(np.array([[sid - 500 + i]], dtype=np.int32))
                c.async_stream_infer(ACC, [x], request_id=f"{sid}-{i}", sequence_id=sid,
                                     sequence_start=i == 0, sequence_end=i == n - 1)
        assert done.wait(30), results
    finally:
        c.stop_stream()
    for sid in (501, 502):
        got = [results[f"{sid}-{i}"] for i in range(n)]
        want = list(np.cumsum([sid - 500 + i for i in range(n)]))
        assert got == want, (sid, got, results)
