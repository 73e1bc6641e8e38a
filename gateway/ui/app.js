// The gateway's web UI: the rendering of one owner's sessions, on the gateway's TypeScript client — this module wires
// the others (state.js, fold.js the pure fold of events, the render_*.js panes, forms.js, connection.js) to the page.
import { state, fromUrl } from "./state.js";
import { renderList, renderHead } from "./render_sessions.js";
import { renderTranscript } from "./render_transcript.js";
import { openView } from "./session_actions.js";
import { wireAgentsPage } from "./agents_page.js";
import { wirePromptKeys } from "./palette.js";
import { wireForms } from "./forms.js";
import { connect, watchHealth } from "./connection.js";

window.addEventListener("popstate", () => {
  const sid = fromUrl();
  if (sid) openView(sid); else { state.viewed = null; renderList(); renderHead(); renderTranscript(); }
});

wireForms();
wireAgentsPage();
wirePromptKeys();
watchHealth();
connect();
