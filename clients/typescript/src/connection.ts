// One WebSocket connection to the gateway's /rpc: calls with ids, answers matched to their promises, notifications
// and every frame handed on. The resilient client (client.ts) is built on it.
import type { ApiMethods, MethodName } from "./generated/api.js";
import { INTERNAL_ERROR } from "./codes.js";
import { refusalMessage, refusedForGood } from "./policy.js";

/** What the client needs of a WebSocket: the browser's, Node's (22+), or the `ws` package's. */
export interface WebSocketLike {
  readonly readyState: number;
  send(data: string): void;
  close(code?: number, reason?: string): void;
  terminate?(): void;
  onopen: ((ev: unknown) => void) | null;
  onmessage: ((ev: { data: unknown }) => void) | null;
  onclose: ((ev: { code?: number; reason?: string }) => void) | null;
  onerror: ((ev: { message?: unknown }) => void) | null;
}
export type WebSocketConstructor = new (url: string) => WebSocketLike;

/** The gateway answered a JSON-RPC error: `code` is one of ERROR_MEANINGS, `data` its details. */
export class RpcError extends Error {
  constructor(readonly code: number, message: string, readonly data?: unknown, readonly method?: string) {
    super(`${method ? `${method}: ` : ""}${message} (code ${code})`);
    this.name = "RpcError";
  }
}

/** A call made while the link is down: it was not sent. Send it again once the client is live. */
export class NotConnected extends Error {
  constructor(message: string) { super(message); this.name = "NotConnected"; }
}

/** The gateway refused the handshake for good (HTTP 401: a missing or wrong token; 403: the page's Origin): trying
 * again would be refused again, so the client never retries it. The message says what to fix, never the token. */
export class HandshakeRefused extends Error {
  constructor(message: string, readonly status: number) { super(message); this.name = "HandshakeRefused"; }
}

/** The link dropped while a call waited for its answer: the call may or may not have taken effect. */
export class ConnectionLost extends Error {
  constructor(message: string) { super(message); this.name = "ConnectionLost"; }
}

type Pending = { resolve: (value: unknown) => void; reject: (error: Error) => void; method: string };
export type Notification = { method: string; params?: unknown };

const OPEN = 1;

