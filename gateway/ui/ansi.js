// ansi_up (an ES module) for the classic app.js: an agent's terminal output with its colours, escaped as HTML.
import { AnsiUp } from "./vendor/ansi_up.js";

window.AnsiUp = AnsiUp;
window.dispatchEvent(new Event("ansi-ready"));
