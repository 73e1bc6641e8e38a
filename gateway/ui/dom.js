// The web UI's small DOM helpers: elements by id, new elements, markdown, time stamps and error boxes.

export const $ = (id) => document.getElementById(id);
export const el = (tag, cls, text) => { const e = document.createElement(tag); if (cls) e.className = cls; if (text != null) e.textContent = text; return e; };
export const clock = (ts) => new Date(ts * 1000).toLocaleTimeString();

// An agent's markdown as HTML, sanitised (marked and DOMPurify are the bundled vendor scripts' globals).
export function md(text) {
  const box = el("div", "md");
  if (window.marked && window.DOMPurify) box.innerHTML = DOMPurify.sanitize(marked.parse(text || ""));
  else box.textContent = text;
  return box;
}

// The time shows through CSS (`attr(data-ts)`): it is not part of the message's text.
export function stamp(node, e) { if (e.ts) node.dataset.ts = clock(e.ts); return node; }

// A refused call's message, next to the control that made it (null clears it).
export function showErrorAt(id, e) {
  const box = $(id); if (!box) return;
  box.textContent = e ? (e.message || String(e)) : ""; box.hidden = !e;
}
