"""GitHub's own descriptions, as the tests read them: the REST OpenAPI description and
the webhook schemas from the pinned npm packages in tests/reference."""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

REFERENCE = Path(__file__).resolve().parent / "reference" / "node_modules" / "@octokit"
OPENAPI = REFERENCE / "openapi" / "generated" / "api.github.com.deref.json"
WEBHOOK_SCHEMAS = REFERENCE / "webhooks-schemas" / "schema.json"


@cache
def openapi() -> dict[str, Any]:
    return json.loads(OPENAPI.read_text())


def as_json_schema(node: Any) -> Any:
    """OpenAPI 3.0's `nullable: true` becomes JSON Schema's null type."""
    if isinstance(node, list):
        return [as_json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: as_json_schema(value) for key, value in node.items()}
    titles = {part.get("title") for part in node.get("allOf", []) if isinstance(part, dict)}
    if titles == {"Simple User", "Enterprise"}:
        # A known quirk of the description: an installation's account is a user *or* an
        # enterprise (GitHub's docs say so), but the schema joins them with allOf.
        out["anyOf"] = out.pop("allOf")
    if node.get("nullable") is True:
        if isinstance(out.get("type"), str):
            out["type"] = [out["type"], "null"]
            if "enum" in out and None not in out["enum"]:
                out["enum"] = [*out["enum"], None]
        else:
            out = {"anyOf": [out, {"type": "null"}]}
    return out


def _shape(path: str) -> str:
    return re.sub(r"\{[^}]*\}", "{}", path)


def find_operation(spec: dict, route: str, method: str) -> tuple[str, dict] | None:
    """The described operation for a route template like /repos/{owner}/{repo}."""
    wanted = _shape(route)
    for path, item in spec["paths"].items():
        if _shape(path) == wanted and method.lower() in item:
            return path, item[method.lower()]
    return None


def check_exchange(spec: dict, route: str, exchange: dict) -> list[str]:
    """What in one recorded request and response the description does not allow."""
    where = f"{exchange['method']} {exchange['path']} -> {exchange['status']}"
    found = find_operation(spec, route, exchange["method"])
    if found is None:
        return [f"{where}: no such operation in the description"]
    _, operation = found
    problems = []
    responses = operation["responses"]
    status = str(exchange["status"])
    if status == "304" and exchange["method"] == "GET":
        # GitHub answers any GET sent with a current ETag 304 (its "conditional
        # requests"); the description lists 304 for only some operations.
        return problems
    if status not in responses and "default" not in responses:
        problems.append(f"{where}: status not documented ({sorted(responses)})")
    body_spec = (operation.get("requestBody") or {}).get("content", {}).get("application/json")
    if exchange["request"] is not None and body_spec:
        problems.extend(validate(where + " request", body_spec["schema"], exchange["request"]))
    content = (responses.get(status) or {}).get("content", {}).get("application/json")
    if exchange["response"] is not None and content and "schema" in content:
        problems.extend(validate(where + " response", content["schema"], exchange["response"]))
    return problems


def validate(where: str, schema: dict, instance: Any) -> list[str]:
    validator = jsonschema.Draft4Validator(as_json_schema(schema))
    return [f"{where}: {'/'.join(map(str, e.absolute_path))}: {e.message[:300]}"
            for e in validator.iter_errors(instance)]
