"""A bad environment for an ``easeml`` command (a damaged database file, a
host that is no address of this machine, a data dir that cannot be made, a
mistyped SQLite --db) and numbers out of a command's range are a one-line
error naming the option or the database, with a nonzero exit: never a
traceback, and never an empty database made at a mistyped path."""

from __future__ import annotations

import errno
import os
import sqlite3

import pytest
from click.testing import CliRunner
from sqlalchemy import exc

from ease_jupyter.cli import main
from ease_jupyter.errors import StorageError, StoreUnavailableError
from ease_jupyter.store.sql.failures import storage_error

HUGE = "1" + "0" * 400  # past the largest float


@pytest.fixture
def no_start(monkeypatch):
    """`easeml serve` must stop before its service runs."""
    import ease_jupyter.service

    def started(*args, **kwargs):
        raise AssertionError("the service started")

    monkeypatch.setattr(ease_jupyter.service, "serve", started)


@pytest.fixture
def no_demo_run(monkeypatch):
    import ease_jupyter.demo

    def ran(**kwargs):
        raise AssertionError("the demo ran")

    monkeypatch.setattr(ease_jupyter.demo, "run_demo", ran)


@pytest.fixture
def clean_env(monkeypatch):
    for name in ("EASEML_DB", "EASEML_DATA_DIR", "EASEML_URL"):
        monkeypatch.delenv(name, raising=False)


def _usage_error(result, option):
    assert result.exit_code == 2, result.output
    assert f"'{option}'" in result.output or f" {option}:" in result.output, result.output
    _one_clean_line(result)


def _one_clean_line(result):
    assert "Traceback" not in result.output, result.output
    assert isinstance(result.exception, SystemExit), repr(result.exception)  # click's exit, not an error of ours
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, result.output


# ------------------------------------------------------------- a damaged database


def _sqlite_error(code: int, message: str) -> exc.DatabaseError:
    orig = sqlite3.DatabaseError(message)
    orig.sqlite_errorcode = code
    return exc.DatabaseError("PRAGMA journal_mode=WAL", (), orig)


@pytest.mark.parametrize("code", [sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT])
def test_a_file_that_is_no_sqlite_database_is_a_storage_error_with_no_retry_hint(code):
    mapped = storage_error(_sqlite_error(code, "file is not a database"))
    assert type(mapped) is StorageError and mapped.field == "database", repr(mapped)
    assert "damaged" in str(mapped) and "try again" not in str(mapped)


def test_a_database_file_that_cannot_be_opened_says_why_and_not_to_wait():
    mapped = storage_error(_sqlite_error(sqlite3.SQLITE_CANTOPEN, "unable to open database file"))
    assert type(mapped) is StoreUnavailableError
    assert "cannot be opened (its directory is missing or not readable" in str(mapped)
    assert "try again" not in str(mapped)


@pytest.fixture
def damaged(tmp_path):
    data = tmp_path / "damaged"
    data.mkdir()
    (data / "easeml.sqlite").write_bytes(bytes(range(256)) * 20)  # 5 KiB that are no SQLite database
    return data


@pytest.mark.parametrize("command", [["fsck"], ["gc"], ["users", "list"], ["users", "add", "zed"],
                                     ["users", "revoke", "zed"], ["serve", "--port", "0"]])
def test_a_damaged_database_file_is_one_line_naming_it(damaged, clean_env, no_start, command):
    result = CliRunner().invoke(main, [*command, "--data-dir", str(damaged)])
    assert result.exit_code == 1, result.output
    _one_clean_line(result)
    assert str(damaged / "easeml.sqlite") in result.output
    assert "not an SQLite database, or is damaged" in result.output and "try again" not in result.output
    assert "writable" not in result.output  # no mode bits mend it


def test_a_database_in_a_directory_that_does_not_exist_names_it_with_no_retry_hint(tmp_path, clean_env):
    url = f"sqlite:///{tmp_path}/nonexistent/dir/x.sqlite"
    result = CliRunner().invoke(main, ["users", "add", "ada", "--db", url])  # add may make a database
    assert result.exit_code == 1, result.output
    _one_clean_line(result)
    assert f"the database {url}: the database file cannot be opened (its directory is missing" in result.output
    assert "try again" not in result.output


# ------------------------------------------------------------- serve --host


@pytest.mark.parametrize("host, says", [
    ("999.1.1.1", "it does not resolve to an IPv4 address"),
    ("8.8.8.8", "no network interface of this machine has that address"),
    ("::1", "it does not resolve to an IPv4 address"),
])
def test_serve_on_a_host_it_cannot_listen_on_names_host(tmp_path, clean_env, host, says):
    result = CliRunner().invoke(main, ["serve", "--data-dir", str(tmp_path / "data"), "--host", host, "--port", "0"])
    _usage_error(result, "--host")
    assert f"found '{host}', {says}" in result.output


# ------------------------------------------------------------- a mistyped SQLite --db


@pytest.mark.parametrize("command", [["users", "list"], ["users", "revoke", "ada"], ["users", "link", "ada"],
                                     ["users", "allow-models", "ada"], ["users", "delete", "ada", "--yes"],
                                     ["gc"], ["fsck"]])
