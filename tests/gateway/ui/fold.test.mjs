// The web UI's pure fold (gateway/ui/fold.js) by table: event streams in, the transcript and config they leave out.
// Run with node's own test runner: `node --test tests/gateway/ui/` (tests/gateway/ui/test_fold.py runs it under pytest).
import { test } from "node:test";
import assert from "node:assert/strict";

import {
  applyEvent, applyConfig, applyListEvent, askingOf, historyEvents, isNew, keepRaw, newConfig, newLog, touchesConfig,
  validEvent, RAW_KEEP, TERMINAL_SHOWN,
} from "../../../gateway/ui/fold.js";

let nextTs = 100;
const ev = (id, type, data = {}) => ({ id, type, session_id: "s-1", data, ts: nextTs++ });
const upd = (id, update, replay = false) => ev(id, "session_update", { update, ...(replay ? { replay } : {}) });
const chunk = (id, text, kind = "agent_message_chunk", replay = false) =>
  upd(id, { sessionUpdate: kind, content: { type: "text", text } }, replay);

// Folds events into a fresh transcript and config, as the page does; what applyEvent returned for each, too.
function fold(events) {
  const log = newLog(), c = newConfig();
  const changed = events.map((p) => applyEvent(log, p, c));
  return { log, c, changed, t: log.entries };
}
const kinds = (t) => t.map((e) => e.kind);

