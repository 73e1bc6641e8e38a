// An agent's terminal output as styled runs of text (no HTML): ansi_up parses the escape sequences, and the page
// builds the elements itself, so no `style` attribute is ever parsed (the page's CSP forbids them, and a parsed one
// is a console error each, even when a sanitiser drops it afterwards).
import { AnsiUp } from "./vendor/ansi_up.js";

// One run of text in one style: `classes` for the 16 colours and the text styles (app.css has them), `color` and
// `background` as "rgb(r, g, b)" for the 256-colour and 24-bit ones (set through the CSSOM, which the CSP allows).
export function ansiRuns(text) {
  const parser = new AnsiUp(), runs = [];
  // ansi_up hands each run of text, with its state, to transform_to_html: taken here as data instead of markup.
  parser.transform_to_html = (f) => {
    if (!f.text) return "";
    const run = { text: f.text, classes: [] };
    for (const [on, cls] of [[f.bold, "ansi-bold"], [f.faint, "ansi-faint"], [f.italic, "ansi-italic"], [f.underline, "ansi-underline"]]) {
      if (on) run.classes.push(cls);
    }
    for (const [colour, side, key] of [[f.fg, "fg", "color"], [f.bg, "bg", "background"]]) {
      if (!colour) continue;
      if (colour.class_name === "truecolor") run[key] = `rgb(${colour.rgb.join(", ")})`;
      else run.classes.push(`${colour.class_name}-${side}`);
    }
    runs.push(run);
    return "";
  };
  parser.process_hyperlink = (pkt) => { if (pkt.text) runs.push({ text: pkt.text, classes: [] }); return ""; };  // a link's text, never a link
  parser.ansi_to_html(text || "");
  return runs;
}
