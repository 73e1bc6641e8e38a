"""Validation of agent messages against the official ACP v1 JSON Schema (shipped in `acp/schema/`).

Each message an agent sends is checked against the definition for its role: the `*Response` of the
method it answers, the `*Request` or `*Notification` of the client method it calls, or `Error`.
Extension methods (names starting with `_`) are not in the schema and are not judged.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import orjson
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match


@dataclass(frozen=True)
class Violation:
    role: str  # "response to session/new", "notification session/update", ...
    path: str  # JSON path of the first violation, e.g. "$.result.stopReason"
    message: str

    def __str__(self) -> str:
        return f"{self.role}: {self.path}: {self.message}"


class AcpSchema:
    def __init__(self, schema: dict[str, Any]) -> None:
        self.defs: dict[str, Any] = schema["$defs"]
        self.agent_responses: dict[str, str] = {}
        self.client_requests: dict[str, str] = {}
        self.client_notifications: dict[str, str] = {}
        for name, body in self.defs.items():
            method, side = body.get("x-method"), body.get("x-side")
            if not method:
                continue
            if side == "agent" and name.endswith("Response"):
                self.agent_responses[method] = name
            elif side == "client" and name.endswith("Request"):
                self.client_requests[method] = name
            elif side in ("client", "protocol") and name.endswith("Notification"):
                # `$/cancel_request` is the protocol's own (x-side "protocol"): either peer may send it
                self.client_notifications[method] = name
        self._validators: dict[str, Draft202012Validator] = {}

    def validator(self, def_name: str) -> Draft202012Validator:
        if def_name not in self._validators:
            self._validators[def_name] = Draft202012Validator({"$ref": f"#/$defs/{def_name}", "$defs": self.defs})
        return self._validators[def_name]

    def _check(self, def_name: str, instance: Any, role: str, prefix: str) -> Violation | None:
        error = best_match(self.validator(def_name).iter_errors(instance))
        if error is None:
            return None
        path = prefix + error.json_path[1:]
        return Violation(role, path, error.message[:300])

    def check_from_agent(self, msg: dict[str, Any], answered_method: str | None = None) -> Violation | None:
        """Judge one message the agent sent. `answered_method` is the method of the request it answers."""
        method = msg.get("method")
        if isinstance(method, str):
            if method.startswith("_"):
                return None
            params = msg.get("params")
            if "id" in msg:
                def_name = self.client_requests.get(method)
                role = f"request {method}"
            else:
                def_name = self.client_notifications.get(method)
                role = f"notification {method}"
            if def_name is None:
                return Violation(role, "$.method", f"{method!r} is not a client method of ACP v1")
            return self._check(def_name, params, role, "$.params")
        if "error" in msg:
            return self._check("Error", msg["error"], f"error answer to {answered_method}", "$.error")
        if "result" in msg and answered_method is not None and not answered_method.startswith("_"):
            def_name = self.agent_responses.get(answered_method)
            if def_name is None:
                return None
            return self._check(def_name, msg["result"], f"response to {answered_method}", "$.result")
        return None


@cache
def acp_v1_schema() -> AcpSchema:
    data = (resources.files("acp") / "schema" / "v1" / "schema.json").read_bytes()
    return AcpSchema(orjson.loads(data))
