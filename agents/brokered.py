"""Brokered keys: a profile's model-API key the agent never holds. What a profile says (`[[brokered]]`), with the
presets for the APIs agents call; the gateway's proxy (`gateway.runtime.key_proxy`) adds the real key upstream.

The agent gets a base URL of the proxy (reached inside its sandbox through `gateway.runtime.key_relay`) in the
API's base-URL variable and a per-session stand-in in its key variable: its environment, its files and `/proc`
hold no real key, and a stand-in is worthless once its agent has exited.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agents.secret_ref import SecretRef

Api = Literal["anthropic", "openai", "gemini", "custom"]


@dataclass(frozen=True)
class Preset:
    """Where an API lives and how an agent is pointed at it: the upstream, the variables the agent reads its base
    URL and key from, the path its base URL ends with, and the header the key travels in (`authorization`:
    `Bearer KEY`)."""

    upstream: str
    base_url_var: str
    key_var: str
    base_path: str
    header: str


PRESETS: dict[str, Preset] = {
    # Claude Code and the Claude Agent SDK read ANTHROPIC_BASE_URL and send ANTHROPIC_API_KEY as x-api-key.
    "anthropic": Preset("https://api.anthropic.com", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "", "x-api-key"),
    # The OpenAI SDKs (Codex among their users) read OPENAI_BASE_URL, which ends in /v1, and send a bearer token.
    "openai": Preset("https://api.openai.com", "OPENAI_BASE_URL", "OPENAI_API_KEY", "/v1", "authorization"),
    # Gemini CLI reads GOOGLE_GEMINI_BASE_URL; the key goes as x-goog-api-key (or `?key=`, which the proxy takes too).
    "gemini": Preset("https://generativelanguage.googleapis.com", "GOOGLE_GEMINI_BASE_URL", "GEMINI_API_KEY", "",
                     "x-goog-api-key"),
}
HEADERS = ("authorization", "x-api-key", "x-goog-api-key", "api-key")  # where a stand-in may travel


class BrokeredKey(BaseModel):
    """One `[[brokered]]` entry of a profile: `api` names a preset (`custom`: give every field); any field given
    overrides the preset's."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    api: Api
    key: str | SecretRef = Field(union_mode="left_to_right")  # the real key, or where to read it at each launch
    upstream: str | None = None
    base_url_var: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    key_var: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    base_path: str | None = Field(default=None, pattern=r"^(/[A-Za-z0-9._~-]+)*$")
    header: Literal["authorization", "x-api-key", "x-goog-api-key", "api-key"] | None = None

    @model_validator(mode="after")
    def _complete(self) -> BrokeredKey:
        if self.api == "custom":
            missing = [n for n in ("upstream", "base_url_var", "key_var", "header") if getattr(self, n) is None]
            if missing:
                raise ValueError(f"api 'custom' needs {', '.join(missing)}")
        upstream = urlsplit(self.resolved().upstream)
        if upstream.scheme not in ("http", "https") or not upstream.hostname or upstream.username is not None \
                or upstream.query or upstream.fragment:
            raise ValueError(f"upstream {self.resolved().upstream!r}: an http(s) URL with a host, no user, query or "
                             "fragment")
        return self

    def resolved(self) -> Preset:
        """The preset with this entry's own fields over it."""
        base = PRESETS.get(self.api, Preset("", "", "", "", "authorization"))
        return Preset(self.upstream or base.upstream, self.base_url_var or base.base_url_var,
                      self.key_var or base.key_var, base.base_path if self.base_path is None else self.base_path,
                      self.header or base.header)

    def real_key(self, base: Mapping[str, str]) -> str | None:
        """The key itself (`base`: the gateway's environment, for a `{ env = … }` reference); None if unreadable."""
        return self.key.resolve(base) if isinstance(self.key, SecretRef) else self.key
