"""A tool's JSON Schema in the dialect Gemini's ``functionDeclarations`` accept.

Gemini's ``parameters`` field (and ``generationConfig.responseSchema``) takes
its ``Schema`` object: a subset of the OpenAPI 3.0 schema object. The
keywords it documents are kept: ``type``, ``format``, ``title``,
``description``, ``nullable``, ``enum``, ``items``, ``minItems``,
``maxItems``, ``properties``, ``required``, ``minProperties``,
``maxProperties``, ``minLength``, ``maxLength``, ``pattern``, ``example``,
``anyOf``, ``propertyOrdering``, ``default``, ``minimum``, ``maximum``.
The rest of JSON Schema is converted where there is an equivalent and
dropped otherwise:

- ``$ref`` into ``$defs``/``definitions`` is inlined (a reference back into
  itself, which the subset cannot express, becomes ``{"type": "object"}``
  with the definition's description);
- ``type: [T, "null"]`` is ``type: T, nullable: true``; an ``anyOf``/``oneOf``
  with a ``null`` member is its other members, ``nullable``; ``oneOf`` is
  ``anyOf``; a one-member ``anyOf`` is that member; ``allOf`` is merged;
- ``const`` is a one-value ``enum``; ``enum`` takes strings only, so an enum
  of other values is dropped and its values named in the ``description``;
- ``exclusiveMinimum``/``exclusiveMaximum`` (numbers) become ``minimum``/``maximum``;
- everything else (``additionalProperties``, ``$schema``, ``examples``,
  ``multipleOf``, ``uniqueItems``, ``not``, ...) is dropped: the model is
  told less, and the tool's own argument check still applies it.

An object with no properties is sent without them (Gemini refuses an empty
``properties``), and a tool that takes no arguments is declared without
``parameters``. The input schema is never changed (a copy is made).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

#: Keywords copied as they are (those the Schema object documents).
_KEEP = frozenset(
    {
        "format",
        "title",
        "description",
        "nullable",
        "minItems",
        "maxItems",
        "minProperties",
        "maxProperties",
        "minLength",
        "maxLength",
        "pattern",
        "example",
        "propertyOrdering",
        "default",
        "minimum",
        "maximum",
    }
)
_TYPES = frozenset({"string", "number", "integer", "boolean", "array", "object", "null"})
#: How deep a schema (and its inlined references) may nest before it is cut short.
MAX_DEPTH = 32


def gemini_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """``schema`` (JSON Schema) as a Gemini ``Schema`` object (see the module)."""
    defs: dict[str, Any] = {}
    for key in ("$defs", "definitions"):
        found = schema.get(key)
        if isinstance(found, Mapping):
            defs.update({f"#/{key}/{name}": value for name, value in found.items()})
    return _convert(schema, defs, (), 0)


def parameters_of(schema: Mapping[str, Any]) -> dict[str, Any] | None:
    """A function declaration's ``parameters``; ``None`` for a tool without arguments."""
    converted = gemini_schema(schema)
    if converted.get("type") == "object" and not converted.get("properties"):
        return None
    return converted


def _convert(
    node: Any, defs: Mapping[str, Any], seen: tuple[str, ...], depth: int
) -> dict[str, Any]:
    if not isinstance(node, Mapping) or depth > MAX_DEPTH:
        return {"type": "object"}
    ref = node.get("$ref")
    if isinstance(ref, str):
        target = defs.get(ref)
        if target is None or ref in seen:
            out: dict[str, Any] = {"type": "object"}
            described = target.get("description") if isinstance(target, Mapping) else None
            if isinstance(described, str):
                out["description"] = described
            return out
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _convert(merged, defs, (*seen, ref), depth + 1)
    if "allOf" in node and isinstance(node["allOf"], list):
        merged = {k: v for k, v in node.items() if k != "allOf"}
        for part in node["allOf"]:
            if isinstance(part, Mapping):
                part = _resolve(part, defs, seen)
                for key, value in part.items():
                    if key == "properties" and isinstance(merged.get("properties"), Mapping):
                        merged["properties"] = {**merged["properties"], **value}
                    elif key == "required" and isinstance(merged.get("required"), list):
                        merged["required"] = [*merged["required"], *value]
                    else:
                        merged.setdefault(key, value)
        return _convert(merged, defs, seen, depth + 1)

    out = {k: node[k] for k in _KEEP if k in node}
    nullable = bool(node.get("nullable"))
    kind = node.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        nullable = nullable or len(kinds) < len(kind)
        if len(kinds) == 1:
            kind = kinds[0]
        elif kinds:
            out["anyOf"] = [{"type": k} for k in kinds if k in _TYPES]
            kind = None
        else:
            kind = None
    if isinstance(kind, str) and kind in _TYPES and kind != "null":
        out["type"] = kind

    alternatives = node.get("anyOf", node.get("oneOf"))
    if isinstance(alternatives, list):
        members = [
            m for m in alternatives if not (isinstance(m, Mapping) and m.get("type") == "null")
        ]
        nullable = nullable or len(members) < len(alternatives)
        converted = [_convert(m, defs, seen, depth + 1) for m in members]
        if len(converted) == 1:
            for key, value in converted[0].items():
                out.setdefault(key, value)
        elif converted:
            out["anyOf"] = converted

    values = node.get("enum")
    if "const" in node:
        values = [node["const"]]
    if isinstance(values, list):
        if values and all(isinstance(v, str) for v in values):
            out["enum"] = list(values)
            out.setdefault("type", "string")
        elif values:
            if "type" not in out:
                found = {_json_type(v) for v in values}
                if len(found) == 1 and None not in found:
                    out["type"] = found.pop()
            listed = ", ".join(json.dumps(v) for v in values)
            text = out.get("description")
            out["description"] = f"{text} (one of: {listed})" if text else f"One of: {listed}"

    for exclusive, inclusive in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        bound = node.get(exclusive)
        if isinstance(bound, int | float) and not isinstance(bound, bool):
            out.setdefault(inclusive, bound)

    properties = node.get("properties")
    if isinstance(properties, Mapping) and properties:
        out["properties"] = {
            str(name): _convert(value, defs, seen, depth + 1) for name, value in properties.items()
        }
        required = node.get("required")
        if isinstance(required, list):
            named = [r for r in required if isinstance(r, str) and r in properties]
            if named:
                out["required"] = named
        out.setdefault("type", "object")
    items = node.get("items")
    if isinstance(items, Mapping):
        out["items"] = _convert(items, defs, seen, depth + 1)
        out.setdefault("type", "array")
    elif out.get("type") == "array":
        # A tuple (prefixItems) or an untyped array: Gemini needs items' schema.
        out["items"] = {"type": "string"} if items is None else {"type": "object"}
    if nullable:
        out["nullable"] = True
    if "type" not in out and "anyOf" not in out:
        out["type"] = "object" if "properties" in out else "string"
    return out


def _json_type(value: Any) -> str | None:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    return None


def _resolve(node: Mapping[str, Any], defs: Mapping[str, Any], seen: tuple[str, ...]) -> Any:
    ref = node.get("$ref")
    if isinstance(ref, str) and ref in defs and ref not in seen:
        target = defs[ref]
        return {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    return node


__all__ = ["gemini_schema", "parameters_of"]
