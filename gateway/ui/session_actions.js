// The web UI's actions on a session: open it, read its status, resume, recover and cancel it.
import { $, showErrorAt } from "./dom.js";
import { state, call, select } from "./state.js";
import { renderList, renderHead } from "./render_sessions.js";
import { renderTranscript, renderRaw } from "./render_transcript.js";
import { renderChanges, loadChanges } from "./render_changes.js";
import { openLog } from "./transcript_log.js";
import { agentsOpen } from "./agents_page.js";

const { ALREADY_TERMINAL, NOT_FOUND } = AcpGateway;  // the gateway's error codes (clients/typescript/src/codes.ts)

export async function openView(sid, again = false) {
  if (document.body.classList.contains("agents-open")) agentsOpen(false);
  if (state.viewed !== sid) {
    select(sid); state.resumedViews.delete(sid);
    for (const box of ["head-error", "config-error", "prompt-error", "changes-error"]) showErrorAt(box, null);  // another session's
    $("changes-note").textContent = ""; state.openFiles.clear();
  }
  renderList(); renderHead(); renderTranscript(); renderRaw(); renderChanges();
  loadChanges(sid).catch(() => {});
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
    if (e.code === NOT_FOUND && sid === state.viewed) { select(null); renderHead(); renderTranscript(); }
    if (e.code !== -1) showErrorAt("head-error", e);
  }
}

export async function refreshStatus(sid = state.viewed) {
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

export async function resumeViewed(how) {
  const sid = state.viewed; if (!sid) return;
  const s = state.sessions.get(sid);
  await busyWith(`Resuming ${how}: relaunching agent ${s ? s.agent : ""}…`,
                 () => call("task.session.resume", { session_id: sid }));
}

export async function recover(action) {
  const sid = state.viewed; if (!sid) return;
  await busyWith(action === "retry" ? "Recovering: retrying the restore…" : "Recovering: starting a fresh session…",
                 () => call("task.session.recover", { session_id: sid, action }));
}

export async function cancelSession(sid) {
  const s = state.sessions.get(sid);
  if (!confirm(`Cancel session "${(s && (s.title || s.name)) || sid}" for good? Its agent is stopped and it cannot be resumed; its transcript stays.`)) return;
  try { await call("task.session.cancel", { session_id: sid }); showErrorAt("head-error", null); }
  catch (e) { if (e.code !== ALREADY_TERMINAL) { showErrorAt("head-error", e); return; } }  // already terminal: that is success
  await refreshStatus(sid).catch(() => {});
}
