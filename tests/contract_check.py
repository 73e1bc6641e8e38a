"""Holds traffic to the published contract: every answer and event a test's client sees is validated against
the OpenRPC document the gateway serves (gateway.api.openrpc), by a standard JSON Schema validator."""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator

from gateway.api.openrpc import document


class ContractCheck:
    def __init__(self) -> None:
        doc = document()
        components = {"components": doc["components"]}
        self.results = {m["name"]: Draft202012Validator({**m["result"]["schema"], **components})
                        for m in doc["methods"] if m["name"] != "rpc.discover"}
        self.event = Draft202012Validator({"$ref": "#/components/schemas/Event", **components})
        self.errors = doc["components"]["errors"]
        self.violations: list[str] = []

    def check_result(self, method: str, result: Any) -> None:
        validator = self.results.get(method)
        if validator is not None:
            self._record(f"{method} answer", validator, result)

    def check_event(self, params: Any) -> None:
        self._record("task.session.event", self.event, params)

    def check_error(self, method: str, code: int, data: Any) -> None:
        spec = self.errors.get(str(code))
        if spec is None:
            self.violations.append(f"{method}: error code {code} is not in the contract")
        elif "data" in spec and data is not None:
            self._record(f"{method} error {code} data", Draft202012Validator(spec["data"]), data)

    def _record(self, what: str, validator: Draft202012Validator, value: Any) -> None:
        error = next(iter(validator.iter_errors(value)), None)
        if error is not None:
            path = "/".join(str(p) for p in error.absolute_path)
            self.violations.append(f"{what} breaks the contract at /{path}: {error.message[:300]}")
