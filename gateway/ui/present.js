// The web UI's pure presentation rules (no DOM, no window): how agents are listed and what their sign-in needs are
// called, what a session's state badge says, which directory the start form offers and where it says sessions may
// run, what a refused start asks the person to type instead, where a message names another session, and which lines of a
// session's patch are whose file.

export const AVAILABILITY = { installed: "", downloads_on_first_start: "downloads on first start", not_found: "not installed" };
const AUTH_WORDS = { signed_in: "signed in", needs_sign_in: "needs sign-in", unknown: "unknown", not_probed: "not probed" };

// Agents as the start form and the agents page list them: those added from the registry (with a `version`) first,
// then the profiles, each group by name.
export function sortAgents(agents) {
  const name = (a) => a.name || a.id;
  return [...agents].sort((x, y) => (!!y.version - !!x.version) || name(x).localeCompare(name(y)));
}

// What an agent's sign-in looks like: "needs sign-in: set ANTHROPIC_API_KEY" names the variables the gateway knows
// (`sign_in_vars`; an older gateway sends none: then the state alone). Null when the gateway says nothing of it.
export function signInWords(agent) {
  const st = agent.auth_state;
  if (!st) return null;
  const vars = Array.isArray(agent.sign_in_vars) ? agent.sign_in_vars.filter((v) => typeof v === "string" && v) : [];
  const words = AUTH_WORDS[st] || st.replace(/_/g, " ");
  return st === "needs_sign_in" && vars.length ? `${words}: set ${vars.join(" or ")}` : words;
}

// An agent's line in the start form's list: its name, version, and what a person must know before starting it.
export function agentLabel(agent) {
  const notes = [AVAILABILITY[agent.availability] || ""];
  if (agent.auth_state === "needs_sign_in") notes.push(signInWords(agent));
  const said = notes.filter(Boolean);
  return `${agent.name || agent.id}${agent.version ? ` ${agent.version}` : ""}${said.length ? ` (${said.join("; ")})` : ""}`;
}

// The variables a session's sign-in card asks for: those of its API-key methods, and any the gateway names besides.
export function signInVars(auth) {
  const found = [];
  for (const m of (auth && auth.methods) || []) if (m.kind === "env_var") found.push(...(m.vars || []));
  found.push(...((auth && auth.sign_in_vars) || []));
  return [...new Set(found.filter((v) => typeof v === "string" && v))];
}

// ---- a session's state badge (in the list and in its header) ----
const ENDED_STATES = ["CANCELLED", "FAILED", "COMPLETED"];
const AGENT_STATES = ["RUNNING", "WAITING_FOR_INPUT"];  // states that promise an agent: wrong when none runs

// What a session's badge says and its class. `s` is what the page knows of the session: a status view, a summary
// with what its `session_status` events said folded in (`needs_resume`, `resume_reason`), or a bare summary
// (task.session.list says neither); `auth` is its config's sign-in request (set while the agent asks for one).
// Its state, unless something must happen before it can take a prompt: a sign-in, a resume (a summary that does not
// say: a session in an agent's state whose agent is not running), or a recovery after a failed restore. STARTING is
// said as it is: an agent is being launched.
export function stateBadge(s, auth) {
  const as = (word) => ({ word, tone: `tone-${word.replace(/ /g, "-")}` });
  if (ENDED_STATES.includes(s.state)) return as(s.state);
  if (auth) return as("needs sign-in");
  if (s.is_agent_running || s.state === "STARTING") return as(s.state);
  if (s.resume_reason === "error_recovery") return as("restore failed");
  if (s.resume_reason === "stale_execution") return as(s.state);  // another gateway runs it: nothing to do here
  const needsResume = typeof s.needs_resume === "boolean" ? s.needs_resume : AGENT_STATES.includes(s.state);
  if (needsResume || s.resume_reason === "not_started") return as("needs resume");
  return as(s.state);
}

// ---- the start form's working directory ----
export const RECENT_KEEP = 5;  // directories remembered per owner

export function inside(path, root) {
  const r = root.endsWith("/") ? root : `${root}/`;
  return path === root || path.startsWith(r);
}

// The directories sessions were started in (newest first) after one more, at most RECENT_KEEP.
export function remember(recent, cwd) { return [cwd, ...(recent || []).filter((d) => d !== cwd)].slice(0, RECENT_KEEP); }

