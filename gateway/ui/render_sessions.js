// The web UI's session list and the viewed session's header: its state, its controls, and its status line.
import { $, el, showErrorAt } from "./dom.js";
import { state, call, config, pendingPermissions } from "./state.js";
import { TERMINAL } from "./fold.js";
import { renderConfig } from "./render_config.js";
import { renderRaw } from "./render_transcript.js";
import { renderChanges, loadChanges, closeChanges } from "./render_changes.js";
import { openView, resumeViewed, recover, cancelSession } from "./session_actions.js";
import { RESUME_REASONS } from "./resume_reasons.js";  // the CLI's words too (gateway/clients/resume_reasons.py)
import { stateBadge } from "./present.js";

// A session's state badge: its state, or what must happen before it takes a prompt (present.js stateBadge); the
// state itself stays in its tooltip.
function badgeOf(s, extra = "") {
  const { word, tone } = stateBadge(s, config(s.session_id).auth);
  const badge = el("span", `badge ${tone}${extra}`, word);
  badge.dataset.state = s.state; badge.title = `state: ${s.state}${s.is_agent_running ? "" : " · agent not running"}`;
  return badge;
}

export function renderList() {
  const ul = $("sessions"); ul.replaceChildren();
  const sorted = [...state.sessions.values()].sort((a, b) => b.created_at - a.created_at);
  if (!sorted.length) ul.append(el("li", "empty", "No sessions yet."));
  for (const s of sorted) {
    const li = el("li", s.session_id === state.viewed ? "selected" : "");
    li.dataset.sessionId = s.session_id;
    li.append(el("div", "title", s.title || s.name || s.session_id), badgeOf(s));
    const waiting = pendingPermissions(s.session_id);
    if (waiting) li.append(el("span", "muted", ` · ${waiting} waiting for your answer`));
    li.onclick = () => openView(s.session_id);
    ul.append(li);
  }
}

const PROMPT_HINT = "Message the agent… (Enter to send, Shift+Enter for a new line, / for commands)";
const SIGN_IN_FIRST = "Sign in first (the card above): the agent starts once you are signed in";

export function renderHead() {
  const head = $("detail-head"); head.replaceChildren();
  const s = state.sessions.get(state.viewed);
  // While the agent asks to be signed in, a prompt would start it only to fail: the sign-in card comes first.
  const signIn = !!s && !!config(s.session_id).auth;
  const canPrompt = !!s && !TERMINAL.includes(s.state) && state.live && !signIn;
  $("prompt").disabled = $("send").disabled = !canPrompt;
  $("prompt").placeholder = signIn ? SIGN_IN_FIRST : PROMPT_HINT;
  $("send").title = signIn ? SIGN_IN_FIRST : "";
  if (!s) { head.append(el("span", "empty", "Select or start a session.")); $("status-line").hidden = true; renderConfig(); renderChanges(); return; }
  const badge = badgeOf(s, state.live ? "" : " stale"); badge.id = "session-state";
  const running = el("span", `muted${state.live ? "" : " stale"}`, s.is_agent_running ? "agent running" : "agent stopped");
  running.id = "agent-running";
  head.append(el("strong", "", s.title || s.name || s.session_id), badge, running);
  const kept = state.keptRunning.get(s.session_id);
  if (kept !== undefined) {  // its agent host kept it, and its turn, through a gateway restart
    const note = el("span", "muted kept-running", "kept running while the gateway restarted");
    note.id = "kept-running"; note.title = `the same agent process, attached again at ${new Date(kept * 1000).toLocaleTimeString()}`;
    head.append(note);
  }
  head.append(el("span", "muted", `${s.name ? `${s.name} · ` : ""}${s.agent}${s.agent_version ? ` ${s.agent_version}` : ""} · ${s.cwd}`));
  if (s.host) {  // its agent runs on a remote host: the cwd shown is a directory there
    const host = el("span", "muted remote-host", `⇄ on ${s.host}`);
    host.id = "remote-host"; host.title = `its agent runs on remote host ${s.host}, in ${s.cwd} there`;
    head.append(host);
  }
  if (s.worktree) {  // its own git worktree: the branch it works on, and where it came from
    const branch = el("span", "muted worktree-branch", `⎇ ${s.worktree.branch} (from ${s.worktree.base})`);
    branch.id = "worktree-branch"; branch.title = `a git worktree of ${s.worktree.repo}`;
    head.append(branch);
  }
  if (s.forked_from) {
    const from = el("a", "muted forked-from", `forked from ${(state.sessions.get(s.forked_from) || {}).title || s.forked_from}`);
    from.href = `#${s.forked_from}`; from.dataset.sessionId = s.forked_from; from.onclick = (ev) => { ev.preventDefault(); if (state.sessions.has(s.forked_from)) openView(s.forked_from); };
    head.append(from);
  }
  head.append(...headButtons(s));
  renderStatusLine(s);
  renderConfig();
  renderChanges();  // its Rewind and Merge follow the session's state
}

// The viewed session's controls: Resume, Stop turn, Cancel session, Fork, Changes, Raw.
function headButtons(s) {
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
  // Changes: what the session did to its files, its checkpoints (Rewind), a worktree's Merge and Discard.
  const changes = el("button", "", state.showChanges ? "Hide changes" : "Changes"); changes.id = "changes-toggle";
  changes.title = "what this session changed in its files, and its checkpoints";
  changes.onclick = () => {
    if (state.showChanges) closeChanges(); else state.showChanges = true;
    renderHead();
    loadChanges().catch((e) => showErrorAt("changes-error", e));
  };
  const raw = el("button", "", state.showRaw ? "Hide raw" : "Raw"); raw.id = "raw-toggle";
  raw.title = "every event of this session as JSON, for agent authors";
  raw.onclick = () => { state.showRaw = !state.showRaw; $("raw").hidden = !state.showRaw; renderRaw(); renderHead(); };
  return [resume, stop, cancel, fork, changes, raw];
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
    line.append(el("span", "", `Restore failed: ${s.error_message || RESUME_REASONS.error_recovery}`));
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
    line.append(el("span", "", `Needs resume: ${RESUME_REASONS[status.resume_reason] || status.resume_reason}${manual}`));
    if (s.error_message) line.append(el("div", "muted", `Last error: ${s.error_message}`));
  } else { line.hidden = true; }
}

document.addEventListener("acp-changes-closed", () => renderHead());  // the pane's own Close: the head's toggle says so
