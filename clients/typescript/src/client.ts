// The owner-session client: one owner's live view of their sessions, kept current across reconnects
// (docs/clients.md says what it guarantees; the Python client, gateway/clients/client.py, keeps the same promises).
import { ConnectionLost, GatewayConnection, HandshakeRefused, NotConnected, RpcError, type Notification,
         type WebSocketConstructor } from "./connection.js";
import type { ApiMethods, Event, MethodName, SessionStartParams, SessionSummary } from "./generated/api.js";
import { HEARTBEAT_INTERVAL, MalformedCounter, SILENT_AFTER, backoffDelay, isNew, isValidEvent, nextLink, nextReconcileDelay,
         silenceDeadline, type LinkEvent, type LinkState } from "./policy.js";
import { Session } from "./session.js";
import { METHOD_NOT_FOUND, RESYNC_REQUIRED } from "./codes.js";

export interface ClientOptions {
  /** The gateway's /rpc endpoint, e.g. ws://127.0.0.1:8765/rpc */
  url: string;
  /** The owner's token (sent as ?token=). */
  token?: string | null;
  /** Seconds between heartbeats; a link silent for two of them is given up. null: none. Default 5. */
  heartbeat?: number | null;
  /** A WebSocket class, where there is no global one (Node.js 20: the `ws` package). */
  WebSocket?: WebSocketConstructor;
  /** Randomness for the backoff's and the reconciliation's jitter (tests make it fixed). */
  random?: () => number;
}

export type EventListener = (event: Event) => void;
export type LinkListener = (state: LinkState) => void;
/** Called after a resync: events between the old cursor and `cursor` were past retention and are not delivered. */
export type ResyncListener = (cursor: number) => void;

const now = () => performance.now() / 1000;

export class OwnerSessionClient {
  readonly url: string;
  readonly heartbeat: number | null;
  /** Where the link is: connecting, live, degraded, reconnecting, closed. */
  link: LinkState = "connecting";
  /** The highest journal event id delivered: the stream resumes after it. */
  cursor: number | null = null;
  /** The owner's sessions as last known (kept while the link is down). */
  sessions = new Map<string, SessionSummary>();
  reconnects = 0;
  reconciliations = 0;
  /** Why the gateway refused the handshake (a missing or wrong token), which closed the client for good. */
  refused: HandshakeRefused | null = null;
  private readonly token: string | null;
  private readonly WebSocket?: WebSocketConstructor;
  private readonly random: () => number;
  private conn: GatewayConnection | null = null;
  private heardAt = 0;
  private readonly eventListeners = new Set<EventListener>();
  private readonly linkListeners = new Set<LinkListener>();
  private readonly resyncListeners = new Set<ResyncListener>();
  private readonly reconcileListeners = new Set<() => void>();
  private liveWaiters: Array<{ resolve: () => void; reject: (error: Error) => void }> = [];
  private readonly malformed = new MalformedCounter();
  private readonly stop = { stopped: false };
  private timers: ReturnType<typeof setTimeout>[] = [];
  private wakeSleeper: (() => void) | null = null;
  private caughtUp: (() => void) | null = null;

  constructor(options: ClientOptions) {
    this.url = options.url;
    this.token = options.token ?? null;
    this.heartbeat = options.heartbeat === undefined ? HEARTBEAT_INTERVAL : options.heartbeat;
    this.WebSocket = options.WebSocket;
    this.random = options.random ?? Math.random;
  }

  // -- life --------------------------------------------------------------------------------------------------
  /** Connects, and keeps connecting until close(). */
  start(): this {
    void this.run();
    this.scheduleReconcile();
    return this;
  }

  close(): void {
    this.stop.stopped = true;
    for (const t of this.timers) clearTimeout(t);
    this.wakeSleeper?.();
    this.conn?.close();
    this.move("close");
    this.settleWaiters();
  }

  /** Resolves once the link is live (now, if it is). Rejects with HandshakeRefused when the gateway refused the
   * handshake (a missing or wrong token: the client is closed then, and never retries it), and with NotConnected
   * once the client is closed. Other failures (the gateway down, a cut link) are retried with backoff meanwhile. */
  whenLive(): Promise<void> {
    if (this.link === "live" || this.link === "degraded") return Promise.resolve();
    if (this.link === "closed") return Promise.reject(this.closedError());
    return new Promise((resolve, reject) => this.liveWaiters.push({ resolve, reject }));
  }

