"""Argument schemas in the plain JSON Schema subset the constrained decoder supports.

pydantic's own output uses `$ref`/`$defs`, titles and `format` keywords; the decoder wants
self-contained objects with `additionalProperties: false`, strings with patterns or enums,
and integers with bounds. Dates become a `YYYY-MM-DD` pattern.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

DATE_PATTERN = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$"
_DROPPED = {"title", "$defs"}


def arguments_schema(model: type[BaseModel]) -> dict[str, Any]:
    raw = model.model_json_schema()
    schema = _simplify(raw, raw.get("$defs", {}))
    schema.setdefault("properties", {})
    schema.setdefault("required", [])
    return schema


def _simplify(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_simplify(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        return _simplify(defs[node["$ref"].rsplit("/", 1)[-1]], defs)
    out = {key: _simplify(value, defs) for key, value in node.items() if key not in _DROPPED}
    if out.get("format") == "date":
        del out["format"]
        out["pattern"] = DATE_PATTERN
    if out.get("type") == "object":
        out["additionalProperties"] = False
    if "const" in out and "enum" not in out:
        out["enum"] = [out.pop("const")]
    return out
