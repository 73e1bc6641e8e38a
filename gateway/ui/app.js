// The gateway's web UI: the owner-session client (the same rules as gateway/client_policy.py) and its rendering.
"use strict";

// ---- the client's rules: the numbers of gateway/client_policy.py ----
const RECONCILE_INTERVAL = 60000, RECONCILE_JITTER = 15000, HEALTH_SAMPLE = 5000, DEGRADED_AFTER = 9,
      MALFORMED_LIMIT = 5, BACKOFF_BASE = 500, BACKOFF_CAP = 30000, ALREADY_TERMINAL = -32009, RESYNC = -32012,
      RAW_KEEP = 500;
const backoff = (attempt) => Math.min(BACKOFF_CAP, BACKOFF_BASE * 2 ** Math.min(attempt, 30)) * (0.5 + Math.random() / 2);
const TERMINAL = ["CANCELLED", "FAILED", "COMPLETED"];
// Updates that report the session's state, not its conversation (acp.models.STATE_UPDATE_KINDS): shown in the header
// (options, commands, usage), not in the transcript.
const STATE_KINDS = ["available_commands_update", "usage_update", "current_mode_update", "config_option_update",
                     "session_info_update"];
const REASONS = {
  agent_not_running: "the agent is not running; its ACP session was saved and can be restored",
  agent_not_running_fresh_start: "the agent is not running and no ACP session was saved: a resume starts a fresh one",
  not_started: "the agent has not been started",
  stale_execution: "another gateway instance ran this session moments ago: wait",
  error_recovery: "the last restore failed and kept the saved session",
};

const params = new URLSearchParams(location.search);
if (params.get("token")) { sessionStorage.setItem("acp-token", params.get("token")); history.replaceState(null, "", location.pathname); }
const $ = (id) => document.getElementById(id);
const el = (tag, cls, text) => { const e = document.createElement(tag); if (cls) e.className = cls; if (text != null) e.textContent = text; return e; };
const clock = (ts) => new Date(ts * 1000).toLocaleTimeString();

const state = { token: sessionStorage.getItem("acp-token") || "", ws: null, live: false, everLive: false, nextId: 1,
  pending: new Map(), cursor: null, sessions: new Map(), statuses: new Map(), viewed: null, resumedViews: new Set(),
  misses: 0, malformed: 0, attempt: 0, transcripts: new Map(), raw: new Map(), agents: new Map(), reconcileTimer: null,
  showRaw: false, configs: new Map(), palette: { items: [], active: 0 } };
window.__acpGateway = state;  // for debugging in the console

// ---- the connection ----
function call(method, params = {}) {
  return new Promise((resolve, reject) => {
    if (!state.ws || state.ws.readyState !== WebSocket.OPEN) { reject({ code: -1, message: "not connected" }); return; }
    const id = state.nextId++;
    state.pending.set(id, { resolve, reject });
    state.ws.send(JSON.stringify({ jsonrpc: "2.0", id, method, params }));
  });
}

function setHealth(kind, text) { const s = $("stream"); s.dataset.health = kind; s.textContent = text; }

function askToken(reason) {
  state.ws = null; setHealth("refused", "not connected");
  $("login-reason").textContent = reason; $("login").hidden = false; $("token").focus();
}

async function tokenRefused() {
  try { const r = await fetch("/whoami", { headers: { Authorization: `Bearer ${state.token}` } }); return r.status === 401; }
  catch { return false; }  // the gateway is down: keep trying
}

function connect() {
  if (!state.token) { askToken("This page needs the gateway's token."); return; }
  const proto = location.protocol === "https:" ? "wss:" : "ws:";
  const ws = new WebSocket(`${proto}//${location.host}/rpc?token=${encodeURIComponent(state.token)}`);
  state.ws = ws;
  ws.onopen = async () => {
    state.attempt = 0;
    try {
      await reconcile(); await subscribe();
      state.live = true; state.everLive = true; state.misses = 0; setHealth("live", "live");
      if (!state.agents.size) await loadInfo();
      if (state.viewed) await openView(state.viewed, true); else renderHead();
    } catch (e) { ws.close(); }
  };
  ws.onmessage = (m) => {
    let msg; try { msg = JSON.parse(m.data); } catch { noteMalformed(); return; }
    for (const item of Array.isArray(msg) ? msg : [msg]) {
      if (item && item.id != null && state.pending.has(item.id)) {
        const p = state.pending.get(item.id); state.pending.delete(item.id);
        item.error ? p.reject(item.error) : p.resolve(item.result);
      } else if (item && item.method === "task.session.event") { handleEvent(item.params); }
      else { noteMalformed(); }
    }
  };
  ws.onclose = async () => {
    const wasLive = state.live;
    state.live = false;
    for (const p of state.pending.values()) p.reject({ code: -1, message: "connection closed" });
    state.pending.clear();
    if (state.ws !== ws) return;
    if (!wasLive && await tokenRefused()) { askToken("The gateway refused this token: enter the right one."); return; }
    if (state.misses < DEGRADED_AFTER) setHealth("reconnecting", "reconnecting…");
    renderHead();  // what is shown is the last known state until the gateway answers again
    setTimeout(connect, backoff(state.attempt++));
  };
}

