// The web UI's pure state transitions: how the gateway's events fold into what the page keeps (no DOM, no window, no fetch).

export const TERMINAL = ["CANCELLED", "FAILED", "COMPLETED"];
export const RAW_KEEP = 500;  // raw events kept per session for the Raw pane
export const TERMINAL_SHOWN = 1 << 20;  // characters of one agent terminal's output kept on the page (the events carry 1 MiB)
// Updates that report the session's state, not its conversation (acp.models.STATE_UPDATE_KINDS): shown in the header
// (options, commands, usage), not in the transcript.
export const STATE_KINDS = ["available_commands_update", "usage_update", "current_mode_update", "config_option_update",
                            "session_info_update"];

// What the config of one session holds before the gateway says anything of it.
export function newConfig() { return { options: [], chosen: {}, unapplied: [], commands: [], usage: null }; }

// An opened session's transcript: its entries, the last journal id folded in (`through`), the events that arrived while
// its journal was read (`waiting`), and its agent terminals by id.
export function newLog() { return { entries: [], through: 0, loading: null, waiting: [], terminals: new Map() }; }

export function validEvent(p) {
  return !!p && typeof p === "object" && typeof p.type === "string" && (p.id === null || Number.isInteger(p.id))
         && !!p.data && typeof p.data === "object" && !Array.isArray(p.data);
}

// Every event of a session, kept raw (the newest RAW_KEEP) for the Raw pane. False for an event of no session.
export function keepRaw(raw, p) {
  if (!p.session_id) return false;
  if (!raw.has(p.session_id)) raw.set(p.session_id, []);
  const log = raw.get(p.session_id); log.push(p); if (log.length > RAW_KEEP) log.shift();
  return true;
}

// The permission requests and questions of each session still waiting for an answer (for the list's counts).
export function askingOf(asking, sid) { if (!asking.has(sid)) asking.set(sid, new Set()); return asking.get(sid); }

// The session list's part of an event, into `st` ({sessions, configs, logs, asking}): true when the list changed.
export function applyListEvent(st, p) {
  const sid = p.session_id, d = p.data;
  switch (p.type) {
    case "session_created": st.sessions.set(sid, d); if (d.config) st.configs.set(sid, d.config); return true;
    case "session_status": case "session_title":
      if (st.sessions.has(sid)) Object.assign(st.sessions.get(sid), d);
      // Whether it needs a resume, and why (what its badge says): a status from a gateway that does not say so
      // leaves no older answer behind, and the page goes by the state and whether the agent runs instead.
      if (p.type === "session_status" && st.sessions.has(sid) && !("needs_resume" in d)) {
        delete st.sessions.get(sid).needs_resume; delete st.sessions.get(sid).resume_reason;
      }
      return true;
    case "session_deleted": st.sessions.delete(sid); st.logs.delete(sid); st.asking.delete(sid); return true;
    case "permission_requested": case "elicitation_requested": askingOf(st.asking, sid).add(d.request_id); return true;
    case "permission_resolved": case "elicitation_resolved": askingOf(st.asking, sid).delete(d.request_id); return true;
    case "turn_ended": askingOf(st.asking, sid).clear(); return true;
    default: return false;
  }
}

// Whether an event is past what a transcript holds (events from the journal's read and the live stream may overlap;
// an event with no id, from history, always is).
export function isNew(log, p) { return p.id === null || p.id > log.through; }

