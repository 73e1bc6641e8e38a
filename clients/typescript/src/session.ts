// One session's helpers: start a turn and read its events as they come, cancel, answer permissions and questions,
// set options, read history. Thin: each is one call of the API, or the owner's event stream filtered.
import type { OwnerSessionClient } from "./client.js";
import { ConnectionLost, RpcError } from "./connection.js";
import type { ElicitationAnswer, Event, HistoryItem, PermissionAnswer, SessionView, StatusView } from "./generated/api.js";
import { ALREADY_TERMINAL } from "./codes.js";

/** What a turn ended with: the `turn_ended` event's data (stop_reason; error and message when the agent failed). */
export interface TurnEnd { stop_reason: string | null; error?: unknown; message?: string; [k: string]: unknown }

export class Session {
  constructor(readonly client: OwnerSessionClient, readonly id: string) {}

  status(): Promise<StatusView> { return this.client.call("task.session.status", { session_id: this.id }); }
  get(): Promise<SessionView> { return this.client.call("task.session.get", { session_id: this.id }); }
  resume(waitReady = true): Promise<unknown> {
    return this.client.call("task.session.resume", { session_id: this.id, wait_ready: waitReady });
  }
  cancelTurn(): Promise<SessionView> { return this.client.call("task.session.cancel_turn", { session_id: this.id }); }

  /** Ends the session for good; a session already ended (-32009) counts as success: its status is returned. */
  async cancel(): Promise<SessionView> {
    try { return await this.client.call("task.session.cancel", { session_id: this.id }); }
    catch (e) { if (e instanceof RpcError && e.code === ALREADY_TERMINAL) return this.status(); throw e; }
  }

  setTitle(title: string): Promise<SessionView> {
    return this.client.call("task.session.set_title", { session_id: this.id, title });
  }
  /** One of the agent's config options (model, mode, thought level…): a select's value, or a boolean; null forgets. */
  setConfigOption(configId: string, value: string | boolean | null): Promise<SessionView> {
    return this.client.call("task.session.set_config_option", { session_id: this.id, config_id: configId, value });
  }
  setMode(modeId: string): Promise<SessionView> {
    return this.client.call("task.session.set_mode", { session_id: this.id, mode_id: modeId });
  }
  /** Answers a permission request with one of its options, or `null` to refuse it (cancelled). */
  respondPermission(requestId: string, optionId: string | null): Promise<PermissionAnswer> {
    return this.client.call("task.session.permission.respond", optionId === null
      ? { session_id: this.id, request_id: requestId, cancelled: true }
      : { session_id: this.id, request_id: requestId, option_id: optionId });
  }
  /** Answers an agent's question (an elicitation): accept with content fitting its schema, decline or cancel. */
  respondElicitation(requestId: string, action: "accept" | "decline" | "cancel",
                     content?: Record<string, unknown>): Promise<ElicitationAnswer> {
    return this.client.call("task.session.elicitation.respond",
                            { session_id: this.id, request_id: requestId, action, ...(content ? { content } : {}) });
  }
  delete(): Promise<null> { return this.client.call("task.session.delete", { session_id: this.id }); }

  /** What the session recorded, oldest first, page by page. */
  async *history(pageSize = 100): AsyncGenerator<HistoryItem> {
    let after = 0;
    for (;;) {
      const page = await this.client.call("task.session.history", { session_id: this.id, after, limit: pageSize });
      yield* page.entries;
      if (page.next === null || page.next === undefined) return;
      after = page.next;
    }
  }

  /** The session's journal events, oldest first (what a transcript is rendered from). */
  async *journal(after = 0, pageSize = 500): AsyncGenerator<Event> {
    for (;;) {
      const page = await this.client.call("task.session.events", { session_id: this.id, after, limit: pageSize });
      yield* page.events;
      if (page.next === null || page.next === undefined) return;
      after = page.next;
    }
  }

  /** This session's live events; returns the function that stops listening. */
  onEvent(listener: (event: Event) => void): () => void {
    return this.client.onEvent((event) => { if (event.session_id === this.id) listener(event); });
  }

  /** Sends a prompt; the turn's events (turn_started … turn_ended) come through the returned Turn as they arrive,
   * across reconnects, each once. */
  prompt(prompt: string | Array<Record<string, unknown>>, meta?: Record<string, unknown>): Turn {
    return new Turn(this, prompt, meta);
  }
}

/** One turn: iterate it for its events (`for await (const event of turn)`), await `turn.result` for how it ended. */
export class Turn implements AsyncIterable<Event> {
  readonly result: Promise<TurnEnd>;
  private readonly queue: Event[] = [];
  private wake: (() => void) | null = null;
  private started = false;
  private ended = false;
  private failure: Error | null = null;
  private readonly stopListening: () => void;
  private settle!: { resolve: (end: TurnEnd) => void; reject: (e: Error) => void };

  constructor(readonly session: Session, prompt: string | Array<Record<string, unknown>>,
              meta?: Record<string, unknown>) {
    this.result = new Promise<TurnEnd>((resolve, reject) => { this.settle = { resolve, reject }; });
    this.result.catch(() => {});  // a turn nobody awaits must not be an unhandled rejection
    const after = session.client.cursor;  // this turn's events come after everything delivered so far
    const blocks = JSON.stringify(typeof prompt === "string" ? [{ type: "text", text: prompt }] : prompt);
    this.stopListening = session.onEvent((event) => {
      if (this.ended || (typeof event.id === "number" && after !== null && event.id <= after)) return;
      // Turns of a session do not overlap (a prompt to a busy session is refused): the next one with this prompt.
      if (event.type === "turn_started" && JSON.stringify(event.data.prompt) === blocks) this.started = true;
      if (!this.started) return;  // the session's resume, before the turn
      this.push(event);
      if (event.type === "turn_ended") this.finish(event.data as TurnEnd);
    });
    const params = { session_id: session.id, prompt, ...(meta ? { meta } : {}) };
    session.client.call("task.session.prompt", params).catch((e: Error) => {
      // The turn is the session's: once started it goes on (and ends) whatever happens to this call's link.
      if (this.started || this.ended) return;
      if (e instanceof ConnectionLost) {
        this.fail(new ConnectionLost(`the link dropped before session ${session.id}'s turn was seen to start: the `
                                     + "prompt may or may not have reached the gateway (its events will say)"));
      } else {
        this.fail(e);
      }
    });
  }

  private push(event: Event): void {
    this.queue.push(event);
    this.wake?.();
  }

  private finish(end: TurnEnd): void {
    this.ended = true;
    this.stopListening();
    this.settle.resolve(end);
    this.wake?.();
  }

  private fail(error: Error): void {
    this.ended = true;
    this.failure = error;
    this.stopListening();
    this.settle.reject(error);
    this.wake?.();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<Event> {
    for (;;) {
      while (this.queue.length) yield this.queue.shift()!;
      if (this.failure) throw this.failure;
      if (this.ended) return;
      await new Promise<void>((resolve) => { this.wake = resolve; });
      this.wake = null;
    }
  }

  /** The text the agent streamed (its agent_message_chunk updates), once the turn is over. */
  async text(): Promise<string> {
    let text = "";
    for await (const event of this) {
      const update = event.type === "session_update" ? (event.data.update as Record<string, any>) : null;
      if (update?.sessionUpdate === "agent_message_chunk" && update.content?.type === "text") text += update.content.text;
    }
    return text;
  }
}
