"""A user's code is confined by Landlock where the kernel has it
(``ease_jupyter.user_confine``): her child reads the Python installation and
writes its own folder, and cannot reach the data directory, other processes'
``/proc`` entries, TCP or (ABI 6) the worker with a signal."""

from __future__ import annotations

import os
import socket
import time
import uuid

import pytest

from ease_jupyter import user_sandbox
from ease_jupyter.user_confine import PROTECTED_ENV, READABLE_ENV, WRITABLE_ENV, abi_version
from ease_jupyter.user_sandbox import UserModelError, run_user_code

ABI = abi_version()
pytestmark = pytest.mark.skipif(ABI == 0, reason="this kernel has no Landlock: users' code runs unconfined here")


def _attempt(fn, *args):
    """What ``fn(*args)`` gave in her child: ("ok", value) or ("refused", the error's type)."""
    try:
        return "ok", fn(*args)
    except OSError as error:
        return "refused", type(error).__name__


def _read(path):
    with open(path) as f:
        return f.read()


def _write(path):
    with open(path, "w") as f:
        return f.write("hers")


def _probe(paths):
    import numpy as np
    from sklearn.linear_model import LogisticRegression

    folder = os.getcwd()
    return {
        "read data": _attempt(_read, paths["secret"]),
        "list data": _attempt(os.listdir, paths["data"]),
        "write data": _attempt(_write, paths["planted"]),
        "write tmp": _attempt(_write, paths["tmp"]),
        "parent environ": _attempt(_read, f"/proc/{os.getppid()}/environ"),
        "own status": _attempt(lambda: _read("/proc/self/status")[:4]),
        "write folder": _attempt(_write, os.path.join(folder, "note")),
        "temp file": _attempt(lambda: __import__("tempfile").mkstemp()[1].startswith(folder)),
        "home": os.environ["HOME"] == folder,
        "fit": float(LogisticRegression().fit(np.array([[0.0], [1.0]]), [0, 1]).predict([[1.0]])[0]),
    }


def _connect(port):
    return _attempt(lambda: socket.create_connection(("127.0.0.1", port), timeout=5).close())


def _signal(pid):
    return _attempt(os.kill, pid, 0)


def _listed(paths):
    return {"read shared": _attempt(_read, paths["shared"]), "write shared": _attempt(_write, paths["shared"]),
            "write scratch": _attempt(_write, paths["scratch"]), "read scratch": _attempt(_read, paths["scratch"])}


@pytest.fixture
def data_dir(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "easeml.sqlite").write_text("everyone's records")
    return data


def test_her_code_reads_and_writes_nothing_outside_its_folder_and_still_fits(data_dir):
    tmp = f"/tmp/easeml-confine-test-{uuid.uuid4().hex}"  # outside pytest's folders, which may be opened to her
    paths = {"data": str(data_dir), "secret": str(data_dir / "easeml.sqlite"), "planted": str(data_dir / "planted"),
             "tmp": tmp}
    seen = run_user_code(_probe, paths, deadline=time.time() + 60, what="probe")
    for what in ("read data", "list data", "write data", "write tmp", "parent environ"):
        assert seen[what] == ("refused", "PermissionError"), (what, seen[what])
    assert not (data_dir / "planted").exists() and not os.path.exists(tmp)
    assert seen["own status"] == ("ok", "Name")
    assert seen["write folder"] == ("ok", 4) and seen["temp file"] == ("ok", True) and seen["home"]
    assert seen["fit"] == 1.0


@pytest.mark.skipif(ABI < 4, reason=f"Landlock ABI {ABI} has no TCP rules (ABI 4 and later)")
def test_her_code_opens_no_tcp_connection():
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.5)
    try:
        port = listener.getsockname()[1]
        assert _connect(port) == ("ok", None)  # unconfined, here: the port takes connections
        listener.accept()[0].close()
        assert run_user_code(_connect, port, deadline=time.time() + 60, what="tcp") == ("refused", "PermissionError")
        with pytest.raises(socket.timeout):
            listener.accept()  # nothing of hers arrived
    finally:
        listener.close()


@pytest.mark.skipif(ABI < 6, reason=f"Landlock ABI {ABI} has no signal scoping (ABI 6 and later)")
def test_her_code_cannot_signal_the_worker():
    refused = run_user_code(_signal, os.getpid(), deadline=time.time() + 60, what="signal")
    assert refused == ("refused", "PermissionError")
    deadline = time.time() + 60
    own = run_user_code(os.getpid, deadline=deadline, what="pid")
    assert run_user_code(_signal, own, deadline=deadline, what="signal") == ("ok", None)  # herself: yes


