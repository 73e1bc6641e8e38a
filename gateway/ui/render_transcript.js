// The web UI's transcript pane: the viewed session's folded entries drawn as messages and cards, and the Raw pane.
import { $, el, md, stamp } from "./dom.js";
import { state } from "./state.js";
import { permissionCard, elicitationCard, diffView } from "./cards.js";
import { ansiRuns } from "./ansi.js";
import { sessionParts } from "./present.js";
import { openView } from "./session_actions.js";

export function renderTranscript() {
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
    } else if (e.kind === "notice") box.append(stamp(withSessionLinks(el("div", `${cls} level-${e.level || "warning"}`), e.text), e));
    else if (e.kind === "turn") box.append(stamp(el("div", `${cls}${e.failed ? " level-error" : ""}`, e.text), e));
    else box.append(stamp(el("div", cls, e.text), e));
  }
  box.scrollTop = box.scrollHeight;
}

export function renderRaw() {
  if (!state.showRaw) return;
  const log = state.raw.get(state.viewed) || [];
  $("raw-log").textContent = log.map((p) => JSON.stringify(p)).join("\n");
}

// A message's text with each session it names ("Forked into session s-…") as a link that opens that session.
function withSessionLinks(node, text) {
  for (const part of sessionParts(text)) {
    if (!part.session) { node.append(part.text); continue; }
    const link = el("a", "session-link", part.session); link.href = `#${part.session}`; link.dataset.sessionId = part.session;
    link.onclick = (ev) => { ev.preventDefault(); openView(part.session); };
    node.append(link);
  }
  return node;
}

// An agent's terminal: its command, its output in the command's colours, and how it ended. The output is text nodes
// in spans made here (never parsed HTML: an escape sequence is never markup), styled by class, and by the CSSOM for
// the colours no class names.
function terminalView(term) {
  const box = el("div", "msg card terminal");
  const head = el("div", "terminal-head");
  const command = el("code", "", `$ ${term.command}`); command.title = command.textContent;  // cut short when long
  head.append(command);
  const x = term.exit;
  head.append(el("span", `status status-${!x ? "in_progress" : x.recorded ? "recorded" : x.exit_code === 0 ? "completed" : "failed"}`,
    !x ? "running" : x.recorded ? "recorded" : x.exit_code != null ? `exit ${x.exit_code}` : `killed (${x.signal})`));
  box.append(head);
  const pre = el("pre", "terminal-output");
  for (const run of ansiRuns(term.text)) {
    if (!run.classes.length && !run.color && !run.background) { pre.append(run.text); continue; }
    const span = el("span", run.classes.join(" "), run.text);
    if (run.color) span.style.color = run.color;  // the CSSOM: allowed by the page's policy, unlike a style attribute
    if (run.background) span.style.backgroundColor = run.background;
    pre.append(span);
  }
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
