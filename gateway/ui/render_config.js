// The web UI's configuration bar: the viewed session's options, its usage, choices not applied, and its sign-in card.
import { $, el, showErrorAt } from "./dom.js";
import { state, call, config } from "./state.js";
import { TERMINAL, optionValues } from "./fold.js";
import { renderList, renderHead } from "./render_sessions.js";
import { signInVars } from "./present.js";

export function renderConfig() {
  const bar = $("config-bar"), notice = $("config-notice");
  const s = state.sessions.get(state.viewed);
  bar.replaceChildren(); notice.replaceChildren();
  if (!s) { bar.hidden = notice.hidden = true; return; }
  const c = config(s.session_id);
  const editable = state.live && !TERMINAL.includes(s.state);
  for (const o of c.options || []) {
    const control = optionControl(s.session_id, c, o, editable);
    if (control) bar.append(control);  // a kind of option newer than this page: not shown as a control
  }
  const usage = usageView(c.usage);
  if (usage) bar.append(usage);
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

// One option as a control (a checkbox, a select), or null for a kind of option this page does not know.
function optionControl(sid, c, o, editable) {
  const label = el("label", c.chosen && c.chosen[o.id] ? "chosen" : "");
  label.title = [o.description, c.chosen && c.chosen[o.id] ? `chosen by ${c.chosen[o.id].by}: kept across restarts` : ""]
    .filter(Boolean).join(" — ");
  if (o.type === "boolean") {
    const box = el("input"); box.type = "checkbox"; box.checked = !!o.currentValue; box.dataset.optionId = o.id;
    box.disabled = !editable; box.onchange = () => setOption(sid, o.id, box.checked);
    label.append(box, el("span", "", o.name || o.id));
  } else if (o.type === "select") {
    const pick = el("select"); pick.dataset.optionId = o.id; pick.disabled = !editable;
    pick.setAttribute("aria-label", o.name || o.id);
    for (const v of optionValues(o)) { const opt = el("option", "", v.name || v.value); opt.value = v.value; opt.title = v.description || ""; pick.append(opt); }
    pick.value = o.currentValue;
    pick.onchange = () => setOption(sid, o.id, pick.value);
    label.append(el("span", "", o.name || o.id), pick);
  } else return null;
  return label;
}

// The agent's context window and cost, as it reports them (null when it reports none).
function usageView(u) {
  if (!u || typeof u.used !== "number") return null;
  const k = (n) => (n >= 1000 ? `${(n / 1000).toFixed(n >= 100000 ? 0 : 1)}k` : String(n));
  let cost = "";
  if (u.cost && typeof u.cost.amount === "number") {
    try { cost = ` · ${new Intl.NumberFormat(undefined, { style: "currency", currency: u.cost.currency, maximumSignificantDigits: 3 }).format(u.cost.amount)}`; }
    catch { cost = ` · ${u.cost.amount} ${u.cost.currency}`; }  // a currency code the browser does not know
  }
  const usage = el("span", "", `context ${k(u.used)} / ${k(u.size)}${cost}`);
  usage.title = "tokens in the agent's context window, of its size; the session's cost so far, as the agent reports";
  usage.id = "usage";
  return usage;
}

// The agent asks to be signed in: each of its methods, with what it needs (an API key is typed into a password field,
// sent once, and never shown again: the gateway keeps it write-only).
function signInCard(sid, auth, editable) {
  const card = el("div", "sign-in");
  card.append(el("strong", "", "The agent asks you to sign in"));
  const vars = signInVars(auth);  // named, so a person knows which key to fetch (or to export before a restart)
  const typed = (auth.methods || []).some((m) => m.kind === "env_var");
  if (vars.length) card.append(el("div", "sign-in-vars", `It needs ${vars.join(" or ")}${typed ? ": type it below" : ""}.`));
  card.append(el("div", "muted", auth.reason || ""));
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
