// The web UI's pure presentation rules (gateway/ui/present.js) and its terminal colours (gateway/ui/ansi.js), by table.
// Run with node's own test runner: `node --test tests/gateway/ui/` (tests/gateway/ui/test_fold.py runs it under pytest).
import { test } from "node:test";
import assert from "node:assert/strict";

import {
  agentLabel, patchByFile, prefilledCwd, refusalHint, refusedRoot, remember, sessionParts, signInVars, signInWords,
  sortAgents, stateBadge, whereWords, RECENT_KEEP,
} from "../../../gateway/ui/present.js";
import { ansiRuns } from "../../../gateway/ui/ansi.js";

const WORKSPACE = -32011;

test("sortAgents: registry agents (with a version) first, then profiles, each group by name", () => {
  const agents = [{ id: "ref" }, { id: "zed-agent", version: "1.0.0" }, { id: "b", name: "Alpha" }, { id: "claude-acp", version: "0.1" }];
  assert.deepEqual(sortAgents(agents).map((a) => a.id), ["claude-acp", "zed-agent", "b", "ref"]);
});

test("signInWords: the state, and the variables to set when the gateway names them", () => {
  const rows = [
    [{ auth_state: "needs_sign_in", sign_in_vars: ["ANTHROPIC_API_KEY"] }, "needs sign-in: set ANTHROPIC_API_KEY"],
    [{ auth_state: "needs_sign_in", sign_in_vars: ["A", "B"] }, "needs sign-in: set A or B"],
    [{ auth_state: "needs_sign_in" }, "needs sign-in"],  // an older gateway: no sign_in_vars
    [{ auth_state: "needs_sign_in", sign_in_vars: [] }, "needs sign-in"],
    [{ auth_state: "signed_in", sign_in_vars: ["A"] }, "signed in"],
    [{ auth_state: "not_probed" }, "not probed"],
    [{ auth_state: "some_new_state" }, "some new state"],
    [{}, null],
  ];
  for (const [agent, words] of rows) assert.equal(signInWords(agent), words, JSON.stringify(agent));
});

test("agentLabel: name, version, and what to know before a start", () => {
  assert.equal(agentLabel({ id: "ref", availability: "installed" }), "ref");
  assert.equal(agentLabel({ id: "x", name: "X", version: "1.2.3", availability: "downloads_on_first_start" }),
               "X 1.2.3 (downloads on first start)");
  assert.equal(agentLabel({ id: "claude-acp", version: "0.1", availability: "installed", auth_state: "needs_sign_in",
                            sign_in_vars: ["ANTHROPIC_API_KEY"] }),
               "claude-acp 0.1 (needs sign-in: set ANTHROPIC_API_KEY)");
  assert.equal(agentLabel({ id: "gone", availability: "not_found", auth_state: "signed_in" }), "gone (not installed)");
});

test("signInVars: the variables of a sign-in card's API-key methods and those the gateway names, once each", () => {
  const auth = { methods: [{ kind: "agent" }, { kind: "env_var", vars: ["REF_TOKEN"] }, { kind: "env_var", vars: ["REF_TOKEN", "OTHER"] }],
                 sign_in_vars: ["ANTHROPIC_API_KEY", "OTHER"] };
  assert.deepEqual(signInVars(auth), ["REF_TOKEN", "OTHER", "ANTHROPIC_API_KEY"]);
  assert.deepEqual(signInVars({ methods: [{ kind: "terminal" }] }), []);
  assert.deepEqual(signInVars(null), []);
});

test("prefilledCwd: the newest directory started in that is still inside a root; never a root itself", () => {
  assert.equal(prefilledCwd([], ["/home/u"]), "");  // nothing started yet: empty, not HOME (which may be refused)
  assert.equal(prefilledCwd(["/srv/old", "/home/u/b", "/home/u/a"], ["/home/u"]), "/home/u/b");
  assert.equal(prefilledCwd(["/home/u2/x"], ["/home/u"]), "");  // a sibling with the same prefix is not inside
  assert.equal(prefilledCwd(["/any/where"], []), "/any/where");
});

