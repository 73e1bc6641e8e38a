// The web UI's agents: the gateway's info (agents, workspace roots) in the start form, and the agents page.
import { $, el, showErrorAt } from "./dom.js";
import { state, call } from "./state.js";

const AVAILABILITY = { installed: "", downloads_on_first_start: " (downloads on first start)", not_found: " (not installed)" };
const AUTH_WORDS = { signed_in: "signed in", needs_sign_in: "needs sign-in", unknown: "unknown", not_probed: "not probed" };

export async function loadInfo() {
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

export function wireAgentsPage() {
  $("agents-open").onclick = () => agentsOpen(true);
  $("agents-close").onclick = () => agentsOpen(false);
}
