// The gateway's web UI: the rendering of one owner's sessions, on the gateway's TypeScript client.
"use strict";

// The connection, the event stream, reconnects and heartbeats are the TypeScript client's (clients/typescript, bundled
// as client.js: global AcpGateway); docs/clients.md says what it guarantees. The numbers are its policy's.
const { HEALTH_SAMPLE_INTERVAL, DEGRADED_AFTER_SAMPLES } = AcpGateway.policy;
const HEALTH_SAMPLE = HEALTH_SAMPLE_INTERVAL * 1000, DEGRADED_AFTER = DEGRADED_AFTER_SAMPLES,
      ALREADY_TERMINAL = AcpGateway.ALREADY_TERMINAL, RAW_KEEP = 500;
const TERMINAL = ["CANCELLED", "FAILED", "COMPLETED"];
const TERMINAL_SHOWN = 1 << 20;  // characters of one agent terminal's output kept on the page (the events carry 1 MiB)
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
if (params.get("token")) { sessionStorage.setItem("acp-token", params.get("token")); history.replaceState(null, "", location.pathname + location.hash); }
// The selected session is in the URL (#s-…): a reload, a shared link, back and forward keep it.
const fromUrl = () => decodeURIComponent(location.hash.slice(1)) || null;
const $ = (id) => document.getElementById(id);
const el = (tag, cls, text) => { const e = document.createElement(tag); if (cls) e.className = cls; if (text != null) e.textContent = text; return e; };
const clock = (ts) => new Date(ts * 1000).toLocaleTimeString();

const state = { token: sessionStorage.getItem("acp-token") || "", live: false, everLive: false,
  statuses: new Map(), viewed: fromUrl(), resumedViews: new Set(),
  misses: 0, logs: new Map(), raw: new Map(), agents: new Map(), 
  showRaw: false, configs: new Map(), palette: { items: [], active: 0 }, asking: new Map(), roots: [], busy: null };
window.__acpGateway = state;  // for debugging in the console

// ---- the connection: the package's OwnerSessionClient ----
let client = null;
Object.defineProperty(state, "sessions", { get: () => (client ? client.sessions : new Map()) });

// Errors as the page shows them: {code, message, data} (code -1: the link is down, the call was not sent).
function call(method, params = {}) {
  if (!client) return Promise.reject({ code: -1, message: "not connected" });
  return client.call(method, params).catch((e) => Promise.reject({ code: e.code ?? -1, message: e.message, data: e.data }));
}

function setHealth(kind, text) { const s = $("stream"); s.dataset.health = kind; s.textContent = text; }

function askToken(reason) {
  if (client) { client.close(); client = null; }
  setHealth("refused", "not connected");
  $("login-reason").textContent = reason; $("login").hidden = false; $("token").focus();
}

async function tokenRefused() {
  try { const r = await fetch("/whoami", { headers: { Authorization: `Bearer ${state.token}` } }); return r.status === 401; }
  catch { return false; }  // the gateway is down: keep trying
}

async function linkChanged(link) {
  const wasLive = state.live;
  state.live = link === "live" || link === "degraded";
  if (link === "live") {
    state.everLive = true; state.misses = 0; setHealth("live", "live");
    if (wasLive) return;  // a silent spell that ended: nothing was missed
    renderList(); renderHead();
    try {
      if (!state.agents.size) await loadInfo();
      if (state.viewed) await openView(state.viewed, !!state.everOpened); else renderHead();
      state.everOpened = true;
    } catch {}
    return;
  }
  if (link === "degraded") { setHealth("degraded", "link silent: reconnecting"); return; }
  if (link === "reconnecting") {
    if (!state.everLive && await tokenRefused()) { askToken("The gateway refused this token: enter the right one."); return; }
    if (state.misses < DEGRADED_AFTER) setHealth("reconnecting", "reconnecting…");
  }
  if (wasLive) renderHead();  // what is shown is the last known state until the gateway answers again
}

function connect() {
  if (!state.token) { askToken("This page needs the gateway's token."); return; }
  const proto = location.protocol === "https:" ? "wss:" : "ws:";
  client = new AcpGateway.OwnerSessionClient({ url: `${proto}//${location.host}/rpc`, token: state.token });
  client.onEvent(handleEvent);
  client.onLink((link) => { linkChanged(link); });
  // events were missed (the cursor was past the journal's retention): every transcript is read again from it
  client.onResync(() => { state.logs.clear(); state.asking.clear(); });
  client.onReconcile(() => { renderList(); renderHead(); });  // the list as the gateway has it (drift repaired)
  client.start();
}

