"""The OpenAI-compatible API on the HTTP port (/v1/models, /v1/completions, /v1/chat/completions),
driven with the official `openai` SDK against tiny Python-backend "LLMs" written here: `echo_json`
answers what reached it (prompt, inputs, request parameters) as JSON text, `words` streams its prompt
word by word as decoupled responses, `raiser` fails, `no_text` has no `text_input`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import openai
import pytest

from helpers import ANCHORS, REPO_ROOT, TritonServer

PY = f"--backend-config=python,python-executable={sys.executable}"

ECHO_TEMPLATE = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"

# A Hugging Face style template: special tokens from the tokenizer configuration, Python string
# methods, transformers' raise_exception, and trim_blocks/lstrip_blocks whitespace handling.
WORDS_TEMPLATE = """{{ bos_token }}
{% for message in messages %}
    {% if message['role'] not in ['system', 'user', 'assistant'] %}
        {{ raise_exception('Unknown role: ' + message['role']) }}
    {% endif %}
    [{{ message['role'] | upper }}] {{ message['content'].strip() }} {{ eos_token }}
{% endfor %}
{% if add_generation_prompt %}[ASSISTANT]{% endif %}"""

ECHO_MODEL = '''
import json
import numpy as np
import triton_python_backend_utils as pb_utils


def value(request, name):
    t = pb_utils.get_input_tensor_by_name(request, name)
    if t is None:
        return None
    a = t.as_numpy().reshape(-1)
    out = [x.decode() if isinstance(x, bytes) else x.item() for x in a]
    return out


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            prompt = value(request, "text_input")[0]
            seen = {"prompt": prompt, "parameters": json.loads(request.parameters())}
            for name in ("max_tokens", "temperature", "stop", "seed"):
                v = value(request, name)
                if v is not None:
                    seen[name] = v
            text = json.dumps(seen)
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("text_output", np.array([text.encode()], dtype=np.object_)),
                pb_utils.Tensor("num_input_tokens", np.array([len(prompt.split())], dtype=np.uint32)),
                pb_utils.Tensor("num_output_tokens", np.array([1], dtype=np.uint32)),
            ]))
        return responses
'''

ECHO_CONFIG = f'''
backend: "python"
max_batch_size: 0
input [
  {{ name: "text_input" data_type: TYPE_STRING dims: [ 1 ] }},
  {{ name: "max_tokens" data_type: TYPE_INT32 dims: [ 1 ] optional: true }},
  {{ name: "temperature" data_type: TYPE_FP32 dims: [ 1 ] optional: true }},
  {{ name: "stop" data_type: TYPE_STRING dims: [ -1 ] optional: true }},
  {{ name: "seed" data_type: TYPE_UINT64 dims: [ 1 ] optional: true }}
]
output [
  {{ name: "text_output" data_type: TYPE_STRING dims: [ 1 ] }},
  {{ name: "num_input_tokens" data_type: TYPE_UINT32 dims: [ 1 ] }},
  {{ name: "num_output_tokens" data_type: TYPE_UINT32 dims: [ 1 ] }}
]
parameters {{ key: "chat_template" value: {{ string_value: {json.dumps(ECHO_TEMPLATE)} }} }}
'''

# Streams the prompt's words, one response each (a space after all but the last), stopping after
# `max_tokens` words (finish_reason "length") or before a `stop` word; then the final flag alone.
WORDS_MODEL = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            prompt = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy().reshape(-1)[0].decode()
            words = prompt.split()
            stop = pb_utils.get_input_tensor_by_name(request, "stop")
            if stop is not None:
                stops = [s.decode() for s in stop.as_numpy().reshape(-1)]
                for i, w in enumerate(words):
                    if w in stops:
                        words = words[:i]
                        break
            limit = int(pb_utils.get_input_tensor_by_name(request, "max_tokens").as_numpy().reshape(-1)[0])
            cut = len(words) > limit
            words = words[:limit]
            for i, w in enumerate(words):
                text = w if i == len(words) - 1 else w + " "
                last = i == len(words) - 1
                sender.send(pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("text_output", np.array([text.encode()], dtype=np.object_)),
                        pb_utils.Tensor("num_input_tokens", np.array([len(prompt.split())], dtype=np.uint32)),
                        pb_utils.Tensor("num_output_tokens", np.array([1], dtype=np.uint32)),
                    ],
                    parameters={"finish_reason": "length" if (cut and last) else "stop"}))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
'''

WORDS_CONFIG = '''
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [
  { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "max_tokens" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "stop" data_type: TYPE_STRING dims: [ -1 ] optional: true }
]
output [
  { name: "text_output" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "num_input_tokens" data_type: TYPE_UINT32 dims: [ 1 ] },
  { name: "num_output_tokens" data_type: TYPE_UINT32 dims: [ 1 ] }
]
'''

# Fails every request; in decoupled form, after one good response (an error mid-stream).
RAISER_MODEL = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        raise pb_utils.TritonModelException("the model broke on purpose")
'''

RAISER_STREAM_MODEL = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            sender.send(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("text_output", np.array([b"partial "], dtype=np.object_))]))
            sender.send(pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError("broke mid-stream")),
                        flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
'''

TEXT_IO = '''
input [ { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ 1 ] } ]
'''

NO_TEXT_MODEL = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.get_input_tensor_by_name(r, "X")]) for r in requests]
'''


def write_model(repo, name, model_py, config, files=None):
    d = repo / name
    (d / "1").mkdir(parents=True)
    (d / "1" / "model.py").write_text(textwrap.dedent(model_py))
    (d / "config.pbtxt").write_text(config)
    for fname, text in (files or {}).items():
        (d / fname).write_text(text)


def llm_repo(repo):
    write_model(repo, "echo_json", ECHO_MODEL, ECHO_CONFIG)
    tokenizer = {"bos_token": "<s>", "eos_token": {"content": "</s>", "lstrip": False}, "chat_template": WORDS_TEMPLATE}
    write_model(repo, "words", WORDS_MODEL, WORDS_CONFIG, {"tokenizer_config.json": json.dumps(tokenizer)})
    write_model(repo, "raiser", RAISER_MODEL, 'backend: "python"\nmax_batch_size: 0\n' + TEXT_IO)
    write_model(repo, "raiser_stream", RAISER_STREAM_MODEL,
                'backend: "python"\nmax_batch_size: 0\nmodel_transaction_policy { decoupled: true }\n' + TEXT_IO)
    write_model(repo, "no_text", NO_TEXT_MODEL, 'backend: "python"\nmax_batch_size: 0\n'
                'input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
                'output [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]\n')
    return repo


@pytest.fixture(scope="module")
def llm(tmp_path_factory):
    repo = llm_repo(tmp_path_factory.mktemp("openai") / "repo")
    s = TritonServer(["--model-repository", repo, PY], name="openai").start()
    yield s
    s.stop()


def sdk(s: TritonServer, **kw) -> openai.OpenAI:
    # No retries: a 500 is an answer to check, not something to try again.
    return openai.OpenAI(base_url=f"http://{s.url}/v1", api_key="unused", max_retries=0, timeout=30, **kw)


# ---- models ------------------------------------------------------------------------------------


def test_models_are_listed_and_retrieved(llm):
    c = sdk(llm)
    ids = sorted(m.id for m in c.models.list())
    assert ids == ["echo_json", "no_text", "raiser", "raiser_stream", "words"]
    m = c.models.retrieve("words")
    assert (m.id, m.object) == ("words", "model") and m.created > 0
    with pytest.raises(openai.NotFoundError) as e:
        c.models.retrieve("nope")
    assert e.value.body["code"] == "model_not_found"


# ---- completions -------------------------------------------------------------------------------


def test_completion_fields_reach_the_model_inputs_and_parameters(llm):
    r = sdk(llm).completions.create(model="echo_json", prompt="hello big world", max_tokens=7, temperature=0.5,
                                    stop=["x", "y"], seed=3, top_p=0.25, frequency_penalty=1.5,
                                    extra_body={"custom_field": "v"}, extra_headers={"x-ignored": "h"})
    seen = json.loads(r.choices[0].text)
    # Declared inputs get the values, typed as the model declares them.
    assert seen["prompt"] == "hello big world"
    assert seen["max_tokens"] == [7] and seen["seed"] == [3] and seen["stop"] == ["x", "y"]
    assert seen["temperature"] == [0.5]
    # The rest become request parameters.
    assert seen["parameters"]["top_p"] == 0.25 and seen["parameters"]["frequency_penalty"] == 1.5
    assert seen["parameters"]["custom_field"] == "v"
    assert "x-ignored" not in seen["parameters"], "headers are forwarded only with --http-header-forward-pattern"
    assert r.object == "text_completion" and r.id.startswith("cmpl-") and r.model == "echo_json"
    assert r.choices[0].finish_reason == "stop" and r.choices[0].index == 0
    # The model's num_input_tokens / num_output_tokens outputs give the usage.
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (3, 1, 4)


def test_max_tokens_defaults_to_tritons_16_for_a_model_that_declares_it(llm):
    r = sdk(llm).completions.create(model="echo_json", prompt="p")
    assert json.loads(r.choices[0].text)["max_tokens"] == [16]


def test_completion_of_a_decoupled_model_is_the_concatenation(llm):
    r = sdk(llm).completions.create(model="words", prompt="one two three four", max_tokens=10)
    assert r.choices[0].text == "one two three four"
    assert r.choices[0].finish_reason == "stop"
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (4, 4)
    r = sdk(llm).completions.create(model="words", prompt="one two three four", max_tokens=2)
    assert r.choices[0].text == "one two" and r.choices[0].finish_reason == "length"


def test_completion_streams_one_chunk_per_response_with_stop_and_max_tokens(llm):
    chunks = list(sdk(llm).completions.create(model="words", prompt="a b c d e", stop="c", max_tokens=10,
                                              stream=True))
    texts = [ch.choices[0].text for ch in chunks]
    assert texts == ["a ", "b", ""], "a chunk per word, then the final flag"
    assert [ch.choices[0].finish_reason for ch in chunks] == [None, None, "stop"]
    assert len({ch.id for ch in chunks}) == 1 and chunks[0].object == "text_completion"
    chunks = list(sdk(llm).completions.create(model="words", prompt="a b c d e", max_tokens=3, stream=True,
                                              stream_options={"include_usage": True}))
    assert "".join(ch.choices[0].text for ch in chunks if ch.choices) == "a b c"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 3
    assert chunks[-1].usage.prompt_tokens == 5


def test_stream_of_a_non_decoupled_model_is_one_chunk(llm):
    chunks = list(sdk(llm).completions.create(model="echo_json", prompt="hi", stream=True))
    assert len(chunks) == 1 and chunks[0].choices[0].finish_reason == "stop"
    assert json.loads(chunks[0].choices[0].text)["parameters"]["stream"] is True


def test_sse_framing_ends_with_done(llm):
    r = llm.post("/v1/completions", {"model": "words", "prompt": "x y", "max_tokens": 5, "stream": True})
    assert r.status == 200 and r.headers["content-type"] == "text/event-stream"
    events = [e for e in r.body.decode().split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events)
    assert events[-1] == "data: [DONE]"
    assert [json.loads(e[6:])["choices"][0]["text"] for e in events[:-1]] == ["x ", "y", ""]


# ---- chat ----------------------------------------------------------------------------------------


MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "  hi there "}]


def test_chat_template_from_the_model_parameter(llm):
    r = sdk(llm).chat.completions.create(model="echo_json", messages=MESSAGES, max_completion_tokens=5)
    seen = json.loads(r.choices[0].message.content)
    assert seen["prompt"] == "<system>be brief<user>  hi there <assistant>"
    assert seen["max_tokens"] == [5], "max_completion_tokens is the model's max_tokens"
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")
    assert r.choices[0].message.role == "assistant" and r.choices[0].finish_reason == "stop"
    # add_generation_prompt (vLLM's extension) and text parts.
    r = sdk(llm).chat.completions.create(
        model="echo_json", messages=[{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
        extra_body={"add_generation_prompt": False})
    assert json.loads(r.choices[0].message.content)["prompt"] == "<user>a\nb"


def test_chat_template_from_tokenizer_config(llm):
    r = sdk(llm).chat.completions.create(model="words", messages=MESSAGES, max_tokens=50)
    # <s> and </s> from tokenizer_config.json; the words model echoes the rendered prompt's words.
    assert r.choices[0].message.content == "<s> [SYSTEM] be brief </s> [USER] hi there </s> [ASSISTANT]"


def test_chat_streams_role_then_one_chunk_per_response(llm):
    chunks = list(sdk(llm).chat.completions.create(model="words", messages=[{"role": "user", "content": "x"}],
                                                   max_tokens=50, stream=True))
    assert chunks[0].choices[0].delta.role == "assistant" and chunks[0].choices[0].delta.content == ""
    contents = [ch.choices[0].delta.content for ch in chunks[1:]]
    assert contents == ["<s> ", "[USER] ", "x ", "</s> ", "[ASSISTANT]", None]
    assert [ch.choices[0].finish_reason for ch in chunks[1:]] == [None] * 5 + ["stop"]
    assert all(ch.object == "chat.completion.chunk" for ch in chunks)


def test_chat_template_raise_exception_is_a_400(llm):
    with pytest.raises(openai.BadRequestError) as e:
        sdk(llm).chat.completions.create(model="words", messages=[{"role": "robot", "content": "x"}], max_tokens=5)
    assert "Unknown role: robot" in e.value.body["message"]


def test_chat_without_a_template_is_a_clear_400(llm):
    with pytest.raises(openai.BadRequestError) as e:
        sdk(llm).chat.completions.create(model="raiser", messages=[{"role": "user", "content": "x"}])
    assert "has no chat template" in e.value.body["message"]
    assert e.value.body["type"] == "invalid_request_error"


# ---- errors --------------------------------------------------------------------------------------


def test_unknown_model_is_404(llm):
    with pytest.raises(openai.NotFoundError) as e:
        sdk(llm).completions.create(model="nope", prompt="x")
    assert e.value.status_code == 404
    assert e.value.body == {"message": e.value.body["message"], "type": "invalid_request_error",
                            "param": "model", "code": "model_not_found"}


def test_malformed_requests_are_400_in_openai_form(llm):
    for body, param in ((b"{not json", None), (b"[1]", None), ({"prompt": "x"}, "model"),
                        ({"model": "echo_json"}, "prompt"), ({"model": "echo_json", "prompt": [1, 2]}, "prompt"),
                        ({"model": "echo_json", "prompt": "x", "stream": "yes"}, "stream"),
                        ({"model": "echo_json", "prompt": "x", "max_tokens": "many"}, None)):
        r = llm.post("/v1/completions", body, headers={"Content-Type": "application/json"})
        assert r.status == 400, (body, r)
        err = r.json()["error"]
        assert set(err) == {"message", "type", "param", "code"} and err["type"] == "invalid_request_error"
        assert err["param"] == param, (body, err)
    r = llm.post("/v1/chat/completions", {"model": "echo_json", "messages": []})
    assert r.status == 400 and r.json()["error"]["param"] == "messages"
    with pytest.raises(openai.BadRequestError) as e:
        sdk(llm).completions.create(model="no_text", prompt="x")
    assert "no 'text_input' input" in e.value.body["message"]


def test_model_that_raises_is_500(llm):
    with pytest.raises(openai.InternalServerError) as e:
        sdk(llm).completions.create(model="raiser", prompt="x")
    assert "broke on purpose" in e.value.body["message"] and e.value.body["type"] == "server_error"
    with pytest.raises(openai.InternalServerError):
        sdk(llm).completions.create(model="raiser", prompt="x", stream=True)
    # The server is still up.
    assert sdk(llm).completions.create(model="words", prompt="ok", max_tokens=1).choices[0].text == "ok"


def test_error_mid_stream_is_an_error_event(llm):
    got = []
    with pytest.raises(openai.APIError) as e:
        for ch in sdk(llm).completions.create(model="raiser_stream", prompt="x", stream=True):
            got.append(ch.choices[0].text)
    assert got == ["partial "] and "broke mid-stream" in str(e.value)
    # Without streaming, the same model's error is the answer.
    with pytest.raises(openai.InternalServerError):
        sdk(llm).completions.create(model="raiser_stream", prompt="x")


# ---- restricted API and header forwarding -------------------------------------------------------


def test_restricted_api_covers_the_openai_routes(tmp_path):
    repo = llm_repo(tmp_path / "repo")
    s = TritonServer(["--model-repository", repo, PY, "--http-restricted-api=inference:infer-key=secret",
                      "--http-restricted-api=model-repository:repo-key=open",
                      "--http-header-forward-pattern=^x-fwd"], name="restricted").start()
    try:
        with pytest.raises(openai.PermissionDeniedError) as e:
            sdk(s).completions.create(model="echo_json", prompt="x")
        assert e.value.body["message"] == "This API is restricted, expecting header 'infer-key'"
        with pytest.raises(openai.PermissionDeniedError):
            sdk(s).models.list()
        ok = sdk(s, default_headers={"infer-key": "secret", "repo-key": "open", "x-fwd-user": "alice"})
        r = ok.completions.create(model="echo_json", prompt="x")
        assert json.loads(r.choices[0].text)["parameters"]["x-fwd-user"] == "alice"
        assert "echo_json" in [m.id for m in ok.models.list()]
    finally:
        s.stop()



def test_openai_routes_over_tls(tmp_path):
    import ssl
    import time

    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert("localhost", "127.0.0.1")
    ca_file, cert_file, key_file = tmp_path / "ca.pem", tmp_path / "server.pem", tmp_path / "server.key"
    ca.cert_pem.write_to_path(str(ca_file))
    cert.private_key_pem.write_to_path(str(key_file))
    cert_file.write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
    repo = llm_repo(tmp_path / "repo")
    s = TritonServer(["--model-repository", repo, PY, "--http-use-ssl", f"--http-server-cert={cert_file}",
                      f"--http-server-key={key_file}"], name="tls").start(wait=None)
    try:
        c = openai.OpenAI(base_url=f"https://localhost:{s.port}/v1", api_key="unused", max_retries=0, timeout=30,
                          http_client=openai.DefaultHttpxClient(verify=ssl.create_default_context(cafile=str(ca_file))))
        deadline = time.monotonic() + 30
        while "words" not in [m.id for m in c.models.list()]:
            assert time.monotonic() < deadline, "the model did not become ready over HTTPS"
            time.sleep(0.1)
        chunks = list(c.chat.completions.create(model="words", messages=[{"role": "user", "content": "x"}],
                                                max_tokens=3, stream=True))
        assert "".join(ch.choices[0].delta.content or "" for ch in chunks) == "<s> [USER] x"
        plain = openai.OpenAI(base_url=f"http://localhost:{s.port}/v1", api_key="unused", max_retries=0, timeout=5)
        with pytest.raises(openai.APIConnectionError):
            plain.models.list()
    finally:
        s.stop()

# ---- genai-perf --------------------------------------------------------------------------------

# genai-perf (PyPI genai-perf 0.0.16) lives in its own venv (scripts/test-tools.sh installs it: its
# dependencies clash with the pins of scripts/requirements.txt); it drives perf_analyzer 2.60's OpenAI
# client, from the same set-up.
GENAI_PERF = Path(os.environ.get("GENAI_PERF", REPO_ROOT / ".gp-venv" / "bin" / "genai-perf"))
PERF_ANALYZER = Path(os.environ.get("PERF_ANALYZER", ANCHORS / "bin" / "perf_analyzer"))

# genai-perf counts tokens with a Hugging Face tokenizer, which it would download; a tiny word-level one
# written here keeps the run offline.
TOKENIZER_SCRIPT = '''
import sys
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

words = "the of and to a in that is was he for it with as his on be at by had not are but from or have".split()
vocab = {"[UNK]": 0, "<s>": 1, "</s>": 2, **{w: i + 3 for i, w in enumerate(words)}}
tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.Whitespace()
tok.decoder = decoders.WordPiece()
PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", bos_token="<s>", eos_token="</s>").save_pretrained(sys.argv[1])
'''


def test_genai_perf_profiles_the_chat_endpoint(llm, tmp_path):
    if not GENAI_PERF.exists():
        pytest.skip(f"genai-perf is not installed at {GENAI_PERF} (scripts/test-tools.sh installs it)")
    if not PERF_ANALYZER.exists():
        pytest.skip(f"perf_analyzer is not installed at {PERF_ANALYZER} (scripts/test-tools.sh installs it)")
    subprocess.run([str(GENAI_PERF.parent / "python"), "-c", TOKENIZER_SCRIPT, str(tmp_path / "tokenizer")],
                   check=True, capture_output=True, timeout=120)
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    # A wide console, so that the metrics table keeps each metric's name on one line.
    env.update(PATH=f"{PERF_ANALYZER.parent}:{GENAI_PERF.parent}:{env['PATH']}", COLUMNS="200")
    requests = 8
    p = subprocess.run(
        [str(GENAI_PERF), "profile", "-m", "words", "--endpoint-type", "chat", "--streaming", "--url", llm.url,
         "--tokenizer", str(tmp_path / "tokenizer"), "--request-count", str(requests), "--concurrency", "2",
         "--warmup-request-count", "0", "--synthetic-input-tokens-mean", "8", "--synthetic-input-tokens-stddev", "0",
         "--extra-inputs", "max_tokens:6", "--artifact-dir", str(tmp_path / "artifacts")],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "Time To First Token" in p.stdout and "Request Count" in p.stdout
    [run] = (tmp_path / "artifacts").iterdir()
    stats = json.loads((run / "profile_export_genai_perf.json").read_text())
    assert stats["request_count"]["avg"] == requests
    assert stats["time_to_first_token"]["avg"] > 0 and stats["output_sequence_length"]["avg"] > 0
    assert (run / "profile_export_genai_perf.csv").stat().st_size > 0
    # What perf_analyzer recorded: each streamed request got the role chunk, a chunk per response of
    # the decoupled model, the finish chunk and [DONE].
    [experiment] = json.loads((run / "profile_export.json").read_text())["experiments"]
    assert len(experiment["requests"]) == requests
    for r in experiment["requests"]:
        payload = json.loads(r["request_inputs"]["payload"])
        assert payload["model"] == "words" and payload["stream"] is True and payload["max_tokens"] == 6
        events = [o["response"] for o in r["response_outputs"]]
        assert len(r["response_timestamps"]) == len(events) >= 4
        chunks = [json.loads(e[len("data: "):]) for e in "".join(events).split("\n\n") if e and e != "data: [DONE]"]
        assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
        text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
        assert text.startswith("<s> [USER]") and chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")
        assert "".join(events).endswith("data: [DONE]\n\n")
