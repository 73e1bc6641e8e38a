// Bundles the package for the gateway's web UI (gateway/ui/client.js: one classic script, global `AcpGateway`) with
// esbuild. `--check` builds in memory and compares with the checked-in file (the test suite runs it).
import { build } from "esbuild";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const pkg = join(dirname(fileURLToPath(import.meta.url)), "..");
const outfile = join(pkg, "..", "..", "gateway", "ui", "client.js");
const check = process.argv.includes("--check");
const result = await build({
  entryPoints: [join(pkg, "src", "index.ts")], bundle: true, format: "iife", globalName: "AcpGateway",
  target: "es2020", platform: "browser", charset: "utf8", legalComments: "none", write: !check, outfile,
  banner: { js: "// The gateway's TypeScript client (clients/typescript), bundled for the web UI by its scripts/bundle.mjs: do not edit." },
});
if (check) {
  const built = new TextDecoder().decode(result.outputFiles[0].contents);
  if (!existsSync(outfile) || readFileSync(outfile, "utf8") !== built) {
    console.error(`stale: ${outfile}: run \`npm run bundle\` in clients/typescript`);
    process.exit(1);
  }
}
