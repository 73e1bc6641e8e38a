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