test("remember: newest first, once each, at most RECENT_KEEP", () => {
  let recent = [];
  for (const d of ["/a", "/b", "/a", "/c", "/d", "/e", "/f"]) recent = remember(recent, d);
  assert.deepEqual(recent, ["/f", "/e", "/d", "/c", "/a"]);
  assert.equal(recent.length, RECENT_KEEP);
});

test("stateBadge: the session's state, unless a sign-in, a resume or a recovery must come first", () => {
  const auth = { methods: [{ id: "m", kind: "env_var", vars: ["REF_TOKEN"] }] };
  const W = "WAITING_FOR_INPUT";
  const rows = [
    // [what the page knows of the session, its config's auth, the badge's word, its class]
    [{ state: W, is_agent_running: true }, null, W, "tone-WAITING_FOR_INPUT"],
    [{ state: "RUNNING", is_agent_running: true }, null, "RUNNING", "tone-RUNNING"],
    [{ state: W, is_agent_running: false, needs_resume: true, resume_reason: "agent_not_running" }, null, "needs resume", "tone-needs-resume"],
    [{ state: W, is_agent_running: false, needs_resume: true, resume_reason: "agent_not_running_fresh_start" }, null, "needs resume", "tone-needs-resume"],
    [{ state: W, is_agent_running: false }, null, "needs resume", "tone-needs-resume"],  // a list summary: says neither
    [{ state: "CREATED", is_agent_running: false, needs_resume: false, resume_reason: "not_started" }, null, "needs resume", "tone-needs-resume"],
    [{ state: "CREATED", is_agent_running: false }, null, "CREATED", "tone-CREATED"],
    [{ state: "STARTING", is_agent_running: false, needs_resume: true }, null, "STARTING", "tone-STARTING"],  // being launched
    [{ state: W, is_agent_running: false, needs_resume: false, resume_reason: "error_recovery" }, null, "restore failed", "tone-restore-failed"],
    [{ state: W, is_agent_running: false, needs_resume: false, resume_reason: "stale_execution" }, null, W, "tone-WAITING_FOR_INPUT"],
    [{ state: W, is_agent_running: false, needs_resume: false, resume_reason: "not_started" }, auth, "needs sign-in", "tone-needs-sign-in"],
    [{ state: W, is_agent_running: true }, auth, "needs sign-in", "tone-needs-sign-in"],
    [{ state: "FAILED", is_agent_running: false }, null, "FAILED", "tone-FAILED"],
    [{ state: "CANCELLED", is_agent_running: false, needs_resume: false }, auth, "CANCELLED", "tone-CANCELLED"],
    [{ state: "COMPLETED", is_agent_running: false }, null, "COMPLETED", "tone-COMPLETED"],
  ];
  for (const [s, a, word, tone] of rows) assert.deepEqual(stateBadge(s, a), { word, tone }, JSON.stringify([s, !!a]));
});

test("whereWords: a root or a directory inside it; a root refused for holding the gateway's state: inside it", () => {
  assert.equal(whereWords(["/home/u"]), "/home/u or a directory inside it");
  assert.equal(whereWords(["/home/u", "/srv"], ["/home/u"]), "a project directory inside /home/u; or /srv or a directory inside it");
  assert.equal(whereWords(["/home/u/"], ["/home/u"]), "a project directory inside /home/u/");
});

test("refusedRoot: the root a refusal says holds the gateway's state", () => {
  const refused = (rule, cwd) => ({ code: WORKSPACE, message: "refused", data: { cwd, rule } });
  assert.equal(refusedRoot(refused("contains_gateway_files", "/home/u/"), ["/home/u"], WORKSPACE), "/home/u");
  assert.equal(refusedRoot(refused("contains_gateway_files", "/tmp"), ["/home/u"], WORKSPACE), null);  // no root
  assert.equal(refusedRoot(refused("outside_workspace_roots", "/home/u"), ["/home/u"], WORKSPACE), null);
  assert.equal(refusedRoot({ code: -32602, message: "bad" }, ["/home/u"], WORKSPACE), null);
});

