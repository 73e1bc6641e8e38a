// The web UI's slash-command palette: `/` at the start of the prompt lists the agent's commands.
import { $, el } from "./dom.js";
import { state, config } from "./state.js";

export function updatePalette() {
  const box = $("palette"), text = $("prompt").value, m = /^\/(\S*)$/.exec(text);
  const commands = state.viewed ? config(state.viewed).commands || [] : [];
  const items = m ? commands.filter((c) => c && typeof c.name === "string" && c.name.startsWith(m[1])) : [];
  state.palette.items = items; state.palette.active = Math.min(state.palette.active, Math.max(items.length - 1, 0));
  box.replaceChildren();
  items.forEach((c, i) => {
    const li = el("li", i === state.palette.active ? "active" : ""); li.setAttribute("role", "option"); li.dataset.command = c.name;
    li.append(el("span", "cmd", `/${c.name}`));
    if (c.input && c.input.hint) li.append(el("span", "hint", c.input.hint));
    li.append(el("span", "what", c.description || ""));
    li.onmousedown = (ev) => { ev.preventDefault(); pickCommand(c); };
    box.append(li);
  });
  box.hidden = !items.length;
}

function pickCommand(c) {
  $("prompt").value = `/${c.name} `; $("prompt").focus();
  state.palette.active = 0; updatePalette();
}

// The prompt's keys: the palette's (arrows, Tab, Enter, Escape) while it is open, else Enter sends.
export function wirePromptKeys() {
  $("prompt").addEventListener("keydown", (ev) => {
    const p = state.palette;
    if (!$("palette").hidden && p.items.length) {
      if (ev.key === "ArrowDown" || ev.key === "ArrowUp") {
        ev.preventDefault(); p.active = (p.active + (ev.key === "ArrowDown" ? 1 : p.items.length - 1)) % p.items.length;
        updatePalette(); return;
      }
      // Tab takes the highlighted command; so does Enter, unless the command is typed out already (then it is sent).
      const typedOut = $("prompt").value === `/${p.items[p.active].name}`;
      if (ev.key === "Tab" || (ev.key === "Enter" && !ev.shiftKey && !typedOut)) {
        ev.preventDefault(); pickCommand(p.items[p.active]); return;
      }
      if (ev.key === "Escape") { $("palette").hidden = true; return; }
    }
    if (ev.key === "Enter" && !ev.shiftKey) { ev.preventDefault(); $("send").click(); }
  });
  $("prompt").addEventListener("input", () => { state.palette.active = 0; updatePalette(); });
  $("prompt").addEventListener("blur", () => { $("palette").hidden = true; });
}
