"""The API's OpenAPI 3.1 description, made from the route declarations and their pydantic
models, at `/api/openapi.json`."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from pydantic import BaseModel

from app.web import access
from app.web.api.calls import ROUTES, Call, Route, ok, route


@route("GET", "/api/openapi.json", None, "This description (no token needed)")
async def openapi_json(call: Call) -> web.Response:
    return ok(describe())


def describe() -> dict:
    """OpenAPI 3.1 from the route declarations and their pydantic models."""
    components: dict[str, Any] = {}

    def ref(model: type[BaseModel]) -> dict:
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        components.update(schema.pop("$defs", {}))
        components[model.__name__] = schema
        return {"$ref": f"#/components/schemas/{model.__name__}"}

    paths: dict[str, dict] = {}
    for r in ROUTES:
        op: dict[str, Any] = {
            "operationId": r.handler.__name__,
            "summary": r.summary,
            "description": (f"Needs scope `{r.scope}` ({access.SCOPE_MEANING[r.scope]})."
                            if r.scope else "Needs no token."),
            "x-hangar-scope": r.scope,
            "security": [{"bearer": [r.scope]}] if r.scope else [],
            "parameters": [
                {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
                for name in _path_params(r.path)
            ],
            "responses": _responses(r),
        }
        if r.query is not None:
            for name, schema in r.query.model_json_schema()["properties"].items():
                op["parameters"].append({"name": name, "in": "query", "required": False,
                                         "schema": schema})
        if r.body is not None:
            op["requestBody"] = {"required": True,
                                 "content": {"application/json": {"schema": ref(r.body)}}}
        paths.setdefault(r.path, {})[r.method.lower()] = op
    return {
        "openapi": "3.1.0",
        "info": {"title": "hangar", "version": "1",
                 "description": "Work on GitHub issues with coding agents, through the same "
                                "rows and rules as `/hangar` comments. No call approves."},
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


def _path_params(path: str) -> list[str]:
    return [part[1:-1] for part in path.split("/") if part.startswith("{")]


def _responses(r: Route) -> dict:
    error = {"content": {"application/json": {"schema": {
        "type": "object", "properties": {"error": {"type": "string"}}, "required": ["error"]}}}}
    answers: dict[str, Any] = {str(r.success): {
        "description": "accepted: the engine takes the intent" if r.success == 202 else "done"}}
    if r.scope is None:
        return answers
    answers["401"] = {"description": "no token or an unknown one", **error}
    answers["403"] = {"description": f"the token lacks scope {r.scope}", **error}
    answers["404"] = {"description": "no such row (or repository, issue); the reason", **error}
    if r.conflicts:
        answers["409"] = {"description": "it cannot be done as things stand; the reason",
                          **error}
    if r.body is not None or r.query is not None:
        answers["422"] = {"description": "the body or query does not fit; the reason", **error}
    answers["503"] = {"description": "the API is off: no token is configured", **error}
    return answers
