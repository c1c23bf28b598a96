#!/usr/bin/env node
// OpenClaw's side of scripts/bench-route-openclaw: the pinned `openclaw` package (installed by
// scripts/openclaw-routes into .openclaw-peer/) answers a batch of route inputs the way its
// gateway would: read openclaw.json, parse it (JSON5, as OpenClaw reads its config), validate
// it with the bundled channel plugins (as the gateway does at load), then `resolveAgentRoute`
// for every JSON line of stdin, one JSON line out per input.
//
//   node scripts/bench-route-openclaw.mjs openclaw.json [--no-validate] <inputs.jsonl >out.jsonl
//
// Prints its own phases (load, validate, route) in ms to stderr as `key=value`.
import fs from "node:fs";
import path from "node:path";
import readline from "node:readline";
import { fileURLToPath, pathToFileURL } from "node:url";
import { findExport } from "./openclaw-peer.mjs";

const t0 = performance.now();
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const peer = path.join(root, ".openclaw-peer", "node_modules", "openclaw");
const JSON5 = (await import(pathToFileURL(path.join(peer, "..", "json5", "lib", "index.js")).href)).default;
const routing = await import(pathToFileURL(path.join(peer, "dist", "plugin-sdk", "routing.js")).href);

const [configPath, ...flags] = process.argv.slice(2);
const tImport = performance.now();
let cfg = JSON5.parse(fs.readFileSync(configPath, "utf8"));
const tParse = performance.now();
let tValidate = tParse;
if (!flags.includes("--no-validate")) {
  const validate = await findExport(peer, "validateConfigObjectWithPlugins");
  const t = performance.now();
  const r = validate(cfg);
  if (!r.ok) {
    console.error(`openclaw refused the config: ${JSON.stringify(r.issues.slice(0, 3))}`);
    process.exit(1);
  }
  cfg = r.config;
  tValidate = performance.now();
  process.stderr.write(`validate_ms=${(tValidate - t).toFixed(0)} `);
}

const out = [];
let lines = 0;
let errors = 0;
const flush = () => {
  if (out.length) {
    fs.writeSync(1, out.join(""));
    out.length = 0;
  }
};
const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of rl) {
  if (!line) continue;
  lines++;
  let answer;
  try {
    const r = routing.resolveAgentRoute({ cfg, ...JSON.parse(line) });
    answer = { agentId: r.agentId, sessionKey: r.sessionKey, matchedBy: r.matchedBy };
  } catch (e) {
    errors++;
    answer = { error: String(e.code ?? e.name ?? e) };
  }
  out.push(JSON.stringify(answer) + "\n");
  if (out.length >= 4096) flush();
}
flush();
const tEnd = performance.now();
process.stderr.write(
  `import_ms=${(tImport - t0).toFixed(0)} parse_ms=${(tParse - tImport).toFixed(0)} ` +
    `route_ms=${(tEnd - tValidate).toFixed(0)} lines=${lines} errors=${errors}\n`,
);
