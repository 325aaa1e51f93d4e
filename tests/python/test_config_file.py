"""The configuration file (issue 11): every flag under its own name, layered under the TRITONRS_*
environment and the command line; mistakes name the file and line and stop the start; `validate`
reads exactly the server's settings; SIGHUP reloads instead of killing the server. Also the start-up
papercuts: a missing repository said once and before any port is bound, and a readiness line that
tells the truth."""

import re
import signal
import time

from helpers import copy_models, run_cli


def write_config(path, text):
    path.write_text(text)
    return path


def metadata_name(server):
    return server.get("/v2").json()["name"]


def test_file_environment_and_command_line_are_layered(start_server, repo, tmp_path):
    copy_models(repo, "simple")
    cfg = write_config(tmp_path / "tritonrs.toml", f'model-repository = ["{repo}"]\nid = "from-file"\n')
    # The repository comes from the file alone.
    s = start_server("--config", cfg)
    assert metadata_name(s) == "from-file"
    assert f"Read the configuration file '{cfg}'." in s.log
    s.stop()
    s = start_server("--config", cfg, env={"TRITONRS_ID": "from-env"})
    assert metadata_name(s) == "from-env"
    s.stop()
    s = start_server("--config", cfg, "--id", "from-cli", env={"TRITONRS_ID": "from-env"})
    assert metadata_name(s) == "from-cli"
    s.stop()
    # TRITONRS_CONFIG names the file too.
    s = start_server(env={"TRITONRS_CONFIG": str(cfg)})
    assert metadata_name(s) == "from-file"


def test_mistakes_in_the_file_name_the_line_and_the_server_does_not_start(tmp_path, repo):
    cases = [
        (f'model-repository = ["{repo}"]\nhttp-prot = 8000\n', r":2: unknown setting 'http-prot'; did you mean 'http-port'\?"),
        ('\n\nhttp-port = "eighty"\n', r":3: 'http-port': invalid value 'eighty'"),
        ("strict-readiness = 2\n", r":1: 'strict-readiness': invalid value '2'"),
        ("http-port = [1, 2]\n", r":1: 'http-port' takes one value, not a list"),
        ("[mqtt]\nbroker = 'x'\n", r":1: unknown section '\[mqtt\]'"),
        ("http-port = \n", r":1: "),
    ]
    for text, want in cases:
        cfg = write_config(tmp_path / "bad.toml", text)
        r = run_cli("--config", str(cfg), "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0", timeout=10)
        assert r.returncode == 2, (text, r.stderr)
        assert re.search(re.escape(str(cfg)) + want, r.stderr), (text, r.stderr)
        assert "Started" not in r.stderr
    r = run_cli("--config", str(tmp_path / "missing.toml"), timeout=10)
    assert r.returncode == 2 and "cannot read the configuration file" in r.stderr, r.stderr


def test_validate_reads_the_servers_settings(tmp_path, repo):
    copy_models(repo, "simple")
    cfg = write_config(tmp_path / "tritonrs.toml", f'model-repository = ["{repo}"]\nhttp-port = 8000\n')
    r = run_cli("validate", "--config", str(cfg))
    assert r.returncode == 0 and "OK    simple" in r.stdout, r
    r = run_cli("validate", env={"TRITONRS_MODEL_REPOSITORY": str(repo)})
    assert r.returncode == 0 and "OK    simple" in r.stdout, r
    (repo / "broken" / "1").mkdir(parents=True)
    (repo / "broken" / "config.pbtxt").write_text('backend: "onnxruntime"\nmax_batch_sizee: 8\n')
    r = run_cli("validate", "--config", str(cfg))
    assert r.returncode == 1 and "FAIL  broken" in r.stdout, r
    r = run_cli("validate", "--config", str(write_config(tmp_path / "bad.toml", "htp-port = 1\n")))
    assert r.returncode == 2 and "bad.toml:1: unknown setting 'htp-port'" in r.stderr, r
    r = run_cli("validate")
    assert r.returncode == 1 and "no model repository" in r.stderr, r


def test_sighup_reloads_settings_and_rescans_instead_of_killing(start_server, repo, tmp_path):
    copy_models(repo, "simple")
    cfg = write_config(tmp_path / "tritonrs.toml",
                       f'model-repository = ["{repo}"]\nmodel-control-mode = "explicit"\nload-model = ["simple"]\n'
                       'log-verbose = 0\n')
    s = start_server("--config", cfg)
    assert s.get("/v2/logging").json()["log_verbose_level"] == 0
    write_config(cfg, f'model-repository = ["{repo}"]\nmodel-control-mode = "explicit"\nload-model = ["simple"]\n'
                      'log-verbose = 1\nid = "renamed"\n')
    # A changed model file is reloaded on SIGHUP in explicit mode.
    config = repo / "simple" / "config.pbtxt"
    config.write_text(config.read_text() + "\n# touched\n")
    s.proc.send_signal(signal.SIGHUP)
    s.wait_for_log("Reload done.")
    assert s.is_running()
    assert s.get("/v2/logging").json()["log_verbose_level"] == 1
    assert "'id' changed in the configuration file; it takes effect at the next restart" in s.log
    assert "Model 'simple' changed in the repository; reloading it." in s.log
    assert s.get("/v2/health/ready").status == 200
    # A broken file on reload keeps the running settings.
    write_config(cfg, "log-verbose = [\n")
    s.proc.send_signal(signal.SIGHUP)
    s.wait_until(lambda: s.log.count("Reload done.") == 2, what="second reload")
    assert "keeping the current settings" in s.log and s.is_running()
    assert s.get("/v2/logging").json()["log_verbose_level"] == 1


def test_a_missing_repository_is_said_once_before_any_port_is_bound(tmp_path):
    r = run_cli("--model-repository", str(tmp_path / "nope"), "--http-port", "0", "--grpc-port", "0",
                "--metrics-port", "0", timeout=10)
    assert r.returncode == 1
    assert r.stderr.count("cannot read model repository") == 1, r.stderr
    assert "Started" not in r.stderr, r.stderr


def test_the_readiness_line_tells_the_truth(start_server, repo):
    copy_models(repo, "simple")
    (repo / "broken" / "1").mkdir(parents=True)
    (repo / "broken" / "config.pbtxt").write_text('backend: "onnxruntime"\nmax_batch_sizee: 8\n')
    s = start_server("--model-repository", repo, wait="live")
    m = s.wait_for_log(r"Server is not ready: 1 model version\(s\) loaded, but model 'broken' is UNAVAILABLE: .*max_batch_sizee")
    assert "Server is ready" not in s.log, m
    assert s.get("/v2/health/ready").status == 503
    s.stop()
    s = start_server("--model-repository", repo, "--strict-readiness=false")
    s.wait_for_log(r"Server is ready: 1 model version\(s\) loaded\.")
