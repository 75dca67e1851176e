"""A failed ``%easeml`` line in a real IPython shell against a real service:
one line (and a hint), no traceback; the traceback with ``--debug`` and in
``_easeml_error.error``; task names with extra words are refused, not
truncated; re-declaring a task says how to open or replace it."""

from __future__ import annotations

from typing import Iterator

import numpy as np
import pytest
from IPython.core.interactiveshell import InteractiveShell

from ease_jupyter.errors import AlreadyExistsError, DataError
from ease_jupyter.magics.errors import one_line
from service.conftest import Running, serving  # tests/ is on sys.path
from shells import connected_shell, run_cell


@pytest.fixture(scope="module")
def service(tmp_path_factory) -> Iterator[Running]:
    with serving(tmp_path_factory.mktemp("svc"), "alice", workers=1) as running:
        yield running


@pytest.fixture
def shell(service) -> Iterator[InteractiveShell]:
    with connected_shell(service.url, service.tokens["alice"]) as ip:
        yield ip


def test_a_service_error_is_one_line_with_a_hint(shell, service, capsys):
    shell.run_line_magic("easeml", "task digits --input 28,28,1 --output 10")
    shell.user_ns.update(X=np.zeros((100, 784), "float32"), y=np.zeros(100, "int64"))
    error, shown = run_cell(shell, capsys, "%easeml feed digits X y")
    assert isinstance(error, DataError) and error.field == "X"  # the cell fails, with the service's error
    lines = shown.strip().splitlines()
    assert lines[0].startswith("DataError: X: found shape (100, 784), expected shape (n, 28, 28, 1)"), shown
    assert lines[1:] == ["  hint: reshape it: X.reshape(-1, 28, 28, 1)"]
    assert "Traceback" not in shown and "urllib" not in shown and "client.py" not in shown
    # the whole traceback is kept for whoever wants it
    kept = shell.user_ns["_easeml_error"]
    assert kept.exception is error and "Traceback (most recent call last)" in kept.error
    assert "_raise_for" in kept.error and kept.error.strip().endswith(str(error))
    assert service.client("alice").task("digits").versions() == []  # nothing stored


def test_debug_shows_the_full_traceback(shell, capsys):
    shell.run_line_magic("easeml", "task digits2 --input 28,28,1 --output 10")
    shell.user_ns.update(X=np.zeros((10, 784), "float32"), y=np.zeros(10, "int64"))
    error, shown = run_cell(shell, capsys, "%easeml --debug feed digits2 X y")
    assert isinstance(error, DataError)
    assert "Traceback" in shown and "_raise_for" in shown, shown


def test_a_name_with_a_space_is_refused_not_truncated(shell, service, capsys):
    error, shown = run_cell(shell, capsys, "%easeml task my task --input 4 --output 3")
    assert isinstance(error, DataError) and error.field == "name"
    assert shown.strip().startswith("DataError: name: found 2 words 'my task', expected one task name")
    assert "Traceback" not in shown
    error, shown = run_cell(shell, capsys, "%easeml task 'my task' --input 4 --output 3")  # quoted: the service refuses
    assert isinstance(error, DataError) and error.field == "name" and "'my task'" in shown
    error, _ = run_cell(shell, capsys, "%easeml task my/task --input 4 --output 3")
    assert isinstance(error, DataError) and error.field == "name"
    assert [t.name for t in service.client("alice").tasks()
            if t.name.startswith("my")] == []  # neither "my" nor anything else was created
    # the other commands that take only a name refuse extra words too
    shell.run_line_magic("easeml", "task mine --input 4 --output 3")
    for line in ("status mine extra", "models mine extra", "cancel mine extra", "provenance mine x"):
        error, shown = run_cell(shell, capsys, f"%easeml {line}")
        assert isinstance(error, DataError) and error.field == "name", line
    assert service.client("alice").task("mine").info["cancelled"] is False  # "cancel mine extra" did nothing


def test_redeclaring_a_task_says_how_to_open_or_replace_it(shell, capsys):
    shell.run_line_magic("easeml", "task iris --input 4 --output 3")
    error, shown = run_cell(shell, capsys, "%easeml task iris --input 4 --output 2")
    assert isinstance(error, AlreadyExistsError)
    assert len(shown.strip().splitlines()) == 1 and "Traceback" not in shown
    for how in ("client.task('iris')", "%easeml task iris` (no shapes)", "%easeml delete iris", "task.delete()"):
        assert how in shown, how
    assert shell.run_line_magic("easeml", "task iris").data["name"] == "iris"  # the way it names works


