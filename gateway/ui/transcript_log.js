// The web UI's transcripts as read: a session's journal (or its recorded history) folded by fold.js, then live events.
import { state, call, config } from "./state.js";
import { newLog, applyEvent, applyConfig, touchesConfig, isNew, historyEvents } from "./fold.js";
import { renderConfig } from "./render_config.js";
import { renderList, renderHead } from "./render_sessions.js";
import { renderTranscript } from "./render_transcript.js";
import { updatePalette } from "./palette.js";

// One event folded into a session's transcript; the config bar (and with commands, the palette) drawn again when
// the viewed session's configuration changed.
function fold(sid, log, p) { configShown(sid, applyEvent(log, p, touchesConfig(p) ? config(sid) : null)); }

function configShown(sid, changed) {
  if (changed === "options") renderList();  // a sign-in asked for or done: the session's badge says it
  if (!changed || sid !== state.viewed) return;
  if (changed === "options") renderHead(); else renderConfig();  // the head: its badge, and the prompt a sign-in holds
  if (changed === "state") updatePalette();
}

// A live event into an opened session's transcript: after the journal's part is in (events that arrive while it is
// read wait for it), and never twice (the journal's read and the live stream may overlap).
export function feed(sid, p) {
  const log = state.logs.get(sid);
  if (!log) {  // not opened: its transcript is read from the journal when it is; its configuration is kept meanwhile
    if (touchesConfig(p)) configShown(sid, applyConfig(config(sid), p));
    return;
  }
  if (log.loading) { log.waiting.push(p); return; }
  if (!isNew(log, p)) return;
  fold(sid, log, p);
  if (sid === state.viewed) renderTranscript();
}

// A session's transcript: its events from the journal, then live ones past that read's cursor. When retention has
// pruned its beginning, its recorded history stands for the journal instead (history, then live events).
export function openLog(sid) {
  let log = state.logs.get(sid);
  if (log) return log.loading || Promise.resolve(log);
  log = newLog();
  state.logs.set(sid, log);
  log.loading = (async () => {
    let after = 0;
    const s = state.sessions.get(sid);
    const forkedAt = s && s.forked_from ? await forkedPart(sid, log, s) : 0;
    for (let first = true; ; first = false) {
      const page = await call("task.session.events", { session_id: sid, after, limit: 2000 });
      if (first && !page.complete) { await fromHistory(sid, log, page.cursor, forkedAt); break; }
      for (const e of page.events) fold(sid, log, e);
      if (page.next == null) { log.through = Math.max(log.through, page.cursor); break; }
      after = page.next;
    }
    log.loading = null;
    for (const p of log.waiting) if (isNew(log, p)) fold(sid, log, p);
    log.waiting = [];
    return log;
  })();
  log.loading.catch(() => state.logs.delete(sid));  // read again at the next opening
  return log.loading;
}

async function allHistory(sid) {
  const entries = [];
  for (let after = 0; after != null; ) {
    const h = await call("task.session.history", { session_id: sid, after, limit: 1000 });
    entries.push(...h.entries); after = h.next;
  }
  return entries;
}

async function fromHistory(sid, log, cursor, shownThrough = 0) {
  const entries = (await allHistory(sid)).filter((e) => e.ts > shownThrough);
  log.entries.push({ kind: "notice", level: "info", text: "The start of this session is past the event journal's retention: what it recorded is shown from its history." });
  for (const p of historyEvents(entries)) fold(sid, log, p);
  log.through = cursor;
}

// A fork's journal starts at the fork: the conversation before it is the copy of the original's history it was made
// with (entries as old as the fork itself), shown first.
async function forkedPart(sid, log, s) {
  const entries = (await allHistory(sid)).filter((e) => e.ts <= s.created_at);
  if (!entries.length) return 0;
  const from = (state.sessions.get(s.forked_from) || {}).title || s.forked_from;
  log.entries.push({ kind: "notice", level: "info", text: `Before the fork (from ${from}), as its history recorded it:` });
  for (const p of historyEvents(entries)) fold(sid, log, p);
  return s.created_at;
}
