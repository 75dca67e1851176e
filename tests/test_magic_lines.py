"""How ``%easeml`` lines are read and answered, in a real IPython shell
against a real service: options anywhere on the line, help, the URL forms
``connect`` takes and ``Client()`` following it, a delete that cannot ask,
a feed without labels, syntax errors said once and counted in the cell, and
what ``infer`` and ``delete`` say."""

from __future__ import annotations

import socket
from typing import Iterator

import numpy as np
import pytest
from IPython.core.error import StdinNotImplementedError
from IPython.core.interactiveshell import InteractiveShell

from ease_jupyter import client as client_module
from ease_jupyter.client import Client, service_url
from ease_jupyter.errors import DataError, NotFoundError, ProgramSyntaxError
from service.conftest import Running, serving, until  # tests/ is on sys.path
from shells import connected_shell, run_cell


@pytest.fixture(scope="module")
def service(tmp_path_factory) -> Iterator[Running]:
    with serving(tmp_path_factory.mktemp("svc"), "alice", "bob", workers=1, torch=False) as running:
        yield running


@pytest.fixture
def shell(service, monkeypatch, tmp_path) -> Iterator[InteractiveShell]:
    for name in ("EASEML_URL", "EASEML_TOKEN", "KERNEL_EASEML_URL", "KERNEL_EASEML_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("EASEML_DATA_DIR", str(tmp_path / "data"))  # should anything start an embedded service
    try:
        with connected_shell(service.url, service.tokens["alice"]) as ip:
            try:
                yield ip
            finally:
                notices = getattr(ip, "_easeml_notices", None)
                if notices is not None:
                    notices.close()
    finally:
        from ease_jupyter.service import embedded

        embedded.stop(tmp_path / "data", timeout=10)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_options_may_come_before_between_or_after_the_words(shell, service, capsys):
    shell.run_line_magic("easeml", "task anywhere --input 4 --output 3")
    shell.user_ns.update(X=np.eye(4, dtype="float32")[[0, 1, 2, 3] * 3], y=np.arange(12) % 3)
    fed = shell.run_line_magic("easeml", "feed --mode append anywhere X y")
    assert fed.data["mode"] == "append" and fed.data["n_examples"] == 12
    status = shell.run_line_magic("easeml", "status --timeout 0.1 anywhere")
    assert status.title.startswith("task anywhere")
    assert shell.run_line_magic("easeml", "--timeout 0.1 status anywhere").title.startswith("task anywhere")
    # the magic's own messages stay
    error, shown = run_cell(shell, capsys, "%easeml status --all anywhere")
    assert isinstance(error, ValueError)
    assert shown.strip() == "ValueError: %easeml status --all: expected no NAME (it shows every user)"
    error, shown = run_cell(shell, capsys, "%easeml status --timeout 1 anywhere extra")
    assert isinstance(error, DataError) and error.field == "name"


def test_help_lists_the_commands_and_each_command_its_options(shell, capsys):
    for line in ("%easeml", "%easeml --help", "%easeml -h"):
        error, shown = run_cell(shell, capsys, line)
        assert error is None and "UsageError" not in shown and "required" not in shown, (line, shown)
        assert shown.startswith("usage: %easeml COMMAND"), shown
        for command in ("connect", "task", "feed", "refine", "status", "infer", "provenance", "models", "model",
                        "cancel", "delete", "export"):
            assert f"%easeml {command} " in shown, command
        assert "%easeml COMMAND --help" in shown and "%easeml?" in shown
    error, shown = run_cell(shell, capsys, "%easeml status --help")
    assert error is None and "unrecognized" not in shown, shown
    assert "%easeml status NAME [--timeout S]" in shown and "%easeml status --all" in shown
    assert "--timeout TIMEOUT" in shown and "--all" in shown and "--debug" in shown
    assert "--input" not in shown and "%easeml feed" not in shown  # another command's
    error, shown = run_cell(shell, capsys, "%easeml feed iris X y -h")
    assert error is None and "--mode" in shown and "%easeml feed NAME X y" in shown


def test_connect_takes_the_url_serve_prints_or_one_without_a_scheme(shell, service, capsys):
    host = service.url.split("://", 1)[1]
    bob = service.tokens["bob"]
    for url in (f"{service.url}/api/v1", f"{service.url}/api/v1/", host):
        connected = shell.run_line_magic("easeml", f"connect {url} --token {bob}")
        assert connected.title == f"connected to {service.url} as bob", url
    assert service_url("localhost:8000") == "http://localhost:8000"
    assert service_url("https://hub.example.org/services/easeml/") == "https://hub.example.org/services/easeml"
    error, shown = run_cell(shell, capsys, "%easeml connect ftp://example.org --token t")
    assert isinstance(error, DataError) and error.field == "url" and "http(s)://HOST:PORT" in shown


def test_a_refused_connection_names_the_url_it_tried(shell, capsys):
    url = f"http://127.0.0.1:{free_port()}"
    error, shown = run_cell(shell, capsys, f"%easeml connect {url} --token t")
    assert isinstance(error, ConnectionRefusedError)
    assert shown.splitlines()[0] == f"ConnectionRefusedError: [Errno 111] Connection refused: nothing answers at {url}"
    with pytest.raises(ConnectionRefusedError, match=f"nothing answers at {url}$"):
        Client(url, "t", register=False).whoami()


def test_client_in_the_notebook_follows_connect_and_a_bare_connect_goes_back(shell, service, capsys, monkeypatch):
    error, shown = run_cell(shell, capsys, "from ease_jupyter import Client\nmine = Client()")
    assert error is None, shown
    mine = shell.user_ns["mine"]
    assert mine.url == service.url and mine.whoami()["name"] == "alice"
    # no URL: the kernel's own default again (here $EASEML_URL, as bob), for the magic and Client() alike
    monkeypatch.setenv("EASEML_URL", service.url)
    monkeypatch.setenv("EASEML_TOKEN", service.tokens["bob"])
    assert shell.run_line_magic("easeml", "connect").data["name"] == "bob"
    assert Client().whoami()["name"] == "bob"
    shell.run_line_magic("easeml", f"connect {service.url} --token {service.tokens['alice']}")
    assert Client().whoami()["name"] == "alice"
    InteractiveShell.clear_instance()  # the shell that connected is gone: its default with it
    assert client_module.kernel_default() is None and Client().whoami()["name"] == "bob"


def test_a_delete_that_cannot_ask_says_to_pass_yes(shell, service, capsys, monkeypatch):
    import builtins

    def no_input(prompt: str = "") -> str:  # what ipykernel's input does for a front end without stdin (nbclient)
        raise StdinNotImplementedError("raw_input was called, but this frontend does not support input requests.")

    shell.run_line_magic("easeml", "task keepme --input 4 --output 3")
    monkeypatch.setattr(builtins, "input", no_input)
    error, shown = run_cell(shell, capsys, "%easeml delete keepme")
    assert isinstance(error, ValueError) and "Traceback" not in shown
    assert shown.strip() == ("ValueError: %easeml delete keepme: cannot ask for a confirmation here (no input: a "
                             "notebook run headless, e.g. by nbclient or papermill); to delete without asking: "
                             "%easeml delete keepme --yes")
    assert service.client("alice").task("keepme").name == "keepme"  # not deleted
    assert shell.run_line_magic("easeml", "delete keepme --yes").data["deleted"]


def test_deleting_a_task_that_does_not_exist_says_only_that(shell, capsys):
    error, shown = run_cell(shell, capsys, "%easeml delete nope")
    assert isinstance(error, NotFoundError)
    assert shown.strip() == "NotFoundError: task 'nope': user 'alice' has no task by that name"


def test_a_tensor_feed_without_labels_is_refused_before_sending(shell, service, capsys):
    shell.run_line_magic("easeml", "task unlabelled --input 4 --output 3")
    shell.user_ns.update(X=np.zeros((5, 4), "float32"))
    error, shown = run_cell(shell, capsys, "%easeml feed unlabelled X")
    assert isinstance(error, DataError) and error.field == "y" and error.found == "nothing"
    assert "%easeml feed unlabelled X y" in shown and "target column" in shown
    assert "npy_b64" not in shown and "upload" not in shown
    assert service.client("alice").task("unlabelled").versions() == []


def test_a_syntax_error_says_its_place_once_counted_in_the_cell(shell, service, capsys):
    error, shown = run_cell(shell, capsys, "%%easeml task bad1\n\ninput: [4] output: 3")
    assert isinstance(error, ProgramSyntaxError) and (error.line, error.column) == (3, 20)
    assert shown.strip() == ("ProgramSyntaxError: line 3, column 20 of the cell: expected the output type: "
                             "'{[tensors], [recursive fields]}' or '[dims]' (found '3', expected '{' or '[')")
    error, shown = run_cell(shell, capsys, "%easeml task bad2 --program 'input: [4] output: 3'")
    assert isinstance(error, ProgramSyntaxError) and shown.strip() == (
        "ProgramSyntaxError: line 1, column 20: expected the output type: "
        "'{[tensors], [recursive fields]}' or '[dims]' (found '3', expected '{' or '[')")
    with pytest.raises(ProgramSyntaxError) as info:
        service.client("alice").task("bad3", program="input: [4]\noutput: 3")
    assert str(info.value).count("line 2, column 9") == 1 and str(info.value).count("(found") == 1
    assert not {"bad1", "bad2", "bad3"} & {t.name for t in service.client("alice").tasks()}


def test_infer_says_when_it_shows_only_the_first_rows(shell, service):
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(3), 10)
    X = (rng.normal(size=(30, 4)) + 3 * y[:, None]).astype("float32")
    shell.user_ns.update(X=X, y=y, few=X[:5])
    shell.run_line_magic("easeml", "task many --input 4 --output 3")
    shell.run_line_magic("easeml", "feed many X y")
    task = service.client("alice").task("many")

    def trained() -> bool:
        try:
            return task.best() is not None
        except NotFoundError:
            return False
        except Exception:  # noqa: BLE001 - no model yet
            return False

    assert until(trained, 120, every=0.2)
    shown = shell.run_line_magic("easeml", "infer many X")
    assert shown.title == "many: 30 prediction(s), showing the first 20 (all of them in .data)"
    assert len(shown.rows) == 20 and len(shown.data) == 30
    assert shell.run_line_magic("easeml", "infer many few").title == "many: 5 prediction(s)"
