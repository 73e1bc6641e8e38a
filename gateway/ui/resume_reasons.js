// What each `resume_reason` of a session's status means to its user, in the web UI: generated from
// gateway/clients/resume_reasons.py by `python -m gateway.clients.resume_reasons`: do not edit.
export const RESUME_REASONS = Object.freeze({
  "agent_not_running": "the agent is not running; its ACP session was saved and can be restored",
  "agent_not_running_fresh_start": "the agent is not running and no ACP session was saved: a resume starts a fresh one",
  "not_started": "the agent has not been started",
  "stale_execution": "another gateway instance ran this session moments ago: wait",
  "error_recovery": "the last restore failed and kept the saved session"
});
