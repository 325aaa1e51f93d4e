"""Command line: --help, --version, the `validate` subcommand, and start-up errors."""

import re
import subprocess

from helpers import BIN, EXAMPLE_MODELS, EXAMPLES, copy_models, run_cli, server_env


def test_help_lists_triton_flags():
    r = run_cli("--help")
    assert r.returncode == 0, r.stderr
    for flag in ("--model-repository", "--model-control-mode", "--strict-readiness", "--backend-config",
                 "--load-model", "--exit-on-error", "--http-port", "--http-max-input-size",
                 "--repository-poll-secs", "--disable-auto-complete-config", "--id"):
        assert flag in r.stdout, f"{flag} missing from --help"
    assert "validate" in r.stdout


def help_text(flag: str, columns: int | None) -> str:
    """`tritonrs <flag>` with no terminal on any stream, at COLUMNS=`columns` (None: no COLUMNS)."""
    env = {k: v for k, v in server_env().items() if k not in ("COLUMNS", "LINES")}
    if columns is not None:
        env["COLUMNS"] = str(columns)
    r = subprocess.run([str(BIN), flag], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30, env=env)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_short_help_is_a_summary_that_fits_80_columns():
    for columns in (80, None):  # a terminal of 80 columns, and none (piped, no COLUMNS): 80 too
        out = help_text("-h", columns)
        long = [line for line in out.splitlines() if len(line) > 80]
        assert not long, f"COLUMNS={columns}: {len(long)} lines over 80 columns:\n" + "\n".join(long[:5])
        assert len(out.splitlines()) < 100, f"-h is {len(out.splitlines())} lines, not a summary"
        for flag in ("--model-repository", "--http-port", "--grpc-port", "--backend-config", "--config"):
            assert flag in out, f"{flag} missing from -h"
        # The rest is one flag away.
        assert "--grpc-keepalive-time" not in out and "`tritonrs --help` lists all" in out, out


def test_long_help_wraps_at_100_columns_with_descriptions_under_their_flags():
    out = help_text("--help", 100)
    lines = out.splitlines()
    assert not [line for line in lines if len(line) > 100]
    # A description pushed right by the longest flag shows as a column of single words far from the
    # margin; descriptions start at column 10 (17 in the list of commands).
    pushed = [line for line in lines if re.fullmatch(r" {18,}\S+", line)]
    assert not pushed, pushed[:5]
    assert "--grpc-keepalive-time <TIME>" in out and "--exit-timeout-secs <SECS>" in out


def test_version():
    r = run_cli("--version")
    assert r.returncode == 0, r.stderr
    assert re.fullmatch(r"tritonrs \d+\.\d+\.\d+\S*\n", r.stdout), r.stdout


def test_validate_examples_ok():
    r = run_cli("validate", "--model-repository", str(EXAMPLES))
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines == [f"OK    {m}" for m in sorted(EXAMPLE_MODELS)]


def test_validate_broken_config_names_file_line_and_field(tmp_path):
    repo = copy_models(tmp_path / "repo", "simple")
    bad = repo / "broken"
    (bad / "1").mkdir(parents=True)
    (bad / "config.pbtxt").write_text('name: "broken"\nbackend: "onnxruntime"\nmax_batch_sizee: 8\n')
    r = run_cli("validate", "--model-repository", str(repo))
    assert r.returncode == 1, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert "OK    simple" in lines
    fail = [l for l in lines if l.startswith("FAIL  broken: ")]
    assert len(fail) == 1, lines
    msg = fail[0]
    assert f"{bad / 'config.pbtxt'}:3:" in msg, msg  # file:line:col
    assert re.search(r"config\.pbtxt:3:\d+", msg), msg
    assert "max_batch_sizee" in msg, msg
    assert len(lines) == 2, lines


def test_validate_syntax_error_reports_position(tmp_path):
    repo = tmp_path / "repo"
    bad = repo / "syntax"
    (bad / "1").mkdir(parents=True)
    (bad / "config.pbtxt").write_text('name: "syntax"\nbackend: "onnxruntime"\ninput [ { name: "X" \n')
    r = run_cli("validate", "--model-repository", str(repo))
    assert r.returncode == 1
    assert r.stdout.startswith("FAIL  syntax: "), r.stdout
    assert re.search(r"config\.pbtxt:\d+:\d+", r.stdout), r.stdout


def test_validate_wrong_value_type(tmp_path):
    repo = tmp_path / "repo"
    bad = repo / "badtype"
    (bad / "1").mkdir(parents=True)
    (bad / "config.pbtxt").write_text('name: "badtype"\nbackend: "onnxruntime"\nmax_batch_size: "eight"\n')
    r = run_cli("validate", "--model-repository", str(repo))
    assert r.returncode == 1
    assert r.stdout.startswith("FAIL  badtype: "), r.stdout
    assert "config.pbtxt:3:" in r.stdout and "max_batch_size" in r.stdout, r.stdout


def test_validate_model_without_versions_fails(tmp_path):
    repo = tmp_path / "repo"
    copy_models(repo, "simple")
    for f in (repo / "simple" / "1").iterdir():
        f.unlink()
    (repo / "simple" / "1").rmdir()
    r = run_cli("validate", "--model-repository", str(repo))
    assert r.returncode == 1
    assert r.stdout.startswith("FAIL  simple: ") and "version" in r.stdout, r.stdout


def test_validate_duplicate_model_across_repositories(tmp_path):
    a = copy_models(tmp_path / "a", "simple", "vlen_scale")
    b = copy_models(tmp_path / "b", "simple")
    r = run_cli("validate", "--model-repository", str(a), "--model-repository", str(b))
    assert r.returncode == 1
    lines = r.stdout.splitlines()
    assert "OK    vlen_scale" in lines
    dup = [l for l in lines if l.startswith("FAIL  simple: ")]
    assert len(dup) == 1 and str(a / "simple") in dup[0] and str(b / "simple") in dup[0], lines


def test_validate_without_auto_complete(tmp_path):
    r = run_cli("validate", "--model-repository", str(EXAMPLES), "--disable-auto-complete-config")
    assert r.returncode == 1
    lines = r.stdout.splitlines()
    assert [l for l in lines if l.startswith("FAIL")] == [l for l in lines if l.startswith("FAIL  autocomplete_add: ")]
    assert len([l for l in lines if l.startswith("FAIL")]) == 1
    assert "config.pbtxt" in r.stdout
    assert sum(l.startswith("OK    ") for l in lines) == len(EXAMPLE_MODELS) - 1


def test_serve_without_repository_exits_with_error():
    r = run_cli("--http-port", "0", "--http-address", "127.0.0.1")
    assert r.returncode != 0
    assert "--model-repository" in r.stderr, r.stderr


def test_invalid_boolean_flag_is_rejected():
    r = run_cli("--strict-readiness=maybe", "--model-repository", str(EXAMPLES))
    assert r.returncode == 2
    assert "maybe" in r.stderr


def test_validate_print_config_shows_the_autocompleted_config():
    r = run_cli("validate", "--model-repository", str(EXAMPLES), "--print-config")
    assert r.returncode == 0, r.stdout + r.stderr
    block = r.stdout.split("OK    autocomplete_add\n", 1)[1].split("\nOK    ", 1)[0]
    assert "max_batch_size: 4" in block
    assert 'name: "INPUT0"' in block and "data_type: TYPE_FP32" in block and "dims: [8]" in block
    assert "kind: KIND_CPU" in block
