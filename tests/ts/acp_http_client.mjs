// A remote ACP client built on the official TypeScript SDK's Streamable HTTP transport (createHttpStream, the
// remote-transport RFD's HTTP mode), run with the Node.js that `make interop` installs, by
// tests/gateway/api/test_acp_http.py against a gateway's `/acp`.
//
//   node acp_http_client.mjs URL TOKEN CWD
//
// A session, a prompt whose tool call streams, a prompt whose tool asks for permission (allowed once), then it prints
// one JSON object: the session id, the stop reasons, the permission requests it was asked, every session/update.
import { client, methods } from "@agentclientprotocol/sdk";
import { createHttpStream } from "@agentclientprotocol/sdk/experimental/http-client";

const [url, token, cwd] = process.argv.slice(2);
const updates = [];
const asked = [];

const app = client({ name: "acp-gateway-test-http-client" })
  .onNotification(methods.client.session.update, (ctx) => {
    updates.push(ctx.params);
  })
  .onRequest(methods.client.session.requestPermission, (ctx) => {
    asked.push(ctx.params.sessionId);
    const allow = ctx.params.options.find((o) => o.kind === "allow_once");
    return { outcome: { outcome: "selected", optionId: allow.optionId } };
  });

const stream = createHttpStream(url, { headers: { Authorization: `Bearer ${token}` } });
const text = (t) => [{ type: "text", text: t }];

const out = await app.connectWith(stream, async (ctx) => {
  const init = await ctx.request(methods.agent.initialize, { protocolVersion: 1, clientCapabilities: {} });
  const { sessionId } = await ctx.request(methods.agent.session.new, { cwd, mcpServers: [] });
  const prompt = async (t) => (await ctx.request(methods.agent.session.prompt, { sessionId, prompt: text(t) }))
    .stopReason;
  const stops = [await prompt("/tool search found-it"), await prompt("/permission"), await prompt("hello")];
  const listed = await ctx.request(methods.agent.session.list, { cwd });
  return { loadSession: init.agentCapabilities?.loadSession ?? false, sessionId, stops, asked, updates,
           listed: listed.sessions.map((s) => s.sessionId) };
});
process.stdout.write(JSON.stringify(out) + "\n");
process.exit(0);
