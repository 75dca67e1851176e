"""The OpenAPI 3.1 description of /api/v1, written by hand (JSON Schema
2020-12: a nullable value is ``"type": [..., "null"]``).

``tests/service/test_openapi.py`` checks that every route of the app appears
here with the same methods, so the two cannot drift apart.
"""

from __future__ import annotations

from typing import Any

from . import notebooks
from .tag_limits import CONTROL_CHARACTERS, MAX_TAG_KEY_CHARS, MAX_TAG_VALUE_CHARS, MAX_TAGS_PER_TASK

ERR = {"$ref": "#/components/responses/Error"}
# auth.check_name: 1-64 of A-Z a-z 0-9 _ . -, never "..", never just ".". Dots
# only between or around runs of other characters says so without a lookahead.
NAME_SCHEMA = {"type": "string", "minLength": 1, "maxLength": 64,
               "pattern": r"^\.?([A-Za-z0-9_-]+\.)*[A-Za-z0-9_-]+\.?$"}
NAME = {"name": "name", "in": "path", "required": True, "schema": NAME_SCHEMA, "description": "task name (no '..')"}
ARRAY = {"$ref": "#/components/schemas/Array"}
NPY = {"$ref": "#/components/schemas/Npy"}
INT_LIST = {"type": "array", "items": {"type": "integer"}}
SHAPE = {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 1}}
# Statuses every route may answer with an error body: bad input, a missing
# token or right, an unknown object, a conflict, a body over the limit, and
# the store's own failures (500 internal/store_corrupt, 503 store_unavailable,
# 507 storage_full).
_ERRORS = ("400", "404", "409", "413", "5XX")
_AUTH_ERRORS = ("401", "403")
# A route that runs a model also answers 429 while its caller has
# handlers.MODEL_CALLS_PER_USER such requests under way.
_MODEL_CALL_ERRORS = ("429",)


def _op(summary: str, *, body: dict | None = None, ok: int | tuple[int, ...] = 200, params: list | None = None,
        response: dict | None = None, public: bool = False, body_required: bool = True,
        runs_model: bool = False) -> dict[str, Any]:
    """One operation: its success statuses (``ok``) with ``response``, and the error statuses."""
    oks = ok if isinstance(ok, tuple) else (ok,)
    responses: dict[str, Any] = {str(status): {"description": "OK", "content": {"application/json": {
        "schema": response or {}}}} for status in oks}
    for status in _ERRORS + (() if public else _AUTH_ERRORS) + (_MODEL_CALL_ERRORS if runs_model else ()):
        responses[status] = ERR
    op: dict[str, Any] = {"summary": summary, "responses": responses}
    if params:
        op["parameters"] = params
    if body is not None:
        op["requestBody"] = {"required": body_required, "content": {"application/json": {"schema": body}}}
    if public:
        op["security"] = []
    return op


def _download(op: dict[str, Any]) -> dict[str, Any]:
    """An operation whose 200 answer is a zip file (GET /tasks/{name}/model)."""
    op["responses"]["200"] = {"description": "A zip of the model file and its model card", "content": {
        "application/zip": {"schema": {"type": "string", "format": "binary"}}}}
    return op


def _obj(*required: str, **props: Any) -> dict[str, Any]:
    """An object with these properties, ``required`` of them always present."""
    schema: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        schema["required"] = list(required)
    return schema


def _only(key: str, schema: dict[str, Any]) -> dict[str, Any]:
    """An object with exactly one property: a branch of a ``oneOf`` that no other branch matches."""
    return {"type": "object", "properties": {key: schema}, "required": [key], "additionalProperties": False}


def _or_null(schema: dict[str, Any]) -> dict[str, Any]:
    """A field whose null the service takes as absent."""
    return {**schema, "type": [schema["type"], "null"]}


def _given(key: str, type_: str) -> dict[str, Any]:
    """Matches an object in which ``key`` is present and not null."""
    return {"required": [key], "properties": {key: {"type": type_}}}


