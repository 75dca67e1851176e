"""What a user may mistype on the ``easeml`` command line is a usage error
that names the option and what it expects (exit 2), never a traceback."""

from __future__ import annotations

import sys

import pytest
from click.testing import CliRunner

from ease_jupyter.cli import main

UNREACHABLE = "postgresql+psycopg2://u@127.0.0.1:1/x"  # nothing listens on port 1


@pytest.fixture
def no_start(monkeypatch):
    """`easeml serve` that must refuse before it starts: one that started would
    run on in the test process, so the start itself fails the test."""
    import ease_jupyter.service

    def started(*args, **kwargs):
        raise AssertionError("the service started")

    monkeypatch.setattr(ease_jupyter.service, "serve", started)


def _usage_error(result, option):
    assert result.exit_code == 2, result.output
    assert f"'{option}'" in result.output or f" {option}:" in result.output, result.output
    assert "Traceback" not in result.output
    assert isinstance(result.exception, SystemExit), result.exception  # click's exit, not an error of ours


@pytest.mark.parametrize("command", [["serve"], ["users", "list"], ["users", "add", "ada"], ["gc"], ["fsck"]])
def test_a_db_url_that_does_not_parse_is_a_usage_error(tmp_path, no_start, command):
    result = CliRunner().invoke(main, [*command, "--data-dir", str(tmp_path), "--db", "notaurl"])
    _usage_error(result, "--db")
    assert "found 'notaurl', expected an SQLAlchemy URL" in result.output


@pytest.mark.parametrize("command", [["serve"], ["users", "list"], ["gc"]])
def test_a_db_url_whose_driver_is_missing_says_which_url_works(tmp_path, no_start, monkeypatch, command):
    monkeypatch.setitem(sys.modules, "psycopg", None)  # SQLAlchemy reads bare postgresql:// as psycopg 3
    result = CliRunner().invoke(main, [*command, "--data-dir", str(tmp_path), "--db", "postgresql://u@127.0.0.1:1/x"])
    _usage_error(result, "--db")
    assert "driver 'psycopg' is not installed" in result.output and "postgresql+psycopg2://" in result.output


@pytest.mark.parametrize("command", [["users", "list"], ["gc"], ["fsck"]])
def test_an_unreachable_database_server_is_a_clean_error(tmp_path, command):
    result = CliRunner().invoke(main, [*command, "--data-dir", str(tmp_path), "--db", UNREACHABLE])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
    assert f"the database {UNREACHABLE}: the database server cannot be reached" in result.output


@pytest.mark.parametrize("flag, value", [
    ("--quota-gb", "inf"), ("--max-json-mb", "inf"), ("--max-chunk-mb", "inf"), ("--blob-gc", "nan"),
    ("--upload-ttl", "inf"), ("--idle-shutdown", "nan"), ("--user-model-timeout", "inf"),
    ("--notebook-timeout", "nan"), ("--long-job-seconds", "nan"), ("--price-cpu", "nan"), ("--price-gpu", "inf"),
])
def test_serve_refuses_numbers_that_are_not_finite(tmp_path, no_start, flag, value):
    result = CliRunner().invoke(main, ["serve", "--data-dir", str(tmp_path), flag, value])
    _usage_error(result, flag)
    assert f"found '{value}', expected a" in result.output


def test_gc_refuses_a_nan_grace(tmp_path):
    result = CliRunner().invoke(main, ["gc", "--data-dir", str(tmp_path), "--grace", "nan"])
    _usage_error(result, "--grace")


def test_long_job_seconds_may_be_inf(tmp_path, no_start):
    result = CliRunner().invoke(main, ["serve", "--data-dir", str(tmp_path), "--long-job-seconds", "inf"])
    assert isinstance(result.exception, AssertionError)  # it got as far as the start


