"""The hand-written OpenAPI document covers every route of the app, is valid
OpenAPI 3.1, and says what the service does (schemathesis checks the rest
against a live service: test_schemathesis.py)."""

from __future__ import annotations

import re

import pytest

from ease_jupyter.errors import DataError
from ease_jupyter.service.app import make_app
from ease_jupyter.service.auth import check_name
from ease_jupyter.service.handlers import API, NAME
from ease_jupyter.service.openapi import NAME_SCHEMA, spec


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


def test_the_document_is_valid_openapi():
    from openapi_spec_validator import validate

    validate(spec())


def _schema(doc: dict, ref_or_schema: dict) -> dict:
    """The schema with ``components`` alongside, so that ``$ref``s resolve."""
    return {**ref_or_schema, "components": doc["components"]}


def test_array_forms_match_exactly_one_branch():
    import jsonschema

    doc = spec()
    array = _schema(doc, {"$ref": "#/components/schemas/Array"})
    part = {"upload": "0123abcd", "offset": 0, "size": 128}
    for value in ([[1, 2], [3, 4]], {"npy_b64": "k05VTVBZ"}, {"upload": "0123abcd"}, part,
                  {"strings": {"utf8": part, "offsets": {"npy_b64": "k05VTVBZ"}}}):
        jsonschema.validate(value, array)  # oneOf: exactly one branch matches
    for value in ({"npy_b64": "k05V", "upload": "x"}, {"npy_b64": 3}, {}, {"other": "x"},
                  {"upload": "x", "offset": 0}, {**part, "offset": -1}, {**part, "extra": 1},
                  {"strings": {"utf8": {"npy_b64": "k05V"}}}, {"strings": {"utf8": [1], "offsets": [0, 1]}},
                  {"strings": {"utf8": {"strings": {}}, "offsets": {"npy_b64": "k05V"}}}):
        assert not jsonschema.Draft202012Validator(array).is_valid(value), value


def test_error_fields_may_be_null():
    import jsonschema

    doc = spec()
    error = _schema(doc, doc["components"]["responses"]["Error"]["content"]["application/json"]["schema"])
    jsonschema.validate({"error": {"code": "forbidden", "field": None, "found": None, "expected": None,
                                   "message": "admin rights needed"}}, error)


@pytest.mark.parametrize("name", ["t", "a.b", ".hidden", "end.", "x" * 64, "a-b_c.d", "-"])
def test_name_pattern_takes_what_the_service_takes(name):
    assert re.fullmatch(NAME_SCHEMA["pattern"].strip("^$"), name) and check_name("name", name) == name


@pytest.mark.parametrize("name", ["..", "a..b", ".", "../etc", "a/b", "sp ace", "é"])
def test_name_pattern_refuses_what_the_service_refuses(name):
    assert not re.search(NAME_SCHEMA["pattern"], name)
    with pytest.raises(DataError):
        check_name("name", name)


def test_statuses_and_parameters_as_served():
    paths = spec()["paths"]
    for path, methods in paths.items():
        for method, op in methods.items():
            public = op.get("security") == []
            if path != "/events":
                assert public or {"401", "403"} <= set(op["responses"]), (method, path)
    assert {"200", "201"} <= set(paths["/tasks"]["post"]["responses"])
    assert {"200", "201"} <= set(paths["/tasks/{name}/refine"]["post"]["responses"])
    assert {"200", "201"} <= set(paths["/tasks/{name}/feed"]["post"]["responses"])  # 200: every row was there
    offset = next(p for p in paths["/uploads/{id}"]["put"]["parameters"] if p["name"] == "offset")
    assert not offset.get("required", False)
    assert not paths["/tasks/{name}/tags"]["put"]["requestBody"]["required"]  # no body: sets nothing
    assert paths["/tasks/{name}/feed"]["post"]["requestBody"]["content"]["application/json"]["schema"]["required"] == [
        "X", "y"]
    # 401 nobody, 403 a caller the hub knows but does not let in, 429 too many streams (websocket.py)
    assert set(paths["/events"]["get"]["responses"]) == {"101", "401", "403", "426", "429"}
    delete = {p["name"]: p for p in paths["/tasks/{name}"]["delete"]["parameters"]}  # deletion.same_task
    assert {name: (p["in"], p.get("required", False)) for name, p in delete.items() if name != "name"} == {
        "id": ("query", False), "created_at": ("query", False)}
    for path in ("/users/{name}", "/users/{name}/budget"):  # budget_api.user_named: which account of a name
        for op in paths[path].values():
            origin = next(p for p in op["parameters"] if p["name"] == "origin")
            assert origin["in"] == "query" and not origin["required"] and origin["schema"]["enum"] == ["local", "hub"]
