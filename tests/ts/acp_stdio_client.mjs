// An editor built on the official TypeScript SDK's stdio transport (ndJsonStream over a child's pipes), run with the
// Node.js that `make interop` installs, by tests/gateway/api/test_acp_connect.py with `acp-gateway connect` as its
// agent.
//
//   node acp_stdio_client.mjs CWD GATE -- AGENT ARGV...
//
// As tests/sdk/acp_stdio_client.py: a prompt `/trickle GATE`, `underway` on stdout once its first chunk came, its
// answer, one more prompt, then one JSON object (the session id, the stop reasons, every chunk's text in order).
import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import { client, methods, ndJsonStream } from "@agentclientprotocol/sdk";

const args = process.argv.slice(2);
const [cwd, gate] = args;
const agent = args.slice(args.indexOf("--") + 1);
const child = spawn(agent[0], agent.slice(1), { stdio: ["pipe", "pipe", "inherit"] });
const chunks = [];
let firstChunk;
const first = new Promise((resolve) => { firstChunk = resolve; });

const app = client({ name: "acp-gateway-test-editor" })
  .onNotification(methods.client.session.update, (ctx) => {
    const update = ctx.params.update;
    if (update.sessionUpdate === "agent_message_chunk") {
      chunks.push(update.content.text);
      firstChunk();
    }
  });

const stream = ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
const text = (t) => [{ type: "text", text: t }];

const out = await app.connectWith(stream, async (ctx) => {
  await ctx.request(methods.agent.initialize, { protocolVersion: 1, clientCapabilities: {} });
  const { sessionId } = await ctx.request(methods.agent.session.new, { cwd, mcpServers: [] });
  const turn = ctx.request(methods.agent.session.prompt, { sessionId, prompt: text(`/trickle ${gate}`) });
  await first;
  process.stdout.write("underway\n");
  const stops = [(await turn).stopReason];
  const during = chunks.slice();
  stops.push((await ctx.request(methods.agent.session.prompt, { sessionId, prompt: text("after the restart") }))
    .stopReason);
  return { sessionId, stops, chunks: during, after: chunks.slice(during.length) };
});
process.stdout.write(JSON.stringify(out) + "\n");
child.stdin.end();
process.exit(0);
