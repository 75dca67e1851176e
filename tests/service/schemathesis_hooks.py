"""A schemathesis check of our own, loaded by ``test_schemathesis.py``
(``SCHEMATHESIS_HOOKS``): every 400 is a refusal that names the field at
fault with one of the service's error codes. That is what keeps a 400 for a
request the schema allows honest where the schema cannot state the rule (the
program grammar, the task's shapes and classes, existing example ids)."""

from __future__ import annotations

import schemathesis

FIELD_ERRORS = {"bad_data", "program_syntax", "no_candidates", "bad_request"}


@schemathesis.check
def refusals_name_the_field(ctx, response, case):  # noqa: ANN001 - schemathesis' check signature
    if response.status_code != 400:
        return None
    try:
        error = response.json()["error"]
    except (ValueError, KeyError, TypeError):
        raise AssertionError(f"a 400 without a JSON error body: {response.text[:200]!r}") from None
    if error.get("code") not in FIELD_ERRORS or not error.get("field"):
        raise AssertionError(f"a 400 that names no field with a known code: {error}")
    return None
