// The web UI's answerable cards: an agent's permission requests and questions (elicitations), and their answers.
import { el, stamp } from "./dom.js";
import { state, call } from "./state.js";
import { contentText } from "./fold.js";
import { renderTranscript } from "./render_transcript.js";

const ALREADY_TERMINAL = AcpGateway.ALREADY_TERMINAL;

export function diffView(d) {
  const pre = el("pre", "diff");
  pre.append(el("div", "muted", d.path || ""));
  for (const line of (d.oldText || "").split("\n").filter((x, i, a) => x || i < a.length - 1)) pre.append(el("div", "del", `- ${line}`));
  for (const line of (d.newText || "").split("\n").filter((x, i, a) => x || i < a.length - 1)) pre.append(el("div", "add", `+ ${line}`));
  return pre;
}

// An agent's question: a form made from its JSON Schema (flat fields), or a link to open; answered once, by anyone.
export function elicitationCard(e) {
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
    for (const [name, prop] of Object.entries(schema.properties || {})) form.append(schemaField(e, name, prop, required));
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

// One field of a question's form, from its schema property; what was typed is kept on the card's entry.
function schemaField(e, name, prop, required) {
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
  label.append(input);
  return label;
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

export function permissionCard(e) {
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

function respond(card, answer) {
  call("task.session.permission.respond", { session_id: state.viewed, request_id: card.request_id, ...answer })
    .then(() => { card.error = null; })
    .catch((e) => {
      if (e.code === ALREADY_TERMINAL) return;  // answered elsewhere first: its answer arrives as an event
      card.error = `Not answered: ${e.message || e}`; renderTranscript();
    });
}