$("login-form").onsubmit = (ev) => {
  ev.preventDefault();
  state.token = $("token").value.trim(); sessionStorage.setItem("acp-token", state.token);
  $("login").hidden = true; setHealth("reconnecting", "connecting…"); connect();
};

async function subscribe() {
  try { await call("task.session.subscribe", state.cursor == null ? { batch: true } : { since: state.cursor, batch: true }); }
  catch (e) { if (e.code !== RESYNC) throw e; await reconcile(true); await call("task.session.subscribe", { since: state.cursor, batch: true }); }
}

async function reconcile(resync = false) {
  const sessions = new Map(); let cursor = null, eventCursor = null;
  do {
    const page = await call("task.session.list", cursor ? { limit: 500, cursor } : { limit: 500 });
    if (eventCursor == null) eventCursor = page.event_cursor;
    for (const s of page.sessions) sessions.set(s.session_id, s);
    cursor = page.next_cursor;
  } while (cursor);
  state.sessions = sessions;
  if (state.cursor == null || resync) state.cursor = eventCursor;
  renderList(); renderHead();
}

async function loadInfo() {
  const info = await call("gateway.info");
  $("owner").textContent = `owner: ${info.owner}`;
  $("agent").replaceChildren();
  for (const a of info.agents) {
    state.agents.set(a.id, a);
    const o = el("option", "", `${a.name || a.id}${a.command_found ? "" : " (not installed)"}`); o.value = a.id; $("agent").append(o);
  }
  $("agent").value = info.default_agent;
}

function scheduleReconcile() {
  clearTimeout(state.reconcileTimer);
  state.reconcileTimer = setTimeout(async () => { if (state.live) { try { await reconcile(); } catch {} } scheduleReconcile(); },
                                    RECONCILE_INTERVAL + RECONCILE_JITTER * Math.random());
}

setInterval(() => {
  state.misses = state.live ? 0 : state.misses + 1;
  if (state.misses >= DEGRADED_AFTER && $("login").hidden) setHealth("degraded", "stream degraded: reconnecting");
}, HEALTH_SAMPLE);

function noteMalformed() {
  if (++state.malformed >= MALFORMED_LIMIT) { state.malformed = 0; if (state.live) reconcile().catch(() => {}); }
}

function validEvent(p) {
  return p && typeof p === "object" && typeof p.type === "string" && (p.id === null || Number.isInteger(p.id))
         && p.data && typeof p.data === "object" && !Array.isArray(p.data);
}

// ---- events into transcripts ----
function transcript(sid) { if (!state.transcripts.has(sid)) state.transcripts.set(sid, []); return state.transcripts.get(sid); }

function keepRaw(p) {
  if (!p.session_id) return;
  if (!state.raw.has(p.session_id)) state.raw.set(p.session_id, []);
  const log = state.raw.get(p.session_id); log.push(p); if (log.length > RAW_KEEP) log.shift();
  if (p.session_id === state.viewed && state.showRaw) renderRaw();
}