# POST /tasks: a program, or both shapes, never a program with a shape (core._program_text).
TASK_BODY = {
    **_obj("name", name=NAME_SCHEMA, program={"type": ["string", "null"]}, input=_or_null(SHAPE),
           output=_or_null(SHAPE)),
    "not": {"allOf": [_given("program", "string"), {"anyOf": [_given("input", "array"), _given("output", "array")]}]},
    "dependentSchemas": {"input": {"anyOf": [{"properties": {"input": {"type": "null"}}}, _given("output", "array")]},
                         "output": {"anyOf": [{"properties": {"output": {"type": "null"}}}, _given("input", "array")]}},
}
# A tag key: not blank (Python's str.strip, whose whitespace includes \x1c-\x1f and \x85) and not easeml.*
NO_CONTROL_CHARACTERS = rf"^(?![\s\S]*{CONTROL_CHARACTERS})"  # tag_limits: none anywhere in the string
TAG_KEY = {"minLength": 1, "maxLength": MAX_TAG_KEY_CHARS,
           "allOf": [{"pattern": r"[^\t\n\x0b\x0c\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"},
                     {"pattern": NO_CONTROL_CHARACTERS}],
           "not": {"pattern": r"^easeml\."}}

# An admin's /users/{name} routes (budget_api.user_named): ?origin= picks one of two accounts of one name.
_ORIGIN_SCHEMA = {"enum": ["local", "hub"]}
_USER_PARAMS = [{**NAME, "description": "user name"}, {
    "name": "origin", "in": "query", "required": False, "schema": _ORIGIN_SCHEMA,
    "description": "which account of this name: the local account or the hub user (they are separate namespaces). "
                   "Without it: the only account of the name; where both exist, the hub user in JupyterHub mode "
                   "and the local account otherwise. A budget answer's origin says which."}]
_SECONDS_OR_NULL = {"type": ["number", "null"], "minimum": 0}
_LIMITS = _obj(seconds=_SECONDS_OR_NULL, gpu_seconds=_SECONDS_OR_NULL, cost=_SECONDS_OR_NULL,
               deadline={"type": ["string", "null"], "format": "date-time"})
BUDGET_BODY = {**_LIMITS, "minProperties": 1, "additionalProperties": False}
BUDGET = _obj("own", "cap", "limits", "spent", "left", "blocked", "reason", own=_LIMITS, cap=_LIMITS, limits=_LIMITS,
              spent=_obj(seconds={"type": "number"}, gpu_seconds={"type": "number"}, cost={"type": ["number", "null"]},
                         by_kind={"type": "object", "additionalProperties": {"type": "number"}}),
              left=_obj(seconds=_SECONDS_OR_NULL, gpu_seconds=_SECONDS_OR_NULL, cost=_SECONDS_OR_NULL), blocked={"type": "boolean"},
              reason={"type": ["string", "null"]}, gpu_pool={"type": "boolean"}, user={"type": "string"},
              origin=_ORIGIN_SCHEMA)
TASK_BUDGET = _obj("max_epochs", "epochs", "source", max_epochs={"type": ["integer", "null"]},
                   epochs={"type": ["integer", "null"]}, source={"enum": ["task", "service", "data size"]},
                   examples={"type": ["integer", "null"]})


# GET /tasks/{name}/profile (ControlLoop.profile; one plan per candidate, Costs.plan)
_RESOURCES = _obj("threads", "workers", "partitions", "device", "memory_bytes", threads={"type": "integer"},
                  workers={"type": "integer"}, partitions={"type": "integer"}, device={"type": "string"},
                  memory_bytes={"type": "integer"})
_PLAN = _obj("model", "engine", "predicted_seconds", "source", "resources", "cost", "goal", "feasible",
             model={"type": "string"}, engine={"type": "string", "description": "sklearn or torch"},
             predicted_seconds={"type": ["number", "null"], "description": "the selector's c_k in seconds"},
             source={"type": ["string", "null"], "description": "family, pooled, flops (the FLOPs proxy), or measured "
                     "(a user's own model: its last measured seconds), neutral (before it ran: the median "
                     "of the task's other arms)"},
             log_sd={"type": ["number", "null"]}, flops_seconds={"type": ["number", "null"]}, resources=_RESOURCES,
             cost={"type": "number"}, provisioned_by={"type": "string", "description": "profiler or flops"},
             goal={"type": "string", "description": "runtime or cost: what it minimizes"},
             feasible={"type": "boolean"}, note={"type": "string"})
PROFILE = _obj("task", "examples", "prices", "profiler", "candidates", task={"type": "string"},
               examples={"type": "integer", "minimum": 0},
               prices=_obj("cpu", "gb", "gpu", cpu={"type": "number"}, gb={"type": "number"}, gpu={"type": "number"}),
               profiler=_obj("records", "families", records={"type": "integer"}, families={
                   "type": "object", "additionalProperties": _obj(
                       "jobs", jobs={"type": "integer"}, source={"enum": ["family", "pooled", None]})}),
               candidates={"type": "array", "items": _PLAN})


