// The web UI's forms: the token's, the one that starts a session, and the prompt's.
import { $, showErrorAt } from "./dom.js";
import { state, call } from "./state.js";
import { setHealth, connect } from "./connection.js";
import { openView } from "./session_actions.js";
import { updatePalette } from "./palette.js";
import { recentKey, recentCwds, showWhere } from "./agents_page.js";
import { remember, refusalHint, refusedRoot } from "./present.js";

const { AGENT_FAILED, WORKSPACE_MISSING } = AcpGateway;  // the gateway's error codes (clients/typescript/src/codes.ts)

export function wireForms() {
  $("login-form").onsubmit = (ev) => {
    ev.preventDefault();
    state.token = $("token").value.trim(); sessionStorage.setItem("acp-token", state.token);
    $("login").hidden = true; setHealth("reconnecting", "connecting…"); connect();
  };
  $("start-form").onsubmit = startSession;
  $("prompt-form").onsubmit = sendPrompt;
}

async function startSession(ev) {
  ev.preventDefault();
  showErrorAt("start-error", null);
  $("start").disabled = true;
  const cwd = $("cwd").value.trim();
  try {
    // "Own git worktree": the directory is a repository's top; the session works in a worktree made from it.
    const host = $("host").value || undefined;  // a remote host's: the directory is one of that machine's
    const where = host ? { cwd, host } : $("worktree").checked ? { worktree: { repo: cwd } } : { cwd };
    const view = await call("task.session.start", { agent: $("agent").value || undefined, ...where,
                                                    title: $("title").value || undefined, wait_ready: true });
    // The gateway took the directory (whatever became of the agent): the field offers it first from now on.
    try { localStorage.setItem(recentKey(), JSON.stringify(remember(recentCwds(), view.worktree ? cwd : view.cwd || cwd))); } catch {}
    state.sessions.set(view.session_id, view); if (view.config) state.configs.set(view.session_id, view.config);
    if (view.state === "FAILED") showErrorAt("start-error", { message: `The session could not start: ${view.error_message}` });
    openView(view.session_id);
  } catch (e) {
    // A refused directory: the gateway's reason, then what to type instead.
    const root = refusedRoot(e, state.roots, WORKSPACE_MISSING);  // holds the gateway's state: hinted at no more
    if (root && !state.refusedRoots.includes(root)) { state.refusedRoots.push(root); showWhere(); }
    const hint = refusalHint(e, state.roots, recentCwds(), WORKSPACE_MISSING, state.refusedRoots);
    showErrorAt("start-error", hint ? { message: `${e.message}\n${hint}` } : e);
  }
  finally { $("start").disabled = false; }
}

async function sendPrompt(ev) {
  ev.preventDefault();
  const text = $("prompt").value.trim(); if (!text || !state.viewed) return;
  $("prompt").value = ""; updatePalette();
  showErrorAt("prompt-error", null);
  try { await call("task.session.prompt", { session_id: state.viewed, prompt: text }); }
  catch (e) {
    // The turn is the session's, not this page's: a lost connection only lost the wait; the outcome arrives
    // as turn_ended once the stream is back (or as "interrupted" if the gateway itself went down).
    if (e.code === -1) showErrorAt("prompt-error", { message: "Connection lost while the turn ran: its outcome will show in the transcript." });
    else if (e.code !== AGENT_FAILED) showErrorAt("prompt-error", e);  // an agent's failure is the transcript's (turn failed: …)
  }
}