$("login-form").onsubmit = (ev) => {
  ev.preventDefault();
  state.token = $("token").value.trim(); sessionStorage.setItem("acp-token", state.token);
  $("login").hidden = true; setHealth("reconnecting", "connecting…"); connect();
};

const AVAILABILITY = { installed: "", downloads_on_first_start: " (downloads on first start)", not_found: " (not installed)" };

async function loadInfo() {
  const info = await call("gateway.info");
  $("owner").textContent = `owner: ${info.owner}`;
  $("agent").replaceChildren();
  for (const a of info.agents) {
    state.agents.set(a.id, a);
    const o = el("option", "", `${a.name || a.id}${a.version ? ` ${a.version}` : ""}${AVAILABILITY[a.availability] ?? ""}`); o.value = a.id;
    if (a.availability === "downloads_on_first_start") o.title = "started through a package runner (npx, uvx…): its first start downloads it, which needs the network";
    $("agent").append(o);
  }
  $("agent").value = info.default_agent;
  // Where sessions may run: offered in the working-directory field, and said in its hint.
  state.roots = info.workspace_roots || [];
  const list = $("cwd-roots"); list.replaceChildren(...state.roots.map((r) => { const o = el("option"); o.value = r; return o; }));
  const hint = state.roots.length ? `inside ${state.roots.join(" or ")}` : "an absolute path";
  $("cwd").placeholder = `working directory (${hint})`; $("cwd").title = `A session runs in a directory ${hint}.`;
  if (!$("cwd").value && state.roots.length) $("cwd").value = state.roots[0];
}

setInterval(() => {
  state.misses = state.live ? 0 : state.misses + 1;
  if (state.misses >= DEGRADED_AFTER && $("login").hidden) setHealth("degraded", "stream degraded: reconnecting");
}, HEALTH_SAMPLE);

function validEvent(p) {
  return p && typeof p === "object" && typeof p.type === "string" && (p.id === null || Number.isInteger(p.id))
         && p.data && typeof p.data === "object" && !Array.isArray(p.data);
}

// ---- events: the session list, pending requests, and each opened session's transcript ----
function keepRaw(p) {
  if (!p.session_id) return;
  if (!state.raw.has(p.session_id)) state.raw.set(p.session_id, []);
  const log = state.raw.get(p.session_id); log.push(p); if (log.length > RAW_KEEP) log.shift();
  if (p.session_id === state.viewed && state.showRaw) renderRaw();
}

function handleEvent(p) {
  if (!validEvent(p)) return;  // the client delivers each journal event once, in order, and only well-formed ones
  keepRaw(p);
  const sid = p.session_id, d = p.data;
  switch (p.type) {
    case "session_created": state.sessions.set(sid, d); if (d.config) state.configs.set(sid, d.config); renderList(); break;
    case "session_status": case "session_title":
      if (state.sessions.has(sid)) Object.assign(state.sessions.get(sid), d);
      renderList();
      if (sid === state.viewed) { renderHead(); if (p.type === "session_status") refreshStatus().catch(() => {}); }
      break;
    case "session_deleted":
      state.sessions.delete(sid); state.logs.delete(sid); state.asking.delete(sid);
      if (state.viewed === sid) select(null); renderList(); renderHead(); break;
    case "permission_requested": case "elicitation_requested": asking(sid).add(d.request_id); renderList(); break;
    case "permission_resolved": case "elicitation_resolved": asking(sid).delete(d.request_id); renderList(); break;
    case "turn_ended": asking(sid).clear(); renderList(); break;
  }
  if (sid) feed(sid, p);
}

// The permission requests and questions of each session still waiting for an answer (for the list's counts).
function asking(sid) { if (!state.asking.has(sid)) state.asking.set(sid, new Set()); return state.asking.get(sid); }

// A live event into an opened session's transcript: after the journal's part is in (events that arrive while it is
// read wait for it), and never twice (the journal's read and the live stream may overlap).
function feed(sid, p) {
  const log = state.logs.get(sid);
  if (!log) { applyConfig(sid, p); return; }  // not opened: its transcript is read from the journal when it is
  if (log.loading) { log.waiting.push(p); return; }
  if (p.id !== null && p.id <= log.through) return;
  applyEvent(sid, log, p);
  if (sid === state.viewed) renderTranscript();
}