function handleEvent(p) {
  if (!validEvent(p)) { noteMalformed(); return; }
  if (p.id !== null) { if (state.cursor != null && p.id <= state.cursor) return; state.cursor = p.id; }
  keepRaw(p);
  const sid = p.session_id, d = p.data;
  switch (p.type) {
    case "session_created": state.sessions.set(sid, d); if (d.config) state.configs.set(sid, d.config); renderList(); break;
    case "session_status": case "session_title":
      if (state.sessions.has(sid)) Object.assign(state.sessions.get(sid), d);
      renderList();
      if (sid === state.viewed) { renderHead(); if (p.type === "session_status") refreshStatus().catch(() => {}); }
      break;
    case "session_deleted": state.sessions.delete(sid); if (state.viewed === sid) state.viewed = null; renderList(); renderHead(); break;
    case "session_update":
      if (STATE_KINDS.includes((d.update || {}).sessionUpdate)) noteState(sid, d.update, !!d.replay);
      else addUpdate(sid, d.update || {}, !!d.replay, p.ts);
      break;
    case "session_config": configChanged(sid, d, p.ts); break;
    case "turn_started": addEntry(sid, { kind: "user", text: promptText(d.prompt), ts: p.ts }); break;
    case "turn_ended": addEntry(sid, { kind: "turn", text: turnOutcome(d), ts: p.ts }); break;
    case "session_message": addEntry(sid, { kind: "notice", level: d.level || "warning", text: d.text, ts: p.ts }); break;
    case "permission_requested": addPermission(sid, d, p.ts); break;
    case "permission_resolved": resolvePermission(sid, d); break;
  }
}

// ---- what the agent offers, what was chosen: the session's configuration ----
function config(sid) {
  if (!state.configs.has(sid)) state.configs.set(sid, { options: [], chosen: {}, unapplied: [], commands: [], usage: null });
  return state.configs.get(sid);
}

function optionValues(o) {  // a select's values, groups flattened
  const out = [];
  for (const v of o.options || []) {
    if (v && Array.isArray(v.options)) for (const g of v.options) out.push(g); else if (v) out.push(v);
  }
  return out;
}

function noteState(sid, u, replay) {
  const c = config(sid);
  if (u.sessionUpdate === "available_commands_update" && Array.isArray(u.availableCommands)) c.commands = u.availableCommands;
  else if (u.sessionUpdate === "usage_update") { const { sessionUpdate, ...usage } = u; c.usage = usage; }
  else return;  // the options arrive as session_config, the gateway's account of them
  if (sid === state.viewed) { renderConfig(); updatePalette(); }
}

function configChanged(sid, d, ts) {
  const c = config(sid);
  const before = Object.fromEntries((c.options || []).map((o) => [o.id, o.currentValue]));
  Object.assign(c, { options: d.options || [], modes: d.modes, models: d.models, chosen: d.chosen || {}, unapplied: d.unapplied || [] });
  if (d.cause === "agent") {  // the agent changed it on its own: say so in the conversation
    const moved = (d.options || []).filter((o) => o.id in before && before[o.id] !== o.currentValue)
      .map((o) => `${o.name || o.id}: ${valueName(o, o.currentValue)}`);
    if (moved.length) addEntry(sid, { kind: "notice", level: "info", text: `The agent changed ${moved.join(", ")}`, ts });
  }
  if (sid === state.viewed) renderConfig();
}

function valueName(o, value) {
  if (o.type === "boolean") return value ? "on" : "off";
  const found = optionValues(o).find((v) => v.value === value);
  return found ? found.name || found.value : String(value);
}