// ---- the transcript: one function folds a session's events, in journal order, into what is shown ----
// `log` is the session's transcript (newLog), `c` its config (newConfig; needed only when touchesConfig). Returns what
// changed besides the transcript: "options" (the config bar), "state" (commands or usage: the bar and the palette), or
// null.
export function applyEvent(log, p, c) {
  if (p.id !== null && p.id > log.through) log.through = p.id;
  const t = log.entries, d = p.data || {}, ts = p.ts;
  let changed = null;
  switch (p.type) {
    case "session_update": {
      const u = d.update || {};
      if (STATE_KINDS.includes(u.sessionUpdate)) changed = noteState(c, u) ? "state" : null;
      else addUpdate(t, u, !!d.replay, ts);
      break;
    }
    case "session_config": configChanged(c, log, d, ts); changed = "options"; break;
    case "turn_started": t.push({ kind: "user", text: promptText(d.prompt), ts }); break;
    case "turn_ended":
      // A request of the turn that got no answer can get none now: the agent stopped waiting with the turn.
      for (const e of t) if ((e.kind === "permission" || e.kind === "elicitation") && !e.answer) e.expired = true;
      t.push({ kind: "turn", text: turnOutcome(d), failed: !d.stop_reason, ts });
      break;
    case "session_message": t.push({ kind: "notice", level: d.level || "warning", text: d.text, ts }); break;
    case "session_status":  // the session ended by a cancel: said once, where its conversation stops
      if (d.state !== "CANCELLED" || log.cancelled) return null;  // any other change of state is the header's
      log.cancelled = true;
      t.push({ kind: "notice", level: "info", text: "Session cancelled", ts });
      break;
    case "session_active_stage":
      if (d.stage === "launching") t.push({ kind: "notice", level: "info", text: "Starting the agent…", ts });
      break;
    case "permission_requested":
      if (p.id === null || t.some((e) => e.kind === "permission" && e.request_id === d.request_id)) break;  // a re-offer
      t.push({ kind: "permission", request_id: d.request_id, tool: d.tool_call || {}, options: d.options || [], ts });
      break;
    case "permission_resolved": {
      const card = t.find((e) => e.kind === "permission" && e.request_id === d.request_id);
      if (card) card.answer = d;
      break;
    }
    case "elicitation_requested":  // an agent's question: one card, however often it is offered
      if (t.some((e) => e.kind === "elicitation" && e.request_id === d.request_id)) break;
      t.push({ kind: "elicitation", ...d, ts });
      break;
    case "elicitation_resolved": {
      const card = t.find((e) => e.kind === "elicitation" && e.request_id === d.request_id);
      if (card) card.answer = d;
      break;
    }
    case "elicitation_completed": {
      const card = t.find((e) => e.kind === "elicitation" && e.elicitation_id === d.elicitation_id);
      if (card) card.completed = true;
      break;
    }
    default: return applyTerminalEvent(log, p);
  }
  for (let i = 0; i < t.length - 1; i++) t[i].open = false;
  return changed;
}

// An agent's terminal: shown inside the tool call that embeds it, else on its own where it started. Output and its
// exit are no new entry (the open message stays open); any other event type is not the transcript's.
function applyTerminalEvent(log, p) {
  const t = log.entries, d = p.data || {}, ts = p.ts;
  switch (p.type) {
    case "terminal_started":
      log.terminals.set(d.terminal_id, { command: d.command, cwd: d.cwd, text: "", exit: null });
      t.push({ kind: "terminal", id: d.terminal_id, ts });
      break;
    case "terminal_recorded":  // from history: its command and what it kept, at once
      log.terminals.set(d.terminal_id, { command: d.command, text: d.text, exit: { recorded: true } });
      t.push({ kind: "terminal", id: d.terminal_id, ts });
      break;
    case "terminal_output": {
      const term = log.terminals.get(d.terminal_id);
      if (term && term.text.length < TERMINAL_SHOWN) term.text += d.text || "";
      return null;
    }
    case "terminal_exited": {
      const term = log.terminals.get(d.terminal_id);
      if (term) term.exit = d;
      return null;
    }
    default: return null;
  }
  for (let i = 0; i < t.length - 1; i++) t[i].open = false;
  return null;
}

// Whether an event says something of a session's configuration (then applyEvent and applyConfig need its config).
export function touchesConfig(p) {
  const d = p.data || {};
  return p.type === "session_config" || (p.type === "session_update" && STATE_KINDS.includes((d.update || {}).sessionUpdate));
}

// What a session not opened keeps of its events: its options, commands and usage. Returns what changed, as applyEvent.
export function applyConfig(c, p) {
  const d = p.data || {};
  if (p.type === "session_config") { configChanged(c, null, d, p.ts); return "options"; }
  if (!touchesConfig(p)) return null;
  return noteState(c, d.update) ? "state" : null;
}

// A conversation update into the transcript `t`: message chunks join the open message of their kind, tool calls are
// one card updated in place, the plan is one entry replaced, and any other kind is kept as raw JSON.
export function addUpdate(t, u, replay, ts) {
  const kind = u.sessionUpdate, text = u.content && u.content.text;
  const last = t[t.length - 1];
  if (kind === "agent_message_chunk" || kind === "agent_thought_chunk" || (kind === "user_message_chunk" && replay)) {
    const k = kind === "agent_message_chunk" ? "agent" : kind === "agent_thought_chunk" ? "thought" : "user";
    if (last && last.kind === k && last.open && last.replay === replay) last.text += text || "";
    else t.push({ kind: k, text: text || "", open: true, replay, ts });
  } else if (kind === "tool_call" || kind === "tool_call_update") {
    let card = t.find((e) => e.kind === "tool" && e.id === u.toolCallId);
    if (!card) { card = { kind: "tool", id: u.toolCallId, title: "tool", status: "pending", replay, ts }; t.push(card); }
    for (const key of ["title", "kind", "status", "locations", "rawInput"]) if (u[key] != null) card[key === "kind" ? "toolKind" : key] = u[key];
    if (u.content != null) {
      card.output = contentText(u.content); card.diffs = (u.content || []).filter((c) => c.type === "diff");
      card.terminals = (u.content || []).filter((c) => c.type === "terminal").map((c) => c.terminalId);
    }
  } else if (kind === "plan") {
    const i = t.findIndex((e) => e.kind === "plan");
    const entry = { kind: "plan", entries: u.entries || [], replay, ts };
    if (i >= 0) t[i] = entry; else t.push(entry);
  } else {  // any other kind (kinds newer than this page): folded, as raw JSON
    t.push({ kind: "raw", label: kind || "update", json: u, replay, ts });
  }
}