// ---- the transcript: one function folds a session's events, in journal order, into what is shown ----
function applyEvent(sid, log, p) {
  if (p.id !== null && p.id > log.through) log.through = p.id;
  const t = log.entries, d = p.data || {}, ts = p.ts;
  switch (p.type) {
    case "session_update": {
      const u = d.update || {};
      if (STATE_KINDS.includes(u.sessionUpdate)) noteState(sid, u); else addUpdate(t, u, !!d.replay, ts);
      break;
    }
    case "session_config": configChanged(sid, log, d, ts); break;
    case "turn_started": t.push({ kind: "user", text: promptText(d.prompt), ts }); break;
    case "turn_ended":
      // A request of the turn that got no answer can get none now: the agent stopped waiting with the turn.
      for (const e of t) if ((e.kind === "permission" || e.kind === "elicitation") && !e.answer) e.expired = true;
      t.push({ kind: "turn", text: turnOutcome(d), failed: !d.stop_reason, ts });
      break;
    case "session_message": t.push({ kind: "notice", level: d.level || "warning", text: d.text, ts }); break;
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
    // An agent's terminal: shown inside the tool call that embeds it, else on its own where it started.
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
      return;  // more output is no new entry: the open message stays open
    }
    case "terminal_exited": {
      const term = log.terminals.get(d.terminal_id);
      if (term) term.exit = d;
      return;
    }
    default: return;
  }
  for (let i = 0; i < t.length - 1; i++) t[i].open = false;
}

function applyConfig(sid, p) {  // what a session not opened keeps of its events: its options, commands and usage
  const d = p.data || {};
  if (p.type === "session_config") configChanged(sid, null, d, p.ts);
  else if (p.type === "session_update" && STATE_KINDS.includes((d.update || {}).sessionUpdate)) noteState(sid, d.update);
}

// A session's transcript: its events from the journal, then live ones past that read's cursor. When retention has
// pruned its beginning, its recorded history stands for the journal instead (history, then live events).
function openLog(sid) {
  let log = state.logs.get(sid);
  if (log) return log.loading || Promise.resolve(log);
  log = { entries: [], through: 0, loading: null, waiting: [], terminals: new Map() };
  state.logs.set(sid, log);
  log.loading = (async () => {
    let after = 0;
    const s = state.sessions.get(sid);
    const forkedAt = s && s.forked_from ? await forkedPart(sid, log, s) : 0;
    for (let first = true; ; first = false) {
      const page = await call("task.session.events", { session_id: sid, after, limit: 2000 });
      if (first && !page.complete) { await fromHistory(sid, log, page.cursor, forkedAt); break; }
      for (const e of page.events) applyEvent(sid, log, e);
      if (page.next == null) { log.through = Math.max(log.through, page.cursor); break; }
      after = page.next;
    }
    log.loading = null;
    for (const p of log.waiting) if (p.id === null || p.id > log.through) applyEvent(sid, log, p);
    log.waiting = [];
    return log;
  })();
  log.loading.catch(() => state.logs.delete(sid));  // read again at the next opening
  return log.loading;
}

async function allHistory(sid) {
  const entries = [];
  for (let after = 0; after != null; ) {
    const h = await call("task.session.history", { session_id: sid, after, limit: 1000 });
    entries.push(...h.entries); after = h.next;
  }
  return entries;
}

async function fromHistory(sid, log, cursor, shownThrough = 0) {
  const entries = (await allHistory(sid)).filter((e) => e.ts > shownThrough);
  log.entries.push({ kind: "notice", level: "info", text: "The start of this session is past the event journal's retention: what it recorded is shown from its history." });
  for (const p of historyEvents(entries)) applyEvent(sid, log, p);
  log.through = cursor;
}

// A fork's journal starts at the fork: the conversation before it is the copy of the original's history it was made
// with (entries as old as the fork itself), shown first.
async function forkedPart(sid, log, s) {
  const entries = (await allHistory(sid)).filter((e) => e.ts <= s.created_at);
  if (!entries.length) return 0;
  const from = (state.sessions.get(s.forked_from) || {}).title || s.forked_from;
  log.entries.push({ kind: "notice", level: "info", text: `Before the fork (from ${from}), as its history recorded it:` });
  for (const p of historyEvents(entries)) applyEvent(sid, log, p);
  return s.created_at;
}