const TABLE = [
  {
    name: "agent message chunks join into one open message",
    events: [chunk(1, "Hel"), chunk(2, "lo")],
    check: ({ t }) => {
      assert.deepEqual(kinds(t), ["agent"]);
      assert.equal(t[0].text, "Hello");
      assert.equal(t[0].open, true);
      assert.equal(t[0].replay, false);
    },
  },
  {
    name: "a thought between agent chunks splits the message, and only the last entry stays open",
    events: [chunk(1, "a"), chunk(2, "thinking", "agent_thought_chunk"), chunk(3, "b")],
    check: ({ t }) => {
      assert.deepEqual(kinds(t), ["agent", "thought", "agent"]);
      assert.deepEqual(t.map((e) => e.open), [false, false, true]);
      assert.deepEqual(t.map((e) => e.text), ["a", "thinking", "b"]);
    },
  },
  {
    name: "replayed chunks do not join live ones; a replayed user chunk is a user message",
    events: [chunk(1, "old", "agent_message_chunk", true), chunk(2, "new"), chunk(3, "asked", "user_message_chunk", true)],
    check: ({ t }) => {
      assert.deepEqual(kinds(t), ["agent", "agent", "user"]);
      assert.deepEqual(t.map((e) => e.replay), [true, false, true]);
    },
  },
  {
    name: "an update kind this page does not know is kept, raw",
    events: [upd(1, { sessionUpdate: "hologram_update", frames: [1, 2] }), upd(2, { no: "kind" })],
    check: ({ t, changed }) => {
      assert.deepEqual(kinds(t), ["raw", "raw"]);
      assert.equal(t[0].label, "hologram_update");
      assert.deepEqual(t[0].json, { sessionUpdate: "hologram_update", frames: [1, 2] });
      assert.equal(t[1].label, "update");
      assert.deepEqual(changed, [null, null]);
    },
  },
  {
    name: "a live user_message_chunk (not a replay) is not the user's message: it is kept raw",
    events: [chunk(1, "echo", "user_message_chunk")],
    check: ({ t }) => { assert.deepEqual(kinds(t), ["raw"]); assert.equal(t[0].label, "user_message_chunk"); },
  },
  {
    name: "a tool call and its updates are one card, updated in place",
    events: [
      upd(1, { sessionUpdate: "tool_call", toolCallId: "c1", title: "Read", kind: "read", status: "pending" }),
      chunk(2, "meanwhile"),
      upd(3, { sessionUpdate: "tool_call_update", toolCallId: "c1", status: "completed", locations: [{ path: "/a" }],
               content: [{ type: "content", content: { type: "text", text: "out" } },
                         { type: "diff", path: "/a", oldText: "x", newText: "y" },
                         { type: "terminal", terminalId: "t1" }] }),
    ],
    check: ({ t }) => {
      assert.deepEqual(kinds(t), ["tool", "agent"]);
      const card = t[0];
      assert.equal(card.title, "Read");
      assert.equal(card.toolKind, "read");
      assert.equal(card.status, "completed");
      assert.equal(card.output, "out");
      assert.deepEqual(card.diffs.map((d) => d.path), ["/a"]);
      assert.deepEqual(card.terminals, ["t1"]);
      assert.deepEqual(card.locations, [{ path: "/a" }]);
    },
  },
  {
    name: "an update of a tool call never announced makes its card",
    events: [upd(1, { sessionUpdate: "tool_call_update", toolCallId: "c9", status: "failed" })],
    check: ({ t }) => assert.deepEqual(t, [{ kind: "tool", id: "c9", title: "tool", status: "failed", replay: false, ts: t[0].ts }]),
  },
  {
    name: "the plan is one entry, replaced by each new plan",
    events: [upd(1, { sessionUpdate: "plan", entries: [{ content: "a" }] }), chunk(2, "x"),
             upd(3, { sessionUpdate: "plan", entries: [{ content: "a", status: "completed" }, { content: "b" }] })],
    check: ({ t }) => {
      assert.deepEqual(kinds(t), ["plan", "agent"]);
      assert.equal(t[0].entries.length, 2);
    },
  },
  {
    name: "a turn: the prompt as the user's message, then its outcome; the next chunk starts a new message",
    events: [ev(1, "turn_started", { prompt: [{ type: "text", text: "hi" }, { type: "image" }] }), chunk(2, "hello"),
             ev(3, "turn_ended", { stop_reason: "end_turn" }), chunk(4, "later")],
    check: ({ t }) => {
      assert.deepEqual(kinds(t), ["user", "agent", "turn", "agent"]);
      assert.equal(t[0].text, "hi\n[image]");
      assert.equal(t[2].text, "turn ended: end_turn");
      assert.equal(t[2].failed, false);
      assert.equal(t[1].open, false);
      assert.equal(t[3].text, "later");
    },
  },
  {
    name: "a turn that failed or was interrupted says so",
    events: [ev(1, "turn_ended", { message: "boom" }), ev(2, "turn_ended", { error: { message: "bad" } }),
             ev(3, "turn_ended", {}), ev(4, "turn_ended", { stop_reason: "interrupted" })],
    check: ({ t }) => {
      assert.deepEqual(t.map((e) => e.text), ["turn failed: boom", "turn failed: bad",
        "turn failed: the agent did not answer", "turn interrupted: the gateway stopped before the agent answered"]);
      assert.deepEqual(t.map((e) => e.failed), [true, true, true, false]);
    },
  },
  {
    name: "a permission asked, offered again, and answered: one card with its answer",
    events: [ev(1, "permission_requested", { request_id: "r1", tool_call: { title: "Write" }, options: [{ optionId: "ok" }] }),
             ev(2, "permission_requested", { request_id: "r1", tool_call: { title: "Write" }, options: [] }),
             ev(3, "permission_resolved", { request_id: "r1", outcome: { outcome: "selected", optionId: "ok" }, by: "web" }),
             ev(4, "turn_ended", { stop_reason: "end_turn" })],
    check: ({ t }) => {
      assert.deepEqual(kinds(t), ["permission", "turn"]);
      assert.equal(t[0].tool.title, "Write");
      assert.deepEqual(t[0].options, [{ optionId: "ok" }]);
      assert.equal(t[0].answer.by, "web");
      assert.equal(t[0].expired, undefined);  // answered: the turn's end does not expire it
    },
  },
  {
    name: "a permission left unanswered when the turn ends expires; one from history (no id) is no card",
    events: [ev(1, "permission_requested", { request_id: "r1" }), ev(null, "permission_requested", { request_id: "r2" }),
             ev(2, "turn_ended", { stop_reason: "cancelled" }),
             ev(3, "permission_resolved", { request_id: "unknown" })],
    check: ({ t }) => {
      assert.deepEqual(kinds(t), ["permission", "turn"]);
      assert.equal(t[0].request_id, "r1");
      assert.equal(t[0].expired, true);
      assert.deepEqual(t[0].tool, {});
      assert.deepEqual(t[0].options, []);
    },
  },
  {
    name: "an agent's question: one card however often offered, its answer, and its completion",
    events: [ev(1, "elicitation_requested", { request_id: "q1", elicitation_id: "e1", mode: "url", url: "https://x" }),
             ev(2, "elicitation_requested", { request_id: "q1", elicitation_id: "e1", mode: "url", url: "https://x" }),
             ev(3, "elicitation_resolved", { request_id: "q1", action: "accept", by: "web" }),
             ev(4, "elicitation_completed", { elicitation_id: "e1" })],
    check: ({ t }) => {
      assert.deepEqual(kinds(t), ["elicitation"]);
      assert.equal(t[0].url, "https://x");
      assert.equal(t[0].answer.action, "accept");
      assert.equal(t[0].completed, true);
    },
  },
  {
    name: "a question unanswered at the turn's end expires",
    events: [ev(1, "elicitation_requested", { request_id: "q1" }), ev(2, "turn_ended", { stop_reason: "end_turn" })],
    check: ({ t }) => assert.equal(t[0].expired, true),
  },
  {
    name: "session messages and the launching stage are notices; other stages are not shown",
    events: [ev(1, "session_message", { text: "careful" }), ev(2, "session_message", { text: "fyi", level: "info" }),
             ev(3, "session_active_stage", { stage: "launching" }), ev(4, "session_active_stage", { stage: "ready" })],
    check: ({ t }) => {
      assert.deepEqual(t.map((e) => [e.kind, e.level, e.text]),
        [["notice", "warning", "careful"], ["notice", "info", "fyi"], ["notice", "info", "Starting the agent…"]]);
    },
  },
  {
    name: "an agent's terminal: started, its output (which keeps the message open), its exit",
    events: [chunk(1, "running it"), ev(2, "terminal_started", { terminal_id: "t1", command: "ls", cwd: "/w" }),
             chunk(3, "still"), ev(4, "terminal_output", { terminal_id: "t1", text: "a\n" }),
             ev(5, "terminal_output", { terminal_id: "t1", text: "b\n" }), ev(6, "terminal_exited", { terminal_id: "t1", exit_code: 0 }),
             chunk(7, " going"), ev(8, "terminal_output", { terminal_id: "nope", text: "lost" })],
    check: ({ log, t }) => {
      assert.deepEqual(kinds(t), ["agent", "terminal", "agent"]);
      assert.equal(t[2].text, "still going");  // output and exit are no new entry: the open message stays open
      assert.deepEqual(log.terminals.get("t1"), { command: "ls", cwd: "/w", text: "a\nb\n", exit: { terminal_id: "t1", exit_code: 0 } });
      assert.equal(log.terminals.size, 1);
    },
  },
  {
    name: "a terminal's output past what the page keeps is dropped",
    events: [ev(1, "terminal_started", { terminal_id: "t1", command: "yes" }),
             ev(2, "terminal_output", { terminal_id: "t1", text: "y".repeat(TERMINAL_SHOWN) }),
             ev(3, "terminal_output", { terminal_id: "t1", text: "more" })],
    check: ({ log }) => assert.equal(log.terminals.get("t1").text.length, TERMINAL_SHOWN),
  },
  {
    name: "a terminal from history comes with its command and output at once",
    events: [ev(null, "terminal_recorded", { terminal_id: "h0", command: "make", text: "ok" })],
    check: ({ log, t }) => {
      assert.deepEqual(kinds(t), ["terminal"]);
      assert.deepEqual(log.terminals.get("h0"), { command: "make", text: "ok", exit: { recorded: true } });
    },
  },
  {
    name: "state updates go to the config, not the transcript",
    events: [upd(1, { sessionUpdate: "available_commands_update", availableCommands: [{ name: "sleep" }] }),
             upd(2, { sessionUpdate: "usage_update", used: 10, size: 100 }),
             upd(3, { sessionUpdate: "current_mode_update", currentModeId: "fast" }),
             upd(4, { sessionUpdate: "available_commands_update" })],
    check: ({ t, c, changed }) => {
      assert.deepEqual(t, []);
      assert.deepEqual(c.commands, [{ name: "sleep" }]);
      assert.deepEqual(c.usage, { used: 10, size: 100 });
      assert.deepEqual(changed, ["state", "state", null, null]);
    },
  },
  {
    name: "the gateway's account of the options; a change the agent made itself is said in the conversation",
    events: [
      ev(1, "session_config", { options: [{ id: "mode", name: "Mode", type: "select", currentValue: "ask",
                                            options: [{ value: "ask", name: "Ask" }, { value: "code", name: "Code" }] }],
                                cause: "user", can_fork: true }),
      ev(2, "session_config", { options: [{ id: "mode", name: "Mode", type: "select", currentValue: "code",
                                            options: [{ group: "g", options: [{ value: "code", name: "Code" }] }] }],
                                cause: "agent", chosen: { mode: { by: "web" } } }),
    ],
    check: ({ t, c, changed, log }) => {
      assert.deepEqual(changed, ["options", "options"]);
      assert.deepEqual(t.map((e) => e.text), ["The agent changed Mode: Code"]);
      assert.equal(c.options[0].currentValue, "code");
      assert.deepEqual(c.chosen, { mode: { by: "web" } });
      assert.equal(c.can_fork, false);
      assert.equal(c.auth, null);
      assert.deepEqual(log.options, c.options);
    },
  },
  {
    name: "a session cancelled says so once, where its conversation stops; other changes of state say nothing",
    events: [chunk(1, "partial"), ev(2, "session_status", { state: "RUNNING", is_agent_running: true }),
             chunk(3, " answer"), ev(4, "session_status", { state: "CANCELLED", is_agent_running: true }),
             ev(5, "session_status", { state: "CANCELLED", is_agent_running: false })],
    check: ({ t, changed }) => {
      assert.deepEqual(kinds(t), ["agent", "notice"]);
      assert.equal(t[0].text, "partial answer");  // a change of state does not split the agent's message
      assert.equal(t[1].text, "Session cancelled");
      assert.equal(t[1].level, "info");
      assert.deepEqual(changed, [null, null, null, null, null]);
    },
  },
  {
    name: "events the transcript does not show change nothing but the cursor",
    events: [ev(7, "session_created", { session_id: "s-1" }), ev(9, "something_new", { x: 1 }), ev(null, "unknown")],
    check: ({ t, log, changed }) => {
      assert.deepEqual(t, []);
      assert.equal(log.through, 9);
      assert.deepEqual(changed, [null, null, null]);
    },
  },
];

