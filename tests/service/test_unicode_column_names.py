"""One column, whatever Unicode form wrote its name: a CSV header written on
macOS (NFD) and one written elsewhere (NFC), through the real service; and a
task whose schema was stored with NFD names before names were NFC."""

from __future__ import annotations

import json
import unicodedata

import pandas as pd

from ease_jupyter.service.task_schema import TABLE_TAG

NFC = unicodedata.normalize("NFC", "größe")
NFD = unicodedata.normalize("NFD", "größe")


def frame(name: str) -> pd.DataFrame:
    return pd.DataFrame({name: [1.0, 2.0, 3.0, 4.0], "town": ["Bern", "Zug", "Bern", "Zug"],
                         "y": ["a", "b", "a", "b"]})


def test_a_header_in_either_spelling_feeds_one_column(svc):
    task = svc.client("alice").task("sizes", like=frame(NFD), target="y")
    assert [c["name"] for c in task.info["table"]["columns"]] == [NFC, "town"]
    assert task.feed(frame(NFC))["new"] == 4
    again = task.feed(frame(NFD))
    assert (again["new"], again["duplicates"]) == (0, 4)
    _, stored, _ = task.data()
    assert list(stored.columns)[:2] == [NFC, "town"]
    # declaring it again from the other spelling opens the same task
    assert svc.client("alice").task("sizes", like=frame(NFC), target="y").info["id"] == task.info["id"]


def test_a_task_stored_with_nfd_names_takes_both_spellings(svc):
    task = svc.client("alice").task("old", like=frame(NFC), target="y")
    store = svc.service.store
    record = store.task_by_name(store.user_by_name("alice").id, "old")
    stored = json.loads(store.tags("task", record.id)[TABLE_TAG])
    stored["columns"][0]["name"] = NFD  # as a task declared from an NFD header before names were NFC
    store.set_tag("task", record.id, TABLE_TAG, json.dumps(stored))
    task.refresh()
    assert task.info["table"]["columns"][0]["name"] == NFD  # its models' pipelines select columns by it
    assert task.feed(frame(NFD))["new"] == 4
    assert task.feed(frame(NFC))["duplicates"] == 4
    assert svc.client("alice").task("old", like=frame(NFC), target="y").info["id"] == task.info["id"]