function renderConfig() {
  const bar = $("config-bar"), notice = $("config-notice");
  const s = state.sessions.get(state.viewed);
  bar.replaceChildren(); notice.replaceChildren();
  if (!s) { bar.hidden = notice.hidden = true; return; }
  const c = config(s.session_id);
  const editable = state.live && !TERMINAL.includes(s.state);
  for (const o of c.options || []) {
    const label = el("label", c.chosen && c.chosen[o.id] ? "chosen" : "");
    label.title = [o.description, c.chosen && c.chosen[o.id] ? `chosen by ${c.chosen[o.id].by}: kept across restarts` : ""]
      .filter(Boolean).join(" — ");
    if (o.type === "boolean") {
      const box = el("input"); box.type = "checkbox"; box.checked = !!o.currentValue; box.dataset.optionId = o.id;
      box.disabled = !editable; box.onchange = () => setOption(s.session_id, o.id, box.checked);
      label.append(box, el("span", "", o.name || o.id));
    } else if (o.type === "select") {
      const pick = el("select"); pick.dataset.optionId = o.id; pick.disabled = !editable;
      pick.setAttribute("aria-label", o.name || o.id);
      for (const v of optionValues(o)) { const opt = el("option", "", v.name || v.value); opt.value = v.value; opt.title = v.description || ""; pick.append(opt); }
      pick.value = o.currentValue;
      pick.onchange = () => setOption(s.session_id, o.id, pick.value);
      label.append(el("span", "", o.name || o.id), pick);
    } else continue;  // a kind of option newer than this page: not shown as a control
    bar.append(label);
  }
  const u = c.usage;
  if (u && typeof u.used === "number") {
    const k = (n) => (n >= 1000 ? `${(n / 1000).toFixed(n >= 100000 ? 0 : 1)}k` : String(n));
    let cost = "";
    if (u.cost && typeof u.cost.amount === "number") {
      try { cost = ` · ${new Intl.NumberFormat(undefined, { style: "currency", currency: u.cost.currency, maximumSignificantDigits: 3 }).format(u.cost.amount)}`; }
      catch { cost = ` · ${u.cost.amount} ${u.cost.currency}`; }  // a currency code the browser does not know
    }
    const usage = el("span", "", `context ${k(u.used)} / ${k(u.size)}${cost}`);
    usage.title = "tokens in the agent's context window, of its size; the session's cost so far, as the agent reports";
    usage.id = "usage"; bar.append(usage);
  }
  bar.hidden = !bar.childElementCount;
  for (const item of c.unapplied || []) {
    const line = el("div", "unapplied", `Not applied: ${item.message}`);
    if (item.kind === "option" && editable) {  // a choice that cannot be applied may be given up
      const forget = el("button", "forget", "Forget this choice"); forget.dataset.optionId = item.id;
      forget.title = "no longer choose it: the agent keeps its own value, and no restart sets it again";
      forget.onclick = () => setOption(s.session_id, item.id, null);
      line.append(" ", forget);
    }
    notice.append(line);
  }
  notice.hidden = !(c.unapplied || []).length;
}

async function setOption(sid, id, value) {
  try { await call("task.session.set_config_option", { session_id: sid, config_id: id, value }); }
  catch (e) { showError(e); renderConfig(); }  // the control goes back to what the agent says
}

// ---- the slash-command palette: `/` at the start of the prompt lists the agent's commands ----
function updatePalette() {
  const box = $("palette"), text = $("prompt").value, m = /^\/(\S*)$/.exec(text);
  const commands = state.viewed ? config(state.viewed).commands || [] : [];
  const items = m ? commands.filter((c) => c && typeof c.name === "string" && c.name.startsWith(m[1])) : [];
  state.palette.items = items; state.palette.active = Math.min(state.palette.active, Math.max(items.length - 1, 0));
  box.replaceChildren();
  items.forEach((c, i) => {
    const li = el("li", i === state.palette.active ? "active" : ""); li.setAttribute("role", "option"); li.dataset.command = c.name;
    li.append(el("span", "cmd", `/${c.name}`));
    if (c.input && c.input.hint) li.append(el("span", "hint", c.input.hint));
    li.append(el("span", "what", c.description || ""));
    li.onmousedown = (ev) => { ev.preventDefault(); pickCommand(c); };
    box.append(li);
  });
  box.hidden = !items.length;
}

function pickCommand(c) {
  $("prompt").value = `/${c.name} `; $("prompt").focus();
  state.palette.active = 0; updatePalette();
}

function turnOutcome(d) {
  if (d.stop_reason === "interrupted") return "turn interrupted: the gateway stopped before the agent answered";
  if (d.stop_reason) return `turn ended: ${d.stop_reason}`;
  return `turn failed: ${(d.error && d.error.message) || "the agent did not answer"}`;
}

function promptText(blocks) { return (blocks || []).map((b) => b.text || `[${b.type}]`).join("\n"); }

function addEntry(sid, entry) { transcript(sid).push(entry); closeOpen(sid); if (sid === state.viewed) renderTranscript(); }

function closeOpen(sid) { const t = transcript(sid); for (let i = 0; i < t.length - 1; i++) t[i].open = false; }

function contentText(c) {
  if (!c) return "";
  if (Array.isArray(c)) return c.map(contentText).join("");
  if (c.type === "content") return contentText(c.content);
  if (c.type === "text") return c.text || "";
  if (c.type === "diff") return "";
  return c.text || "";
}