for (const row of TABLE) test(`applyEvent: ${row.name}`, () => row.check(fold(row.events)));

test("applyEvent: the cursor is the highest journal id folded; events with no id (history) leave it", () => {
  const log = newLog();
  for (const [id, through] of [[3, 3], [null, 3], [2, 3], [5, 5]]) {
    applyEvent(log, ev(id, "session_message", { text: "x" }), newConfig());
    assert.equal(log.through, through);
  }
});

test("isNew: what a transcript already holds is not folded again (the journal's read and the live stream overlap)", () => {
  const log = newLog();
  log.through = 5;
  for (const [id, fresh] of [[4, false], [5, false], [6, true], [null, true]]) assert.equal(isNew(log, { id }), fresh, `id ${id}`);
});

test("applyConfig: a session not opened keeps its options, commands and usage, nothing else", () => {
  const c = newConfig();
  const rows = [
    [ev(1, "session_config", { options: [{ id: "o" }], auth: { methods: [] } }), "options"],
    [upd(2, { sessionUpdate: "available_commands_update", availableCommands: [{ name: "x" }] }), "state"],
    [upd(3, { sessionUpdate: "config_option_update" }), null],
    [chunk(4, "hello"), null],
    [ev(5, "turn_ended", {}), null],
  ];
  for (const [p, changed] of rows) assert.equal(applyConfig(c, p), changed, p.type);
  assert.deepEqual(c.options, [{ id: "o" }]);
  assert.deepEqual(c.auth, { methods: [] });
  assert.deepEqual(c.commands, [{ name: "x" }]);
});