// ---- what the agent offers, what was chosen: the session's configuration ----
// A state update into the config `c`: true when it changed something shown (commands, usage).
export function noteState(c, u) {
  if (u.sessionUpdate === "available_commands_update" && Array.isArray(u.availableCommands)) c.commands = u.availableCommands;
  else if (u.sessionUpdate === "usage_update") { const { sessionUpdate, ...usage } = u; c.usage = usage; }
  else return false;  // the options arrive as session_config, the gateway's account of them
  return true;
}

// The gateway's account of the options into the config `c`; with a transcript `log`, a change the agent made on its
// own is said in the conversation.
export function configChanged(c, log, d, ts) {
  const before = Object.fromEntries((log ? log.options || [] : []).map((o) => [o.id, o.currentValue]));
  Object.assign(c, { options: d.options || [], modes: d.modes, models: d.models, chosen: d.chosen || {}, unapplied: d.unapplied || [],
                    auth: d.auth || null, can_fork: !!d.can_fork });
  if (log) {  // the transcript's own account of the options (the view's may be newer than the event being folded)
    if (d.cause === "agent") {  // the agent changed it on its own: say so in the conversation
      const moved = (d.options || []).filter((o) => o.id in before && before[o.id] !== o.currentValue)
        .map((o) => `${o.name || o.id}: ${valueName(o, o.currentValue)}`);
      if (moved.length) log.entries.push({ kind: "notice", level: "info", text: `The agent changed ${moved.join(", ")}`, ts });
    }
    log.options = d.options || [];
  }
}

export function optionValues(o) {  // a select's values, groups flattened
  const out = [];
  for (const v of o.options || []) {
    if (v && Array.isArray(v.options)) for (const g of v.options) out.push(g); else if (v) out.push(v);
  }
  return out;
}

export function valueName(o, value) {
  if (o.type === "boolean") return value ? "on" : "off";
  const found = optionValues(o).find((v) => v.value === value);
  return found ? found.name || found.value : String(value);
}

export function turnOutcome(d) {
  if (d.stop_reason === "interrupted") return "turn interrupted: the gateway stopped before the agent answered";
  if (d.stop_reason) return `turn ended: ${d.stop_reason}`;
  return `turn failed: ${d.message || (d.error && d.error.message) || "the agent did not answer"}`;
}

export function promptText(blocks) { return (blocks || []).map((b) => b.text || `[${b.type}]`).join("\n"); }

export function contentText(c) {
  if (!c) return "";
  if (Array.isArray(c)) return c.map(contentText).join("");
  if (c.type === "content") return contentText(c.content);
  if (c.type === "text") return c.text || "";
  if (c.type === "diff") return "";
  return c.text || "";
}

// History entries as the events they were recorded from, for `applyEvent`.
export function historyEvents(entries) {
  const ev = (type, data, ts) => ({ id: null, type, data, ts });
  const open = new Map();
  return entries.map((e, i) => {
    if (e.kind === "user_message") return ev("turn_started", { prompt: [{ type: "text", text: e.content }] }, e.ts);
    if (e.kind === "agent_message") return ev("session_update", { update: { sessionUpdate: "agent_message_chunk", content: { type: "text", text: e.content } } }, e.ts);
    if (e.kind === "turn_interrupted") return ev("turn_ended", { stop_reason: "interrupted" }, e.ts);
    if (e.kind === "terminal") return ev("terminal_recorded", { terminal_id: `h${i}`, command: e.name, text: e.content }, e.ts);
    if (e.kind === "tool_call") { open.set(e.name, `h${i}`); return ev("session_update", { update: { sessionUpdate: "tool_call", toolCallId: `h${i}`, title: e.name, status: "pending" } }, e.ts); }
    if (e.kind === "tool_result") {
      const id = open.get(e.name) || `h${i}`; open.delete(e.name);
      return ev("session_update", { update: { sessionUpdate: "tool_call_update", toolCallId: id, title: e.name,
        status: e.content.startsWith("(failed)") ? "failed" : "completed", content: [{ type: "content", content: { type: "text", text: e.content } }] } }, e.ts);
    }
    return ev("unknown", {}, e.ts);
  });
}
