import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import WebSocket from "ws";
import { OwnerSessionClient } from "../dist/index.js";
import { Gateway, TOKEN } from "./harness.mjs";

let gateway;
before(async () => { gateway = await new Gateway().start(); });
after(async () => { await gateway.stop(); });

test("a turn's streamed answer through the package", async () => {
  const client = new OwnerSessionClient({ url: gateway.url, token: TOKEN, WebSocket }).start();
  await client.whenLive();
  const session = await client.startSession({ cwd: gateway.work, wait_ready: true });
  const turn = session.prompt("/stream 3");
  const text = await turn.text();
  assert.equal(text, "chunk 0 chunk 1 chunk 2 ");
  assert.equal((await turn.result).stop_reason, "end_turn");
  client.close();
});
