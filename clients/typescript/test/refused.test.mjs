// A refused handshake (docs/clients.md, promise 1) against a real gateway: a wrong or missing token rejects
// whenLive() at once with an error that names the token and not its value, the link ends `closed`, and no second
// handshake is tried; where the WebSocket hides the HTTP status (a browser), the gateway's /whoami tells.
// A gateway that is down is still retried.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import WebSocket from "ws";
import { GatewayConnection, HandshakeRefused, OwnerSessionClient } from "../dist/index.js";
import { BlackholeProxy, Gateway, TOKEN, until } from "./harness.mjs";

const WRONG = "wrong-token-zzzzzzzzzzzzzzzz";  // a dummy secret: no message may show it

/** A browser's WebSocket, as far as a failed handshake goes: its error event says nothing (no HTTP status). */
class BrowserLikeWebSocket extends WebSocket {
  get onerror() { return super.onerror; }
  set onerror(handler) { super.onerror = handler ? () => handler({ type: "error" }) : null; }
}

function refusedFor(tokenGiven) {
  return (error) => {
    assert.ok(error instanceof HandshakeRefused, `${error}`);
    assert.equal(error.status, 401);
    assert.match(error.message, tokenGiven ? /refused the token \(HTTP 401\)/ : /no token was given/);
    assert.match(error.message, /ACP_GATEWAY_TOKEN/);
    assert.match(error.message, /does not retry/);
    assert.ok(!error.message.includes(WRONG) && !error.message.includes(TOKEN), error.message);
    return true;
  };
}

describe("a refused handshake", () => {
  let gateway, proxy;
  before(async () => { gateway = await new Gateway().start(); proxy = await new BlackholeProxy(gateway.port).listen(); });
  after(async () => { await proxy.close(); await gateway.stop(); });

  for (const [name, token, WS] of [["a wrong token", WRONG, WebSocket], ["no token", null, WebSocket],
                                   ["a wrong token, in a browser", WRONG, BrowserLikeWebSocket],
                                   ["no token, in a browser", null, BrowserLikeWebSocket]]) {
    test(`${name}: whenLive rejects at once, naming the token, and nothing is tried again`, { timeout: 20_000 },
         async () => {
      const before = proxy.accepted;
      const client = new OwnerSessionClient({ url: proxy.url(), token, WebSocket: WS, random: () => 0 }).start();
      const links = [];
      client.onLink((state) => links.push(state));
      await assert.rejects(client.whenLive(), refusedFor(token !== null));  // without the rule: never settles
      assert.deepEqual(links, ["closed"]);  // no `reconnecting`: no backoff, no second handshake
      assert.equal(client.link, "closed");
      assert.ok(client.refused instanceof HandshakeRefused);
      await assert.rejects(client.whenLive(), refusedFor(token !== null));  // anyone who asks later hears why
      // the proxy forwards and counts connections: the client's one handshake (and in a browser its one /whoami
      // request), then this one
      const good = await GatewayConnection.open(proxy.url(), TOKEN, WebSocket);
      assert.equal(typeof (await good.call("gateway.ping")).cursor, "number");
      good.close();
      assert.equal(proxy.accepted - before, WS === BrowserLikeWebSocket ? 3 : 2);
      assert.deepEqual(links, ["closed"]);
    });
  }

  test("a plain connection rejects with the same error", { timeout: 20_000 }, async () => {
    await assert.rejects(GatewayConnection.open(gateway.url, WRONG, WebSocket), refusedFor(true));
    await assert.rejects(GatewayConnection.open(gateway.url, null, BrowserLikeWebSocket), refusedFor(false));
  });
});

describe("a gateway that is down", () => {
  let gateway;
  before(async () => { gateway = await new Gateway().start(); await gateway.kill9(); });
  after(async () => { await gateway.stop(); });

  test("is retried with backoff until it is up (its /whoami cannot be asked: not a refusal)", { timeout: 30_000 },
       async () => {
    const client = new OwnerSessionClient({ url: gateway.url, token: TOKEN, WebSocket: BrowserLikeWebSocket,
                                            heartbeat: null, random: () => 0 }).start();
    const links = [];
    client.onLink((state) => links.push(state));
    let live = false;
    const waiting = client.whenLive().then(() => { live = true; });
    await until(() => links.filter((s) => s === "reconnecting").length >= 2, "two failed attempts");
    assert.equal(live, false);
    await gateway.start();
    await waiting;
    assert.equal(client.link, "live");
    assert.equal(client.refused, null);
    client.close();
    await assert.rejects(client.whenLive(), /was closed/);
  });
});
