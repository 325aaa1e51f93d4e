"""The logging extension: GET/POST /v2/logging, and that changes take effect on the log."""

import pytest
from tritonclient.utils import InferenceServerException

from helpers import EXAMPLES

DEFAULTS = {"log_file": "", "log_info": True, "log_warning": True, "log_error": True,
            "log_verbose_level": 0, "log_format": "default"}


@pytest.fixture
def server(start_server):
    return start_server("--model-repository", EXAMPLES, "--model-control-mode=explicit", "--load-model", "simple")


def test_get_log_settings_defaults(server):
    c = server.client()
    assert c.get_log_settings() == DEFAULTS
    r = server.get("/v2/logging")
    assert r.status == 200 and r.json() == DEFAULTS


def test_log_settings_from_flags(start_server):
    s = start_server("--model-repository", EXAMPLES, "--model-control-mode=explicit",
                     "--log-verbose=2", "--log-warning=false", "--log-format=ISO8601")
    got = s.client().get_log_settings()
    assert got["log_verbose_level"] == 2
    assert got["log_warning"] is False
    assert got["log_format"] == "ISO8601"


def test_update_verbose_level(server):
    c = server.client()
    got = c.update_log_settings({"log_verbose_level": 1})
    assert got == {**DEFAULTS, "log_verbose_level": 1}
    assert c.get_log_settings()["log_verbose_level"] == 1
    # Verbose messages now appear: loading a model logs its debug-level timing line.
    c.load_model("vlen_scale")
    server.wait_for_log(r"DEBUG.*vlen_scale", timeout=10)
    got = c.update_log_settings({"log_verbose_level": 0})
    assert got["log_verbose_level"] == 0


def test_empty_update_changes_nothing(server):
    assert server.client().update_log_settings({}) == DEFAULTS
    assert server.client().get_log_settings() == DEFAULTS


def test_update_partial_keeps_other_fields(server):
    c = server.client()
    c.update_log_settings({"log_warning": False})
    c.update_log_settings({"log_error": False})
    assert c.get_log_settings() == {**DEFAULTS, "log_warning": False, "log_error": False}


def test_disabling_info_silences_info_lines(server):
    c = server.client()
    assert c.update_log_settings({"log_info": False})["log_info"] is False
    c.load_model("classifier")
    assert c.is_model_ready("classifier")
    c.update_log_settings({"log_info": True})
    c.load_model("bytes_identity")
    # stderr is read in order, so once the later line is in, the earlier one would be too.
    server.wait_for_log(r"Model 'bytes_identity' version 1 is READY", timeout=10)
    assert "Model 'classifier' version 1 is READY" not in server.log


@pytest.mark.parametrize("body", [
    {"log_file": "/tmp/elsewhere.log"},
    {"log_format": "ISO8601"},
    {"log_verbose_level": "high"},
    {"log_info": "yes"},
    {"no_such_setting": True},
])
def test_invalid_updates_are_rejected(server, body):
    with pytest.raises(InferenceServerException) as e:
        server.client().update_log_settings(body)
    assert e.value.status() == "400", e.value
    assert server.client().get_log_settings() == DEFAULTS


def test_malformed_logging_body(server):
    r = server.post("/v2/logging", b"{oops", headers={"Content-Type": "application/json"})
    assert r.status == 400 and "error" in r.json()
    assert server.is_live()
