// The web UI's agents: the gateway's info (agents, workspace roots) in the start form, and the agents page.
import { $, el, showErrorAt } from "./dom.js";
import { state, call } from "./state.js";
import { AVAILABILITY, sortAgents, signInWords, agentLabel, prefilledCwd, whereWords } from "./present.js";

// The directories this owner's sessions started in, newest first (kept in the browser: the field offers the last).
export const recentKey = () => `acp-recent-cwd:${state.owner || ""}`;
export function recentCwds() {
  try { const v = JSON.parse(localStorage.getItem(recentKey()) || "[]"); return Array.isArray(v) ? v.filter((d) => typeof d === "string") : []; }
  catch { return []; }
}

let loading = null;  // the gateway.info call in flight: a focus while it runs waits for it rather than asking again
let cwdOffered = false;  // the directory field is filled in once, at the first info: what the person types stays theirs

// The gateway's info, asked again each time the start form or the agents page is opened or focused: an agent added
// meanwhile (`acp-gateway agents add`) is listed without a reload.
export function loadInfo() {
  if (!loading) loading = call("gateway.info").then(showInfo).finally(() => { loading = null; });
  return loading;
}

function showInfo(info) {
  state.owner = info.owner;
  $("owner").textContent = `owner: ${info.owner}`;
  state.agents = new Map(info.agents.map((a) => [a.id, a]));
  const pick = $("agent"), chosen = pick.value;
  const options = sortAgents(info.agents).map((a) => {
    const o = el("option", "", agentLabel(a)); o.value = a.id;
    if (a.availability === "downloads_on_first_start") o.title = "started through a package runner (npx, uvx…): its first start downloads it, which needs the network";
    return o;
  });
  // Drawn again only when it changed: replacing the options of an open list would close it under the person's hand.
  const same = options.length === pick.options.length && options.every((o, i) => o.value === pick.options[i].value && o.textContent === pick.options[i].textContent);
  if (!same) pick.replaceChildren(...options);
  pick.value = chosen && state.agents.has(chosen) ? chosen : info.default_agent;  // the person's pick stays
  showAgentNote();
  // Where sessions may run: said in the field's hint; offered in its list after the directories used before. The
  // field itself starts with the last directory a session started in, never with a root (the gateway refuses one
  // that holds its own files, as HOME does).
  state.roots = info.workspace_roots || [];
  // The remote hosts this owner may run sessions on: a choice of the start form only when there are some.
  const hosts = info.remote_hosts || [], hostPick = $("host");
  state.remoteHosts = hosts;
  if (hosts.length && hostPick.options.length !== hosts.length + 1) {
    const here = el("option", "", "on this machine"); here.value = "";
    hostPick.replaceChildren(here, ...hosts.map((h) => { const o = el("option", "", `on ${h.name} (${h.workspace_roots.join(", ")})`); o.value = h.name; return o; }));
    hostPick.onchange = () => { $("worktree").disabled = !!hostPick.value; if (hostPick.value) $("worktree").checked = false; showWhere(); };
    agentChosen();  // the first time: the default agent's host
  }
  hostPick.hidden = !hosts.length;
  const recent = recentCwds();
  const offered = [...new Set([...recent, ...state.roots])];
  $("cwd-roots").replaceChildren(...offered.map((r) => { const o = el("option"); o.value = r; return o; }));
  showWhere();
  if (!cwdOffered && !$("cwd").value) $("cwd").value = prefilledCwd(recent, state.roots);
  cwdOffered = true;
}

// The directory field's hint: where sessions may run (a root the gateway refused for holding its state: inside it).
export function showWhere() {
  const remote = (state.remoteHosts || []).find((h) => h.name === $("host").value);
  if (remote) {  // a directory of that machine's: its roots, never this one's
    $("cwd").placeholder = `working directory on ${remote.name}: inside ${remote.workspace_roots.join(" or ")}`;
    $("cwd").title = `The session's agent runs on remote host ${remote.name}, in this directory there.`;
    return;
  }
  const where = state.roots.length ? whereWords(state.roots, state.refusedRoots) : "an absolute path";
  $("cwd").placeholder = `working directory: ${where}`;
  $("cwd").title = `A session runs in ${where}${state.roots.length ? " (never one that holds the gateway's own state)" : ""}.`;
}

// Under the agent list: what the chosen agent needs before its first prompt (a key to set, say).
// An agent chosen: where its profile runs it is chosen with it (the person may choose another host after).
export function agentChosen() {
  const a = state.agents.get($("agent").value), hostPick = $("host");
  if (a && hostPick.options.length && [...hostPick.options].some((o) => o.value === (a.host || ""))) {
    hostPick.value = a.host || ""; if (hostPick.onchange) hostPick.onchange();
  }
  showAgentNote();
}

export function showAgentNote() {
  const a = state.agents.get($("agent").value), note = $("agent-note");
  const needs = a && a.auth_state === "needs_sign_in" ? signInWords(a) : null;
  note.textContent = needs ? `${a.name || a.id} ${needs}` : ""; note.hidden = !needs;
}

// ---- the agents page: what each agent is, which version, whether it is signed in, how its last check went ----
export function agentsOpen(open) {
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
  for (const a of sortAgents(state.agents.values())) {  // installed from the registry first (they say the most)
    const row = el("tr"); row.dataset.agent = a.id;
    const name = el("td"); name.append(el("strong", "", a.name || a.id), el("div", "muted", a.id));
    const versions = (a.installed_versions || []).filter((v) => v !== a.version);
    const version = el("td", "agent-version", a.version || AVAILABILITY[a.availability] || "—");
    if (versions.length) version.append(el("div", "muted", `also installed: ${versions.join(", ")}`));
    const auth = el("td", `agent-auth auth-${a.auth_state || "none"}`, signInWords(a) || "—");
    const check = el("td", "agent-check", a.version ? checkWords(a.last_check) : "—");
    const start = el("button", "primary", "Start session"); start.type = "button";
    start.disabled = a.availability === "not_found";
    start.onclick = () => startWith(a.id);
    const action = el("td"); action.append(start);
    row.append(name, version, auth, check, action); body.append(row);
  }
}

function startWith(agentId) {
  $("agent").value = agentId; agentChosen();
  agentsOpen(false);
  if (!$("cwd").value.trim()) { $("cwd").focus(); showErrorAt("start-error", { message: "Give the working directory, then Start session." }); return; }
  $("start-form").requestSubmit();
}

export function wireAgentsPage() {
  $("agents-open").onclick = () => agentsOpen(true);
  $("agents-close").onclick = () => agentsOpen(false);
  $("agent").onchange = agentChosen;
  // Focusing the start form (its agent list, say) asks the gateway again: an agent added since is offered at once.
  $("start-form").addEventListener("focusin", () => { if (state.everLive) loadInfo().catch(() => {}); });
}
