"""The reference agent's session configuration: its modes, models, config options and slash commands, and how a
set request is checked against them. Shapes of ACP v1 (config options, modes) and of the legacy `models` that
adapters in the wild still answer; which of them a session offers is the agent's `--config-style`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from acp.errors import INVALID_PARAMS, METHOD_NOT_FOUND, RpcError

MODES = (("ask", "Ask", "Asks before it changes anything"), ("code", "Code", "Writes and runs code"),
         ("plan", "Plan", "Plans; changes nothing"))
MODELS = (("ref-small", "Reference small", "Quick and cheap"), ("ref-large", "Reference large", "Slow and thorough"))
EFFORTS = ("low", "medium", "high")
DEFAULTS: dict[str, str | bool] = {"mode": "code", "model": "ref-small", "effort": "medium", "verbose": False}
STYLES = ("both", "options", "legacy", "none")

# The prompt commands of the agent (`commands.COMMANDS`), as ACP's available commands.
COMMANDS = (
    ("read", "Read a file through the client (fs/read_text_file)", "PATH [LINE [LIMIT]]"),
    ("write", "Write a file through the client (fs/write_text_file)", "PATH TEXT"),
    ("call", "Call any client method", "METHOD"),
    ("permission", "Ask the client for a permission", None),
    ("tool", "Report a tool call", "NAME [RESULT]"),
    ("stream", "Stream N chunks", "N"),
    ("gate", "Stream N chunks, the second half once the file PATH exists", "PATH N"),
    ("trickle", "Stream chunks a few milliseconds apart until the file PATH exists", "PATH"),
    ("hang", "Hang until cancelled", None),
    ("sleep", "Sleep S seconds", "S"),
    ("fail", "Fail this turn with an error", None),
    ("crash", "Exit in the middle of the turn", None),
    ("mode", "Switch this session's mode, as the agent's own decision", "ask | code | plan"),
    ("config", "Say the session's current mode, model, effort and verbosity", None),
    ("mcp", "Name the MCP servers this session was given", None),
    ("dirs", "Name this session's additional directories", None),
    ("recall", "Say the prompts this session remembers", None),
    ("work", "Write and read a file and run a command through the client, as far as it offers them", None),
)


@dataclass
class SessionOptions:
    """One session's configuration values, and what this process leaves out of its offer."""

    values: dict[str, str | bool] = field(default_factory=lambda: dict(DEFAULTS))
    dropped: frozenset[str] = frozenset()  # options not offered for this session (`--drop-option-after-restart`)


@dataclass(frozen=True)
class Catalogue:
    """What this agent process offers: by style, with or without booleans (the client's opt-in)."""

    style: str = "both"
    booleans: bool = False
    refused: frozenset[tuple[str, str]] = frozenset()  # (option, value) pairs refused although offered

    @property
    def has_options(self) -> bool:
        return self.style in ("both", "options")

    @property
    def has_modes(self) -> bool:
        return self.style in ("both", "legacy")

    @property
    def has_models(self) -> bool:
        return self.style == "legacy"

    def config_options(self, session: SessionOptions) -> list[dict[str, Any]]:
        values = session.values
        options = [
            _select("mode", "Mode", "mode", values["mode"], MODES),
            _select("model", "Model", "model", values["model"], MODELS),
            _select("effort", "Effort", "thought_level", values["effort"],
                    tuple((e, e.title(), None) for e in EFFORTS)),
        ]
        if self.booleans:
            options.append({"id": "verbose", "name": "Verbose", "description": "Explain every step",
                            "category": "_reference_output", "type": "boolean", "currentValue": values["verbose"]})
        return [o for o in options if o["id"] not in session.dropped]

    def offer(self, session: SessionOptions) -> dict[str, Any]:
        """The `modes` / `configOptions` / `models` of a session/new, load or resume answer."""
        answer: dict[str, Any] = {}
        if self.has_options:
            answer["configOptions"] = self.config_options(session)
        if self.has_modes and "mode" not in session.dropped:
            answer["modes"] = {"currentModeId": session.values["mode"],
                               "availableModes": [{"id": i, "name": n, "description": d} for i, n, d in MODES]}
        if self.has_models and "model" not in session.dropped:
            answer["models"] = {"currentModelId": session.values["model"],
                                "availableModels": [{"modelId": i, "name": n, "description": d}
                                                    for i, n, d in MODELS]}
        return answer

    def check(self, session: SessionOptions, option_id: str, value: Any, method: str) -> str | bool:
        """The value a set request may take, or the error a strict agent answers."""
        allowed = {"session/set_config_option": self.has_options, "session/set_mode": self.has_modes,
                   "session/set_model": self.has_models}[method]
        if not allowed:
            raise RpcError(METHOD_NOT_FOUND, f"Method not found: {method}")
        offered = {o["id"]: o for o in self.config_options(session)} if self.has_options else {}
        if method != "session/set_config_option":
            offered = {option_id: {"type": "select", "options": [{"value": v} for v, _, _ in
                                                                 (MODES if option_id == "mode" else MODELS)]}}
        option = offered.get(option_id)
        if option is None or option_id in session.dropped:
            raise RpcError(INVALID_PARAMS, f"Invalid params: unknown config option: {option_id}",
                           {"configId": option_id})
        if option["type"] == "boolean":
            if not isinstance(value, bool):
                raise RpcError(INVALID_PARAMS, f"Invalid params: {option_id} takes true or false")
        elif value not in {o["value"] for o in option["options"]}:
            raise RpcError(INVALID_PARAMS, f"Invalid params: invalid value for config option {option_id}: {value}")
        if (option_id, str(value).lower()) in self.refused:
            raise RpcError(INVALID_PARAMS, f"Invalid params: the reference agent refuses {option_id} = {value} "
                           "(--refuse-value)")
        return value  # type: ignore[no-any-return]


def _select(option_id: str, name: str, category: str, current: Any,
            entries: Iterable[tuple[str, str, str | None]]) -> dict[str, Any]:
    return {"id": option_id, "name": name, "category": category, "type": "select", "currentValue": current,
            "options": [{"value": v, "name": n, **({"description": d} if d else {})} for v, n, d in entries]}


def commands() -> list[dict[str, Any]]:
    return [{"name": name, "description": text, "input": {"hint": hint} if hint else None}
            for name, text, hint in COMMANDS]


def described(values: Mapping[str, Any]) -> str:
    return " ".join(f"{key}={str(values[key]).lower() if isinstance(values[key], bool) else values[key]}"
                    for key in DEFAULTS)