// What the directory field starts with: the newest directory a session started in that still lies inside a root
// (with no roots known, the newest); never a root itself, which the gateway may refuse (HOME holds its own files).
export function prefilledCwd(recent, roots) {
  return (recent || []).find((d) => !roots.length || roots.some((r) => inside(d, r))) || "";
}

const bare = (path) => (path.length > 1 ? path.replace(/\/+$/, "") : path);

// Where a session may run, in words: each workspace root "or a directory inside it" (the workspace rules take a root
// itself, unless it holds the gateway's own state), a root the gateway refused for that (`refusedRoots`, learnt from
// its refusals: the page cannot see where the gateway keeps its state) as "a project directory inside" it.
export function whereWords(roots, refusedRoots = []) {
  return roots.map((r) => (refusedRoots.includes(bare(r)) ? `a project directory inside ${r}` : `${r} or a directory inside it`))
    .join("; or ");
}

// The root a refusal says holds the gateway's own state (so is no place for a session), or null.
export function refusedRoot(e, roots, workspaceCode) {
  if (!e || e.code !== workspaceCode || !e.data || e.data.rule !== "contains_gateway_files") return null;
  const cwd = bare(e.data.cwd || "");
  return roots.map(bare).find((r) => r === cwd) || null;
}

// What a refused start asks the person to type instead (null for a refusal that is not about the directory).
// `e` is the refusal ({code, message, data: {cwd, rule}}), `roots` the owner's workspace roots, `recent` the
// directories sessions started in, `refusedRoots` the roots refused for holding the gateway's state.
export function refusalHint(e, roots, recent, workspaceCode, refusedRoots = []) {
  if (!e || e.code !== workspaceCode) return null;
  const cwd = (e.data && e.data.cwd) || "", rule = e.data && e.data.rule;
  const within = roots.length ? ` inside ${roots.join(" or ")}` : "";
  const where = roots.length ? whereWords(roots, refusedRoots) : "a project directory";
  const last = prefilledCwd(recent, roots);
  const tail = last && last !== cwd ? ` The last one a session started in was ${last}.` : "";
  if (rule === "contains_gateway_files") {
    const example = `${cwd.replace(/\/+$/, "")}/my-project`;
    return `Type a project's own directory instead, one that does not hold the gateway's state: ${example}, say (create it first).${tail}`;
  }
  if (rule === "inside_gateway_files") return `Type a project directory outside the gateway's own files${within}.${tail}`;
  if (rule === "outside_workspace_roots" || rule === "system_directory") return `Type ${where}.${tail}`;
  return `Create it first (mkdir -p ${cwd}), or type a directory that exists${within}.${tail}`;  // no such directory
}

// ---- sessions named in a message ----
const SESSION_ID = /\bs-[0-9a-f]{8,}\b/g;

// A message's text in parts: plain text ({text}) and the sessions it names ({session}), in order.
export function sessionParts(text) {
  const parts = []; let at = 0;
  for (const m of (text || "").matchAll(SESSION_ID)) {
    if (m.index > at) parts.push({ text: text.slice(at, m.index) });
    parts.push({ session: m[0] }); at = m.index + m[0].length;
  }
  if (at < (text || "").length) parts.push({ text: text.slice(at) });
  return parts;
}

// A name as git's patch header writes it: as it is, or in C quotes when it holds a quote, a backslash or a control
// character (the gateway runs git with core.quotePath off: other characters are not quoted).
function headerName(text) {
  if (!text.startsWith('"')) return text;
  const escapes = { n: "\n", t: "\t", '"': '"', "\\": "\\", a: "\x07", b: "\b", f: "\f", r: "\r", v: "\v" };
  return text.slice(1, -1).replace(/\\(.)/g, (_, c) => escapes[c] ?? c);
}

// The patch cut at each file's `diff --git` header: path -> its lines. A header is `a/NAME b/NAME` (renames are off: the
// two names are one), read by length, so a name holding " b/" is read whole; in C quotes when git quotes it.
export function patchByFile(patch) {
  const files = new Map(); let current = null;
  for (const line of (patch || "").split("\n")) {
    if (line.startsWith("diff --git ")) {
      const rest = line.slice("diff --git ".length), quoted = rest.startsWith('"');
      const skip = quoted ? 3 : 2, size = (rest.length - (quoted ? 9 : 5)) / 2;
      const name = rest.slice(skip, skip + size);
      current = headerName(quoted ? `"${name}"` : name); files.set(current, []);
    }
    if (current !== null) files.get(current).push(line);
  }
  return files;
}
