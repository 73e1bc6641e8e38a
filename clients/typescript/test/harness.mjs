// A real gateway for the Node tests (the repository's Python gateway and its reference agent, as processes), and a
// TCP proxy that can stop forwarding: a link that silently stops delivering, which no closed socket imitates.
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

export const REPO = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
export const PYTHON = process.env.ACP_GATEWAY_PYTHON || [join(REPO, ".venv", "bin", "python")].find(existsSync) || "python3";
export const TOKEN = "ts-client-test-token-0123456789";

/** Waits for `predicate` (polled on every event-loop turn that has I/O), failing after `timeoutMs` with `what`. */
export async function until(predicate, what, timeoutMs = 20_000) {
  const start = Date.now();
  while (!(await predicate())) {
    if (Date.now() - start > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

export class Gateway {
  constructor({ config = "" } = {}) {
    this.dir = mkdtempSync(join(tmpdir(), "acp-ts-"));
    this.work = join(this.dir, "work");
    mkdirSync(this.work);
    mkdirSync(join(this.dir, "agents"));
    const agent = [PYTHON, "-m", "agents.reference", "--state-dir", join(this.dir, "agent-state")];
    writeFileSync(join(this.dir, "agents", "reference.toml"),
                  `id = "reference"\ncommand = ${JSON.stringify(agent)}\nnative_session_resume = true\n`);
    // Agents are the gateway's children here (host_linger = 0), as in the Python harness: a host left lingering after
    // a test's gateway stops would outlive the run for up to 15 minutes. A test about hosts names host_linger.
    writeFileSync(join(this.dir, "gateway.toml"), config.includes("host_linger") ? config : `host_linger = 0\n${config}`);
    this.port = 0;
    this.stderr = "";
  }

  get url() { return `ws://127.0.0.1:${this.port}/rpc`; }

  /** Starts the gateway (again on the same port, after a kill) and resolves once it listens. */
  start() {
    const argv = ["-m", "gateway.cli", "serve", "--port", String(this.port), "--state-dir", join(this.dir, "state"),
                  "--workspace-root", this.dir, "--agents-dir", join(this.dir, "agents"), "--default-agent", "reference",
                  "--token", TOKEN, "--config", join(this.dir, "gateway.toml")];
    const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("ACP_GATEWAY_")));
    this.proc = spawn(PYTHON, argv, { cwd: REPO, env: { ...env, PYTHONPATH: REPO }, stdio: ["ignore", "pipe", "pipe"] });
    this.proc.stderr.on("data", (d) => { this.stderr = (this.stderr + d).slice(-20_000); });
    return new Promise((resolve, reject) => {
      let out = "";
      this.proc.stdout.on("data", (d) => {
        out += d;
        const m = out.match(/listening on ws:\/\/127\.0\.0\.1:(\d+)\/rpc/);
        if (m && !this.port) this.port = Number(m[1]);
        if (m) resolve(this);
      });
      this.proc.on("exit", (code) => reject(new Error(`gateway exited (${code}) before listening:\n${this.stderr}`)));
    });
  }

  /** kill -9: no goodbye to anyone. */
  kill9() {
    return new Promise((resolve) => { this.proc.once("exit", resolve); this.proc.kill("SIGKILL"); });
  }

  stop() {
    if (!this.proc || this.proc.exitCode !== null) return Promise.resolve();
    return new Promise((resolve) => { this.proc.once("exit", resolve); this.proc.kill("SIGTERM"); });
  }
}

/** Forwards TCP to `port` until told to blackhole: then it stops moving bytes either way (sockets stay open). */
export class BlackholeProxy {
  constructor(port) {
    this.target = port;
    this.holed = false;
    this.pairs = new Set();
    this.accepted = 0;  // connections opened through it: each one a handshake
    this.server = net.createServer((client) => {
      this.accepted += 1;
      const upstream = net.connect(this.target, "127.0.0.1");
      const pair = { client, upstream };
      this.pairs.add(pair);
      client.pipe(upstream);
      upstream.pipe(client);
      if (this.holed) this.hold(pair);
      const end = () => { client.destroy(); upstream.destroy(); this.pairs.delete(pair); };
      client.on("close", end); upstream.on("close", end);
      client.on("error", end); upstream.on("error", end);
    });
  }

  listen() { return new Promise((resolve) => this.server.listen(0, "127.0.0.1", () => resolve(this))); }
  get port() { return this.server.address().port; }
  url(path = "/rpc") { return `ws://127.0.0.1:${this.port}${path}`; }

  hold(pair) { pair.client.pause(); pair.upstream.pause(); pair.client.unpipe(); pair.upstream.unpipe(); }

  /** Nothing is delivered any more, either way; nothing is closed. */
  blackhole() { this.holed = true; for (const pair of this.pairs) this.hold(pair); }

  restore() {
    this.holed = false;
    for (const { client, upstream } of this.pairs) { client.pipe(upstream); upstream.pipe(client); client.resume(); upstream.resume(); }
  }

  /** Every connection through the proxy closed at once (a closed socket, which a client sees at once). */
  cut() { for (const { client, upstream } of this.pairs) { client.destroy(); upstream.destroy(); } }

  close() {
    this.cut();
    return new Promise((resolve) => this.server.close(resolve));
  }
}
