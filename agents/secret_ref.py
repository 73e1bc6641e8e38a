"""A value a profile names instead of writing it: the gateway's own environment variable or a file's content."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator


class SecretRef(BaseModel):
    """A profile's environment value named, not written: `{ env = "NAME" }` (the gateway's own environment variable
    NAME, given to this agent only) or `{ file = "/path" }` (the file's content, its last newline dropped), read at
    each launch. A reference that cannot be read leaves the variable unset."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    env: str | None = Field(default=None, min_length=1)
    file: str | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _one(self) -> SecretRef:
        if (self.env is None) == (self.file is None):
            raise ValueError("give exactly one of env or file")
        return self

    def resolve(self, base: Mapping[str, str]) -> str | None:
        if self.env is not None:
            return base.get(self.env)
        try:
            return Path(self.file or "").read_text().removesuffix("\n")
        except OSError:
            return None