// History entries as the events they were recorded from, for `applyEvent`.
function historyEvents(entries) {
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

function noteState(sid, u) {
  const c = config(sid);
  if (u.sessionUpdate === "available_commands_update" && Array.isArray(u.availableCommands)) c.commands = u.availableCommands;
  else if (u.sessionUpdate === "usage_update") { const { sessionUpdate, ...usage } = u; c.usage = usage; }
  else return;  // the options arrive as session_config, the gateway's account of them
  if (sid === state.viewed) { renderConfig(); updatePalette(); }
}

function configChanged(sid, log, d, ts) {
  const c = config(sid);
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
  if (c.auth) notice.append(signInCard(s.session_id, c.auth, editable));
  notice.hidden = !(c.unapplied || []).length && !c.auth;
}

// The agent asks to be signed in: each of its methods, with what it needs (an API key is typed into a password field,
// sent once, and never shown again: the gateway keeps it write-only).
function signInCard(sid, auth, editable) {
  const card = el("div", "sign-in");
  card.append(el("strong", "", "The agent asks you to sign in"), el("div", "muted", auth.reason || ""));
  for (const m of auth.methods || []) {
    const form = el("form", "sign-in-method"); form.dataset.methodId = m.id;
    form.append(el("span", "", `${m.name}${m.description ? ` — ${m.description}` : ""}`));
    const inputs = [];
    for (const name of m.kind === "env_var" ? m.vars || [] : []) {
      const input = el("input"); input.type = "password"; input.name = name; input.placeholder = name;
      input.autocomplete = "off"; input.setAttribute("aria-label", name); inputs.push(input); form.append(input);
    }
    const go = el("button", "primary", m.kind === "agent" ? "Sign in" : m.kind === "env_var" ? "Save and sign in" : "Sign in");
    go.disabled = !editable;
    if (m.kind === "terminal") go.title = "runs the agent's login; what it says (a code to enter, a page to open) shows below";
    form.append(go);
    form.onsubmit = async (ev) => {
      ev.preventDefault(); go.disabled = true;
      const values = inputs.length ? Object.fromEntries(inputs.map((i) => [i.name, i.value])) : undefined;
      try {
        const view = await call("task.session.authenticate", { session_id: sid, method_id: m.id, ...(values ? { values } : {}) });
        for (const i of inputs) i.value = "";
        showErrorAt("config-error", view.config && view.config.auth ? { message: `Not signed in: ${view.error_message || "the agent refused"}` } : null);
        state.sessions.set(sid, view); if (view.config) state.configs.set(sid, view.config);
        renderList(); renderHead(); renderConfig();
      } catch (e) { showErrorAt("config-error", e); go.disabled = false; }
    };
    card.append(form);
  }
  return card;
}

async function setOption(sid, id, value) {
  try { await call("task.session.set_config_option", { session_id: sid, config_id: id, value }); showErrorAt("config-error", null); }
  catch (e) { showErrorAt("config-error", e); renderConfig(); }  // the control goes back to what the agent says
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
  return `turn failed: ${d.message || (d.error && d.error.message) || "the agent did not answer"}`;
}

function promptText(blocks) { return (blocks || []).map((b) => b.text || `[${b.type}]`).join("\n"); }

function contentText(c) {
  if (!c) return "";
  if (Array.isArray(c)) return c.map(contentText).join("");
  if (c.type === "content") return contentText(c.content);
  if (c.type === "text") return c.text || "";
  if (c.type === "diff") return "";
  return c.text || "";
}

function addUpdate(t, u, replay, ts) {
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

function pendingPermissions(sid) { return state.asking.has(sid) ? state.asking.get(sid).size : 0; }

// ---- rendering ----
function renderList() {
  const ul = $("sessions"); ul.replaceChildren();
  const sorted = [...state.sessions.values()].sort((a, b) => b.created_at - a.created_at);
  if (!sorted.length) ul.append(el("li", "empty", "No sessions yet."));
  for (const s of sorted) {
    const li = el("li", s.session_id === state.viewed ? "selected" : "");
    li.dataset.sessionId = s.session_id;
    li.append(el("div", "title", s.title || s.name || s.session_id), el("span", `badge tone-${s.state}`, s.state));
    const waiting = pendingPermissions(s.session_id);
    if (waiting) li.append(el("span", "muted", ` · ${waiting} waiting for your answer`));
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
  head.append(el("strong", "", s.title || s.name || s.session_id), badge, running,
              el("span", "muted", `${s.name ? `${s.name} · ` : ""}${s.agent}${s.agent_version ? ` ${s.agent_version}` : ""} · ${s.cwd}`));
  if (s.forked_from) {
    const from = el("a", "muted forked-from", `forked from ${(state.sessions.get(s.forked_from) || {}).title || s.forked_from}`);
    from.href = "#"; from.onclick = (ev) => { ev.preventDefault(); if (state.sessions.has(s.forked_from)) openView(s.forked_from); };
    head.append(from);
  }
  const active = !TERMINAL.includes(s.state) && state.live;
  const resume = el("button", "", "Resume"); resume.id = "resume"; resume.disabled = !active || s.is_agent_running;
  resume.onclick = () => resumeViewed("by hand");
  const stop = el("button", "", "Stop turn"); stop.id = "stop-turn"; stop.disabled = !state.live || s.state !== "RUNNING";
  stop.onclick = () => call("task.session.cancel_turn", { session_id: s.session_id })
    .then(() => showErrorAt("head-error", null), (e) => showErrorAt("head-error", e));
  const cancel = el("button", "", "Cancel session"); cancel.id = "cancel"; cancel.disabled = !active;
  cancel.onclick = () => cancelSession(s.session_id);
  // A fork: a new session with this one's conversation so far (where the agent forks sessions), opened at once.
  const fork = el("button", "", "Fork"); fork.id = "fork"; fork.hidden = !config(s.session_id).can_fork;
  fork.disabled = !active || s.state === "RUNNING";
  fork.title = "a new session that goes on from this conversation; this one stays as it is";
  fork.onclick = () => call("task.session.fork", { session_id: s.session_id })
    .then((view) => { showErrorAt("head-error", null); state.sessions.set(view.session_id, view); openView(view.session_id); },
          (e) => showErrorAt("head-error", e));
  const raw = el("button", "", state.showRaw ? "Hide raw" : "Raw"); raw.id = "raw-toggle";
  raw.title = "every event of this session as JSON, for agent authors";
  raw.onclick = () => { state.showRaw = !state.showRaw; $("raw").hidden = !state.showRaw; renderRaw(); renderHead(); };
  head.append(resume, stop, cancel, fork, raw);
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
  if (state.busy) {
    line.dataset.kind = "busy"; line.hidden = false; line.append(el("span", "", state.busy)); return;
  }
  if (s.state === "FAILED" && s.error_message) {  // why it ended: shown where the user looks, not only in the log
    line.dataset.kind = "failed"; line.hidden = false; line.append(el("span", "", `Failed: ${s.error_message}`)); return;
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
  } else if (config(s.session_id).auth) {  // the sign-in card above says what to do
    line.dataset.kind = "needs_auth"; line.hidden = false;
    line.append(el("span", "", "Needs sign-in: the agent starts once you sign in above"));
  } else if (status.needs_resume || status.resume_reason === "not_started") {
    line.dataset.kind = "needs_resume"; line.hidden = false;
    const agent = state.agents.get(s.agent);
    const manual = agent && agent.auto_resume === false ? " — auto-resume is off for this agent: press Resume" : "";
    line.append(el("span", "", `Needs resume: ${REASONS[status.resume_reason] || status.resume_reason}${manual}`));
    if (s.error_message) line.append(el("div", "muted", `Last error: ${s.error_message}`));
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

// An agent's terminal: its command, its output with the command's 16 colours (ansi_up escapes the text as HTML, and
// DOMPurify keeps only what is safe of its markup), and how it ended.
function terminalView(term) {
  const box = el("div", "msg card terminal");
  const head = el("div", "terminal-head");
  head.append(el("code", "", `$ ${term.command}`));
  const x = term.exit;
  head.append(el("span", `status status-${!x ? "in_progress" : x.exit_code === 0 ? "completed" : "failed"}`,
    !x ? "running" : x.recorded ? "recorded" : x.exit_code != null ? `exit ${x.exit_code}` : `killed (${x.signal})`));
  box.append(head);
  const pre = el("pre", "terminal-output");
  if (window.AnsiUp && window.DOMPurify) {
    // Colours as classes (app.css): the page's policy allows no inline style, so what ansi_up would say as one (bold,
    // 24-bit colours) is dropped rather than refused by the browser.
    const ansi = new window.AnsiUp(); ansi.use_classes = true;
    pre.innerHTML = DOMPurify.sanitize(ansi.ansi_to_html(term.text), { FORBID_ATTR: ["style"] });
  }
  else pre.textContent = term.text.replace(/\x1b\[[0-9;]*m/g, "");
  box.append(pre);
  if (x && x.complete === false) box.append(el("div", "muted", `${x.output_bytes} bytes in all: the rest was not streamed (the agent got its last bytes).`));
  return box;
}

function toolCard(e) {
  const card = el("div", `msg card tool${e.replay ? " replay" : ""}`);
  const head = el("div", "card-head");
  head.append(el("strong", "", `⚙ ${e.title}`));
  if (e.toolKind) head.append(el("span", "kind", e.toolKind));
  head.append(el("span", `status status-${e.status}`, e.status));
  card.append(head);
  const log = state.logs.get(state.viewed);
  for (const id of e.terminals || []) {
    const term = log && log.terminals.get(id);
    if (term) card.append(terminalView(term));
  }
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

// An agent's question: a form made from its JSON Schema (flat fields), or a link to open; answered once, by anyone.
function elicitationCard(e) {
  const card = el("div", "msg card elicitation"); card.dataset.requestId = e.request_id;
  card.append(el("div", "card-head", ""));
  card.firstChild.append(el("strong", "", "The agent asks"));
  card.append(el("div", "", e.message || ""));
  if (e.answer) {
    card.append(el("div", "answered", `Answered: ${e.answer.action} (by ${e.answer.by})` + (e.completed ? " · done" : "")));
    return stamp(card, e);
  }
  if (e.expired) { card.append(el("div", "answered", "Not answered: the turn ended first")); return stamp(card, e); }
  const buttons = el("div", "options");
  if (e.mode === "url") {
    const link = el("a", "", e.url); link.href = e.url; link.target = "_blank"; link.rel = "noopener noreferrer";
    card.append(el("div", "muted", "Open this page to continue:"), link);
    const open = el("button", "primary", "Open and continue");
    open.onclick = () => { window.open(e.url, "_blank", "noopener,noreferrer"); answerElicitation(e, "accept"); };
    buttons.append(open);
  } else {
    const form = el("form", "elicitation-form");
    const schema = e.requested_schema || {}, required = schema.required || [];
    for (const [name, prop] of Object.entries(schema.properties || {})) {
      const label = el("label", "", `${prop.title || name}${required.includes(name) ? " *" : ""}`);
      let input;
      if (prop.type === "boolean") { input = el("input"); input.type = "checkbox"; input.checked = !!prop.default; }
      else if (prop.enum || prop.oneOf) {
        input = el("select");
        if (!required.includes(name)) input.append(el("option", "", ""));
        for (const v of prop.enum || prop.oneOf.map((o) => o.const)) input.append(el("option", "", String(v)));
      } else if (prop.type === "array") { input = el("input"); input.placeholder = "comma-separated"; }
      else { input = el("input"); input.type = prop.type === "string" ? (prop.format === "email" ? "email" : "text") : "number"; }
      input.name = name; input.dataset.kind = prop.type;
      if (prop.description) input.title = prop.description;
      // What was typed survives the card being drawn again (a refused answer, another event of the session).
      e.values = e.values || {};
      if (name in e.values) { if (input.type === "checkbox") input.checked = e.values[name]; else input.value = e.values[name]; }
      input.oninput = input.onchange = () => { e.values[name] = input.type === "checkbox" ? input.checked : input.value; };
      label.append(input); form.append(label);
    }
    form.onsubmit = (ev) => { ev.preventDefault(); answerElicitation(e, "accept", formContent(form)); };
    card.append(form);
    const submit = el("button", "primary", "Send"); submit.onclick = () => form.requestSubmit();
    buttons.append(submit);
  }
  const decline = el("button", "", "Decline"); decline.onclick = () => answerElicitation(e, "decline");
  buttons.append(decline);
  for (const b of buttons.children) b.disabled = !state.live;
  card.append(buttons);
  if (e.error) card.append(el("div", "call-error", e.error));
  return stamp(card, e);
}

// A form's answer as the schema's types: numbers as numbers, a checkbox as a boolean, empty optional fields left out.
function formContent(form) {
  const content = {};
  for (const input of form.querySelectorAll("input, select")) {
    const kind = input.dataset.kind;
    if (kind === "boolean") { content[input.name] = input.checked; continue; }
    if (input.value === "") continue;
    if (kind === "number" || kind === "integer") content[input.name] = Number(input.value);
    else if (kind === "array") content[input.name] = input.value.split(",").map((x) => x.trim()).filter(Boolean);
    else content[input.name] = input.value;
  }
  return content;
}

function answerElicitation(card, action, content) {
  call("task.session.elicitation.respond", { session_id: state.viewed, request_id: card.request_id, action,
                                             ...(content ? { content } : {}) })
    .then(() => { card.error = null; })
    .catch((e) => {
      if (e.code === ALREADY_TERMINAL) return;  // answered elsewhere first: its answer arrives as an event
      card.error = `Not answered: ${e.message || e}`; renderTranscript();
    });
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
  } else if (e.expired) {
    card.append(el("div", "answered", "Not answered: the turn ended first"));
  } else {
    const opts = el("div", "options");
    for (const o of e.options) {
      const b = el("button", o.kind && o.kind.startsWith("allow") ? "primary" : "", o.name || o.optionId);
      b.dataset.optionId = o.optionId; b.disabled = !state.live;
      b.onclick = () => respond(e, { option_id: o.optionId });
      opts.append(b);
    }
    card.append(opts);
    if (e.error) card.append(el("div", "call-error", e.error));
  }
  return stamp(card, e);
}

function renderTranscript() {
  const box = $("transcript"); box.replaceChildren();
  const log = state.logs.get(state.viewed);
  for (const e of log ? log.entries : []) {
    const cls = `msg ${e.kind}${e.replay ? " replay" : ""}`;
    if (e.kind === "tool") box.append(toolCard(e));
    else if (e.kind === "terminal") {  // on its own only when no tool call shows it
      const term = log.terminals.get(e.id);
      if (term && !log.entries.some((c) => c.kind === "tool" && (c.terminals || []).includes(e.id))) box.append(stamp(terminalView(term), e));
    }
    else if (e.kind === "permission") box.append(permissionCard(e));
    else if (e.kind === "elicitation") box.append(elicitationCard(e));
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
    else if (e.kind === "turn") box.append(stamp(el("div", `${cls}${e.failed ? " level-error" : ""}`, e.text), e));
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
function select(sid) {  // the selected session goes into the URL: a reload or back/forward shows it again
  state.viewed = sid;
  const hash = sid ? `#${encodeURIComponent(sid)}` : "";
  if (location.hash !== hash) history.pushState(null, "", location.pathname + location.search + hash);
}

window.addEventListener("ansi-ready", () => { if (state.viewed) renderTranscript(); });  // colours, once loaded
window.addEventListener("popstate", () => {
  const sid = fromUrl();
  if (sid) openView(sid); else { state.viewed = null; renderList(); renderHead(); renderTranscript(); }
});

async function openView(sid, again = false) {
  if (document.body.classList.contains("agents-open")) agentsOpen(false);
  if (state.viewed !== sid) {
    select(sid); state.resumedViews.delete(sid);
    for (const box of ["head-error", "config-error", "prompt-error"]) showErrorAt(box, null);  // another session's
  }
  renderList(); renderHead(); renderTranscript(); renderRaw();
  try {
    await openLog(sid);
    if (sid === state.viewed) renderTranscript();
    const status = await refreshStatus(sid);
    const agent = state.agents.get(status.agent);
    // Auto-resume once per view, as a user would click Resume; not for agents whose launches cost money, and not
    // on a reconnect (`again`): the page shows what the gateway says (needs resume, with Resume enabled) and a
    // restarted gateway is not flooded with relaunches by every tab left open.
    if (!again && status.needs_resume && status.is_resumable && !state.resumedViews.has(sid)
        && !(agent && agent.auto_resume === false) && !(status.config && status.config.auth)) {  // not before a sign-in
      state.resumedViews.add(sid);
      await resumeViewed("automatically");
    }
  } catch (e) {
    if (e.code === -32002 && sid === state.viewed) { select(null); renderHead(); renderTranscript(); }
    if (e.code !== -1) showErrorAt("head-error", e);
  }
}

async function refreshStatus(sid = state.viewed) {
  const status = await call("task.session.status", { session_id: sid });
  state.statuses.set(sid, status);
  if (status.config) state.configs.set(sid, status.config);
  if (state.sessions.has(sid)) Object.assign(state.sessions.get(sid), status);
  if (sid === state.viewed) { renderList(); renderHead(); }
  return status;
}

// What is being done to the viewed session right now (a resume, a recovery), said in its status line: it is the
// page's doing, not the session's, so it is not part of the transcript (how the agent came back is: the gateway
// says it as a session message every frontend sees).
async function busyWith(text, work) {
  state.busy = text; renderHead();
  try { await work(); showErrorAt("head-error", null); }
  catch (e) { showErrorAt("head-error", e); }
  finally { state.busy = null; }
  await refreshStatus().catch(() => {});
  renderHead();
}

async function resumeViewed(how) {
  const sid = state.viewed; if (!sid) return;
  const s = state.sessions.get(sid);
  await busyWith(`Resuming ${how}: relaunching agent ${s ? s.agent : ""}…`,
                 () => call("task.session.resume", { session_id: sid }));
}

async function recover(action) {
  const sid = state.viewed; if (!sid) return;
  await busyWith(action === "retry" ? "Recovering: retrying the restore…" : "Recovering: starting a fresh session…",
                 () => call("task.session.recover", { session_id: sid, action }));
}

async function cancelSession(sid) {
  const s = state.sessions.get(sid);
  if (!confirm(`Cancel session "${(s && (s.title || s.name)) || sid}" for good? Its agent is stopped and it cannot be resumed; its transcript stays.`)) return;
  try { await call("task.session.cancel", { session_id: sid }); showErrorAt("head-error", null); }
  catch (e) { if (e.code !== ALREADY_TERMINAL) { showErrorAt("head-error", e); return; } }  // already terminal: that is success
  await refreshStatus(sid).catch(() => {});
}

function respond(card, answer) {
  call("task.session.permission.respond", { session_id: state.viewed, request_id: card.request_id, ...answer })
    .then(() => { card.error = null; })
    .catch((e) => {
      if (e.code === ALREADY_TERMINAL) return;  // answered elsewhere first: its answer arrives as an event
      card.error = `Not answered: ${e.message || e}`; renderTranscript();
    });
}

// A refused call's message, next to the control that made it (null clears it).
function showErrorAt(id, e) {
  const box = $(id); if (!box) return;
  box.textContent = e ? (e.message || String(e)) : ""; box.hidden = !e;
}

// ---- the agents page: what each agent is, which version, whether it is signed in, how its last check went ----
const AUTH_WORDS = { signed_in: "signed in", needs_sign_in: "needs sign-in", unknown: "unknown", not_probed: "not probed" };

function agentsOpen(open) {
  document.body.classList.toggle("agents-open", open); $("agents-page").hidden = !open;
  if (open) loadInfo().then(renderAgents, (e) => showErrorAt("agents-error", e));
}

function checkWords(check) {
  if (!check) return "never checked";
  const counts = check.counts || {};
  const when = new Date(check.at * 1000).toISOString().slice(0, 10);
  return `${check.verdict.replace(/_/g, " ")} · ${counts.pass || 0} pass, ${counts.fail || 0} fail · ${when}`;
}

function renderAgents() {
  const body = $("agents-table").querySelector("tbody"); body.replaceChildren();
  // installed from the registry first (they say the most), then the profiles, each by name
  const agents = [...state.agents.values()].sort((x, y) => (!!y.version - !!x.version) || (x.name || x.id).localeCompare(y.name || y.id));
  for (const a of agents) {
    const row = el("tr"); row.dataset.agent = a.id;
    const name = el("td"); name.append(el("strong", "", a.name || a.id), el("div", "muted", a.id));
    const versions = (a.installed_versions || []).filter((v) => v !== a.version);
    const version = el("td", "agent-version", a.version || (AVAILABILITY[a.availability] || "").trim().replace(/^\((.*)\)$/, "$1") || "—");
    if (versions.length) version.append(el("div", "muted", `also installed: ${versions.join(", ")}`));
    const auth = el("td", `agent-auth auth-${a.auth_state || "none"}`, a.auth_state ? AUTH_WORDS[a.auth_state] || a.auth_state : "—");
    const check = el("td", "agent-check", a.version ? checkWords(a.last_check) : "—");
    const start = el("button", "primary", "Start session"); start.type = "button";
    start.disabled = a.availability === "not_found";
    start.onclick = () => startWith(a.id);
    const action = el("td"); action.append(start);
    row.append(name, version, auth, check, action); body.append(row);
  }
}

function startWith(agentId) {
  $("agent").value = agentId;
  agentsOpen(false);
  if (!$("cwd").value.trim()) { $("cwd").focus(); showErrorAt("start-error", { message: "Give the working directory, then Start session." }); return; }
  $("start-form").requestSubmit();
}

$("agents-open").onclick = () => agentsOpen(true);
$("agents-close").onclick = () => agentsOpen(false);

$("start-form").onsubmit = async (ev) => {
  ev.preventDefault();
  showErrorAt("start-error", null);
  $("start").disabled = true;
  try {
    const view = await call("task.session.start", { agent: $("agent").value || undefined, cwd: $("cwd").value.trim(),
                                                    title: $("title").value || undefined, wait_ready: true });
    state.sessions.set(view.session_id, view); if (view.config) state.configs.set(view.session_id, view.config);
    if (view.state === "FAILED") showErrorAt("start-error", { message: `The session could not start: ${view.error_message}` });
    openView(view.session_id);
  } catch (e) { showErrorAt("start-error", e); }
  finally { $("start").disabled = false; }
};

$("prompt-form").onsubmit = async (ev) => {
  ev.preventDefault();
  const text = $("prompt").value.trim(); if (!text || !state.viewed) return;
  $("prompt").value = ""; updatePalette();
  showErrorAt("prompt-error", null);
  try { await call("task.session.prompt", { session_id: state.viewed, prompt: text }); }
  catch (e) {
    // The turn is the session's, not this page's: a lost connection only lost the wait; the outcome arrives
    // as turn_ended once the stream is back (or as "interrupted" if the gateway itself went down).
    if (e.code === -1) showErrorAt("prompt-error", { message: "Connection lost while the turn ran: its outcome will show in the transcript." });
    else if (e.code !== -32015) showErrorAt("prompt-error", e);  // an agent's failure is the transcript's (turn failed: …)
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