test("touchesConfig: which events need the session's config", () => {
  for (const [p, yes] of [[ev(1, "session_config"), true], [upd(2, { sessionUpdate: "usage_update" }), true],
                          [chunk(3, "x"), false], [ev(4, "turn_started"), false]]) assert.equal(touchesConfig(p), yes);
});

test("applyListEvent: the session list, and each session's requests waiting for an answer", () => {
  const st = { sessions: new Map(), configs: new Map(), logs: new Map(), asking: new Map() };
  const rows = [
    [ev(1, "session_created", { session_id: "s-1", state: "STARTING", config: { options: [] } }), true],
    [ev(2, "session_status", { state: "RUNNING" }), true],
    [ev(3, "permission_requested", { request_id: "r1" }), true],
    [ev(4, "elicitation_requested", { request_id: "q1" }), true],
    [ev(5, "permission_resolved", { request_id: "r1" }), true],
    [chunk(6, "x"), false],
  ];
  for (const [p, listChanged] of rows) assert.equal(applyListEvent(st, p), listChanged, p.type);
  assert.equal(st.sessions.get("s-1").state, "RUNNING");
  assert.deepEqual(st.configs.get("s-1"), { options: [] });
  assert.deepEqual([...askingOf(st.asking, "s-1")], ["q1"]);
  applyListEvent(st, ev(7, "turn_ended", {}));
  assert.equal(st.asking.get("s-1").size, 0);
  st.logs.set("s-1", newLog());
  applyListEvent(st, ev(8, "session_deleted", {}));
  assert.equal(st.sessions.size + st.logs.size + st.asking.size, 0);
});

