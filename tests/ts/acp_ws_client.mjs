// A remote ACP client built on the official TypeScript SDK (@agentclientprotocol/sdk, its WebSocket stream), run with
// the Node.js that `make interop` installs, by tests/gateway/api/test_acp_sdk_clients.py against a gateway's `/acp`.
//
//   node acp_ws_client.mjs create URL TOKEN CWD              new session, two prompts
//   node acp_ws_client.mjs reload URL TOKEN CWD SESSION_ID   session/load it, then one more prompt
//   node acp_ws_client.mjs permission URL TOKEN CWD          a prompt whose tool asks for permission, allowed once
//
// It prints one JSON object: the session/update notifications in arrival order (notification handlers start in
// arrival order), how many had come when session/load answered, and what the calls answered.
import { client, methods } from "@agentclientprotocol/sdk";
import { createWebSocketStream } from "@agentclientprotocol/sdk/experimental/ws-client";
import WebSocket from "ws";

const [phase, url, token, cwd, sessionArg] = process.argv.slice(2);
const updates = [];
const asked = [];

const app = client({ name: "acp-gateway-test-client" })
  .onNotification(methods.client.session.update, (ctx) => {
    updates.push(ctx.params);
  })
  .onRequest(methods.client.session.requestPermission, (ctx) => {
    asked.push(ctx.params.sessionId);
    const allow = ctx.params.options.find((o) => o.kind === "allow_once");
    return { outcome: { outcome: "selected", optionId: allow.optionId } };
  });

const stream = createWebSocketStream(url, { WebSocket, headers: { Authorization: `Bearer ${token}` } });
const text = (t) => [{ type: "text", text: t }];

const out = await app.connectWith(stream, async (ctx) => {
  const result = { updates };
  const init = await ctx.request(methods.agent.initialize, { protocolVersion: 1, clientCapabilities: {} });
  result.loadSession = init.agentCapabilities?.loadSession ?? false;
  const prompt = async (sessionId, t) =>
    (await ctx.request(methods.agent.session.prompt, { sessionId, prompt: text(t) })).stopReason;
  if (phase === "create") {
    const { sessionId } = await ctx.request(methods.agent.session.new, { cwd, mcpServers: [] });
    result.sessionId = sessionId;
    result.stops = [await prompt(sessionId, "/tool search found-it"), await prompt(sessionId, "hello before the crash")];
  } else if (phase === "reload") {
    await ctx.request(methods.agent.session.load, { sessionId: sessionArg, cwd, mcpServers: [] });
    result.loadedAt = updates.length;
    result.stops = [await prompt(sessionArg, "hello after the restart")];
  } else if (phase === "permission") {
    const { sessionId } = await ctx.request(methods.agent.session.new, { cwd, mcpServers: [] });
    result.sessionId = sessionId;
    result.stops = [await prompt(sessionId, "/permission")];
    result.asked = asked;
  }
  return result;
});
process.stdout.write(JSON.stringify(out) + "\n");
process.exit(0);
