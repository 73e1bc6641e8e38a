// Relay throughput of TypeScript clients through the gateway, for bench/run.py: this project's package
// (clients/typescript, on /rpc) and the official TypeScript ACP SDK's WebSocket client (on /acp), each receiving
// the same flood from the same agent. Prints one JSON line: updates, seconds.
//
//   node ts_clients.mjs package|sdk URL TOKEN COUNT CWD      (URL: the gateway's ws://…/rpc)
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..");
const load = (path) => import(pathToFileURL(join(ROOT, path)).href);
const [mode, url, token, countArg, cwd] = process.argv.slice(2);
const count = Number(countArg);
const { default: WebSocket } = await load("clients/typescript/node_modules/ws/wrapper.mjs");
const { GatewayConnection, OwnerSessionClient } = await load("clients/typescript/dist/index.js");

const admin = await GatewayConnection.open(url, token, WebSocket);
const { session_id: sessionId } = await admin.call("task.session.start", { agent: "flood", cwd, wait_ready: true });
let seen = 0, start = 0;
const finished = new Promise((resolve) => {
  globalThis.counted = (n) => { seen += n; if (seen >= count) resolve(performance.now()); };
});
// A client that stops short of the flood fails it, exit status 3, in run.py's flood_deadline (30 s + 1 s per 2,000).
setTimeout(() => {
  process.stderr.write(`subscriber 1 got ${seen} of ${count} updates (not within ${30 + count / 2000} s)\n`);
  process.exit(3);
}, (30 + count / 2000) * 1000);

if (mode === "package") {
  const client = new OwnerSessionClient({ url, token, WebSocket }).start();
  client.onEvent((e) => { if (e.type === "session_update") globalThis.counted(1); });
  await client.whenLive();
  start = performance.now();
  admin.call("task.session.prompt", { session_id: sessionId, prompt: String(count) });
  const end = await finished;
  client.close();
  print(end);
} else {
  const { client, methods } = await load(".interop/node_modules/@agentclientprotocol/sdk/dist/v1/stable/acp.js");
  const { createWebSocketStream } = await load(".interop/node_modules/@agentclientprotocol/sdk/dist/transports/ws-stream.js");
  const app = client({ name: "bench" }).onNotification(methods.client.session.update, () => globalThis.counted(1));
  const stream = createWebSocketStream(url.replace(/\/rpc$/, "/acp"), { WebSocket, headers: { Authorization: `Bearer ${token}` } });
  await app.connectWith(stream, async (ctx) => {
    await ctx.request(methods.agent.initialize, { protocolVersion: 1, clientCapabilities: {} });
    await ctx.request(methods.agent.session.resume, { sessionId, cwd, mcpServers: [] });
    start = performance.now();
    admin.call("task.session.prompt", { session_id: sessionId, prompt: String(count) });
    print(await finished);
  });
}

function print(end) {
  process.stdout.write(JSON.stringify({ updates: seen, seconds: (end - start) / 1000 }) + "\n");
  process.exit(0);
}
