// The client's promises (docs/clients.md) against a real gateway: nothing lost or delivered twice across a gateway
// kill -9, a link that silently stops delivering, and a cursor past the journal's retention.
import assert from "node:assert/strict";
import { existsSync, unlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import WebSocket from "ws";
import { GatewayConnection, OwnerSessionClient } from "../dist/index.js";
import { BlackholeProxy, Gateway, TOKEN, until } from "./harness.mjs";

const HEARTBEAT = 1;  // seconds: the tests' interval (the default is 5)

/** Everything one client delivers, and when its link changed. */
function record(client) {
  const seen = { ids: [], events: [], links: [], resyncs: [] };
  client.onEvent((e) => { seen.events.push(e); if (e.id !== null) seen.ids.push(e.id); });
  client.onLink((state) => seen.links.push({ state, at: performance.now() / 1000 }));
  client.onResync((cursor) => seen.resyncs.push(cursor));
  return seen;
}

function assertExactlyOnce(ids) {
  assert.deepEqual(ids, [...new Set(ids)], "no event delivered twice");
  assert.deepEqual(ids, [...ids].sort((a, b) => a - b), "in order");
  for (let i = 1; i < ids.length; i++) assert.equal(ids[i], ids[i - 1] + 1, `no gap after event ${ids[i - 1]}`);
}

/** The owner's journal ids after `after`, read on a connection of its own. */
async function journalIds(gateway, sessionIds, afterId) {
  const conn = await GatewayConnection.open(gateway.url, TOKEN, WebSocket);
  const ids = [];
  for (const sid of sessionIds) {
    let next = afterId;
    for (;;) {
      const page = await conn.call("task.session.events", { session_id: sid, after: next, limit: 2000 });
      ids.push(...page.events.map((e) => e.id));
      if (page.next === null) break;
      next = page.next;
    }
  }
  conn.close();
  return ids.sort((a, b) => a - b);
}

describe("across a gateway kill -9", () => {
  let gateway;
  before(async () => { gateway = await new Gateway().start(); });
  after(async () => { await gateway.stop(); });

  test("every event of the owner's stream arrives once, those made while it was down included", async () => {
    const client = new OwnerSessionClient({ url: gateway.url, token: TOKEN, WebSocket, heartbeat: HEARTBEAT,
                                            random: () => 0 }).start();
    const seen = record(client);
    await client.whenLive();
    const first = client.cursor;
    const session = await client.startSession({ cwd: gateway.work, wait_ready: true });
    assert.equal(await session.prompt("/stream 5").text(), "chunk 0 chunk 1 chunk 2 chunk 3 chunk 4 ");
    await gateway.kill9();
    await until(() => client.link === "reconnecting", "the client to notice the gateway is gone");
    await gateway.start();
    // Another frontend prompts at once, probably before this client is back: its turn's events are owed.
    const other = await GatewayConnection.open(gateway.url, TOKEN, WebSocket);
    await other.call("task.session.prompt", { session_id: session.id, prompt: "/stream 4" });
    other.close();
    await client.whenLive();
    assert.equal(await session.prompt("after the crash").text(), "echo: after the crash");
    const expected = await journalIds(gateway, [session.id], first);
    await until(() => seen.ids.length >= expected.length, "every journal event");
    assertExactlyOnce(seen.ids);
    assert.deepEqual(seen.ids, expected);
    assert.ok(seen.links.some((l) => l.state === "reconnecting"));
    client.close();
  });
});

describe("a link that silently stops delivering", () => {
  let gateway, proxy;
  before(async () => { gateway = await new Gateway().start(); proxy = await new BlackholeProxy(gateway.port).listen(); });
  after(async () => { await proxy.close(); await gateway.stop(); });

  test("is degraded within two heartbeats, and every event of the turn arrives once when it is back", async () => {
    const client = new OwnerSessionClient({ url: proxy.url(), token: TOKEN, WebSocket, heartbeat: HEARTBEAT,
                                            random: () => 0 }).start();
    const seen = record(client);
    await client.whenLive();
    const go = join(gateway.work, "go");
    if (existsSync(go)) unlinkSync(go);
    const session = await client.startSession({ cwd: gateway.work, wait_ready: true });
    const turn = session.prompt(`/sh echo before; while [ ! -f ${go} ]; do sleep 0.05; done; echo after`);
    const events = [];
    const collected = (async () => { for await (const e of turn) events.push(e); })();
    await until(() => events.some((e) => JSON.stringify(e.data).includes("before")), "the turn's first output");
    const holedAt = performance.now() / 1000;
    proxy.blackhole();
    writeFileSync(go, "");  // the rest of the turn happens while the link delivers nothing
    await until(() => seen.links.some((l) => l.state === "degraded"), "degraded", 10_000);
    const degraded = seen.links.find((l) => l.state === "degraded");
    // the deadline is two intervals after the last frame heard, which came before the blackhole
    assert.ok(degraded.at - holedAt <= 2 * HEARTBEAT + 0.25, `degraded ${degraded.at - holedAt} s after the blackhole`);
    await until(() => seen.links.some((l) => l.state === "reconnecting" && l.at >= degraded.at), "reconnecting");
    proxy.restore();
    const end = await turn.result;
    await collected;
    assert.equal(end.stop_reason, "end_turn");
    const text = events.filter((e) => e.type === "session_update").map((e) => e.data.update.content?.text ?? "").join("");
    assert.match(text, /before[\s\S]*after/);
    assert.equal(events[0].type, "turn_started");
    assert.equal(events.at(-1).type, "turn_ended");
    const turnIds = events.map((e) => e.id).filter((id) => id !== null);
    assertExactlyOnce(turnIds);
    assertExactlyOnce(seen.ids);
    client.close();
  });
});

describe("a handshake into a link that delivers nothing", () => {
  let gateway, proxy;
  before(async () => { gateway = await new Gateway().start(); proxy = await new BlackholeProxy(gateway.port).listen(); });
  after(async () => { await proxy.close(); await gateway.stop(); });

  test("times out with a clear error, and the process goes on", async () => {
    proxy.blackhole();
    // the `ws` package reports a socket ended while connecting as an 'error' event; unheard, it ends the process
    await assert.rejects(GatewayConnection.open(proxy.url(), TOKEN, WebSocket, 200), /timed out/);
    await new Promise((resolve) => setImmediate(resolve));
    proxy.restore();
    const conn = await GatewayConnection.open(proxy.url(), TOKEN, WebSocket);
    assert.equal(typeof (await conn.call("gateway.ping")).cursor, "number");
    conn.close();
  });
});

describe("a cursor past the journal's retention", () => {
  let gateway, proxy;
  before(async () => {
    gateway = await new Gateway({ config: "event_retention = 10\n" }).start();
    proxy = await new BlackholeProxy(gateway.port).listen();
  });
  after(async () => { await proxy.close(); await gateway.stop(); });

  test("resyncs from the session list and goes on, nothing delivered twice", async () => {
    const client = new OwnerSessionClient({ url: proxy.url(), token: TOKEN, WebSocket, heartbeat: HEARTBEAT,
                                            random: () => 0 }).start();
    const seen = record(client);
    await client.whenLive();
    const session = await client.startSession({ cwd: gateway.work, wait_ready: true });
    await session.prompt("hello").result;
    proxy.blackhole();
    await until(() => client.link === "reconnecting", "the client to give the link up");
    const other = await GatewayConnection.open(gateway.url, TOKEN, WebSocket);
    // past retention: the journal prunes by count once in 1000 events, down to the newest 10 here
    await other.call("task.session.prompt", { session_id: session.id, prompt: "/flood 1100 10" });
    other.close();
    proxy.restore();
    await until(() => seen.resyncs.length === 1, "a resync");
    await client.whenLive();
    assert.equal(await session.prompt("after the resync").text(), "echo: after the resync");
    assertExactlyOnce(seen.ids.filter((id) => id > seen.resyncs[0]));
    assert.deepEqual(seen.ids, [...new Set(seen.ids)]);
    client.close();
  });
});
