// The gateway's JSON-RPC error codes, each named once for the TypeScript client and the web UI that runs on it: the
// names and numbers of gateway/error_codes.py (tests/gateway/test_errors.py holds them equal). ERROR_MEANINGS says what each
// one means.
export const PARSE_ERROR = -32700;
export const INVALID_REQUEST = -32600;
export const METHOD_NOT_FOUND = -32601;
export const INVALID_PARAMS = -32602;
export const INTERNAL_ERROR = -32603;
export const UNAUTHORIZED = -32001;
export const NOT_FOUND = -32002;
/** "Treat as success": a second cancel, a permission or question already answered. */
export const ALREADY_TERMINAL = -32009;
export const BUSY = -32010;
export const WORKSPACE_MISSING = -32011;
export const RESYNC_REQUIRED = -32012;
export const NOT_RESUMABLE = -32013;
export const LIMIT_EXCEEDED = -32014;
/** The agent answered the turn with an error, or exited during it. */
export const AGENT_FAILED = -32015;
export const STORAGE_FAILED = -32016;
export const CONFIG_REFUSED = -32017;
/** Git could not do it for the session: no repository, a merge's conflicts (data.files). */
export const GIT_REFUSED = -32018;