export function resolveWebSocket(given?: WebSocketConstructor): WebSocketConstructor {
  const found = given ?? (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket;
  if (!found) {
    throw new Error("no WebSocket here: on Node.js 20, install `ws` and pass it: new OwnerSessionClient({ url, token, "
                    + "WebSocket }) after `import WebSocket from \"ws\"`");
  }
  return found;
}

/** The /rpc URL with the token as `?token=` (browsers cannot set an Authorization header on a WebSocket). */
export function rpcUrl(url: string, token: string | null | undefined): string {
  if (!token) return url;
  const u = new URL(url);
  u.searchParams.set("token", token);
  return u.toString();
}

/** The HTTP status a failed handshake was answered with, where the WebSocket says it: the `ws` package's error
 * reads "Unexpected server response: 401". Browsers and Node.js's own WebSocket say nothing (null). */
function handshakeStatus(ev: { message?: unknown } | null | undefined): number | null {
  const found = typeof ev?.message === "string" ? /Unexpected server response: (\d{3})/.exec(ev.message) : null;
  return found ? Number(found[1]) : null;
}

/** Where the WebSocket hides a failed handshake's status: what the gateway's `/whoami` answers the same token
 * (401 when it is refused; `/whoami` beside `/rpc`). null when it cannot be asked (another path, no fetch, the
 * gateway down or another origin's page without CORS): the failure is then retried like any other. */
async function whoamiStatus(url: string, token: string | null | undefined, timeoutMs: number): Promise<number | null> {
  const u = new URL(url);
  const presented = token || u.searchParams.get("token");
  if (!u.pathname.endsWith("/rpc") || typeof fetch !== "function") return null;
  u.protocol = u.protocol === "wss:" ? "https:" : "http:";
  u.pathname = `${u.pathname.slice(0, -"rpc".length)}whoami`;
  u.search = "";
  try {
    const answer = await fetch(u, { headers: presented ? { Authorization: `Bearer ${presented}` } : {},
                                    signal: AbortSignal.timeout(timeoutMs) });
    return answer.status;
  } catch {
    return null;
  }
}

export class GatewayConnection {
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  private closedWith: Error | null = null;
  malformed = 0;
  onNotification: (note: Notification) => void = () => {};
  onFrame: () => void = () => {};
  onClose: (code: number | undefined, reason: string | undefined) => void = () => {};

  private constructor(private readonly ws: WebSocketLike, private readonly url: string) {
    ws.onmessage = (ev) => this.receive(ev.data);
    ws.onclose = (ev) => this.closed(ev.code, ev.reason);
    ws.onerror = () => {};
  }

  /** Opens a connection; rejects if it does not open: with HandshakeRefused when the gateway refused the token
   * (HTTP 401) or the page's Origin (403), else with an Error (the gateway is down, or the handshake timed out). */
  static open(url: string, token: string | null | undefined, WebSocket?: WebSocketConstructor,
              timeoutMs = 10_000): Promise<GatewayConnection> {
    const WS = resolveWebSocket(WebSocket);
    return new Promise((resolve, reject) => {
      const ws = new WS(rpcUrl(url, token));
      let status: number | null = null;
      const timer = setTimeout(() => { fail(new Error(`connecting to ${url} timed out`)); }, timeoutMs);
      const fail = (error: Error) => {
        clearTimeout(timer);
        // onerror stays a no-op: the `ws` package reports terminating a socket that is still connecting as an
        // 'error' event, which with no listener is an uncaught exception that ends the process.
        ws.onopen = ws.onclose = null;
        ws.onerror = () => {};
        try { ws.terminate ? ws.terminate() : ws.close(); } catch { /* already gone */ }
        reject(error);
      };
      const refusedOrNot = async (code: number | undefined) => {
        clearTimeout(timer);
        const answered = status ?? await whoamiStatus(url, token, timeoutMs);
        if (answered !== null && refusedForGood(answered)) {
          fail(new HandshakeRefused(refusalMessage(url, answered, !!token), answered));
        } else {
          fail(new Error(`could not connect to ${url} (${status !== null ? `HTTP ${status}` : `close code ${code ?? "none"}`})`));
        }
      };
      ws.onerror = (ev) => { status = handshakeStatus(ev) ?? status; };
      ws.onclose = (ev) => { ws.onclose = null; void refusedOrNot(ev.code); };
      ws.onopen = () => { clearTimeout(timer); resolve(new GatewayConnection(ws, url)); };
    });
  }

  get open(): boolean { return this.closedWith === null && this.ws.readyState === OPEN; }

  call<M extends MethodName>(method: M, params?: ApiMethods[M]["params"]): Promise<ApiMethods[M]["result"]>;
  call(method: string, params?: object): Promise<unknown>;
  call(method: string, params: object = {}): Promise<unknown> {
    if (!this.open) {
      return Promise.reject(this.closedWith ?? new NotConnected(`not connected to ${this.url}: ${method} was not sent`));
    }
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject, method });
      this.ws.send(JSON.stringify({ jsonrpc: "2.0", id, method, params }));
    });
  }

  /** Drops the connection at once, without the closing handshake a dead link would never complete. */
  abort(): void {
    if (this.ws.terminate) this.ws.terminate();
    else this.ws.close(4000, "link silent");
    this.closed(undefined, "aborted");
  }

  close(): void {
    try { this.ws.close(1000, "client closed"); } catch { /* already closed */ }
    this.closed(1000, "client closed");
  }

  private receive(data: unknown): void {
    this.onFrame();
    let message: unknown;
    try { message = JSON.parse(typeof data === "string" ? data : String(data)); } catch { this.malformed += 1; return; }
    for (const item of Array.isArray(message) ? message : [message]) this.dispatch(item);
  }

  private dispatch(item: unknown): void {
    if (!item || typeof item !== "object") { this.malformed += 1; return; }
    const msg = item as { id?: unknown; method?: unknown; params?: unknown; result?: unknown;
                          error?: { code?: number; message?: string; data?: unknown } };
    if (typeof msg.method === "string" && msg.id === undefined) {
      this.onNotification({ method: msg.method, params: msg.params });
      return;
    }
    const waiting = typeof msg.id === "number" ? this.pending.get(msg.id) : undefined;
    if (!waiting) return;
    this.pending.delete(msg.id as number);
    if (msg.error) {
      waiting.reject(new RpcError(msg.error.code ?? INTERNAL_ERROR, msg.error.message ?? "", msg.error.data, waiting.method));
    } else {
      waiting.resolve(msg.result ?? null);
    }
  }

  private closed(code: number | undefined, reason: string | undefined): void {
    if (this.closedWith !== null) return;
    this.closedWith = new ConnectionLost(`the connection to ${this.url} closed (${code ?? "no close code"}`
                                         + `${reason ? `: ${reason}` : ""})`);
    this.ws.onmessage = null;
    this.ws.onclose = null;
    for (const p of this.pending.values()) {
      p.reject(new ConnectionLost(`${p.method}: the link dropped before its answer; it may or may not have `
                                  + "taken effect"));
    }
    this.pending.clear();
    this.onClose(code, reason);
  }
}