function addUpdate(sid, u, replay, ts) {
  const t = transcript(sid), kind = u.sessionUpdate, text = u.content && u.content.text;
  const last = t[t.length - 1];
  if (kind === "agent_message_chunk" || kind === "agent_thought_chunk" || (kind === "user_message_chunk" && replay)) {
    const k = kind === "agent_message_chunk" ? "agent" : kind === "agent_thought_chunk" ? "thought" : "user";
    if (last && last.kind === k && last.open && last.replay === replay) last.text += text || "";
    else t.push({ kind: k, text: text || "", open: true, replay, ts });
  } else if (kind === "tool_call" || kind === "tool_call_update") {
    let card = t.find((e) => e.kind === "tool" && e.id === u.toolCallId);
    if (!card) { card = { kind: "tool", id: u.toolCallId, title: "tool", status: "pending", replay, ts }; t.push(card); }
    for (const key of ["title", "kind", "status", "locations", "rawInput"]) if (u[key] != null) card[key === "kind" ? "toolKind" : key] = u[key];
    if (u.content != null) { card.output = contentText(u.content); card.diffs = (u.content || []).filter((c) => c.type === "diff"); }
  } else if (kind === "plan") {
    const i = t.findIndex((e) => e.kind === "plan");
    const entry = { kind: "plan", entries: u.entries || [], replay, ts };
    if (i >= 0) t[i] = entry; else t.push(entry);
  } else {  // any other kind (available commands, modes, kinds newer than this page): folded, as raw JSON
    t.push({ kind: "raw", label: kind || "update", json: u, replay, ts });
  }
  closeOpen(sid);
  if (sid === state.viewed) renderTranscript();
}

function addPermission(sid, d, ts) {
  const t = transcript(sid);
  if (t.some((e) => e.kind === "permission" && e.request_id === d.request_id)) return;  // a re-offer of one shown
  t.push({ kind: "permission", request_id: d.request_id, tool: d.tool_call || {}, options: d.options || [], ts });
  closeOpen(sid);
  if (sid === state.viewed) renderTranscript();
  renderList();
}

function resolvePermission(sid, d) {
  const card = transcript(sid).find((e) => e.kind === "permission" && e.request_id === d.request_id);
  if (card) card.answer = d;
  if (sid === state.viewed) renderTranscript();
  renderList();
}

function pendingPermissions(sid) {
  return transcript(sid).filter((e) => e.kind === "permission" && !e.answer).length;
}

// ---- rendering ----
function renderList() {
  const ul = $("sessions"); ul.replaceChildren();
  const sorted = [...state.sessions.values()].sort((a, b) => b.created_at - a.created_at);
  if (!sorted.length) ul.append(el("li", "empty", "No sessions yet."));
  for (const s of sorted) {
    const li = el("li", s.session_id === state.viewed ? "selected" : "");
    li.dataset.sessionId = s.session_id;
    li.append(el("div", "title", s.title || s.session_id), el("span", `badge tone-${s.state}`, s.state));
    const waiting = pendingPermissions(s.session_id);
    if (waiting) li.append(el("span", "muted", ` · ${waiting} permission request${waiting > 1 ? "s" : ""}`));
    li.onclick = () => openView(s.session_id);
    ul.append(li);
  }
}

function renderHead() {
  const head = $("detail-head"); head.replaceChildren();
  const s = state.sessions.get(state.viewed);
  const canPrompt = !!s && !TERMINAL.includes(s.state) && state.live;
  $("prompt").disabled = $("send").disabled = !canPrompt;
  if (!s) { head.append(el("span", "empty", "Select or start a session.")); $("status-line").hidden = true; renderConfig(); return; }
  const badge = el("span", `badge tone-${s.state}${state.live ? "" : " stale"}`, s.state); badge.id = "session-state";
  const running = el("span", `muted${state.live ? "" : " stale"}`, s.is_agent_running ? "agent running" : "agent stopped");
  running.id = "agent-running";
  head.append(el("strong", "", s.title || s.session_id), badge, running, el("span", "muted", `${s.agent} · ${s.cwd}`));
  const active = !TERMINAL.includes(s.state) && state.live;
  const resume = el("button", "", "Resume"); resume.id = "resume"; resume.disabled = !active || s.is_agent_running;
  resume.onclick = () => resumeViewed("by hand");
  const stop = el("button", "", "Stop turn"); stop.id = "stop-turn"; stop.disabled = !state.live || s.state !== "RUNNING";
  stop.onclick = () => call("task.session.cancel_turn", { session_id: s.session_id }).catch(showError);
  const cancel = el("button", "", "Cancel session"); cancel.id = "cancel"; cancel.disabled = !active;
  cancel.onclick = () => cancelSession(s.session_id);
  const raw = el("button", "", state.showRaw ? "Hide raw" : "Raw"); raw.id = "raw-toggle";
  raw.title = "every event of this session as JSON, for agent authors";
  raw.onclick = () => { state.showRaw = !state.showRaw; $("raw").hidden = !state.showRaw; renderRaw(); renderHead(); };
  head.append(resume, stop, cancel, raw);
  renderStatusLine(s);
  renderConfig();
}