@pytest.mark.parametrize("flag, value, says", [
    ("--engine", "bogus", "found 'bogus', expected local, dask"),
    ("--blob-url", "relative/path", "found 'relative/path', expected an fsspec URL"),
    ("--blob-url", "nosuchfs://bucket/path", "protocol 'nosuchfs' fsspec cannot open"),
])
def test_serve_settings_name_their_option(tmp_path, no_start, flag, value, says):
    result = CliRunner().invoke(main, ["serve", "--data-dir", str(tmp_path), flag, value])
    _usage_error(result, flag)
    assert says in result.output and "engine:" not in result.output and "blob_url" not in result.output


def test_serve_help_explains_host():
    result = CliRunner().invoke(main, ["serve", "--help"])
    assert "Address to listen on" in result.output


def test_users_need_an_existing_store_and_never_a_memory_one(tmp_path):
    runner = CliRunner()
    typo = tmp_path / "typo"
    result = runner.invoke(main, ["users", "list", "--data-dir", str(typo)])
    assert result.exit_code == 1 and f"no data dir at {typo}" in result.output and not typo.exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    result = runner.invoke(main, ["users", "revoke", "ada", "--data-dir", str(empty)])
    _usage_error(result, "--db")
    assert not (empty / "easeml.sqlite").exists()
    for command in (["add", "bob"], ["list"], ["revoke", "bob"], ["link", "bob"], ["allow-models", "bob"]):
        result = runner.invoke(main, ["users", *command, "--data-dir", str(tmp_path), "--db", "memory://"])
        _usage_error(result, "--db")
        assert "memory://" in result.output
    fresh = tmp_path / "fresh" / "machine"  # the first admin on a new machine: made as before
    added = runner.invoke(main, ["users", "add", "ada", "--admin", "--data-dir", str(fresh)])
    assert added.exit_code == 0 and len(added.output.strip()) >= 32, added.output
    listed = runner.invoke(main, ["users", "list", "--data-dir", str(fresh)])
    assert listed.exit_code == 0 and listed.output.startswith("ada\tadmin"), listed.output
    # with --db its database is all a users command opens: no data dir asked for nor made
    url = f"sqlite:///{fresh / 'easeml.sqlite'}"
    nowhere = tmp_path / "nowhere"
    for command in (["list"], ["revoke", "ada", "--new-token"]):
        result = runner.invoke(main, ["users", *command, "--db", url, "--data-dir", str(nowhere)])
        assert result.exit_code == 0, result.output
    assert not nowhere.exists()


@pytest.fixture
def no_demo_run(monkeypatch):
    import ease_jupyter.demo

    def ran(**kwargs):
        raise AssertionError("the demo ran")

    monkeypatch.setattr(ease_jupyter.demo, "run_demo", ran)


def test_demo_checks_engine_and_out_before_it_runs(tmp_path, no_demo_run):
    runner = CliRunner()
    result = runner.invoke(main, ["demo", "--quick", "--engine", "bogus", "--out", str(tmp_path / "out")])
    _usage_error(result, "--engine")
    assert "found 'bogus', expected" in result.output
    (tmp_path / "file").write_text("")
    result = runner.invoke(main, ["demo", "--quick", "--out", str(tmp_path / "file" / "report")])
    _usage_error(result, "--out")
    assert f"cannot write in {tmp_path / 'file' / 'report'}" in result.output


def test_demo_engine_that_does_not_start_names_the_option(tmp_path, monkeypatch):
    import ease_jupyter.demo
    from ease_jupyter.execution.engine import EngineError

    def fails(**kwargs):  # as a gateway with no address fails at the service's start
        raise EngineError("engine: found 'gateway', but dask-gateway has no server address")

    monkeypatch.setattr(ease_jupyter.demo, "run_demo", fails)
    result = CliRunner().invoke(main, ["demo", "--quick", "--engine", "gateway", "--out", str(tmp_path)])
    _usage_error(result, "--engine")
    assert "found 'gateway', but dask-gateway has no server address" in result.output


