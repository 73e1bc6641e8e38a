"""The part of orjson the agent host uses (`dumps`, `loads`, `JSONDecodeError`), from the standard library: a host
shipped to a machine that has Python 3 and nothing else (`shipping.py`) runs on it. Slower than orjson; the host
uses orjson wherever it is installed."""

from __future__ import annotations

import json
from typing import Any

JSONDecodeError = json.JSONDecodeError


def dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    return json.loads(bytes(data) if isinstance(data, memoryview) else data)