function renderStatusLine(s) {
  const line = $("status-line"); line.replaceChildren();
  const status = state.statuses.get(s.session_id);
  if (!state.live) {
    line.dataset.kind = "disconnected"; line.hidden = false;
    line.append(el("span", "", "Connection lost: this is the last known state; it updates once the gateway answers again."));
    return;
  }
  if (!status || TERMINAL.includes(s.state) || s.is_agent_running) { line.hidden = true; return; }
  if (status.resume_reason === "error_recovery") {
    line.dataset.kind = "error_recovery"; line.hidden = false;
    line.append(el("span", "", `Restore failed: ${s.error_message || REASONS.error_recovery}`));
    const retry = el("button", "", "Recover: retry"); retry.id = "recover-retry";
    retry.onclick = () => recover("retry");
    const fresh = el("button", "", "Recover: start fresh"); fresh.id = "recover-fresh";
    fresh.title = "gives up the saved ACP session and starts a new one";
    fresh.onclick = () => recover("fresh_start");
    line.append(retry, fresh);
  } else if (status.needs_resume || status.resume_reason === "not_started") {
    line.dataset.kind = "needs_resume"; line.hidden = false;
    const agent = state.agents.get(s.agent);
    const manual = agent && agent.auto_resume === false ? " — auto-resume is off for this agent: press Resume" : "";
    line.append(el("span", "", `Needs resume: ${REASONS[status.resume_reason] || status.resume_reason}${manual}`));
  } else { line.hidden = true; }
}

function md(text) {
  const box = el("div", "md");
  if (window.marked && window.DOMPurify) box.innerHTML = DOMPurify.sanitize(marked.parse(text || ""));
  else box.textContent = text;
  return box;
}

// The time shows through CSS (`attr(data-ts)`): it is not part of the message's text.
function stamp(node, e) { if (e.ts) node.dataset.ts = clock(e.ts); return node; }

function toolCard(e) {
  const card = el("div", `msg card tool${e.replay ? " replay" : ""}`);
  const head = el("div", "card-head");
  head.append(el("strong", "", `⚙ ${e.title}`));
  if (e.toolKind) head.append(el("span", "kind", e.toolKind));
  head.append(el("span", `status status-${e.status}`, e.status));
  card.append(head);
  const locations = (e.locations || []).map((l) => l.path + (l.line ? `:${l.line}` : ""));
  if (locations.length || e.output || (e.diffs && e.diffs.length) || e.rawInput) {
    const details = el("details");
    details.append(el("summary", "", "details"));
    if (locations.length) details.append(el("div", "muted", locations.join(", ")));
    for (const d of e.diffs || []) details.append(diffView(d));
    if (e.output) details.append(el("pre", "", e.output));
    if (e.rawInput) details.append(el("pre", "", JSON.stringify(e.rawInput, null, 2)));
    card.append(details);
  }
  return stamp(card, e);
}

function diffView(d) {
  const pre = el("pre", "diff");
  pre.append(el("div", "muted", d.path || ""));
  for (const line of (d.oldText || "").split("\n").filter((x, i, a) => x || i < a.length - 1)) pre.append(el("div", "del", `- ${line}`));
  for (const line of (d.newText || "").split("\n").filter((x, i, a) => x || i < a.length - 1)) pre.append(el("div", "add", `+ ${line}`));
  return pre;
}

