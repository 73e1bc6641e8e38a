// The web UI's Changes pane: the viewed session's files in git (docs/worktrees.md) — what it changed (the files, the
// patch file by file), its checkpoints with Rewind, and for a worktree session Merge and Discard.
import { $, el, showErrorAt } from "./dom.js";
import { state, call } from "./state.js";
import { patchByFile } from "./present.js";

const { GIT_REFUSED } = AcpGateway;  // the gateway's error codes (clients/typescript/src/codes.ts)
const STATUS = { A: "added", M: "modified", D: "deleted", T: "type changed" };
const PROMPT_KEPT = 120;  // characters of a turn's prompt a checkpoint keeps (gateway/runtime/checkpoints.py)

export async function loadChanges(sid = state.viewed) {
  if (!sid || !state.showChanges) return;
  const [diff, points] = await Promise.allSettled([
    call("task.session.diff", { session_id: sid }), call("task.session.checkpoints", { session_id: sid })]);
  state.changes.set(sid, { diff: diff.status === "fulfilled" ? diff.value : null,
                           points: points.status === "fulfilled" ? points.value.checkpoints : [],
                           error: diff.status === "rejected" ? diff.reason : null });
  if (sid === state.viewed) renderChanges();
}

export function closeChanges() {
  state.showChanges = false; $("changes").hidden = true;
  showErrorAt("changes-error", null); $("changes-note").textContent = "";
}

// Drawn again whenever the viewed session changes (its state: a running turn disables Rewind and Merge) and when its
// changes were read again; the files a person opened stay open.
export function renderChanges() {
  const s = state.sessions.get(state.viewed);
  if (!s && state.showChanges) closeChanges();  // the session went (deleted, discarded): nothing of it stays
  const pane = $("changes"); pane.hidden = !state.showChanges;
  if (!state.showChanges || !s) return;
  const body = $("changes-body"); body.replaceChildren();
  const known = state.changes.get(state.viewed);
  const busy = !state.live || s.state === "RUNNING";
  const head = el("div", "changes-head");
  const refresh = el("button", "", "Refresh"); refresh.id = "changes-refresh";
  refresh.onclick = () => loadChanges().catch((e) => showErrorAt("changes-error", e));
  const close = el("button", "", "Close"); close.id = "changes-close";
  close.onclick = () => { closeChanges(); document.dispatchEvent(new Event("acp-changes-closed")); };
  head.append(refresh);
  if (s.worktree) {
    head.prepend(el("span", "muted", `branch ${s.worktree.branch} from ${s.worktree.base}`));
    const merge = el("button", "", `Merge into ${s.worktree.base}`); merge.id = "merge";
    merge.disabled = busy;
    merge.title = busy ? "wait for the turn to end (or stop it)"
      : "commit what the agent left uncommitted on its branch, and merge the branch into its base";
    merge.onclick = () => mergeViewed(s);
    const discard = el("button", "danger", "Discard"); discard.id = "discard";
    discard.title = "delete this session, its worktree and its branch";
    discard.onclick = () => discardViewed(s);
    head.append(merge, discard);
  }
  head.append(close);
  body.append(head);
  if (!known) { body.append(el("div", "muted", "Loading…")); return; }
  const reason = known.error && known.error.code === GIT_REFUSED && known.error.data ? known.error.data.reason : null;
  if (reason === "no_repository") {  // nothing of git to show: said plainly, once
    body.append(el("div", "muted no-repository", "This session works in a directory that is in no git repository "
      + "inside your workspace roots, so it has no checkpoints or diffs. Start a session with “own git worktree”, or "
      + "in a repository, to have them."));
    return;
  }
  if (reason === "no_checkpoint") body.append(el("div", "muted", "Nothing to compare with yet: the first checkpoint is taken at the start of the next turn."));
  else if (known.error) body.append(el("div", "muted", `Could not read the changes: ${known.error.message}`));
  if (known.diff) body.append(filesView(known.diff));
  body.append(checkpointsView(s, known.points, busy));
}

