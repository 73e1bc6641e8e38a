// The ACP session gateway's client for frontends (browsers and Node.js ≥ 20): see README.md and docs/clients.md.
export { OwnerSessionClient } from "./client.js";
export * from "./codes.js";
export type { ClientOptions, EventListener, LinkListener, ResyncListener } from "./client.js";
export { GatewayConnection, RpcError, NotConnected, ConnectionLost, HandshakeRefused, rpcUrl } from "./connection.js";
export type { WebSocketLike, WebSocketConstructor, Notification } from "./connection.js";
export { Session, Turn } from "./session.js";
export type { TurnEnd } from "./session.js";
export * as policy from "./policy.js";
export type * from "./generated/api.js";
export { ERROR_MEANINGS } from "./generated/api.js";
export type { LinkState, LinkEvent } from "./generated/policy.js";
