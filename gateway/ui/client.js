// The gateway's TypeScript client (clients/typescript), bundled for the web UI by its scripts/bundle.mjs: do not edit.
"use strict";
var AcpGateway = (() => {
  var __defProp = Object.defineProperty;
  var __getOwnPropDesc = Object.getOwnPropertyDescriptor;
  var __getOwnPropNames = Object.getOwnPropertyNames;
  var __hasOwnProp = Object.prototype.hasOwnProperty;
  var __defNormalProp = (obj, key, value) => key in obj ? __defProp(obj, key, { enumerable: true, configurable: true, writable: true, value }) : obj[key] = value;
  var __export = (target, all) => {
    for (var name in all)
      __defProp(target, name, { get: all[name], enumerable: true });
  };
  var __copyProps = (to, from, except, desc) => {
    if (from && typeof from === "object" || typeof from === "function") {
      for (let key of __getOwnPropNames(from))
        if (!__hasOwnProp.call(to, key) && key !== except)
          __defProp(to, key, { get: () => from[key], enumerable: !(desc = __getOwnPropDesc(from, key)) || desc.enumerable });
    }
    return to;
  };
  var __toCommonJS = (mod) => __copyProps(__defProp({}, "__esModule", { value: true }), mod);
  var __publicField = (obj, key, value) => __defNormalProp(obj, typeof key !== "symbol" ? key + "" : key, value);

  // src/index.ts
  var index_exports = {};
  __export(index_exports, {
    AGENT_FAILED: () => AGENT_FAILED,
    ALREADY_TERMINAL: () => ALREADY_TERMINAL,
    BUSY: () => BUSY,
    CONFIG_REFUSED: () => CONFIG_REFUSED,
    ConnectionLost: () => ConnectionLost,
    ERROR_MEANINGS: () => ERROR_MEANINGS,
    GIT_REFUSED: () => GIT_REFUSED,
    GatewayConnection: () => GatewayConnection,
    HandshakeRefused: () => HandshakeRefused,
    INTERNAL_ERROR: () => INTERNAL_ERROR,
    INVALID_PARAMS: () => INVALID_PARAMS,
    INVALID_REQUEST: () => INVALID_REQUEST,
    LIMIT_EXCEEDED: () => LIMIT_EXCEEDED,
    METHOD_NOT_FOUND: () => METHOD_NOT_FOUND,
    NOT_FOUND: () => NOT_FOUND,
    NOT_RESUMABLE: () => NOT_RESUMABLE,
    NotConnected: () => NotConnected,
    OwnerSessionClient: () => OwnerSessionClient,
    PARSE_ERROR: () => PARSE_ERROR,
    RESYNC_REQUIRED: () => RESYNC_REQUIRED,
    RpcError: () => RpcError,
    STORAGE_FAILED: () => STORAGE_FAILED,
    Session: () => Session,
    Turn: () => Turn,
    UNAUTHORIZED: () => UNAUTHORIZED,
    WORKSPACE_MISSING: () => WORKSPACE_MISSING,
    policy: () => policy_exports,
    rpcUrl: () => rpcUrl
  });

  // src/codes.ts
  var PARSE_ERROR = -32700;
  var INVALID_REQUEST = -32600;
  var METHOD_NOT_FOUND = -32601;
  var INVALID_PARAMS = -32602;
  var INTERNAL_ERROR = -32603;
  var UNAUTHORIZED = -32001;
  var NOT_FOUND = -32002;
  var ALREADY_TERMINAL = -32009;
  var BUSY = -32010;
  var WORKSPACE_MISSING = -32011;
  var RESYNC_REQUIRED = -32012;
  var NOT_RESUMABLE = -32013;
  var LIMIT_EXCEEDED = -32014;
  var AGENT_FAILED = -32015;
  var STORAGE_FAILED = -32016;
  var CONFIG_REFUSED = -32017;
  var GIT_REFUSED = -32018;

  // src/policy.ts
  var policy_exports = {};
  __export(policy_exports, {
    BACKOFF_BASE: () => BACKOFF_BASE,
    BACKOFF_CAP: () => BACKOFF_CAP,
    DEGRADED_AFTER_SAMPLES: () => DEGRADED_AFTER_SAMPLES,
    HEALTH_SAMPLE_INTERVAL: () => HEALTH_SAMPLE_INTERVAL,
    HEARTBEAT_INTERVAL: () => HEARTBEAT_INTERVAL,
    IllegalLinkTransition: () => IllegalLinkTransition,
    LINK_TRANSITIONS: () => LINK_TRANSITIONS,
    MALFORMED_LIMIT: () => MALFORMED_LIMIT,
    MalformedCounter: () => MalformedCounter,
    RECONCILE_INTERVAL: () => RECONCILE_INTERVAL,
    RECONCILE_JITTER: () => RECONCILE_JITTER,
    REFUSED_STATUSES: () => REFUSED_STATUSES,
    SILENT_AFTER: () => SILENT_AFTER,
    backoffDelay: () => backoffDelay,
    isNew: () => isNew,
    isValidEvent: () => isValidEvent,
    nextLink: () => nextLink,
    nextReconcileDelay: () => nextReconcileDelay,
    refusalMessage: () => refusalMessage,
    refusedForGood: () => refusedForGood,
    silenceDeadline: () => silenceDeadline
  });

  // src/generated/policy.ts
  var BACKOFF_BASE = 0.5;
  var BACKOFF_CAP = 30;
  var DEGRADED_AFTER_SAMPLES = 9;
  var HEALTH_SAMPLE_INTERVAL = 5;
  var HEARTBEAT_INTERVAL = 5;
  var MALFORMED_LIMIT = 5;
  var RECONCILE_INTERVAL = 60;
  var RECONCILE_JITTER = 15;
  var SILENT_AFTER = 2;
  var LINK_TRANSITIONS = [
    ["connecting", "connected", "live"],
    ["connecting", "lost", "reconnecting"],
    ["live", "heard", "live"],
    ["live", "silent", "degraded"],
    ["live", "lost", "reconnecting"],
    ["degraded", "heard", "live"],
    ["degraded", "lost", "reconnecting"],
    ["reconnecting", "retry", "connecting"]
  ];

  // src/policy.ts
  function nextReconcileDelay(rand) {
    return RECONCILE_INTERVAL + RECONCILE_JITTER * rand;
  }
  function backoffDelay(attempt, rand) {
    const ceiling = Math.min(BACKOFF_CAP, BACKOFF_BASE * 2 ** Math.min(Math.max(attempt, 0), 30));
    return ceiling * (0.5 + rand / 2);
  }
  function silenceDeadline(heardAt, interval) {
    return heardAt + SILENT_AFTER * interval;
  }
  var IllegalLinkTransition = class extends Error {
  };
  var TABLE = new Map(LINK_TRANSITIONS.map(([state, event, next]) => [`${state} ${event}`, next]));
  function nextLink(state, event) {
    if (event === "close") return "closed";
    const next = TABLE.get(`${state} ${event}`);
    if (next === void 0) throw new IllegalLinkTransition(`${event} in ${state}`);
    return next;
  }
  function isValidEvent(params) {
    if (!params || typeof params !== "object" || Array.isArray(params)) return false;
    const p = params;
    return typeof p.type === "string" && (p.id === null || p.id === void 0 || Number.isInteger(p.id)) && !!p.data && typeof p.data === "object" && !Array.isArray(p.data);
  }
  var MalformedCounter = class {
    constructor() {
      __publicField(this, "count", 0);
    }
    note() {
      this.count += 1;
      if (this.count >= MALFORMED_LIMIT) {
        this.count = 0;
        return true;
      }
      return false;
    }
  };
  function isNew(cursor, id) {
    return id === null || id === void 0 || cursor === null || id > cursor;
  }
  var REFUSED_STATUSES = /* @__PURE__ */ new Set([401, 403]);
  function refusedForGood(status) {
    return REFUSED_STATUSES.has(status);
  }
  var TOKEN_HELP = "Set ACP_GATEWAY_TOKEN (the client's token) to one of the gateway's tokens: the one `acp-gateway serve` printed at its first start and keeps in its state directory's `token` file, or one given to it (--token, ACP_GATEWAY_TOKEN or [[auth.tokens]] in its configuration). The client does not retry it.";
  function refusalMessage(url, status, tokenGiven) {
    const u = new URL(url);
    const given = tokenGiven || u.searchParams.has("token");
    const where = `${u.protocol}//${u.host}${u.pathname}`;
    if (status === 403) {
      return `the gateway at ${where} refused the connection (HTTP 403): the page's Origin is not allowed; a browser page must come from the gateway itself or from an origin in its \`allowed_origins\`. The client does not retry it.`;
    }
    if (!given) return `the gateway at ${where} refused the connection (HTTP ${status}): no token was given. ${TOKEN_HELP}`;
    return `the gateway at ${where} refused the token (HTTP ${status}): it is not one of the gateway's tokens. ${TOKEN_HELP}`;
  }

  // src/connection.ts
  var RpcError = class extends Error {
    constructor(code, message, data, method) {
      super(`${method ? `${method}: ` : ""}${message} (code ${code})`);
      this.code = code;
      this.data = data;
      this.method = method;
      this.name = "RpcError";
    }
  };
  var NotConnected = class extends Error {
    constructor(message) {
      super(message);
      this.name = "NotConnected";
    }
  };
  var HandshakeRefused = class extends Error {
    constructor(message, status) {
      super(message);
      this.status = status;
      this.name = "HandshakeRefused";
    }
  };
  var ConnectionLost = class extends Error {
    constructor(message) {
      super(message);
      this.name = "ConnectionLost";
    }
  };
  var OPEN = 1;
  function resolveWebSocket(given) {
    const found = given ?? globalThis.WebSocket;
    if (!found) {
      throw new Error('no WebSocket here: on Node.js 20, install `ws` and pass it: new OwnerSessionClient({ url, token, WebSocket }) after `import WebSocket from "ws"`');
    }
    return found;
  }
  function rpcUrl(url, token) {
    if (!token) return url;
    const u = new URL(url);
    u.searchParams.set("token", token);
    return u.toString();
  }
  function handshakeStatus(ev) {
    const found = typeof ev?.message === "string" ? /Unexpected server response: (\d{3})/.exec(ev.message) : null;
    return found ? Number(found[1]) : null;
  }
  async function whoamiStatus(url, token, timeoutMs) {
    const u = new URL(url);
    const presented = token || u.searchParams.get("token");
    if (!u.pathname.endsWith("/rpc") || typeof fetch !== "function") return null;
    u.protocol = u.protocol === "wss:" ? "https:" : "http:";
    u.pathname = `${u.pathname.slice(0, -"rpc".length)}whoami`;
    u.search = "";
    try {
      const answer = await fetch(u, {
        headers: presented ? { Authorization: `Bearer ${presented}` } : {},
        signal: AbortSignal.timeout(timeoutMs)
      });
      return answer.status;
    } catch {
      return null;
    }
  }
  var GatewayConnection = class _GatewayConnection {
    constructor(ws, url) {
      this.ws = ws;
      this.url = url;
      __publicField(this, "nextId", 1);
      __publicField(this, "pending", /* @__PURE__ */ new Map());
      __publicField(this, "closedWith", null);
      __publicField(this, "malformed", 0);
      __publicField(this, "onNotification", () => {
      });
      __publicField(this, "onFrame", () => {
      });
      __publicField(this, "onClose", () => {
      });
      ws.onmessage = (ev) => this.receive(ev.data);
      ws.onclose = (ev) => this.closed(ev.code, ev.reason);
      ws.onerror = () => {
      };
    }
    /** Opens a connection; rejects if it does not open: with HandshakeRefused when the gateway refused the token
     * (HTTP 401) or the page's Origin (403), else with an Error (the gateway is down, or the handshake timed out). */
    static open(url, token, WebSocket, timeoutMs = 1e4) {
      const WS = resolveWebSocket(WebSocket);
      return new Promise((resolve, reject) => {
        const ws = new WS(rpcUrl(url, token));
        let status = null;
        const timer = setTimeout(() => {
          fail(new Error(`connecting to ${url} timed out`));
        }, timeoutMs);
        const fail = (error) => {
          clearTimeout(timer);
          ws.onopen = ws.onclose = null;
          ws.onerror = () => {
          };
          try {
            ws.terminate ? ws.terminate() : ws.close();
          } catch {
          }
          reject(error);
        };
        const refusedOrNot = async (code) => {
          clearTimeout(timer);
          const answered = status ?? await whoamiStatus(url, token, timeoutMs);
          if (answered !== null && refusedForGood(answered)) {
            fail(new HandshakeRefused(refusalMessage(url, answered, !!token), answered));
          } else {
            fail(new Error(`could not connect to ${url} (${status !== null ? `HTTP ${status}` : `close code ${code ?? "none"}`})`));
          }
        };
        ws.onerror = (ev) => {
          status = handshakeStatus(ev) ?? status;
        };
        ws.onclose = (ev) => {
          ws.onclose = null;
          void refusedOrNot(ev.code);
        };
        ws.onopen = () => {
          clearTimeout(timer);
          resolve(new _GatewayConnection(ws, url));
        };
      });
    }
    get open() {
      return this.closedWith === null && this.ws.readyState === OPEN;
    }
    call(method, params = {}) {
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
    abort() {
      if (this.ws.terminate) this.ws.terminate();
      else this.ws.close(4e3, "link silent");
      this.closed(void 0, "aborted");
    }
    close() {
      try {
        this.ws.close(1e3, "client closed");
      } catch {
      }
      this.closed(1e3, "client closed");
    }
    receive(data) {
      this.onFrame();
      let message;
      try {
        message = JSON.parse(typeof data === "string" ? data : String(data));
      } catch {
        this.malformed += 1;
        return;
      }
      for (const item of Array.isArray(message) ? message : [message]) this.dispatch(item);
    }
    dispatch(item) {
      if (!item || typeof item !== "object") {
        this.malformed += 1;
        return;
      }
      const msg = item;
      if (typeof msg.method === "string" && msg.id === void 0) {
        this.onNotification({ method: msg.method, params: msg.params });
        return;
      }
      const waiting = typeof msg.id === "number" ? this.pending.get(msg.id) : void 0;
      if (!waiting) return;
      this.pending.delete(msg.id);
      if (msg.error) {
        waiting.reject(new RpcError(msg.error.code ?? INTERNAL_ERROR, msg.error.message ?? "", msg.error.data, waiting.method));
      } else {
        waiting.resolve(msg.result ?? null);
      }
    }
    closed(code, reason) {
      if (this.closedWith !== null) return;
      this.closedWith = new ConnectionLost(`the connection to ${this.url} closed (${code ?? "no close code"}${reason ? `: ${reason}` : ""})`);
      this.ws.onmessage = null;
      this.ws.onclose = null;
      for (const p of this.pending.values()) {
        p.reject(new ConnectionLost(`${p.method}: the link dropped before its answer; it may or may not have taken effect`));
      }
      this.pending.clear();
      this.onClose(code, reason);
    }
  };

  // src/session.ts
  var Session = class {
    constructor(client, id) {
      this.client = client;
      this.id = id;
    }
    status() {
      return this.client.call("task.session.status", { session_id: this.id });
    }
    get() {
      return this.client.call("task.session.get", { session_id: this.id });
    }
    resume(waitReady = true) {
      return this.client.call("task.session.resume", { session_id: this.id, wait_ready: waitReady });
    }
    cancelTurn() {
      return this.client.call("task.session.cancel_turn", { session_id: this.id });
    }
    /** Ends the session for good; a session already ended (-32009) counts as success: its status is returned. */
    async cancel() {
      try {
        return await this.client.call("task.session.cancel", { session_id: this.id });
      } catch (e) {
        if (e instanceof RpcError && e.code === ALREADY_TERMINAL) return this.status();
        throw e;
      }
    }
    setTitle(title) {
      return this.client.call("task.session.set_title", { session_id: this.id, title });
    }
    /** One of the agent's config options (model, mode, thought level…): a select's value, or a boolean; null forgets. */
    setConfigOption(configId, value) {
      return this.client.call("task.session.set_config_option", { session_id: this.id, config_id: configId, value });
    }
    setMode(modeId) {
      return this.client.call("task.session.set_mode", { session_id: this.id, mode_id: modeId });
    }
    /** Answers a permission request with one of its options, or `null` to refuse it (cancelled). */
    respondPermission(requestId, optionId) {
      return this.client.call("task.session.permission.respond", optionId === null ? { session_id: this.id, request_id: requestId, cancelled: true } : { session_id: this.id, request_id: requestId, option_id: optionId });
    }
    /** Answers an agent's question (an elicitation): accept with content fitting its schema, decline or cancel. */
    respondElicitation(requestId, action, content) {
      return this.client.call(
        "task.session.elicitation.respond",
        { session_id: this.id, request_id: requestId, action, ...content ? { content } : {} }
      );
    }
    delete() {
      return this.client.call("task.session.delete", { session_id: this.id });
    }
    /** What the session recorded, oldest first, page by page. */
    async *history(pageSize = 100) {
      let after = 0;
      for (; ; ) {
        const page = await this.client.call("task.session.history", { session_id: this.id, after, limit: pageSize });
        yield* page.entries;
        if (page.next === null || page.next === void 0) return;
        after = page.next;
      }
    }
    /** The session's journal events, oldest first (what a transcript is rendered from). */
    async *journal(after = 0, pageSize = 500) {
      for (; ; ) {
        const page = await this.client.call("task.session.events", { session_id: this.id, after, limit: pageSize });
        yield* page.events;
        if (page.next === null || page.next === void 0) return;
        after = page.next;
      }
    }
    /** This session's live events; returns the function that stops listening. */
    onEvent(listener) {
      return this.client.onEvent((event) => {
        if (event.session_id === this.id) listener(event);
      });
    }
    /** Sends a prompt; the turn's events (turn_started … turn_ended) come through the returned Turn as they arrive,
     * across reconnects, each once. */
    prompt(prompt, meta) {
      return new Turn(this, prompt, meta);
    }
  };
  var Turn = class {
    constructor(session, prompt, meta) {
      this.session = session;
      __publicField(this, "result");
      __publicField(this, "queue", []);
      __publicField(this, "wake", null);
      __publicField(this, "started", false);
      __publicField(this, "ended", false);
      __publicField(this, "failure", null);
      __publicField(this, "stopListening");
      __publicField(this, "settle");
      this.result = new Promise((resolve, reject) => {
        this.settle = { resolve, reject };
      });
      this.result.catch(() => {
      });
      const after = session.client.cursor;
      const blocks = JSON.stringify(typeof prompt === "string" ? [{ type: "text", text: prompt }] : prompt);
      this.stopListening = session.onEvent((event) => {
        if (this.ended || typeof event.id === "number" && after !== null && event.id <= after) return;
        if (event.type === "turn_started" && JSON.stringify(event.data.prompt) === blocks) this.started = true;
        if (!this.started) return;
        this.push(event);
        if (event.type === "turn_ended") this.finish(event.data);
      });
      const params = { session_id: session.id, prompt, ...meta ? { meta } : {} };
      session.client.call("task.session.prompt", params).catch((e) => {
        if (this.started || this.ended) return;
        if (e instanceof ConnectionLost) {
          this.fail(new ConnectionLost(`the link dropped before session ${session.id}'s turn was seen to start: the prompt may or may not have reached the gateway (its events will say)`));
        } else {
          this.fail(e);
        }
      });
    }
    push(event) {
      this.queue.push(event);
      this.wake?.();
    }
    finish(end) {
      this.ended = true;
      this.stopListening();
      this.settle.resolve(end);
      this.wake?.();
    }
    fail(error) {
      this.ended = true;
      this.failure = error;
      this.stopListening();
      this.settle.reject(error);
      this.wake?.();
    }
    async *[Symbol.asyncIterator]() {
      for (; ; ) {
        while (this.queue.length) yield this.queue.shift();
        if (this.failure) throw this.failure;
        if (this.ended) return;
        await new Promise((resolve) => {
          this.wake = resolve;
        });
        this.wake = null;
      }
    }
    /** The text the agent streamed (its agent_message_chunk updates), once the turn is over. */
    async text() {
      let text = "";
      for await (const event of this) {
        const update = event.type === "session_update" ? event.data.update : null;
        if (update?.sessionUpdate === "agent_message_chunk" && update.content?.type === "text") text += update.content.text;
      }
      return text;
    }
  };

  // src/client.ts
  var now = () => performance.now() / 1e3;
  var OwnerSessionClient = class {
    constructor(options) {
      __publicField(this, "url");
      __publicField(this, "heartbeat");
      /** Where the link is: connecting, live, degraded, reconnecting, closed. */
      __publicField(this, "link", "connecting");
      /** The highest journal event id delivered: the stream resumes after it. */
      __publicField(this, "cursor", null);
      /** The owner's sessions as last known (kept while the link is down). */
      __publicField(this, "sessions", /* @__PURE__ */ new Map());
      __publicField(this, "reconnects", 0);
      __publicField(this, "reconciliations", 0);
      /** Why the gateway refused the handshake (a missing or wrong token), which closed the client for good. */
      __publicField(this, "refused", null);
      __publicField(this, "token");
      __publicField(this, "WebSocket");
      __publicField(this, "random");
      __publicField(this, "conn", null);
      __publicField(this, "heardAt", 0);
      __publicField(this, "eventListeners", /* @__PURE__ */ new Set());
      __publicField(this, "linkListeners", /* @__PURE__ */ new Set());
      __publicField(this, "resyncListeners", /* @__PURE__ */ new Set());
      __publicField(this, "reconcileListeners", /* @__PURE__ */ new Set());
      __publicField(this, "liveWaiters", []);
      __publicField(this, "malformed", new MalformedCounter());
      __publicField(this, "stop", { stopped: false });
      __publicField(this, "timers", []);
      __publicField(this, "wakeSleeper", null);
      __publicField(this, "caughtUp", null);
      this.url = options.url;
      this.token = options.token ?? null;
      this.heartbeat = options.heartbeat === void 0 ? HEARTBEAT_INTERVAL : options.heartbeat;
      this.WebSocket = options.WebSocket;
      this.random = options.random ?? Math.random;
    }
    // -- life --------------------------------------------------------------------------------------------------
    /** Connects, and keeps connecting until close(). */
    start() {
      void this.run();
      this.scheduleReconcile();
      return this;
    }
    close() {
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
    whenLive() {
      if (this.link === "live" || this.link === "degraded") return Promise.resolve();
      if (this.link === "closed") return Promise.reject(this.closedError());
      return new Promise((resolve, reject) => this.liveWaiters.push({ resolve, reject }));
    }
    onEvent(listener) {
      this.eventListeners.add(listener);
      return () => this.eventListeners.delete(listener);
    }
    onLink(listener) {
      this.linkListeners.add(listener);
      return () => this.linkListeners.delete(listener);
    }
    onResync(listener) {
      this.resyncListeners.add(listener);
      return () => this.resyncListeners.delete(listener);
    }
    /** After every reconciliation (on each connect, then every 60–75 s): `sessions` was read again from the gateway. */
    onReconcile(listener) {
      this.reconcileListeners.add(listener);
      return () => this.reconcileListeners.delete(listener);
    }
    call(method, params = {}) {
      if (!this.conn || !(this.link === "live" || this.link === "degraded")) {
        return Promise.reject(new NotConnected(`not connected to the gateway at ${this.url} (${this.link}): ${method} was not sent; send it again once the client is live`));
      }
      return this.conn.call(method, params);
    }
    /** A session by id or name: its helpers (prompt, cancel, permissions, options, history). */
    session(sessionId) {
      return new Session(this, sessionId);
    }
    /** Starts a session and returns its helpers. */
    async startSession(params) {
      const view = await this.call("task.session.start", params);
      return new Session(this, view.session_id);
    }
    closedError() {
      return this.refused ?? new NotConnected(`the client of the gateway at ${this.url} was closed`);
    }
    /** Live: every waiter goes on. Closed: every waiter hears why. */
    settleWaiters() {
      const waiters = this.liveWaiters;
      this.liveWaiters = [];
      for (const waiter of waiters) {
        if (this.link === "closed") waiter.reject(this.closedError());
        else waiter.resolve();
      }
    }
    /** The gateway refused the handshake for good: the client ends, saying why, and never tries again. */
    endRefused(refused) {
      this.refused = refused;
      this.close();
    }
    /** The backoff's wait, cut short by close(). */
    sleep(seconds) {
      return new Promise((resolve) => {
        const timer = setTimeout(() => {
          this.wakeSleeper = null;
          resolve();
        }, seconds * 1e3);
        this.wakeSleeper = () => {
          clearTimeout(timer);
          this.wakeSleeper = null;
          resolve();
        };
      });
    }
    // -- the link ----------------------------------------------------------------------------------------------
    move(event) {
      const state = nextLink(this.link, event);
      if (state === this.link) return;
      this.link = state;
      if (state === "live") this.settleWaiters();
      for (const listener of [...this.linkListeners]) listener(state);
    }
    async run() {
      let attempt = 0;
      while (!this.stop.stopped) {
        let conn;
        try {
          conn = await GatewayConnection.open(
            this.url,
            this.token,
            this.WebSocket,
            (this.heartbeat === null ? 10 : SILENT_AFTER * this.heartbeat) * 1e3
          );
        } catch (e) {
          if (this.stop.stopped) return;
          if (e instanceof HandshakeRefused) {
            this.endRefused(e);
            return;
          }
          this.move("lost");
          await this.sleep(backoffDelay(attempt++, this.random()));
          if (this.stop.stopped) return;
          this.move("retry");
          continue;
        }
        if (this.stop.stopped) {
          conn.close();
          return;
        }
        attempt = 0;
        this.reconnects += 1;
        const gone = new Promise((resolve) => {
          conn.onClose = () => resolve();
        });
        this.conn = conn;
        this.heardAt = now();
        conn.onFrame = () => this.heard();
        conn.onNotification = (note) => this.handle(note);
        const heartbeats = this.heartbeat === null ? null : this.watch(conn, this.heartbeat);
        try {
          if (heartbeats) {
            try {
              await conn.call("gateway.ping", { heartbeat: this.heartbeat });
            } catch (e) {
              if (!(e instanceof RpcError && e.code === METHOD_NOT_FOUND)) throw e;
              heartbeats.stop();
            }
          }
          await this.reconcile();
          const caughtUp = new Promise((resolve) => {
            this.caughtUp = resolve;
          });
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
    heard() {
      this.heardAt = now();
      if (this.link === "degraded") this.move("heard");
    }
    /** Pings every `interval`; a link that delivers nothing for two of them is given up (docs/clients.md). */
    watch(conn, interval) {
      let timer;
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
            conn.call("gateway.ping").catch(() => {
            }).finally(() => {
              pinging = false;
            });
          }
          nextPing = t + interval;
        }
        timer = setTimeout(tick, Math.max(0, Math.min(nextPing, deadline) - t) * 1e3 + 1);
      };
      timer = setTimeout(tick, interval * 1e3);
      return { stop: () => {
        stopped = true;
        clearTimeout(timer);
      } };
    }
    // -- the stream --------------------------------------------------------------------------------------------
    async subscribe(conn) {
      try {
        await conn.call("task.session.subscribe", this.cursor === null ? { batch: true } : { since: this.cursor, batch: true });
      } catch (e) {
        if (!(e instanceof RpcError && e.code === RESYNC_REQUIRED)) throw e;
        await this.reconcile(true);
        for (const listener of [...this.resyncListeners]) listener(this.cursor);
        await conn.call("task.session.subscribe", { since: this.cursor, batch: true });
      }
    }
    handle(note) {
      if (note.method !== "task.session.event" || !isValidEvent(note.params)) {
        if (this.malformed.note()) void this.reconcile().catch(() => {
        });
        return;
      }
      const event = note.params;
      if (event.type === "caught_up") this.caughtUp?.();
      if (!isNew(this.cursor, event.id)) return;
      if (typeof event.id === "number") this.cursor = event.id;
      this.apply(event);
      for (const listener of [...this.eventListeners]) {
        try {
          listener(event);
        } catch (e) {
          queueMicrotask(() => {
            throw e;
          });
        }
      }
    }
    apply(event) {
      const sid = event.session_id;
      if (!sid) return;
      if (event.type === "session_deleted") this.sessions.delete(sid);
      else if (event.type === "session_created") this.sessions.set(sid, event.data);
      else if ((event.type === "session_status" || event.type === "session_title") && this.sessions.has(sid)) {
        const { subscription_id: _, ...rest } = event.data;
        Object.assign(this.sessions.get(sid), rest);
      }
    }
    async reconcile(resync = false) {
      const conn = this.conn;
      if (!conn) return;
      const sessions = /* @__PURE__ */ new Map();
      let cursor = null;
      let eventCursor = null;
      do {
        const page = await conn.call("task.session.list", cursor ? { limit: 500, cursor } : { limit: 500 });
        eventCursor ?? (eventCursor = page.event_cursor);
        for (const s of page.sessions) sessions.set(s.session_id, s);
        cursor = page.next_cursor ?? null;
      } while (cursor);
      this.sessions = sessions;
      this.reconciliations += 1;
      if (this.cursor === null || resync) this.cursor = eventCursor;
      for (const listener of [...this.reconcileListeners]) listener();
    }
    scheduleReconcile() {
      const t = setTimeout(() => {
        if (this.stop.stopped) return;
        if (this.link === "live") void this.reconcile().catch(() => {
        });
        this.scheduleReconcile();
      }, nextReconcileDelay(this.random()) * 1e3);
      this.timers = [t];
    }
  };

  // src/generated/api.ts
  var ERROR_MEANINGS = {
    [-32001]: "Unauthorized",
    [-32002]: "Not found (another owner's ids too)",
    [-32009]: "Already terminal: treat as success",
    [-32010]: "Busy: a turn is running",
    [-32011]: "Workspace missing or refused (data.rule)",
    [-32012]: "Resync required: subscribe from task.session.list's event_cursor",
    [-32013]: "Not resumable",
    [-32014]: "A limit was reached",
    [-32015]: "The agent failed the turn",
    [-32016]: "The store refused a write: free space, then retry",
    [-32017]: "The option or value is not offered, of the wrong type, or refused by the agent (data.offered)",
    [-32018]: "Git could not do it for the session (no repository, a merge's conflicts: data.files)",
    [-32600]: "Invalid request (or an empty or oversized batch)",
    [-32601]: "Method not found",
    [-32602]: "Invalid params: data.field names the param",
    [-32603]: "Internal error: a bug; data.error_id finds the traceback in the log",
    [-32700]: "Parse error: the frame is not JSON"
  };
  return __toCommonJS(index_exports);
})();