def test_a_mistyped_sqlite_db_makes_no_empty_database(tmp_path, clean_env, command):
    data = tmp_path / "data"
    data.mkdir()
    typo = tmp_path / "typo.sqlite"
    result = CliRunner().invoke(main, [*command, "--db", f"sqlite:///{typo}", "--data-dir", str(data)])
    _usage_error(result, "--db")
    assert f"no SQLite database at {typo}" in result.output
    assert not typo.exists()


def test_a_mistyped_sqlite_db_from_the_environment_names_the_variable(tmp_path, clean_env, monkeypatch):
    typo = tmp_path / "typo.sqlite"
    monkeypatch.setenv("EASEML_DB", f"sqlite:///{typo}")
    result = CliRunner().invoke(main, ["users", "list"])
    _usage_error(result, "$EASEML_DB")
    assert not typo.exists()


def test_an_existing_sqlite_db_still_opens_and_users_add_still_makes_one(tmp_path, clean_env):
    url = f"sqlite:///{tmp_path / 'new.sqlite'}"
    runner = CliRunner()
    added = runner.invoke(main, ["users", "add", "ada", "--admin", "--db", url])
    assert added.exit_code == 0, added.output
    listed = runner.invoke(main, ["users", "list", "--db", url])
    assert listed.exit_code == 0 and listed.output.startswith("ada\tadmin"), listed.output


# ------------------------------------------------------------- a data dir that cannot be made


@pytest.mark.parametrize("command", [["users", "add", "bob"], ["serve", "--port", "0"]])
def test_a_data_dir_under_a_file_names_data_dir(tmp_path, clean_env, no_start, command):
    (tmp_path / "afile").write_text("")
    result = CliRunner().invoke(main, [*command, "--data-dir", str(tmp_path / "afile" / "sub")])
    _usage_error(result, "--data-dir")
    assert "cannot make the data dir" in result.output and "Not a directory" in result.output


@pytest.mark.parametrize("command", [["users", "add", "bob"], ["serve", "--port", "0"]])
def test_a_data_dir_variable_naming_a_file_names_the_variable(tmp_path, clean_env, no_start, monkeypatch, command):
    (tmp_path / "afile").write_text("")
    monkeypatch.setenv("EASEML_DATA_DIR", str(tmp_path / "afile"))
    result = CliRunner().invoke(main, command)
    _usage_error(result, "$EASEML_DATA_DIR")
    assert f"cannot make the data dir {tmp_path / 'afile'} (a file of that name is in the way)" in result.output


def test_the_demo_names_a_data_dir_it_cannot_make_before_it_runs(tmp_path, no_demo_run):
    (tmp_path / "afile").write_text("")
    result = CliRunner().invoke(main, ["demo", "--quick", "--data-dir", str(tmp_path / "afile" / "sub"),
                                       "--out", str(tmp_path / "out")])
    _usage_error(result, "--data-dir")
    assert "Not a directory" in result.output


# ------------------------------------------------------------- numbers out of range


SIMULATE = ["simulate", "--synthetic", "0.5,1", "--syn-models", "5", "--syn-users-per-group", "6", "--reps", "2",
            "--quiet"]


def test_negative_seeds_are_usage_errors(tmp_path, no_demo_run):
    result = CliRunner().invoke(main, ["demo", "--quick", "--seed", "-1", "--out", str(tmp_path / "out")])
    _usage_error(result, "--seed")
    result = CliRunner().invoke(main, [*SIMULATE, "--syn-seed", "-1", "--json", str(tmp_path / "s.json")])
    _usage_error(result, "--syn-seed")


@pytest.mark.parametrize("flag", ["--syn-models", "--syn-users-per-group"])
def test_simulate_bounds_the_synthetic_sizes(tmp_path, flag):
    result = CliRunner().invoke(main, [*SIMULATE, flag, "1000000000", "--json", str(tmp_path / "s.json")])
    _usage_error(result, flag)
    assert "1<=x<=2000" in result.output


def test_simulate_checks_save_matrices_before_the_run(tmp_path):
    (tmp_path / "afile").write_text("")
    result = CliRunner().invoke(main, [*SIMULATE, "--json", str(tmp_path / "s.json"),
                                       "--save-matrices", str(tmp_path / "afile" / "sub")])
    _usage_error(result, "--save-matrices")
    assert f"cannot write in {tmp_path / 'afile' / 'sub'}" in result.output
    assert not (tmp_path / "s.json").exists()  # refused before the run
    saved = CliRunner().invoke(main, [*SIMULATE, "--json", str(tmp_path / "s.json"),
                                      "--save-matrices", str(tmp_path / "matrices")])
    assert saved.exit_code == 0, saved.output
    assert (tmp_path / "matrices" / "quality.csv").is_file() and (tmp_path / "matrices" / "cost.csv").is_file()


@pytest.mark.parametrize("flag, value", [("--examples", HUGE), ("--examples", str(10**12 + 1)),
                                         ("--seq-len", "10001")])