def test_the_workers_environment_may_open_a_shared_folder_to_read_and_a_scratch_folder(tmp_path, monkeypatch):
    shared, scratch = tmp_path / "weights", tmp_path / "scratch"
    shared.mkdir()
    scratch.mkdir()
    (shared / "w.txt").write_text("pretrained")
    monkeypatch.setenv(READABLE_ENV, str(shared))
    monkeypatch.setenv(WRITABLE_ENV, str(scratch))
    paths = {"shared": str(shared / "w.txt"), "scratch": str(scratch / "out.txt")}
    deadline = time.time() + 60
    try:
        seen = run_user_code(_listed, paths, deadline=deadline, what="listed")
    finally:
        user_sandbox.close_job(deadline)
    assert seen == {"read shared": ("ok", "pretrained"), "write shared": ("refused", "PermissionError"),
                    "write scratch": ("ok", 4), "read scratch": ("ok", "hers")}
    assert (scratch / "out.txt").read_text() == "hers"


def test_her_error_from_a_refused_open_names_the_path_she_tried(data_dir):
    with pytest.raises(UserModelError, match=r"PermissionError.*easeml\.sqlite"):
        run_user_code(_read, str(data_dir / "easeml.sqlite"), deadline=time.time() + 60, what="read")


def test_an_import_path_that_holds_the_data_directory_opens_only_its_modules(tmp_path, monkeypatch):
    project = tmp_path / "project"  # the folder a service was started in (a notebook's), on its import path
    for folder in ("data", "package", ".ssh"):
        (project / folder).mkdir(parents=True)
    files = {"notes.txt": "beside the data", "mine.py": "X = 1", "package/__init__.py": "Y = 2",
             ".ssh/id_rsa": "key", "data/easeml.sqlite": "everyone's records"}
    for name, text in files.items():
        (project / name).write_text(text)
    monkeypatch.setattr("sys.path", [*__import__("sys").path, str(project)])
    deadline = time.time() + 60
    try:
        opened = run_user_code(_attempt, _read, str(project / "notes.txt"), deadline=deadline, what="read")
        assert opened == ("ok", "beside the data")  # an import path is readable...
    finally:
        user_sandbox.close_job(deadline)
    monkeypatch.setenv(PROTECTED_ENV, str(project / "data"))
    deadline = time.time() + 60
    try:
        seen = {name: run_user_code(_attempt, _read, str(project / name), deadline=deadline, what="read")
                for name in files}
    finally:
        user_sandbox.close_job(deadline)
    # ...unless it holds the data: then its modules and packages only
    assert seen == {"notes.txt": ("refused", "PermissionError"), "mine.py": ("ok", "X = 1"),
                    "package/__init__.py": ("ok", "Y = 2"), ".ssh/id_rsa": ("refused", "PermissionError"),
                    "data/easeml.sqlite": ("refused", "PermissionError")}


@pytest.mark.parametrize("variable, opened, relation", [(WRITABLE_ENV, ".", "holds"),
                                                         (READABLE_ENV, "data/shared", "lies in")])
def test_a_folder_opened_to_her_code_that_holds_or_lies_in_the_data_directory_runs_none_of_it(
        tmp_path, monkeypatch, variable, opened, relation):
    (tmp_path / "data" / "shared").mkdir(parents=True)
    monkeypatch.setenv(PROTECTED_ENV, str(tmp_path / "data"))
    folder = (tmp_path / opened).resolve()
    monkeypatch.setenv(variable, str(folder))
    deadline = time.time() + 60
    try:
        with pytest.raises(UserModelError, match=rf"her code was not run: {variable} names {folder}, "
                                                 rf"which {relation} {tmp_path / 'data'}"):
            run_user_code(os.getpid, deadline=deadline, what="pid")
    finally:
        user_sandbox.close_job(deadline)


def _make_device():
    import stat

    os.mknod("kmsg", stat.S_IFCHR | 0o600, os.makedev(1, 11))


def test_her_code_makes_no_device_file_even_in_its_folder():
    with pytest.raises(UserModelError, match="PermissionError"):
        run_user_code(_make_device, deadline=time.time() + 60, what="mknod")


def test_the_service_protects_its_data_directory_and_database_file(tmp_path, monkeypatch):
    from ease_jupyter.service import ServiceConfig
    from ease_jupyter.service.core import Service

    monkeypatch.delenv(PROTECTED_ENV, raising=False)
    database = tmp_path / "elsewhere" / "db.sqlite"
    database.parent.mkdir()
    service = Service(ServiceConfig(data_dir=tmp_path / "data", db_url=f"sqlite:///{database}", executor="thread",
                                    tick_seconds=3600, torch=False))
    try:
        assert os.environ[PROTECTED_ENV].split(os.pathsep) == [str(tmp_path / "data"), str(database)]
        assert PROTECTED_ENV in user_sandbox.CHILD_ENV_KEYS  # her children see it
    finally:
        service.stop()


def test_her_code_reads_the_systems_settings_but_not_its_secrets():
    deadline = time.time() + 60
    try:
        seen = {path: run_user_code(_attempt, _read, path, deadline=deadline, what="read")[0]
                for path in ("/etc/passwd", "/etc/hosts", "/etc/shadow", "/etc/gshadow")}
    finally:
        user_sandbox.close_job(deadline)
    assert seen == {"/etc/passwd": "ok", "/etc/hosts": "ok", "/etc/shadow": "refused", "/etc/gshadow": "refused"}