test("applyListEvent: session_status says whether the session needs a resume, and why; a status that does not say forgets it", () => {
  const st = { sessions: new Map(), configs: new Map(), logs: new Map(), asking: new Map() };
  applyListEvent(st, ev(1, "session_created", { session_id: "s-1", state: "WAITING_FOR_INPUT", is_agent_running: true }));
  const s = st.sessions.get("s-1");
  applyListEvent(st, ev(2, "session_status", { state: "WAITING_FOR_INPUT", is_agent_running: false, needs_resume: true,
                                               resume_reason: "agent_not_running" }));  // announced after a restart
  assert.deepEqual([s.is_agent_running, s.needs_resume, s.resume_reason], [false, true, "agent_not_running"]);
  applyListEvent(st, ev(3, "session_status", { state: "WAITING_FOR_INPUT", is_agent_running: true, needs_resume: false,
                                               resume_reason: "agent_running" }));
  assert.deepEqual([s.is_agent_running, s.needs_resume, s.resume_reason], [true, false, "agent_running"]);
  applyListEvent(st, ev(4, "session_status", { state: "WAITING_FOR_INPUT", is_agent_running: false, needs_resume: true,
                                               resume_reason: "agent_not_running" }));
  applyListEvent(st, ev(5, "session_status", { state: "RUNNING", is_agent_running: true }));  // an older gateway's
  assert.equal("needs_resume" in s || "resume_reason" in s, false);
  applyListEvent(st, ev(6, "session_title", { title: "t" }));  // a title says nothing of it: kept
  assert.equal(s.title, "t");
});

test("keepRaw: the newest RAW_KEEP events of each session, none of no session", () => {
  const raw = new Map();
  for (let i = 1; i <= RAW_KEEP + 3; i++) assert.equal(keepRaw(raw, ev(i, "x")), true);
  assert.equal(keepRaw(raw, { id: 1, type: "gateway_notice", data: {} }), false);
  assert.equal(raw.get("s-1").length, RAW_KEEP);
  assert.equal(raw.get("s-1")[0].id, 4);
  assert.equal(raw.size, 1);
});

test("validEvent: what the page folds at all", () => {
  const rows = [
    [{ id: 1, type: "x", data: {} }, true], [{ id: null, type: "x", data: {} }, true],
    [{ id: 1.5, type: "x", data: {} }, false], [{ id: 1, type: 2, data: {} }, false], [{ id: 1, type: "x", data: [] }, false],
    [{ id: 1, type: "x" }, false], [null, false], ["event", false],
  ];
  for (const [p, ok] of rows) assert.equal(validEvent(p), ok, JSON.stringify(p));
});

test("historyEvents: a session's recorded history folds into the transcript it stands for", () => {
  const history = [
    { kind: "user_message", content: "hi", ts: 1 }, { kind: "agent_message", content: "hello", ts: 2 },
    { kind: "tool_call", name: "Read", ts: 3 }, { kind: "tool_result", name: "Read", content: "(failed) no", ts: 4 },
    { kind: "terminal", name: "ls", content: "a", ts: 5 }, { kind: "turn_interrupted", ts: 6 }, { kind: "later_kind", ts: 7 },
  ];
  const events = historyEvents(history);
  assert.ok(events.every((p) => p.id === null));
  const { t, log } = fold(events);
  assert.deepEqual(kinds(t), ["user", "agent", "tool", "terminal", "turn"]);
  assert.equal(t[2].status, "failed");
  assert.equal(t[2].output, "(failed) no");
  assert.equal(log.terminals.get(t[3].id).command, "ls");
  assert.equal(t[4].text, "turn interrupted: the gateway stopped before the agent answered");
  assert.equal(log.through, 0);
});