def test_models_bounds_its_numbers(flag, value):
    result = CliRunner().invoke(main, ["models", "--input", "64", "--output", "10", flag, value])
    _usage_error(result, flag)


def test_models_takes_the_largest_example_count():
    result = CliRunner().invoke(main, ["models", "--input", "64", "--output", "10", "--examples", str(10**12),
                                       "--json"])
    assert result.exit_code == 0, result.output


# ------------------------------------------------------------- lab --ip


@pytest.mark.parametrize("ip", ["999.1.1.1", "8.8.8.8"])
def test_lab_checks_ip_before_it_starts_anything(tmp_path, clean_env, monkeypatch, ip):
    from ease_jupyter.cli import lab as lab_cli
    from ease_jupyter.service import embedded

    def started(*args, **kwargs):
        raise AssertionError("something started")

    monkeypatch.setattr(embedded, "start_embedded", started)
    monkeypatch.setattr(lab_cli, "run_jupyterlab", started)
    result = CliRunner().invoke(main, ["lab", "--no-browser", "--ip", ip, "--data-dir", str(tmp_path / "d")])
    _usage_error(result, "--ip")
    assert f"found '{ip}'" in result.output
    assert not (tmp_path / "d").exists()


def test_lab_takes_the_addresses_of_this_machine():
    from ease_jupyter.cli.lab import _listen_address

    for ip in ("127.0.0.1", "localhost", "0.0.0.0", "", "*"):
        assert _listen_address(None, None, ip) == ip


# ------------------------------------------------------------- help, stop


def test_the_top_level_help_of_users_names_every_subcommand():
    line = next(line for line in CliRunner().invoke(main, ["--help"]).output.splitlines()
                if line.strip().startswith("users"))
    for word in ("add", "list", "revoke", "link", "delete", "allow"):
        assert word in line.lower(), line


def test_stop_refuses_a_data_dir_that_does_not_exist(tmp_path, clean_env, monkeypatch):
    result = CliRunner().invoke(main, ["stop", "--data-dir", str(tmp_path / "typo")])
    _usage_error(result, "--data-dir")
    assert f"no data dir at {tmp_path / 'typo'}" in result.output
    monkeypatch.setenv("EASEML_DATA_DIR", str(tmp_path / "typo"))
    _usage_error(CliRunner().invoke(main, ["stop"]), "$EASEML_DATA_DIR")
    (tmp_path / "there").mkdir()
    result = CliRunner().invoke(main, ["stop", "--data-dir", str(tmp_path / "there")])
    assert result.exit_code == 0 and "no ease.ml service runs" in result.output, result.output


@pytest.mark.parametrize("code, option", [(errno.EACCES, "port"), (errno.ENODEV, "host")])
def test_any_other_bind_failure_is_an_unusable_address_naming_its_option(monkeypatch, code, option):
    import tornado.netutil

    from ease_jupyter.service.app import AddressUnusable, _bind
    from ease_jupyter.service.config import ServiceConfig

    def refuse(*args, **kwargs):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(tornado.netutil, "bind_sockets", refuse)
    with pytest.raises(AddressUnusable) as caught:
        _bind(ServiceConfig(db_url="memory://", data_dir=None, host="127.0.0.1", port=80))
    assert caught.value.option == option and caught.value.port == 80


@pytest.mark.parametrize("code", [errno.EMFILE, errno.ENOBUFS])
def test_a_bind_failure_not_about_the_address_is_raised_as_it_is(monkeypatch, code):
    """Too many open files is no bad --host."""
    import tornado.netutil

    from ease_jupyter.service.app import AddressUnusable, _bind
    from ease_jupyter.service.config import ServiceConfig

    def refuse(*args, **kwargs):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(tornado.netutil, "bind_sockets", refuse)
    with pytest.raises(OSError) as caught:
        _bind(ServiceConfig(db_url="memory://", data_dir=None, host="127.0.0.1", port=80))
    assert not isinstance(caught.value, AddressUnusable) and caught.value.errno == code


@pytest.mark.parametrize("db", [False, True], ids=["data-dir", "db-url"])
@pytest.mark.parametrize("args", [["admin", "ada"], ["revoke", "ada"]], ids=["admin", "revoke"])
def test_a_store_failing_in_a_users_command_is_one_line(tmp_path, clean_env, monkeypatch, db, args):
    """A database that fails once open (say, locked past the busy timeout by
    a running service) is the one-line database error, not a traceback."""
    from ease_jupyter.store.sql import SQLStore

    runner = CliRunner()
    assert runner.invoke(main, ["users", "add", "ada", "--data-dir", str(tmp_path)]).exit_code == 0

    def locked(self, *args, **kwargs):
        raise StoreUnavailableError("the database is locked; try again later")

    monkeypatch.setattr(SQLStore, "set_user_admin", locked)
    monkeypatch.setattr(SQLStore, "set_user_token_hash", locked)
    where = ["--db", f"sqlite:///{tmp_path / 'easeml.sqlite'}"] if db else ["--data-dir", str(tmp_path)]
    result = runner.invoke(main, ["users", *args, *where])
    assert result.exit_code == 1 and "the database" in result.output and "locked" in result.output, result.output
    _one_clean_line(result)
