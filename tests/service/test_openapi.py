"""The hand-written OpenAPI document covers every route of the app."""

from __future__ import annotations

import re

from ease_jupyter.service.app import make_app
from ease_jupyter.service.handlers import API, NAME
from ease_jupyter.service.openapi import spec


def _template(regex: str) -> str:
    return re.sub(re.escape(NAME), "{name}", regex).replace("/uploads/{name}", "/uploads/{id}")


def test_every_route_is_in_the_spec(svc):
    doc = svc.call("GET", "/openapi.json").body
    assert doc["openapi"].startswith("3.") and doc == spec()
    app = make_app(svc.service)
    seen = set()
    for rule in app.wildcard_router.rules:
        pattern = rule.matcher.regex.pattern.rstrip("$")
        assert pattern.startswith(API), pattern
        path = _template(pattern[len(API):].replace("\\", ""))
        assert path in doc["paths"], f"{path} missing from openapi.py"
        ops = getattr(rule.target, "ops", {"get": None})
        assert set(doc["paths"][path]) == set(ops), path
        seen.add(path)
    assert seen == set(doc["paths"]), "the spec documents routes the app does not have"
