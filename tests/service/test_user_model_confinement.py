"""On the real service, a user's model cannot read the database or plant a
file among the blobs (``user_confine``, where the kernel has Landlock): the
job fails with her own error, and other users' tasks train as before."""

from __future__ import annotations

import pytest
from sklearn.linear_model import LogisticRegression

from ease_jupyter.user_confine import abi_version

from .conftest import serving

pytestmark = pytest.mark.skipif(abi_version() == 0,
                                reason="this kernel has no Landlock: users' code runs unconfined here")


class Snoops(LogisticRegression):
    """Reads the file ``read`` and writes ``plant`` before it fits."""

    def __init__(self, read="", plant="", C=1.0):
        super().__init__(C=C)
        self.read, self.plant = read, plant

    def fit(self, X, y):
        if self.read:
            with open(self.read, "rb") as f:
                f.read(16)
        if self.plant:
            with open(self.plant, "w") as f:
                f.write("hers")
        return super().fit(X, y)


@pytest.mark.parametrize("attempt", ["read", "plant"])
def test_her_model_can_neither_read_the_database_nor_write_among_the_blobs(tmp_path, iris, attempt):
    X, y = iris
    target = {"read": tmp_path / "easeml.sqlite", "plant": tmp_path / "blobs" / "planted"}[attempt]
    with serving(tmp_path, "ada", "bob", torch=False, workers=1, allow_user_models=True) as running:
        assert (tmp_path / "easeml.sqlite").is_file() and (tmp_path / "blobs").is_dir()
        ada = running.client("ada").task("iris", input=[4], output=[3])
        bob = running.client("bob").task("flowers", input=[4], output=[3])
        ada.add_model(Snoops(**{attempt: str(target)}), name="snoops")
        ada.feed(X, y)
        bob.feed(X, y)
        assert ada.wait(timeout=240) and bob.wait(timeout=240)
        jobs = {j["model"]: j for j in ada.jobs()}
        assert jobs["snoops"]["status"] == "failed"
        assert "PermissionError" in jobs["snoops"]["error"] and str(target) in jobs["snoops"]["error"]
        assert any(j["status"] == "succeeded" for j in bob.jobs())
        assert bob.best()["accuracy"] > 0.8
    assert not (tmp_path / "blobs" / "planted").exists()