function filesView(diff) {
  const box = el("div", "changed-files"); box.id = "changed-files";
  const against = diff.against.checkpoint ? `checkpoint ${diff.against.checkpoint}` : diff.against.base ? "its base" : "HEAD";
  box.append(el("strong", "", `${diff.files.length} file${diff.files.length === 1 ? "" : "s"} changed since ${against}`));
  const byFile = patchByFile(diff.patch);
  for (const f of diff.files) {
    const item = el("details", "changed-file"); item.dataset.path = f.path;
    item.open = state.openFiles.has(f.path);  // as the person left it, across turns
    item.ontoggle = () => { if (item.open) state.openFiles.add(f.path); else state.openFiles.delete(f.path); };
    const summary = el("summary", "");
    summary.append(el("span", `file-status st-${f.status}`, STATUS[f.status] || f.status), " ",
                   el("code", "", f.path), " ",
                   el("span", "muted", f.added === null ? "binary" : `+${f.added} −${f.deleted}`));
    item.append(summary);
    const pre = el("pre", "diff");
    for (const line of byFile.get(f.path) || []) {
      const cls = line.startsWith("+") && !line.startsWith("+++") ? "add" : line.startsWith("-") && !line.startsWith("---") ? "del"
        : line.startsWith("@@") ? "hunk" : "muted";
      pre.append(el("div", cls, line));
    }
    item.append(pre);
    box.append(item);
  }
  if (diff.truncated) box.append(el("div", "muted", "The patch was cut at 2 MiB: acp-gateway diff shows it whole."));
  return box;
}

function checkpointsView(s, points, busy) {
  const box = el("div", "checkpoints"); box.id = "checkpoints";
  box.append(el("strong", "", "Checkpoints"), el("div", "muted", "the files at the start of each turn; Rewind puts them back as they were then"));
  if (!points.length) box.append(el("div", "muted", "None yet: one is taken at the start of each turn."));
  const ol = el("ol", "");
  for (const p of [...points].reverse()) {
    const li = el("li", ""); li.dataset.checkpoint = p.checkpoint;
    const when = new Date(p.at * 1000).toLocaleTimeString();
    const prompt = p.prompt.length >= PROMPT_KEPT ? `${p.prompt}…` : p.prompt;
    const what = p.kind === "rewind" ? "the files just before a rewind" : `before “${prompt || "a turn"}”`;
    const text = el("div", "checkpoint-text");
    text.append(el("span", "", `#${p.checkpoint} ${when} · ${what}`),
                el("span", "muted", p.files_changed === null ? "" : ` · ${p.files_changed} file${p.files_changed === 1 ? "" : "s"} changed after`));
    li.append(text);
    const rewind = el("button", "", "Rewind"); rewind.className = "rewind";
    rewind.disabled = busy;
    rewind.title = busy ? "wait for the turn to end (or stop it)" : "put the files back as they were at this checkpoint";
    rewind.onclick = () => rewindViewed(s, p);
    li.append(rewind);
    ol.append(li);
  }
  box.append(ol);
  return box;
}

async function rewindViewed(s, p) {
  if (!confirm(`Rewind the files of "${s.title || s.name || s.session_id}" to checkpoint ${p.checkpoint}? The files as they are now are kept as a checkpoint, so this can be undone.`)) return;
  $("changes-note").textContent = "";
  try { await call("task.session.rewind", { session_id: s.session_id, checkpoint: p.checkpoint }); showErrorAt("changes-error", null); }
  catch (e) { refused(e); }
  await loadChanges(s.session_id).catch(() => {});
}

async function mergeViewed(s) {
  $("changes-note").textContent = "";
  try {
    const done = await call("task.session.worktree.merge", { session_id: s.session_id });
    showErrorAt("changes-error", null);
    $("changes-note").textContent = done.merged ? `Merged ${done.branch} into ${done.base} (${done.commit.slice(0, 12)}).`
      : `Nothing to merge: ${done.base} already has everything of ${done.branch}.`;
  } catch (e) { refused(e); }
  await loadChanges(s.session_id).catch(() => {});
}

async function discardViewed(s) {
  const running = s.state === "RUNNING" ? " Its running turn is stopped first." : "";
  if (!confirm(`Discard "${s.title || s.name || s.session_id}"? The session, its worktree and its branch ${s.worktree.branch} are deleted; this cannot be undone.${running}`)) return;
  $("changes-note").textContent = running ? "Stopping the turn, then discarding…" : "Discarding…";
  try { await call("task.session.delete", { session_id: s.session_id, discard: true }); closeChanges(); }
  catch (e) { $("changes-note").textContent = ""; refused(e); }
}

// A refusal shown where the person is looking: the top of the pane, scrolled into view.
function refused(e) {
  showErrorAt("changes-error", e);
  $("changes-error").scrollIntoView({ block: "nearest" });
}
