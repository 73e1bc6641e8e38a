// The web UI's link to the gateway: the client's start, its health shown in the header, the token, and its events.
import { $, showErrorAt } from "./dom.js";
import { state, getClient, setClient, select } from "./state.js";
import { validEvent, keepRaw, applyListEvent } from "./fold.js";
import { renderList, renderHead } from "./render_sessions.js";
import { renderRaw } from "./render_transcript.js";
import { loadChanges } from "./render_changes.js";
import { openView, refreshStatus } from "./session_actions.js";
import { feed } from "./transcript_log.js";
import { loadInfo } from "./agents_page.js";

// The numbers are the TypeScript client's policy (docs/clients.md says what it guarantees).
const { HEALTH_SAMPLE_INTERVAL, DEGRADED_AFTER_SAMPLES } = AcpGateway.policy;
const HEALTH_SAMPLE = HEALTH_SAMPLE_INTERVAL * 1000, DEGRADED_AFTER = DEGRADED_AFTER_SAMPLES;

export function setHealth(kind, text) { const s = $("stream"); s.dataset.health = kind; s.textContent = text; }

function askToken(reason) {
  const client = getClient();
  if (client) { client.close(); setClient(null); }
  setHealth("refused", "not connected");
  $("login-reason").textContent = reason; $("login").hidden = false; $("token").focus();
}

async function linkChanged(link, client) {
  // a refused handshake is final (the client never retries it): ask for the right token
  if (link === "closed" && client.refused) { askToken("The gateway refused this token: enter the right one."); return; }
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
  if (link === "reconnecting" && state.misses < DEGRADED_AFTER) setHealth("reconnecting", "reconnecting…");
  if (wasLive) renderHead();  // what is shown is the last known state until the gateway answers again
}

export function connect() {
  if (!state.token) { askToken("This page needs the gateway's token."); return; }
  const proto = location.protocol === "https:" ? "wss:" : "ws:";
  const client = new AcpGateway.OwnerSessionClient({ url: `${proto}//${location.host}/rpc`, token: state.token });
  setClient(client);
  client.onEvent(handleEvent);
  client.onLink((link) => { linkChanged(link, client); });
  // events were missed (the cursor was past the journal's retention): every transcript is read again from it
  client.onResync(() => { state.logs.clear(); state.asking.clear(); });
  client.onReconcile(() => { renderList(); renderHead(); });  // the list as the gateway has it (drift repaired)
  client.start();
}

// The stream's health, sampled: a link silent for DEGRADED_AFTER samples shows as degraded.
export function watchHealth() {
  setInterval(() => {
    state.misses = state.live ? 0 : state.misses + 1;
    if (state.misses >= DEGRADED_AFTER && $("login").hidden) setHealth("degraded", "stream degraded: reconnecting");
  }, HEALTH_SAMPLE);
}

// ---- events: the session list, pending requests, and each opened session's transcript ----
function handleEvent(p) {
  if (!validEvent(p)) return;  // the client delivers each journal event once, in order, and only well-formed ones
  if (keepRaw(state.raw, p) && p.session_id === state.viewed && state.showRaw) renderRaw();
  const sid = p.session_id;
  if (applyListEvent(state, p)) {
    if (p.type === "session_deleted" && state.viewed === sid) select(null);
    renderList();
    if (p.type === "session_deleted") renderHead();
    else if ((p.type === "session_status" || p.type === "session_title") && sid === state.viewed) {
      renderHead(); if (p.type === "session_status") refreshStatus().catch(() => {});
    }
  }
  if (sid) feed(sid, p);
  if (sid && keptRunningNews(sid, p) && sid === state.viewed) renderHead();
  // A turn's end is its outcome, on screen in the transcript: a wait cut by a lost connection is not an error now.
  if (p.type === "turn_ended" && sid === state.viewed) showErrorAt("prompt-error", null);
  // The Changes pane follows the viewed session's files: read again when a turn ends or the files moved.
  if (sid === state.viewed && state.showChanges && (p.type === "turn_ended"
      || (p.type === "session_message" && p.data && ["files_rewound", "branch_merged"].includes(p.data.code)))) {
    loadChanges(sid).catch(() => {});
  }
}

// `session_message` code `agent_kept_running` (gateway/runtime/writer.py KEPT_RUNNING): the head says so until the
// session's next turn starts.
function keptRunningNews(sid, p) {
  if (p.type === "session_message" && p.data && p.data.code === "agent_kept_running") {
    state.keptRunning.set(sid, p.ts); return true;
  }
  if (p.type === "turn_started" && state.keptRunning.has(sid)) { state.keptRunning.delete(sid); return true; }
  return false;
}