USER_MODEL = _obj("name", "kind", "grid", "code", "limit", name={"type": "string"},
                  kind={"type": "string", "enum": ["estimator", "factory"]},
                  grid={"type": "object"}, code={"type": "string", "description": "blob digest"},
                  limit={"type": "number"}, size={"type": "integer"}, described={"type": "string"},
                  created_at={"type": "number"})


def spec() -> dict[str, Any]:
    task_paths = {
        "/tasks/{name}/budget": {
            "get": _op("The task's max_epochs (null: none set), the epochs its torch picks train now and where "
                       "they come from (task, service or data size)", params=[NAME], response=TASK_BUDGET),
            "put": _op("Set the task's max_epochs (1-1000; null: back to the default by data size): the most epochs "
                       "a pick's configs train; poor ones stop early (successive halving)", params=[NAME],
                       body={"type": "object", "properties": {"max_epochs": {"type": ["integer", "null"],
                                                                             "minimum": 1, "maximum": 1000}},
                             "required": ["max_epochs"], "additionalProperties": False},
                       response=TASK_BUDGET)},
        "/tasks/{name}": {"get": _op("A task with its latest version, job counts, its candidate models and its "
                                     "status (idle, training, blocked, no_data, no_candidates, cancelled)",
                                     params=[NAME], response={"$ref": "#/components/schemas/TaskStatus"}),
                           "delete": _op(
            "Delete the task with its versions, jobs, metrics, tags and the blobs no other task uses. It is "
            "cancelled first; 409 when its running jobs do not end within a minute (it stays cancelled). With id "
            "(and created_at), only the task of that name with that id (and creation time): another, the name "
            "declared again since, is 404, as is no task",
            params=[NAME, {"name": "id", "in": "query", "required": False, "schema": {"type": "integer"},
                           "description": "the task's id as the caller saw it: a delete sent again never deletes "
                                          "a task declared under the name since"},
                    {"name": "created_at", "in": "query", "required": False,
                     "schema": {"type": "string", "format": "date-time"},
                     "description": "the task's created_at as the caller saw it (a database from before schema 0004 "
                                    "may give a new task the id of a deleted one)"}],
            response=_obj("id", "name", "deleted", id={"type": "integer"}, name={"type": "string"},
                          deleted={"const": True}, versions={"type": "integer"}, jobs={"type": "integer"},
                          blobs_deleted={"type": "integer"}, bytes_freed={"type": "integer"}))},
        "/tasks/{name}/cancel": {"post": _op("Cancel the task: queued jobs are cancelled, running ones ignored", params=[NAME])},
        "/tasks/{name}/resume": {"post": _op("Undo a cancel", params=[NAME])},
        "/tasks/{name}/mute": {"put": _op(
            "Mute (true) or unmute (false) the task's notifications (improved, idle, failed, budget); read back "
            "as the task's 'muted'", params=[NAME],
            body={"type": "object", "properties": {"muted": {"type": "boolean"}}, "required": ["muted"],
                  "additionalProperties": False},
            response=_obj("name", "muted", name={"type": "string"}, muted={"type": "boolean"}))},
        "/tasks/{name}/feed": {"post": _op(
            "Add examples: a new dataset version (201), or the latest one (200) when the feed adds no row. mode "
            "'dedupe' (default) skips rows (input and label) the latest version holds, 'append' adds them again, "
            "'replace' makes a version of exactly the fed rows; new and duplicates count the fed rows that were "
            "not / were there; origin 'image files' (the client's feed of an image folder) marks the task as fed "
            "images read so (the model card's 'image files' step)", params=[NAME], ok=(200, 201),
            body=_obj("X", "y", X=ARRAY, y=ARRAY, mode={"enum": ["dedupe", "append", "replace", None]},
                      origin={"enum": ["image files", None]}),
            response={"allOf": [{"$ref": "#/components/schemas/Version"}, _obj(
                "created", "new", "duplicates", "mode", created={"type": "boolean"},
                new={"type": "integer", "minimum": 0}, duplicates={"type": "integer", "minimum": 0},
                mode={"enum": ["dedupe", "append", "replace"]})]})},
        "/tasks/{name}/refine": {"post": _op(
            "Turn examples on (keep) or off (drop): a new version (201), or the latest one (200) when that changes "
            "nothing", params=[NAME], ok=(200, 201),
            body={**_obj(keep=_or_null(INT_LIST), drop=_or_null(INT_LIST)),
                  "anyOf": [_given("keep", "array"), _given("drop", "array")]},
                                             response={"$ref": "#/components/schemas/Version"})},
        "/tasks/{name}/versions": {"get": _op("Dataset versions, oldest first", params=[NAME],
                                              response={"type": "array", "items": {"$ref": "#/components/schemas/Version"}})},
        "/tasks/{name}/examples": {"get": _op(
            "The active examples of a version (default latest), in example-id order, one page at a time: from "
            "position offset, at most limit rows and at most 8 MiB of arrays; next_offset starts the next page "
            "(null after the last)", params=[
                NAME, {"name": "version", "in": "query", "schema": {"type": "integer"}},
                {"name": "offset", "in": "query", "schema": {"type": "integer", "minimum": 0}},
                {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1}}],
            response=_obj(example_ids=ARRAY, X=ARRAY, y=ARRAY, offset={"type": "integer", "minimum": 0},
                          total={"type": "integer", "minimum": 0},
                          next_offset={"type": ["integer", "null"], "minimum": 0}))},
        "/tasks/{name}/jobs": {"get": _op("Training jobs, by id", params=[NAME],
                                          response={"type": "array", "items": {"$ref": "#/components/schemas/Job"}})},
        "/tasks/{name}/history": {"get": _op("Jobs with their per-epoch metrics", params=[NAME])},
        "/tasks/{name}/profile": {"get": _op(
            "The profiler's predicted seconds and the provisioner's chosen configuration and money cost of each "
            "candidate of the task, cheapest predicted first (docs/profiler.md); no candidates before the first "
            "feed", params=[NAME], response=PROFILE)},
        "/tasks/{name}/best": {"get": _op("The best model so far (404 before one exists)", params=[NAME],
                                          response=_obj(model={"type": "string"}, config={"type": "object"},
                                                        accuracy={"type": "number"}, dataset_version={"type": "integer"},
                                                        validation_size={"type": ["integer", "null"], "minimum": 0},
                                                        job_id={"type": "integer"}))},
        "/tasks/{name}/model": {"get": _download(_op(
            "The best model as a file, for its own runtime (no ease_jupyter needed): a zip of the model file "
            "(model.joblib, model.onnx or model.pt) and model_card.json; 400 bad_data (field format) for a format "
            "that does not exist or does not fit the model's engine, or format given more than once, 400 bad_data "
            "(field: the key) for any other query parameter, 409 no_model before the first model",
            params=[NAME, {"name": "format", "in": "query", "description": "default: joblib for a scikit-learn "
                           "model, torchscript for a torch model",
                           "schema": {"enum": ["joblib", "onnx", "torchscript", "state_dict"]}}], runs_model=True))},
        "/tasks/{name}/suspicion": {"get": _op(
            "Refine panel: per-example loss of the best finished model and disagreement of the top-k models on a "
            "version (default latest); 409 no_model before the first model", params=[
                NAME, {"name": "version", "in": "query", "schema": {"type": "integer"}},
                {"name": "k", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 50, "default": 5}}],
            response=_obj(version={"type": "integer"}, index=ARRAY, loss=ARRAY, disagreement=ARRAY, validation=ARRAY,
                          loss_kind={"enum": ["cross_entropy", "zero_one", "squared_error"]},
                          k={"type": "integer"},
                          model=_obj(job_id={"type": "integer"}, name={"type": "string"}, config={"type": "object"},
                                     accuracy={"type": "number"}, dataset_version={"type": "integer"}),
                          models={"type": "array", "items": _obj(job_id={"type": "integer"}, name={"type": "string"},
                                                                 accuracy={"type": "number"})}),
            runs_model=True)},
        "/tasks/{name}/infer": {"post": _op("Predict with the best model; class indices for classification",
                                            params=[NAME], body=_obj("X", X=ARRAY), response=_obj(predictions=ARRAY),
                                            runs_model=True)},
        "/tasks/{name}/provenance": {"get": _op("Provenance DAG edges (dataset versions and models)", params=[
            NAME, {"name": "direction", "in": "query", "schema": {"enum": ["backward", "forward", "all"]}}])},
        "/tasks/{name}/tags": {"get": _op("Metadata tags of the task", params=[NAME]),
                               "put": _op("Set tags (string keys and values; 'easeml.' is reserved); no body "
                                          "sets nothing", params=[NAME], body_required=False,
                                          body={"type": "object", "maxProperties": MAX_TAGS_PER_TASK,
                                                "additionalProperties": {"type": "string",
                                                                         "maxLength": MAX_TAG_VALUE_CHARS,
                                                                         "pattern": NO_CONTROL_CHARACTERS},
                                                "propertyNames": TAG_KEY},
                                          response={"type": "object", "additionalProperties": {"type": "string"}})},
    }
    paths = {
        "/health": {"get": _op("Liveness (no token needed): only {status: ok}, except that an admin also sees "
                               "the version, workers and WebSocket subscribers", public=True,
                               response=_obj("status", status={"enum": ["ok"]}, version={"type": "string"},
                                             workers={"type": "integer"}, subscribers={"type": "integer"},
                                             store={"$ref": "#/components/schemas/StoreStatus"}))},
        "/openapi.json": {"get": _op("This document (no token needed)", public=True)},
        "/whoami": {"get": _op("The caller")},
        "/users": {"get": _op("All users (admin)"),
                   "post": _op("Create a user; the token is returned only here (admin)", ok=201,
                               body=_obj("name", name=NAME_SCHEMA, admin={"type": "boolean"}),
                               response=_obj(name={"type": "string"}, token={"type": "string"}))},
        "/users/{name}": {"put": _op(
            "Settings of user {name} (admin), either or both: allow_user_models lets her add her own models "
            "(task.add_model) whatever the service's --allow-user-models; admin gives or takes a local account's "
            "admin rights, at her next request (400 naming admin for a hub user: her rights follow the hub; 409 "
            "for the caller's own rights). The answer holds the fields set", params=_USER_PARAMS,
            body={**_obj(allow_user_models={"type": "boolean"}, admin={"type": "boolean"}),
                  "minProperties": 1, "additionalProperties": False},
            response=_obj("name", name={"type": "string"}, allow_user_models={"type": "boolean"},
                          admin={"type": "boolean"})),
            "delete": _op(
                "Delete user {name} and everything of hers, for good (admin): each of her tasks as DELETE "
                "/tasks/{name} deletes one (a running job ends first; blobs another user also references stay), "
                "her uploads not fed yet, her notebook sessions, her budgets, caps and settings, her token, and her "
                "account. The counts are summed over her tasks (blobs_deleted and bytes_freed: what left her "
                "quota). 409 for the caller's own account, and when a job of hers still runs after a minute (what "
                "was deleted stays deleted; send it again). A hub user deleted here gets a new, empty account at "
                "her next login", params=_USER_PARAMS,
                response=_obj("id", "name", "origin", "deleted", "tasks", "versions", "jobs", "blobs_deleted",
                              "bytes_freed", id={"type": "integer"}, name={"type": "string"}, origin=_ORIGIN_SCHEMA,
                              deleted={"type": "boolean"}, tasks={"type": "integer"}, versions={"type": "integer"},
                              jobs={"type": "integer"}, blobs_deleted={"type": "integer"},
                              bytes_freed={"type": "integer"},
                              task_names={"type": "array", "items": {"type": "string"}},
                              uploads_deleted={"type": "integer"}, upload_bytes_freed={"type": "integer"},
                              notebooks_deleted={"type": "integer"}))},
        "/tasks/{name}/models": {
            "get": _op("The task's own models (user models), each with its kind, grid, code blob and time limit",
                       params=[NAME], response={"type": "array", "items": USER_MODEL}),
            "post": _op("Add a model of the caller's own as an arm of the task: a cloudpickled scikit-learn "
                        "estimator (kind estimator) or torch factory(input_shape, output_shape, **options) (kind "
                        "factory), base64, with its grid {option: [values]}. 403 unless the caller may add models "
                        "(--allow-user-models, or an admin's PUT /users/{name})", ok=201, params=[NAME],
                        body=_obj("name", "kind", "code", name=NAME_SCHEMA,
                                  kind={"type": "string", "enum": ["estimator", "factory"]},
                                  code={"type": "string", "format": "byte"},
                                  grid={"type": "object", "additionalProperties": {"type": "array"}},
                                  limit={"type": "number", "exclusiveMinimum": 0},
                                  described={"type": "string"}),
                        response=USER_MODEL)},
        "/users/{name}/budget": {
            "get": _op("User {name}'s compute budget, the cap on it, what she spent and whether she gets new picks "
                       "(admin)", params=_USER_PARAMS, response=BUDGET),
            "put": _op("Cap user {name}'s budget (admin): seconds, gpu_seconds, cost (>= 0) and a deadline (ISO 8601 "
                       "with a UTC offset, in the future); null clears one", params=_USER_PARAMS,
                       body=BUDGET_BODY, response=BUDGET)},
        "/budget": {
            "get": _op("The caller's compute budget: her limits, an admin's cap, what she spent (per device kind), "
                       "what is left and whether she gets new picks", response=BUDGET),
            "put": _op("Set the caller's own limits (at most an admin's cap): seconds of worker time, gpu_seconds, "
                       "a cost (in the service's price units) and a deadline after which she gets no new picks; null clears one", body=BUDGET_BODY,
                       response=BUDGET)},
        "/users/{name}/tokens": {"delete": _op(
            "Revoke the ease.ml token of local account {name} at once; its tasks stay (admin)",
            params=[{**NAME, "description": "user name (a local account)"}],
            response=_obj(id={"type": "integer"}, name={"type": "string"}, origin={"type": "string"},
                          revoked={"type": "boolean"}))},
        "/tasks": {"get": _op("The caller's tasks", response={"type": "array", "items": {"$ref": "#/components/schemas/Task"}}),
                   "post": _op("Create a task (201) or open an existing one with the same program (200); a new "
                               "task needs a program or both input and output shapes", ok=(200, 201),
                               body=TASK_BODY,
                               response={"$ref": "#/components/schemas/Task"})},
        **task_paths,
        "/leaderboard": {"get": _op("The best model of each of the caller's tasks")},
        "/uploads": {"post": _op("Start a chunked upload of .npy bytes: one array, or several one after another, "
                                 "each named by its offset and size", ok=201, response=_obj(id={"type": "string"}))},
        "/uploads/{id}": {
            "get": _op("Bytes received so far", params=[{"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}]),
            "delete": _op("Drop an upload that will not be fed (a feed or infer consumes its own)",
                          params=[{"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}],
                          response=_obj("id", "deleted", id={"type": "string"}, deleted={"type": "boolean"})),
            "put": {**_op("Append a chunk (raw bytes) at offset (default 0); 409 unless offset is the size so far",
                          params=[{"name": "id", "in": "path", "required": True, "schema": {"type": "string"}},
                                  {"name": "offset", "in": "query", "schema": {"type": "integer", "default": 0}}],
                          response=_obj("id", "size", id={"type": "string"}, size={"type": "integer"})),
                    "requestBody": {"content": {"application/octet-stream": {"schema": {"type": "string",
                                                                                        "format": "binary"}}}}},
        },
        "/scheduler": {"get": _op(
            "The scheduler view (any user): policy, HYBRID mode, the last decision and per-user progress; other users "
            "appear as 'user N' without task names unless the caller is an admin",
            response=_obj(policy={"type": "string"}, mode={"type": "string"},
                          last_decision={"$ref": "#/components/schemas/Decision"},
                          users={"type": "array", "items": _obj(
                              name={"type": "string"}, you={"type": "boolean"}, n_tasks={"type": "integer"},
                              tasks={"type": ["array", "null"], "items": {"type": "string"}},
                              running={"type": "integer"}, best_accuracy={"type": ["number", "null"]},
                              accuracy_loss={"type": ["number", "null"]},
                              compute_seconds={"type": "number"}, compute_share={"type": ["number", "null"]})},
                          running={"type": "integer"}, compute_seconds={"type": "number"}))},
        "/admin/progress": {"get": _op("Aggregate progress of all users and the control loop (admin)")},
        **notebooks.openapi_paths(),
        "/events": {"get": {
            "summary": "WebSocket of job/version/task/metrics events, and decision events for everyone (anonymised "
                       "like /scheduler); token in header or ?token=. No or an unknown token is 401, a token whose "
                       "user may not use the service (hub mode: no access scope) 403, a user with too many streams "
                       "open 429; a GET without a WebSocket upgrade is 426.",
            "responses": {"101": {"description": "Switching to the WebSocket protocol"},
                          "401": ERR, "403": ERR, "426": ERR, "429": ERR}}},
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "ease_jupyter scheduler service", "version": "1",
                 "description": "Multi-tenant, cost-aware model selection (ease.ml) as a JSON API. "
                                "Errors are {\"error\": {code, field, found, expected, message}}."},
        "servers": [{"url": "/api/v1"}],
        "security": [{"token": []}],
        "paths": paths,
        "components": {
            "securitySchemes": {"token": {"type": "apiKey", "in": "header", "name": "Authorization",
                                          "description": "'token <t>' or 'Bearer <t>'"}},
            "responses": {"Error": {"description": "An error naming the field at fault", "content": {
                "application/json": {"schema": _obj("error", error=_obj(
                    "code", "field", "found", "expected", "message", code={"type": "string"},
                    field={"type": ["string", "null"]}, found={}, expected={},
                    message={"type": "string"}))}}}},
            "schemas": {
                # A nested list, .npy bytes (Npy), or a 1-d array of strings as its values' UTF-8 bytes
                # and n + 1 offsets (each Npy); exactly one of them (arrays.py).
                "Array": {"oneOf": [{"type": "array"}, NPY, _only("strings", {
                    **_obj("utf8", "offsets", utf8=NPY, offsets=NPY), "additionalProperties": False})]},
                # base64 .npy bytes, a finished chunked upload, or the part of one that holds this array
                # (one upload carries many arrays of a request); exactly one of them.
                "Npy": {"oneOf": [_only("npy_b64", {"type": "string", "format": "byte"}),
                                  _only("upload", {"type": "string"}),
                                  {**_obj("upload", "offset", "size", upload={"type": "string"},
                                          offset={"type": "integer", "minimum": 0},
                                          size={"type": "integer", "minimum": 0}),
                                   "additionalProperties": False}]},
                "Task": _obj(id={"type": "integer"}, name={"type": "string"}, program={"type": "string"},
                             cancelled={"type": "boolean"}),
                "TaskStatus": {"allOf": [{"$ref": "#/components/schemas/Task"}, _obj(
                    "latest_version", "jobs", "idle", "arms", "candidates", "blocked", "status", "reason",
                    latest_version={"oneOf": [{"$ref": "#/components/schemas/Version"}, {"type": "null"}]},
                    jobs={"type": "object", "additionalProperties": {"type": "integer"}},
                    idle={"type": "boolean"}, arms={"type": "integer"}, candidates={"type": "integer"},
                    muted={"type": "boolean"},
                    blocked={"enum": ["store_unavailable", "storage_full", None]},
                    status={"enum": ["cancelled", "no_candidates", "no_data", "blocked", "training", "idle",
                                     "over_budget"]},
                    reason={"type": "string"})]},
                "StoreStatus": _obj("writable", writable={"type": "boolean"},
                                    blocked={"enum": ["store_unavailable", "storage_full", None]},
                                    since={"type": ["number", "string", "null"]}, message={"type": ["string", "null"]}),
                "Version": _obj(id={"type": "integer"}, number={"type": "integer"}, kind={"enum": ["feed", "refine"]},
                                parent_id={"type": ["integer", "null"]}, n_examples={"type": "integer"}),
                "Decision": {**_obj(user={"type": "string"}, task={"type": ["string", "null"]},
                                    model={"type": "string"}, phase={"type": "string"}, policy={"type": "string"},
                                    candidates={"type": ["array", "null"], "items": _obj(
                                        user={"type": "string"}, task={"type": ["string", "null"]},
                                        gap={"type": "number"})},
                                    decision={"type": "integer"}, job_id={"type": ["integer", "null"]},
                                    time={"type": "number"}), "type": ["object", "null"]},
                "Job": _obj(id={"type": "integer"}, model={"type": "string"}, config={"type": "object"},
                            status={"enum": ["queued", "running", "succeeded", "failed", "cancelled"]},
                            accuracy={"type": ["number", "null"]},
                            # the profiler's prediction before it ran, its source, and log(actual / predicted)
                            predicted_seconds={"type": ["number", "null"]},
                            source={"enum": ["family", "pooled", "flops", "measured", "neutral", None]},
                            log_error={"type": ["number", "null"]},
                            # of cost_seconds, what its profiling runs took (a new family's first job)
                            profiling_seconds={"type": ["number", "null"], "minimum": 0}),
            },
        },
    }
