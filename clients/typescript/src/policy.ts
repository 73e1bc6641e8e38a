// The clients' rules as pure functions (time and randomness are inputs): the same numbers and link table as the
// Python client's gateway/clients/policy.py, from which src/generated/policy.ts is generated.
import {
  BACKOFF_BASE, BACKOFF_CAP, LINK_TRANSITIONS, MALFORMED_LIMIT, RECONCILE_INTERVAL, RECONCILE_JITTER, SILENT_AFTER,
  type LinkEvent, type LinkState,
} from "./generated/policy.js";
import type { Event } from "./generated/api.js";

export * from "./generated/policy.js";

/** Seconds until the next full reconciliation: 60 s plus up to 15 s of jitter (`rand` in [0, 1)). */
export function nextReconcileDelay(rand: number): number {
  return RECONCILE_INTERVAL + RECONCILE_JITTER * rand;
}

/** Seconds to wait before connection attempt `attempt` (from 0): 0.25–0.5 s, doubling up to a 15–30 s cap. */
export function backoffDelay(attempt: number, rand: number): number {
  const ceiling = Math.min(BACKOFF_CAP, BACKOFF_BASE * 2 ** Math.min(Math.max(attempt, 0), 30));
  return ceiling * (0.5 + rand / 2);
}

/** When a link last heard from at `heardAt` (seconds) counts as silent. */
export function silenceDeadline(heardAt: number, interval: number): number {
  return heardAt + SILENT_AFTER * interval;
}

export class IllegalLinkTransition extends Error {}

const TABLE = new Map(LINK_TRANSITIONS.map(([state, event, next]) => [`${state} ${event}`, next]));

/** The link's next state; a move not in the table is a bug in the client. */
export function nextLink(state: LinkState, event: LinkEvent): LinkState {
  if (event === "close") return "closed";
  const next = TABLE.get(`${state} ${event}`);
  if (next === undefined) throw new IllegalLinkTransition(`${event} in ${state}`);
  return next;
}

/** The shape of `task.session.event` params; anything else counts as malformed. */
export function isValidEvent(params: unknown): params is Event {
  if (!params || typeof params !== "object" || Array.isArray(params)) return false;
  const p = params as Record<string, unknown>;
  return typeof p.type === "string" && (p.id === null || p.id === undefined || Number.isInteger(p.id))
    && !!p.data && typeof p.data === "object" && !Array.isArray(p.data);
}

/** Counts malformed events; says when it is time to reconcile (and starts over). */
export class MalformedCounter {
  count = 0;
  note(): boolean {
    this.count += 1;
    if (this.count >= MALFORMED_LIMIT) { this.count = 0; return true; }
    return false;
  }
}

/** Whether an event is new to a client whose cursor is `cursor`: journal events at or below it were delivered. */
export function isNew(cursor: number | null, id: number | null | undefined): boolean {
  return id === null || id === undefined || cursor === null || id > cursor;
}

/** HTTP answers to the WebSocket handshake that no retry would change: the token (401: missing or not one of the
 * gateway's) or the page's Origin (403). Every other failure is retried with backoff. The same set as
 * gateway/clients/policy.py's REFUSED_STATUSES. */
export const REFUSED_STATUSES: ReadonlySet<number> = new Set([401, 403]);

/** Whether a handshake the gateway answered with HTTP `status` is final: the client closes, saying why. */
export function refusedForGood(status: number): boolean {
  return REFUSED_STATUSES.has(status);
}

const TOKEN_HELP = "Set ACP_GATEWAY_TOKEN (the client's token) to one of the gateway's tokens: the one `acp-gateway "
  + "serve` printed at its first start and keeps in its state directory's `token` file, or one given to it (--token, "
  + "ACP_GATEWAY_TOKEN or [[auth.tokens]] in its configuration). The client does not retry it.";

/** What a client says when the gateway refused its handshake: which token problem and how to fix it, never the token
 * (the URL is shown without its query, where a browser's token travels, and without user information). The same
 * words as gateway/clients/policy.py's refusal_message (a test holds them equal). */
export function refusalMessage(url: string, status: number, tokenGiven: boolean): string {
  const u = new URL(url);
  const given = tokenGiven || u.searchParams.has("token");
  const where = `${u.protocol}//${u.host}${u.pathname}`;
  if (status === 403) {
    return `the gateway at ${where} refused the connection (HTTP 403): the page's Origin is not allowed; a browser `
      + "page must come from the gateway itself or from an origin in its `allowed_origins`. The client does not "
      + "retry it.";
  }
  if (!given) return `the gateway at ${where} refused the connection (HTTP ${status}): no token was given. ${TOKEN_HELP}`;
  return `the gateway at ${where} refused the token (HTTP ${status}): it is not one of the gateway's tokens. ${TOKEN_HELP}`;
}
