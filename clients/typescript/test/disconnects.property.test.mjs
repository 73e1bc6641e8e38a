// A property over random disconnect timings: whatever closes or silences the link, and when, every event of the
// owner's stream after the client's first cursor arrives exactly once and in order, once the link is back.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import fc from "fast-check";
import WebSocket from "ws";
import { GatewayConnection, OwnerSessionClient } from "../dist/index.js";
import { BlackholeProxy, Gateway, TOKEN, until } from "./harness.mjs";

let gateway, proxy, direct, sessionId;
before(async () => {
  gateway = await new Gateway().start();
  proxy = await new BlackholeProxy(gateway.port).listen();
  direct = await GatewayConnection.open(gateway.url, TOKEN, WebSocket);  // the other frontend, never disturbed
  sessionId = (await direct.call("task.session.start", { cwd: gateway.work, wait_ready: true })).session_id;
});
after(async () => { direct.close(); await proxy.close(); await gateway.stop(); });

const action = fc.oneof(
  fc.record({ kind: fc.constant("prompt"), chunks: fc.integer({ min: 1, max: 8 }) }),
  fc.record({ kind: fc.constantFrom("cut", "hole"), ms: fc.integer({ min: 0, max: 1200 }) }),
  fc.record({ kind: fc.constant("wait"), ms: fc.integer({ min: 0, max: 300 }) }),
);
const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

test("no event lost or repeated, whatever the disconnect timings", async () => {
  await fc.assert(fc.asyncProperty(fc.array(action, { minLength: 1, maxLength: 6 }), async (actions) => {
    proxy.restore();
    const client = new OwnerSessionClient({ url: proxy.url(), token: TOKEN, WebSocket, heartbeat: 0.5 }).start();
    const ids = [];
    client.onEvent((e) => { if (e.id !== null) ids.push(e.id); });
    try {
      await client.whenLive();
      const first = client.cursor;
      for (const a of actions) {
        if (a.kind === "prompt") {
          await direct.call("task.session.prompt", { session_id: sessionId, prompt: `/stream ${a.chunks}` });
        } else if (a.kind === "wait") {
          await pause(a.ms);
        } else {
          if (a.kind === "cut") proxy.cut(); else proxy.blackhole();
          await direct.call("task.session.prompt", { session_id: sessionId, prompt: "/stream 3" });  // while down
          await pause(a.ms);
          proxy.restore();
        }
      }
      const head = (await direct.call("gateway.ping")).cursor;
      await until(() => client.cursor === head, `the client to reach the journal's head ${head}`, 30_000);
      const expected = Array.from({ length: head - first }, (_, i) => first + 1 + i);
      assert.deepEqual(ids, expected);
    } finally {
      client.close();
    }
  }), { numRuns: 15, endOnFailure: true });
});