  onEvent(listener: EventListener): () => void { this.eventListeners.add(listener); return () => this.eventListeners.delete(listener); }
  onLink(listener: LinkListener): () => void { this.linkListeners.add(listener); return () => this.linkListeners.delete(listener); }
  onResync(listener: ResyncListener): () => void { this.resyncListeners.add(listener); return () => this.resyncListeners.delete(listener); }
  /** After every reconciliation (on each connect, then every 60–75 s): `sessions` was read again from the gateway. */
  onReconcile(listener: () => void): () => void { this.reconcileListeners.add(listener); return () => this.reconcileListeners.delete(listener); }

  // -- calls -------------------------------------------------------------------------------------------------
  /** One call. While the link is down it is not queued: it fails at once with NotConnected (send it again after
   * whenLive()). A call whose link drops before its answer fails with ConnectionLost: it may have taken effect. */
  call<M extends MethodName>(method: M, params?: ApiMethods[M]["params"]): Promise<ApiMethods[M]["result"]>;
  call(method: string, params?: object): Promise<unknown>;
  call(method: string, params: object = {}): Promise<unknown> {
    if (!this.conn || !(this.link === "live" || this.link === "degraded")) {
      return Promise.reject(new NotConnected(`not connected to the gateway at ${this.url} (${this.link}): ${method} `
                                             + "was not sent; send it again once the client is live"));
    }
    return this.conn.call(method, params);
  }

  /** A session by id or name: its helpers (prompt, cancel, permissions, options, history). */
  session(sessionId: string): Session { return new Session(this, sessionId); }

  /** Starts a session and returns its helpers. */
  async startSession(params: SessionStartParams): Promise<Session> {
    const view = await this.call("task.session.start", params);
    return new Session(this, view.session_id);
  }

  private closedError(): Error {
    return this.refused ?? new NotConnected(`the client of the gateway at ${this.url} was closed`);
  }

  /** Live: every waiter goes on. Closed: every waiter hears why. */
  private settleWaiters(): void {
    const waiters = this.liveWaiters;
    this.liveWaiters = [];
    for (const waiter of waiters) {
      if (this.link === "closed") waiter.reject(this.closedError()); else waiter.resolve();
    }
  }

  /** The gateway refused the handshake for good: the client ends, saying why, and never tries again. */
  private endRefused(refused: HandshakeRefused): void {
    this.refused = refused;
    this.close();
  }