function permissionCard(e) {
  const card = el("div", "msg card permission"); card.dataset.requestId = e.request_id;
  const head = el("div", "card-head");
  head.append(el("strong", "", `Permission: ${e.tool.title || "a tool call"}`));
  if (e.tool.kind) head.append(el("span", "kind", e.tool.kind));
  card.append(head);
  const locations = (e.tool.locations || []).map((l) => l.path);
  if (locations.length) card.append(el("div", "muted", locations.join(", ")));
  for (const c of e.tool.content || []) {
    if (c.type === "diff") card.append(diffView(c));
    else if (contentText(c)) card.append(el("pre", "", contentText(c)));
  }
  if (e.answer) {
    const outcome = e.answer.outcome || {};
    const chosen = (e.options.find((o) => o.optionId === outcome.optionId) || {}).name || outcome.optionId;
    card.append(el("div", "answered", outcome.outcome === "selected" ? `Answered: ${chosen} (by ${e.answer.by})`
                                                                     : `Answered: cancelled (by ${e.answer.by})`));
  } else {
    const opts = el("div", "options");
    for (const o of e.options) {
      const b = el("button", o.kind && o.kind.startsWith("allow") ? "primary" : "", o.name || o.optionId);
      b.dataset.optionId = o.optionId; b.disabled = !state.live;
      b.onclick = () => respond(e, { option_id: o.optionId });
      opts.append(b);
    }
    card.append(opts);
  }
  return stamp(card, e);
}

function renderTranscript() {
  const box = $("transcript"); box.replaceChildren();
  for (const e of transcript(state.viewed)) {
    const cls = `msg ${e.kind}${e.replay ? " replay" : ""}`;
    if (e.kind === "tool") box.append(toolCard(e));
    else if (e.kind === "permission") box.append(permissionCard(e));
    else if (e.kind === "agent") { const m = el("div", cls); m.append(md(e.text)); box.append(stamp(m, e)); }
    else if (e.kind === "plan") {
      const d = el("div", `${cls} card`), ol = el("ol");
      for (const p of e.entries) ol.append(el("li", p.status, `${p.content}${p.status ? ` (${p.status})` : ""}`));
      d.append(el("strong", "", "Plan"), ol); box.append(stamp(d, e));
    } else if (e.kind === "raw") {
      const d = el("details", `${cls} raw-entry`);
      d.append(el("summary", "", `[${e.label}]`), el("pre", "", JSON.stringify(e.json, null, 2)));
      box.append(stamp(d, e));
    } else if (e.kind === "notice") box.append(stamp(el("div", `${cls} level-${e.level || "warning"}`, e.text), e));
    else box.append(stamp(el("div", cls, e.text), e));
  }
  box.scrollTop = box.scrollHeight;
}

function renderRaw() {
  if (!state.showRaw) return;
  const log = state.raw.get(state.viewed) || [];
  $("raw-log").textContent = log.map((p) => JSON.stringify(p)).join("\n");
}

// ---- actions ----
function historyEntries(entries) {
  const t = [];
  for (const e of entries) {
    if (e.kind === "user_message") t.push({ kind: "user", text: e.content, ts: e.ts });
    else if (e.kind === "agent_message") t.push({ kind: "agent", text: e.content, ts: e.ts });
    else if (e.kind === "turn_interrupted") t.push({ kind: "turn", text: `turn interrupted: ${e.content}`, ts: e.ts });
    else if (e.kind === "tool_call") t.push({ kind: "tool", title: e.name, status: "pending", ts: e.ts });
    else if (e.kind === "tool_result") {
      const card = [...t].reverse().find((x) => x.kind === "tool" && x.title === e.name && x.status === "pending");
      const failed = e.content.startsWith("(failed)");
      if (card) { card.status = failed ? "failed" : "completed"; card.output = e.content; }
      else t.push({ kind: "tool", title: e.name, status: failed ? "failed" : "completed", output: e.content, ts: e.ts });
    }
  }
  return t;
}

async function openView(sid, again = false) {
  if (state.viewed !== sid) { state.viewed = sid; state.resumedViews.delete(sid); }
  renderList(); renderHead(); renderTranscript(); renderRaw();
  try {
    if (!transcript(sid).length) {
      const h = await call("task.session.history", { session_id: sid, limit: 1000 });
      if (!transcript(sid).length) { state.transcripts.set(sid, historyEntries(h.entries)); }
      renderTranscript();
    }
    const status = await refreshStatus(sid);
    const agent = state.agents.get(status.agent);
    // Auto-resume once per view, as a user would click Resume; not for agents whose launches cost money, and not
    // on a reconnect (`again`): the page shows what the gateway says (needs resume, with Resume enabled) and a
    // restarted gateway is not flooded with relaunches by every tab left open.
    if (!again && status.needs_resume && status.is_resumable && !state.resumedViews.has(sid)) {
      state.resumedViews.add(sid);
      if (agent && agent.auto_resume === false) {
        addEntry(sid, { kind: "notice", level: "info", text: `Auto-resume is off for agent ${status.agent}: press Resume to relaunch it.`, ts: Date.now() / 1000 });
      } else await resumeViewed("automatically");
    }
  } catch (e) { if (e.code !== -1) showError(e); }
}

