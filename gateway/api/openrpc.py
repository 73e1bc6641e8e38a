"""The OpenRPC document of the API, generated from `gateway.api.contract` and `gateway.errors`: served at
`/openrpc.json` and answered by `rpc.discover`."""

from __future__ import annotations

import functools
from typing import Any

from pydantic import BaseModel

from .. import __version__
from ..errors import ERROR_DATA, ERROR_MEANINGS
from .contract import METHODS, Event

REF = "#/components/schemas/{model}"

def _schema(model: type[BaseModel], schemas: dict[str, Any]) -> dict[str, Any]:
    """A reference to `model`'s schema, which goes (with the models it uses) into `schemas`."""
    schema = model.model_json_schema(ref_template=REF)
    schemas.update(schema.pop("$defs", {}))
    schemas[model.__name__] = schema
    return {"$ref": REF.format(model=model.__name__)}


def _error_data_schema(code: int) -> dict[str, Any]:
    shapes = ERROR_DATA.get(code)
    if not shapes:
        return {}
    return {"oneOf": [{"type": "object", "required": sorted(keys), "properties": {k: {} for k in sorted(keys)},
                       "additionalProperties": False} for keys in shapes]}


@functools.cache
def document() -> dict[str, Any]:
    schemas: dict[str, Any] = {}
    methods = []
    for name, spec in METHODS.items():
        params_schema = spec.params.model_json_schema(ref_template=REF)
        schemas.update(params_schema.pop("$defs", {}))
        required = set(params_schema.get("required", []))
        methods.append({
            "name": name,
            "summary": spec.summary,
            "paramStructure": "by-name",
            "params": [{"name": key, "required": key in required, "schema": prop}
                       for key, prop in params_schema.get("properties", {}).items()],
            "result": {"name": "result", "schema": _schema(spec.result, schemas) if spec.result else {"type": "null"}},
            "errors": [{"$ref": f"#/components/errors/{code}"} for code in sorted(ERROR_MEANINGS, reverse=True)
                       if code not in (-32700, -32600, -32601, -32001)],
        })
    methods.append({"name": "rpc.discover", "summary": "This document", "params": [],
                    "result": {"name": "OpenRPC document", "schema": {"type": "object"}}})
    _schema(Event, schemas)
    return {
        "openrpc": "1.3.2",
        "info": {"title": "ACP session gateway", "version": __version__,
                 "description": "JSON-RPC 2.0 over WebSocket at /rpc. Events arrive as `task.session.event` "
                                "notifications whose params are components/schemas/Event."},
        "servers": [{"name": "gateway", "url": "ws://127.0.0.1:8765/rpc"}],
        "methods": methods,
        "components": {
            "schemas": schemas,
            "errors": {str(code): {"code": code, "message": meaning, **(
                {"data": _error_data_schema(code)} if code in ERROR_DATA else {})}
                for code, meaning in ERROR_MEANINGS.items()},
        },
        "x-notifications": [{"name": "task.session.event", "params": {"$ref": REF.format(model="Event")}}],
    }