  /** The backoff's wait, cut short by close(). */
  private sleep(seconds: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => { this.wakeSleeper = null; resolve(); }, seconds * 1000);
      this.wakeSleeper = () => { clearTimeout(timer); this.wakeSleeper = null; resolve(); };
    });
  }

  // -- the link ----------------------------------------------------------------------------------------------
  private move(event: LinkEvent): void {
    const state = nextLink(this.link, event);
    if (state === this.link) return;
    this.link = state;
    if (state === "live") this.settleWaiters();
    for (const listener of [...this.linkListeners]) listener(state);
  }

  private async run(): Promise<void> {
    let attempt = 0;
    while (!this.stop.stopped) {
      let conn: GatewayConnection;
      try {
        // A handshake on a link that delivers nothing is given up as a silent link is (10 s without heartbeats).
        conn = await GatewayConnection.open(this.url, this.token, this.WebSocket,
                                            (this.heartbeat === null ? 10 : SILENT_AFTER * this.heartbeat) * 1000);
      } catch (e) {
        if (this.stop.stopped) return;
        if (e instanceof HandshakeRefused) { this.endRefused(e); return; }  // the same token would be refused again
        this.move("lost");
        await this.sleep(backoffDelay(attempt++, this.random()));
        if (this.stop.stopped) return;
        this.move("retry");
        continue;
      }
      if (this.stop.stopped) { conn.close(); return; }
      attempt = 0;
      this.reconnects += 1;
      const gone = new Promise<void>((resolve) => { conn.onClose = () => resolve(); });
      this.conn = conn;
      this.heardAt = now();
      conn.onFrame = () => this.heard();
      conn.onNotification = (note) => this.handle(note);
      const heartbeats = this.heartbeat === null ? null : this.watch(conn, this.heartbeat);
      try {
        if (heartbeats) {
          try { await conn.call("gateway.ping", { heartbeat: this.heartbeat! }); }
          catch (e) { if (!(e instanceof RpcError && e.code === METHOD_NOT_FOUND)) throw e; heartbeats.stop(); }
        }
        await this.reconcile();
        // Live once the replay of what was missed is in (`caught_up`): a turn started from then on sees its own events.
        const caughtUp = new Promise<void>((resolve) => { this.caughtUp = resolve; });
        await this.subscribe(conn);
        await Promise.race([caughtUp, gone]);
        if (!this.stop.stopped && conn.open) this.move("connected");
        await gone;
      } catch (e) {
        if (!(e instanceof ConnectionLost || e instanceof RpcError || e instanceof NotConnected)) throw e;
        conn.abort();
      } finally {
        heartbeats?.stop();
      }
      if (this.stop.stopped) return;
      this.move("lost");
      await this.sleep(backoffDelay(attempt++, this.random()));
      if (this.stop.stopped) return;
      this.move("retry");
    }
  }

  private heard(): void {
    this.heardAt = now();
    if (this.link === "degraded") this.move("heard");
  }

  /** Pings every `interval`; a link that delivers nothing for two of them is given up (docs/clients.md). */
  private watch(conn: GatewayConnection, interval: number): { stop: () => void } {
    let timer: ReturnType<typeof setTimeout> | undefined;
    let stopped = false;
    let nextPing = now() + interval;
    let pinging = false;
    const tick = () => {
      if (stopped || !conn.open) return;
      const t = now();
      const deadline = silenceDeadline(this.heardAt, interval);
      if (t >= deadline) {
        if (this.link === "live") this.move("silent");
        conn.abort();
        return;
      }
      if (t >= nextPing) {
        if (!pinging) {
          pinging = true;
          conn.call("gateway.ping").catch(() => {}).finally(() => { pinging = false; });
        }
        nextPing = t + interval;
      }
      timer = setTimeout(tick, Math.max(0, Math.min(nextPing, deadline) - t) * 1000 + 1);
    };
    timer = setTimeout(tick, interval * 1000);
    return { stop: () => { stopped = true; clearTimeout(timer); } };
  }

  // -- the stream --------------------------------------------------------------------------------------------
  private async subscribe(conn: GatewayConnection): Promise<void> {
    try {
      await conn.call("task.session.subscribe", this.cursor === null ? { batch: true } : { since: this.cursor, batch: true });
    } catch (e) {
      if (!(e instanceof RpcError && e.code === RESYNC_REQUIRED)) throw e;
      await this.reconcile(true);  // the cursor is past retention (or ahead of the journal): start from the list's
      for (const listener of [...this.resyncListeners]) listener(this.cursor!);
      await conn.call("task.session.subscribe", { since: this.cursor!, batch: true });
    }
  }

  private handle(note: Notification): void {
    if (note.method !== "task.session.event" || !isValidEvent(note.params)) {
      if (this.malformed.note()) void this.reconcile().catch(() => {});
      return;
    }
    const event = note.params;
    // This client's one subscription on this connection (its answer may not have been read yet: ws hands on every
    // message of a TCP read before the answer's promise continues, so the id cannot be compared here).
    if (event.type === "caught_up") this.caughtUp?.();
    if (!isNew(this.cursor, event.id)) return;  // delivered already (a replay overlapping the live stream)
    if (typeof event.id === "number") this.cursor = event.id;
    this.apply(event);
    for (const listener of [...this.eventListeners]) {
      try { listener(event); } catch (e) { queueMicrotask(() => { throw e; }); }
    }
  }

  private apply(event: Event): void {
    const sid = event.session_id;
    if (!sid) return;
    if (event.type === "session_deleted") this.sessions.delete(sid);
    else if (event.type === "session_created") this.sessions.set(sid, event.data as unknown as SessionSummary);
    else if ((event.type === "session_status" || event.type === "session_title") && this.sessions.has(sid)) {
      const { subscription_id: _, ...rest } = event.data;
      Object.assign(this.sessions.get(sid)!, rest);
    }
  }

  private async reconcile(resync = false): Promise<void> {
    const conn = this.conn;
    if (!conn) return;
    const sessions = new Map<string, SessionSummary>();
    let cursor: string | null = null;
    let eventCursor: number | null = null;
    do {
      const page: ApiMethods["task.session.list"]["result"] =
        await conn.call("task.session.list", cursor ? { limit: 500, cursor } : { limit: 500 });
      eventCursor ??= page.event_cursor;
      for (const s of page.sessions) sessions.set(s.session_id, s);
      cursor = page.next_cursor ?? null;
    } while (cursor);
    this.sessions = sessions;
    this.reconciliations += 1;
    if (this.cursor === null || resync) this.cursor = eventCursor;
    for (const listener of [...this.reconcileListeners]) listener();
  }

  private scheduleReconcile(): void {
    const t = setTimeout(() => {
      if (this.stop.stopped) return;
      if (this.link === "live") void this.reconcile().catch(() => {});
      this.scheduleReconcile();
    }, nextReconcileDelay(this.random()) * 1000);
    this.timers = [t];
  }
}