async function refreshStatus(sid = state.viewed) {
  const status = await call("task.session.status", { session_id: sid });
  state.statuses.set(sid, status);
  if (status.config) state.configs.set(sid, status.config);
  if (state.sessions.has(sid)) Object.assign(state.sessions.get(sid), status);
  if (sid === state.viewed) { renderList(); renderHead(); }
  return status;
}

async function resumeViewed(how) {
  const sid = state.viewed; if (!sid) return;
  const s = state.sessions.get(sid);
  addEntry(sid, { kind: "notice", level: "info", text: `Resuming ${how}: relaunching agent ${s ? s.agent : ""}…`, ts: Date.now() / 1000 });
  try { await call("task.session.resume", { session_id: sid }); }
  catch (e) { showError(e); }
  await refreshStatus(sid).catch(() => {});  // how it came back arrives as the gateway's own message
}

async function recover(action) {
  const sid = state.viewed; if (!sid) return;
  addEntry(sid, { kind: "notice", level: "info", text: action === "retry" ? "Recovering: retrying the restore…" : "Recovering: starting a fresh session…", ts: Date.now() / 1000 });
  try { await call("task.session.recover", { session_id: sid, action }); } catch (e) { showError(e); }
  await refreshStatus(sid).catch(() => {});
}

async function cancelSession(sid) {
  try { await call("task.session.cancel", { session_id: sid }); }
  catch (e) { if (e.code !== ALREADY_TERMINAL) { showError(e); return; } }  // already terminal: that is success
  await refreshStatus(sid).catch(() => {});
}

function respond(card, answer) {
  call("task.session.permission.respond", { session_id: state.viewed, request_id: card.request_id, ...answer })
    .catch((e) => { if (e.code !== ALREADY_TERMINAL) showError(e); });
}

function showError(e) {
  if (state.viewed) addEntry(state.viewed, { kind: "notice", level: "error", text: `Error: ${e.message || e}`, ts: Date.now() / 1000 });
}

$("start-form").onsubmit = async (ev) => {
  ev.preventDefault();
  try {
    const view = await call("task.session.start", { agent: $("agent").value || undefined, cwd: $("cwd").value,
                                                    title: $("title").value || undefined, wait_ready: true });
    state.sessions.set(view.session_id, view); if (view.config) state.configs.set(view.session_id, view.config);
    openView(view.session_id);
  } catch (e) { alert(e.message || e); }
};

$("prompt-form").onsubmit = async (ev) => {
  ev.preventDefault();
  const text = $("prompt").value.trim(); if (!text || !state.viewed) return;
  $("prompt").value = ""; updatePalette();
  try { await call("task.session.prompt", { session_id: state.viewed, prompt: text }); }
  catch (e) {
    // The turn is the session's, not this page's: a lost connection only lost the wait; the outcome arrives
    // as turn_ended once the stream is back (or as "interrupted" if the gateway itself went down).
    if (e.code === -1) addEntry(state.viewed, { kind: "notice", text: "connection lost while the turn ran: its outcome will show here", ts: Date.now() / 1000 });
    else showError(e);
  }
};
$("prompt").addEventListener("keydown", (ev) => {
  const p = state.palette;
  if (!$("palette").hidden && p.items.length) {
    if (ev.key === "ArrowDown" || ev.key === "ArrowUp") {
      ev.preventDefault(); p.active = (p.active + (ev.key === "ArrowDown" ? 1 : p.items.length - 1)) % p.items.length;
      updatePalette(); return;
    }
    // Tab takes the highlighted command; so does Enter, unless the command is typed out already (then it is sent).
    const typedOut = $("prompt").value === `/${p.items[p.active].name}`;
    if (ev.key === "Tab" || (ev.key === "Enter" && !ev.shiftKey && !typedOut)) {
      ev.preventDefault(); pickCommand(p.items[p.active]); return;
    }
    if (ev.key === "Escape") { $("palette").hidden = true; return; }
  }
  if (ev.key === "Enter" && !ev.shiftKey) { ev.preventDefault(); $("send").click(); }
});
$("prompt").addEventListener("input", () => { state.palette.active = 0; updatePalette(); });
$("prompt").addEventListener("blur", () => { $("palette").hidden = true; });

connect();
scheduleReconcile();