def test_simulate_checks_the_json_path_first(tmp_path):
    (tmp_path / "file").write_text("")
    result = CliRunner().invoke(main, ["simulate", "--synthetic", "0.5,1.0", "--syn-models", "4",
                                       "--syn-users-per-group", "6", "--reps", "1", "--quiet",
                                       "--json", str(tmp_path / "file" / "out.json")])
    _usage_error(result, "--json")


def test_simulate_names_the_line_of_the_file_and_plain_numbers(tmp_path):
    quality, cost = tmp_path / "q.csv", tmp_path / "c.csv"
    quality.write_text("user,a,b\n\nu1,0.5,1.5\nu2,0.1,0.2\n")  # a blank line: line 3 is u1's
    result = CliRunner().invoke(main, ["simulate", "--quality", str(quality), "--json", str(tmp_path / "o.json")])
    _usage_error(result, "--quality")
    assert f"{quality}, line 3, column 'b': found 1.5, expected an accuracy in [0, 1]" in result.output
    quality.write_text("user,a,b\nu1,0.5,0.5\nu2,0.1,0.2\n")
    cost.write_text("user,a,b\nu2,1,-2.5\n\nu1,1,1\n")
    result = CliRunner().invoke(main, ["simulate", "--quality", str(quality), "--cost", str(cost),
                                       "--json", str(tmp_path / "o.json")])
    _usage_error(result, "--cost")
    assert f"{cost}, line 2, column 'b': found -2.5, expected seconds > 0" in result.output
    assert "np.float64" not in result.output


def test_models_task_without_a_token_names_the_option(monkeypatch):
    for name in ("EASEML_TOKEN", "KERNEL_EASEML_TOKEN", "JUPYTERHUB_API_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    result = CliRunner().invoke(main, ["models", "--task", "x", "--url", "http://127.0.0.1:9"])
    _usage_error(result, "--token")
    assert "token=" not in result.output


def test_the_demo_keeps_off_a_data_dir_in_use_and_off_accounts_it_did_not_make(tmp_path):
    """On a data dir that a service holds, or whose account of a demo user's
    name someone else made, the demo stops naming --data-dir, and that
    account's token still works."""
    from ease_jupyter.service.auth import user_for_token
    from ease_jupyter.service.embedded import DataDirLock
    from ease_jupyter.store import open_store

    runner = CliRunner()
    held = tmp_path / "held"
    held.mkdir()
    lock = DataDirLock(held)
    try:
        result = runner.invoke(main, ["demo", "--quick", "--data-dir", str(held), "--out", str(tmp_path / "r1")])
        _usage_error(result, "--data-dir")
        assert "already uses" in result.output
    finally:
        lock.release()
    theirs = tmp_path / "theirs"
    added = runner.invoke(main, ["users", "add", "alice", "--data-dir", str(theirs)])
    assert added.exit_code == 0, added.output
    token = added.output.strip().splitlines()[-1]
    result = runner.invoke(main, ["demo", "--quick", "--data-dir", str(theirs), "--out", str(tmp_path / "r2")])
    _usage_error(result, "--data-dir")
    assert "did not make" in result.output
    store = open_store(None, theirs)[0]
    try:
        assert user_for_token(store, token).name == "alice"
    finally:
        store.close()


def test_serve_is_refused_on_a_held_data_dir_before_it_opens_the_database(tmp_path, monkeypatch):
    """The database of a data dir that a service holds is not opened (nor
    migrated) by a second `easeml serve`: it stops at the lock's holder."""
    from ease_jupyter.cli import serve as serve_cli
    from ease_jupyter.service.embedded import DataDirLock

    def opened(config):
        raise AssertionError("the database was opened")

    monkeypatch.setattr(serve_cli, "require_writable_store", opened)
    lock = DataDirLock(tmp_path)
    try:
        lock.announce("http://127.0.0.1:1")
        result = CliRunner().invoke(main, ["serve", "--data-dir", str(tmp_path), "--port", "0"])
    finally:
        lock.release()
    _usage_error(result, "--data-dir")
    assert "http://127.0.0.1:1" in result.output
