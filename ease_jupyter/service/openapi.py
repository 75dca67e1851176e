"""The OpenAPI 3 description of /api/v1, written by hand.

``tests/service/test_openapi.py`` checks that every route of the app appears
here with the same methods, so the two cannot drift apart.
"""

from __future__ import annotations

from typing import Any

ERR = {"$ref": "#/components/responses/Error"}
NAME = {"name": "name", "in": "path", "required": True, "schema": {"type": "string", "pattern": "^[A-Za-z0-9_.-]{1,64}$"},
        "description": "task name (no '..')"}
ARRAY = {"$ref": "#/components/schemas/Array"}


def _op(summary: str, *, body: dict | None = None, ok: int = 200, params: list | None = None,
        response: dict | None = None, public: bool = False) -> dict[str, Any]:
    op: dict[str, Any] = {
        "summary": summary,
        "responses": {str(ok): {"description": "OK", "content": {"application/json": {"schema": response or {}}}},
                      "400": ERR, "401": ERR, "404": ERR, "409": ERR, "413": ERR},
    }
    if params:
        op["parameters"] = params
    if body is not None:
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": body}}}
    if public:
        op["security"] = []
    return op


def _obj(**props: Any) -> dict[str, Any]:
    return {"type": "object", "properties": props}


def spec() -> dict[str, Any]:
    task_paths = {
        "/tasks/{name}": {"get": _op("A task with its latest version, job counts and whether it is idle", params=[NAME],
                                     response={"$ref": "#/components/schemas/Task"})},
        "/tasks/{name}/cancel": {"post": _op("Cancel the task: queued jobs are cancelled, running ones ignored", params=[NAME])},
        "/tasks/{name}/resume": {"post": _op("Undo a cancel", params=[NAME])},
        "/tasks/{name}/feed": {"post": _op("Add examples: a new dataset version", params=[NAME], ok=201,
                                           body=_obj(X=ARRAY, y=ARRAY), response={"$ref": "#/components/schemas/Version"})},
        "/tasks/{name}/refine": {"post": _op("Turn examples on (keep) or off (drop): a new version", params=[NAME], ok=201,
                                             body=_obj(keep={"type": "array", "items": {"type": "integer"}},
                                                       drop={"type": "array", "items": {"type": "integer"}}),
                                             response={"$ref": "#/components/schemas/Version"})},
        "/tasks/{name}/versions": {"get": _op("Dataset versions, oldest first", params=[NAME],
                                              response={"type": "array", "items": {"$ref": "#/components/schemas/Version"}})},
        "/tasks/{name}/examples": {"get": _op("The active examples of a version (default latest)", params=[
            NAME, {"name": "version", "in": "query", "schema": {"type": "integer"}}],
            response=_obj(example_ids=ARRAY, X=ARRAY, y=ARRAY))},
        "/tasks/{name}/jobs": {"get": _op("Training jobs, by id", params=[NAME],
                                          response={"type": "array", "items": {"$ref": "#/components/schemas/Job"}})},
        "/tasks/{name}/history": {"get": _op("Jobs with their per-epoch metrics", params=[NAME])},
        "/tasks/{name}/best": {"get": _op("The best model so far (404 before one exists)", params=[NAME],
                                          response=_obj(model={"type": "string"}, config={"type": "object"},
                                                        accuracy={"type": "number"}, dataset_version={"type": "integer"},
                                                        job_id={"type": "integer"}))},
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
                                                                 accuracy={"type": "number"})}))},
        "/tasks/{name}/infer": {"post": _op("Predict with the best model; class indices for classification",
                                            params=[NAME], body=_obj(X=ARRAY), response=_obj(predictions=ARRAY))},
        "/tasks/{name}/provenance": {"get": _op("Provenance DAG edges (dataset versions and models)", params=[
            NAME, {"name": "direction", "in": "query", "schema": {"enum": ["backward", "forward", "all"]}}])},
        "/tasks/{name}/tags": {"get": _op("Metadata tags of the task", params=[NAME]),
                               "put": _op("Set tags (string keys and values; 'easeml.' is reserved)", params=[NAME],
                                          body={"type": "object", "additionalProperties": {"type": "string"}})},
    }
    paths = {
        "/health": {"get": _op("Liveness (no token needed)", public=True)},
        "/openapi.json": {"get": _op("This document (no token needed)", public=True)},
        "/whoami": {"get": _op("The caller")},
        "/users": {"get": _op("All users (admin)"),
                   "post": _op("Create a user; the token is returned only here (admin)", ok=201,
                               body=_obj(name={"type": "string"}, admin={"type": "boolean"}),
                               response=_obj(name={"type": "string"}, token={"type": "string"}))},
        "/tasks": {"get": _op("The caller's tasks", response={"type": "array", "items": {"$ref": "#/components/schemas/Task"}}),
                   "post": _op("Create a task (201) or open an existing one with the same program (200)", ok=201,
                               body=_obj(name={"type": "string"}, program={"type": "string"},
                                         input={"type": "array", "items": {"type": "integer"}},
                                         output={"type": "array", "items": {"type": "integer"}}))},
        **task_paths,
        "/leaderboard": {"get": _op("The best model of each of the caller's tasks")},
        "/uploads": {"post": _op("Start a chunked upload of .npy bytes", ok=201, response=_obj(id={"type": "string"}))},
        "/uploads/{id}": {
            "get": _op("Bytes received so far", params=[{"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}]),
            "put": {**_op("Append a chunk (raw bytes) at offset", params=[
                {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}},
                {"name": "offset", "in": "query", "required": True, "schema": {"type": "integer"}}]),
                "requestBody": {"content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}},
        },
        "/scheduler": {"get": _op(
            "The scheduler view (any user): policy, HYBRID mode, the last decision and per-user progress; other users "
            "appear as 'user N' without task names unless the caller is an admin",
            response=_obj(policy={"type": "string"}, mode={"type": "string"},
                          last_decision={"$ref": "#/components/schemas/Decision"},
                          users={"type": "array", "items": _obj(
                              name={"type": "string"}, you={"type": "boolean"}, n_tasks={"type": "integer"},
                              tasks={"type": "array", "items": {"type": "string"}, "nullable": True},
                              running={"type": "integer"}, best_accuracy={"type": "number", "nullable": True},
                              accuracy_loss={"type": "number", "nullable": True},
                              compute_seconds={"type": "number"}, compute_share={"type": "number", "nullable": True})},
                          running={"type": "integer"}, compute_seconds={"type": "number"}))},
        "/admin/progress": {"get": _op("Aggregate progress of all users and the control loop (admin)")},
        "/events": {"get": _op("WebSocket of job/version/task/metrics events, and decision events for everyone "
                                "(anonymised like /scheduler); token in header or ?token=", ok=101)},
    }
    return {
        "openapi": "3.0.3",
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
                "application/json": {"schema": _obj(error=_obj(code={"type": "string"}, field={"type": "string"},
                                                                found={}, expected={}, message={"type": "string"}))}}}},
            "schemas": {
                "Array": {"oneOf": [{"type": "array"}, _obj(npy_b64={"type": "string"}), _obj(upload={"type": "string"})]},
                "Task": _obj(id={"type": "integer"}, name={"type": "string"}, program={"type": "string"},
                             cancelled={"type": "boolean"}),
                "Version": _obj(id={"type": "integer"}, number={"type": "integer"}, kind={"enum": ["feed", "refine"]},
                                parent_id={"type": "integer", "nullable": True}, n_examples={"type": "integer"}),
                "Decision": {**_obj(user={"type": "string"}, task={"type": "string", "nullable": True},
                                    model={"type": "string"}, phase={"type": "string"}, policy={"type": "string"},
                                    candidates={"type": "array", "nullable": True, "items": _obj(
                                        user={"type": "string"}, task={"type": "string", "nullable": True},
                                        gap={"type": "number"})},
                                    decision={"type": "integer"}, job_id={"type": "integer", "nullable": True},
                                    time={"type": "number"}), "nullable": True},
                "Job": _obj(id={"type": "integer"}, model={"type": "string"}, config={"type": "object"},
                            status={"enum": ["queued", "running", "succeeded", "failed", "cancelled"]},
                            accuracy={"type": "number", "nullable": True}),
            },
        },
    }
