"""The %easeml magics in an in-process IPython shell (no kernel)."""

from __future__ import annotations

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.error import UsageError

from ease_jupyter.errors import DataError, NotFoundError

from .conftest import IRIS_MODELS


@pytest.fixture
def shell(svc):
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "ease_jupyter")
    try:
        yield ip
    finally:
        InteractiveShell.clear_instance()


def test_magics_end_to_end(shell, svc, iris):
    X, y = iris
    shell.user_ns.update(X=X, y=y, Xs=X[:7])
    r = shell.run_line_magic("easeml", f"connect {svc.url} --token {svc.tokens['alice']}")
    assert "alice" in repr(r) and "<b>" in r._repr_html_()
    r = shell.run_cell_magic("easeml", "task iris", "input: [4]\noutput: [3]\n")
    assert r.data["program"] == "{input: {[Tensor[4]], []}, output: {[Tensor[3]], []}}"
    assert "Tensor[4]" in repr(r) and "<table>" in r._repr_html_()
    assert shell.run_line_magic("easeml", "task other --input 4 --output 2").data["name"] == "other"
    v = shell.run_line_magic("easeml", "feed iris X y")
    assert v.data["number"] == 1 and "150 examples" in repr(v)
    status = shell.run_line_magic("easeml", "status iris --timeout 90")
    assert status.data["idle"] and status.rows[0]["accuracy"] > 0.85
    pred = shell.run_line_magic("easeml", "infer iris Xs")
    assert len(pred.data) == 7 and "prediction" in pred._repr_html_()
    models = shell.run_line_magic("easeml", "models iris")
    accs = [row["accuracy"] for row in models.rows]
    assert len(accs) == IRIS_MODELS and accs == sorted(accs, reverse=True)
    v2 = shell.run_line_magic("easeml", "refine iris --drop 0,1,2")
    assert v2.data["number"] == 2 and v2.data["n_examples"] == 147
    prov = shell.run_line_magic("easeml", "provenance iris")
    assert {row["edge"] for row in prov.rows} >= {"feed", "refine", "train"}
    board = shell.run_line_magic("easeml", "status")
    assert {row["task"] for row in board.rows} == {"iris", "other"}
    assert shell.run_line_magic("easeml", "cancel iris").data["cancelled"] is True


def test_magic_errors_and_help(shell, svc):
    shell.run_line_magic("easeml", f"connect {svc.url} --token {svc.tokens['bob']}")
    with pytest.raises(UsageError):
        shell.run_line_magic("easeml", "explode")
    with pytest.raises(NotFoundError):
        shell.run_line_magic("easeml", "status nope")
    shell.run_line_magic("easeml", "task t --input 4 --output 3")
    shell.user_ns.update(bad=[[1.0, 2.0]], lab=[0])
    with pytest.raises(DataError) as info:
        shell.run_line_magic("easeml", "feed t bad lab")
    assert info.value.field.startswith("X")
    with pytest.raises(ValueError, match="variable"):
        shell.run_line_magic("easeml", "feed t missing lab")
    doc = shell.find_line_magic("easeml").__doc__
    for sub in ("connect", "task", "feed", "refine", "status", "infer", "provenance", "models", "cancel", "%%easeml"):
        assert sub in doc
    assert "%easeml [--input INPUT]" in doc and "--drop DROP" in doc  # magic_arguments appended the usage
