"""What each `resume_reason` of a session's status means to its user: the one copy of these words, for every frontend.

The CLI (`acp-gateway sessions`) shows them from here. The web UI is static files with no Python behind them and the
status view carries only the reason's code, so its copy, gateway/ui/resume_reasons.js, is generated from this table
(`python -m gateway.clients.resume_reasons`; tests/gateway/ui/test_resume_reasons.py fails while it is stale). The
reasons
themselves, and what a frontend should do for each, are docs/restore.md's.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

# reason -> its words; `agent_running` and `terminal_state` need none (no frontend says why nothing is needed).
RESUME_REASONS: dict[str, str] = {
    "agent_not_running": "the agent is not running; its ACP session was saved and can be restored",
    "agent_not_running_fresh_start": "the agent is not running and no ACP session was saved: a resume starts a "
                                     "fresh one",
    "not_started": "the agent has not been started",
    "stale_execution": "another gateway instance ran this session moments ago: wait",
    "error_recovery": "the last restore failed and kept the saved session",
}

UI_MODULE = Path(__file__).resolve().parent.parent / "ui" / "resume_reasons.js"


def resume_reason_words(reason: str) -> str:
    """The reason's words; an unknown reason (a newer gateway's) as its code."""
    return RESUME_REASONS.get(reason, reason)


def ui_module() -> str:
    """The text of gateway/ui/resume_reasons.js: the same table, as an ES module."""
    return ("// What each `resume_reason` of a session's status means to its user, in the web UI: generated from\n"
            "// gateway/clients/resume_reasons.py by `python -m gateway.clients.resume_reasons`: do not edit.\n"
            f"export const RESUME_REASONS = Object.freeze({json.dumps(RESUME_REASONS, indent=2)});\n")


if __name__ == "__main__":
    UI_MODULE.write_text(ui_module())
    print(f"wrote {UI_MODULE}", file=sys.stderr)
