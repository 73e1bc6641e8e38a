// The web UI's shared state: what the page knows of the owner's sessions, the gateway client, and calls through it.
import { newConfig } from "./fold.js";

const params = new URLSearchParams(location.search);
if (params.get("token")) { sessionStorage.setItem("acp-token", params.get("token")); history.replaceState(null, "", location.pathname + location.hash); }
// The selected session is in the URL (#s-…): a reload, a shared link, back and forward keep it.
export const fromUrl = () => decodeURIComponent(location.hash.slice(1)) || null;

export const state = { token: sessionStorage.getItem("acp-token") || "", live: false, everLive: false,
  statuses: new Map(), viewed: fromUrl(), resumedViews: new Set(),
  misses: 0, logs: new Map(), raw: new Map(), agents: new Map(),
  showRaw: false, configs: new Map(), palette: { items: [], active: 0 }, asking: new Map(), roots: [], refusedRoots: [], busy: null,
  keptRunning: new Map(),  // session id -> when an agent host kept its agent through a gateway restart (until its next turn)
  showChanges: false, changes: new Map(), openFiles: new Set() };  // the Changes pane: session id -> {diff, points, error} as last read  // session id -> when an agent host kept its agent through a gateway restart (until its next turn)
window.__acpGateway = state;  // for debugging in the console

// ---- the connection: the package's OwnerSessionClient (clients/typescript, bundled as client.js: global AcpGateway) ----
let client = null;
export const getClient = () => client;
export function setClient(c) { client = c; }
Object.defineProperty(state, "sessions", { get: () => (client ? client.sessions : new Map()) });

// Errors as the page shows them: {code, message, data} (code -1: the link is down, the call was not sent).
export function call(method, params = {}) {
  if (!client) return Promise.reject({ code: -1, message: "not connected" });
  return client.call(method, params).catch((e) => Promise.reject({ code: e.code ?? -1, message: e.message, data: e.data }));
}

// A session's configuration as the page knows it (options, commands, usage, sign-in), made on first use.
export function config(sid) {
  if (!state.configs.has(sid)) state.configs.set(sid, newConfig());
  return state.configs.get(sid);
}

export function pendingPermissions(sid) { return state.asking.has(sid) ? state.asking.get(sid).size : 0; }

export function select(sid) {  // the selected session goes into the URL: a reload or back/forward shows it again
  state.viewed = sid;
  const hash = sid ? `#${encodeURIComponent(sid)}` : "";
  if (location.hash !== hash) history.pushState(null, "", location.pathname + location.search + hash);
}