test("refusalHint: a refused directory says what to type instead", () => {
  const refused = (rule, cwd = "/home/u") => ({ code: WORKSPACE, message: "refused", data: { cwd, rule } });
  const roots = ["/home/u"];
  assert.match(refusalHint(refused("contains_gateway_files"), roots, [], WORKSPACE), /\/home\/u\/my-project/);
  assert.match(refusalHint(refused("contains_gateway_files", "/home/u/"), roots, [], WORKSPACE), /: \/home\/u\/my-project,/);
  assert.equal(refusalHint(refused("outside_workspace_roots", "/usr"), roots, [], WORKSPACE), "Type /home/u or a directory inside it.");
  assert.equal(refusalHint(refused("outside_workspace_roots", "/usr"), roots, [], WORKSPACE, ["/home/u"]),
               "Type a project directory inside /home/u.");  // the root holds the gateway's state: not the root
  assert.match(refusalHint(refused("inside_gateway_files"), roots, [], WORKSPACE), /outside the gateway's own files inside \/home\/u/);
  assert.match(refusalHint({ code: WORKSPACE, message: "missing", data: { cwd: "/home/u/new" } }, roots, [], WORKSPACE),
               /mkdir -p \/home\/u\/new/);
  assert.match(refusalHint(refused("outside_workspace_roots", "/usr"), roots, ["/home/u/p"], WORKSPACE),
               /The last one a session started in was \/home\/u\/p\./);
  assert.equal(refusalHint({ code: -32602, message: "bad params" }, roots, [], WORKSPACE), null);
  assert.equal(refusalHint(null, roots, [], WORKSPACE), null);
});

test("sessionParts: the sessions a message names, between its text", () => {
  const id = "s-0123456789abcdef0123456789abcdef";
  assert.deepEqual(sessionParts(`Forked into session ${id}.`), [{ text: "Forked into session " }, { session: id }, { text: "." }]);
  assert.deepEqual(sessionParts(`${id}`), [{ session: id }]);
  assert.deepEqual(sessionParts("no session here, s-xyz"), [{ text: "no session here, s-xyz" }]);
  assert.deepEqual(sessionParts(""), []);
});

test("ansiRuns: runs of text with classes for the 16 colours and text styles, CSSOM colours for the rest, never markup", () => {
  const runs = ansiRuns("a \x1b[31mred\x1b[0m \x1b[1;4mloud\x1b[0m \x1b[38;5;208mo\x1b[48;2;1;2;3mtc\x1b[0m <b>x</b>");
  assert.deepEqual(runs, [
    { text: "a ", classes: [] }, { text: "red", classes: ["ansi-red-fg"] }, { text: " ", classes: [] },
    { text: "loud", classes: ["ansi-bold", "ansi-underline"] }, { text: " ", classes: [] },
    { text: "o", classes: [], color: "rgb(255, 135, 0)" },
    { text: "tc", classes: [], color: "rgb(255, 135, 0)", background: "rgb(1, 2, 3)" },
    { text: " <b>x</b>", classes: [] },  // text as it came: the page sets it as text, never as HTML
  ]);
  assert.deepEqual(ansiRuns("\x1b]8;;https://example.org\x07a link\x1b]8;;\x07"), [{ text: "a link", classes: [] }]);
  assert.deepEqual(ansiRuns(""), []);
});

test("patchByFile: each file's lines under its own name, quoted names read back, spaces and non-ASCII as they are", () => {
  const patch = ['diff --git a/my file.txt b/my file.txt', "+x", 'diff --git "a/q\\"uote\\\\d" "b/q\\"uote\\\\d"', "+y",
                 "diff --git a/é.txt b/é.txt", "-z", "+w", "diff --git a/a b/c d.txt b/a b/c d.txt", "+v"].join("\n");
  const files = patchByFile(patch);
  assert.deepEqual([...files.keys()], ["my file.txt", 'q"uote\\d', "é.txt", "a b/c d.txt"]);
  assert.deepEqual(files.get("é.txt"), ["diff --git a/é.txt b/é.txt", "-z", "+w"]);
  assert.equal(patchByFile("").size, 0);
});

