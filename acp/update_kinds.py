"""What kinds of `session/update` there are, as plain data: a client that only prints updates (the CLI's frontend)
needs it without the models of `acp/models.py` (pydantic)."""

from __future__ import annotations

# `session/update` kinds that report the session's state (its commands, usage, configuration, title) rather than
# its conversation: not replayed history, not a turn going on.
STATE_UPDATE_KINDS = frozenset({"available_commands_update", "usage_update", "current_mode_update",
                                "config_option_update", "session_info_update"})