def test_unexpected_errors_keep_their_traceback(shell, capsys):
    class Broken:
        def __array__(self, *args, **kwargs):
            raise RuntimeError("a bug somewhere")

    shell.user_ns.update(B=Broken(), y=[0])
    shell.run_line_magic("easeml", "task plain --input 4 --output 3")
    error, shown = run_cell(shell, capsys, "%easeml feed plain B y")
    assert isinstance(error, RuntimeError) and "Traceback" in shown  # not ours to shorten: a bug shows whole


def test_an_unknown_task_says_how_to_declare_it(shell, capsys):
    error, shown = run_cell(shell, capsys, "%easeml status nope")
    assert type(error).__name__ == "NotFoundError"
    assert shown.strip().splitlines() == [
        "NotFoundError: task 'nope': user 'alice' has no task by that name",
        "  hint: declare it first: %easeml task nope --input SHAPE --output SHAPE (or --program ...)"]


def test_a_service_that_does_not_answer_is_one_line(shell, capsys):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    error, shown = run_cell(shell, capsys, f"%easeml connect http://127.0.0.1:{port} --token t")
    assert isinstance(error, (ConnectionError, OSError)) and "Traceback" not in shown
    lines = shown.strip().splitlines()
    assert len(lines) == 2 and "Connection refused" in lines[0] and lines[1].startswith("  hint: is the service running?")
    error, shown = run_cell(shell, capsys, "%easeml status")  # the working connection was kept
    assert error is None, shown


def test_a_shape_that_is_not_integers_names_its_option(shell, capsys):
    error, shown = run_cell(shell, capsys, "%easeml task shapes --input 4x3 --output 2")
    assert isinstance(error, DataError) and error.field == "--input" and "comma-separated integers" in shown


def test_status_says_when_its_timeout_passed_and_shows_other_errors_than_no_model(shell, capsys, monkeypatch):
    from ease_jupyter.client import Task

    shell.run_line_magic("easeml", "task slow --input 4 --output 3")
    monkeypatch.setattr(Task, "wait", lambda self, timeout=None, poll=0.25: False)
    status = shell.run_line_magic("easeml", "status slow --timeout 2")  # not shown: no live widget starts
    assert status.title == "task slow (still training after 2 s)"

    def store_down(self):
        raise ConnectionError("the service went away")

    monkeypatch.setattr(Task, "best", store_down)
    error, shown = run_cell(shell, capsys, "%easeml status slow")
    assert isinstance(error, ConnectionError)  # not hidden as "no model yet"


def test_one_line_without_a_known_hint():
    assert one_line(DataError("y", "3 labels", "one per example")) == "DataError: y: found 3 labels, expected one per example"


def test_from_takes_an_unquoted_path_and_names_one_that_is_neither_a_variable_nor_a_file(
        shell, service, capsys, tmp_path, monkeypatch):
    import pandas as pd

    pd.DataFrame({"mass": [3.0, 4.0, 5.0, 6.0], "species": ["a", "b", "a", "b"]}).to_csv(
        tmp_path / "penguins.csv", index=False)
    monkeypatch.chdir(tmp_path)
    made = shell.run_line_magic("easeml", "task from_path --from penguins.csv --target species")  # no quotes needed
    assert made.data["table"]["target"] == "species" and made.data["class_names"] == ["a", "b"]
    error, shown = run_cell(shell, capsys, "%easeml task no_path --from data/penguins.csv --target species")
    assert isinstance(error, DataError) and error.field == "--from"
    assert shown.strip().splitlines() == [
        "DataError: --from: found 'data/penguins.csv', which is neither a variable of the notebook (NameError: name "
        f"'data' is not defined) nor an existing file (relative paths start at {str(tmp_path)!r}), expected a "
        "DataFrame variable (--from df), or the path of a CSV or Parquet file (--from data/penguins.csv; in quotes "
        'where it has spaces: --from "my data.csv")']
    error, shown = run_cell(shell, capsys, '%easeml task no_path --from "data/penguins.csv" --target species')
    assert isinstance(error, DataError) and error.field == "--from"
    assert error.found.startswith("the path 'data/penguins.csv', which does not exist") and "Traceback" not in shown
    assert "no_path" not in [t.name for t in service.client("alice").tasks()]
