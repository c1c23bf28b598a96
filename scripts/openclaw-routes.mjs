#!/usr/bin/env node
// The table of real OpenClaw answers the tests hold deepcli to (tests/fixtures/openclaw/routes.json).
//
// Runs OpenClaw itself (the pinned `openclaw` package in .openclaw-peer/, installed by
// scripts/openclaw-routes from tests/openclaw-peer/package-lock.json) on:
//   * every tests/fixtures/openclaw/*.json5: OpenClaw's validation of it, and its
//     `resolveAgentRoute` answer (agent id, session key) for a set of inputs derived from the
//     config (each binding's match, as is and with a direct and a group peer, each channel's
//     unmatched message, a thread under each peer binding); then the round trip: deepcli
//     `import openclaw` → `export openclaw` → OpenClaw's validation and answers on the export;
//   * every tests/fixtures/openclaw/deepcli/<name>/ config: deepcli `export openclaw` →
//     OpenClaw's validation and answers on the export.
// Each entry records the sha256 of what it was made from, so the tests see a stale table.
//
//   node scripts/openclaw-routes.mjs           rewrite the table
//   node scripts/openclaw-routes.mjs --check   exit 1 if the table differs from OpenClaw's answers now
import { createHash } from "node:crypto";
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { findExport } from "./openclaw-peer.mjs";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const peer = path.join(root, ".openclaw-peer", "node_modules", "openclaw");
const fixtures = path.join(root, "tests", "fixtures", "openclaw");
const tablePath = path.join(fixtures, "routes.json");
const deepcli = path.join(root, "target", "debug", "deepcli");
const check = process.argv.includes("--check");

const version = JSON.parse(fs.readFileSync(path.join(peer, "package.json"), "utf8")).version;
const JSON5 = (await import(pathToFileURL(path.join(peer, "..", "json5", "lib", "index.js")).href)).default;
const routing = await import(pathToFileURL(path.join(peer, "dist", "plugin-sdk", "routing.js")).href);

// The gateway validates with its bundled channel plugins: find that function in OpenClaw's
// bundle by name (the chunk names are content hashes).
const validate = await findExport(peer, "validateConfigObjectWithPlugins");

const sha = (text) => "sha256:" + createHash("sha256").update(text).digest("hex");
const PROBE = "openclaw-import-probe";

// A config OpenClaw accepts is routed as the gateway routes it: the validated config. One it
// refuses (older shapes: numeric peer ids, `kind: "dm"`) is routed as written, but with the
// normalization every accepted config gets that changes routes: `session.mainKey` is always
// "main" in 2026.9.
function validated(raw) {
  const r = validate(structuredClone(raw));
  if (r.ok) return { ok: true, config: r.config, issues: [] };
  const config = structuredClone(raw);
  if (config.session && typeof config.session === "object") delete config.session.mainKey;
  return { ok: false, config, issues: r.issues.map((i) => `${i.path}: ${i.message}`) };
}

function inputs(raw) {
  const out = [];
  const channels = [];
  const bindings = Array.isArray(raw.bindings) ? raw.bindings : [];
  for (const b of bindings) {
    const m = b?.match;
    const channel = typeof m?.channel === "string" ? m.channel.trim().toLowerCase() : "";
    if (!channel) continue;
    if (!channels.includes(channel)) channels.push(channel);
    const account = typeof m.accountId === "string" ? m.accountId.trim() : undefined;
    const base = { channel };
    if (account === "*") base.accountId = PROBE;
    else if (account) base.accountId = account;
    if (m.guildId != null) base.guildId = String(m.guildId);
    if (m.teamId != null) base.teamId = String(m.teamId);
    if (Array.isArray(m.roles) && m.roles.length) base.memberRoleIds = m.roles.map(String);
    if (m.peer) {
      const kind = String(m.peer.kind ?? "").trim().toLowerCase().replace(/^dm$/, "direct");
      const id = String(m.peer.id ?? "").trim();
      if (!["direct", "group", "channel"].includes(kind) || !id) continue;
      const peer = { kind, id: id === "*" ? PROBE : id };
      out.push({ ...base, peer });
      // A thread under the bound conversation: matched through parentPeer.
      if (kind !== "direct") out.push({ ...base, peer: { kind: "channel", id: `${PROBE}-thread` }, parentPeer: peer });
    } else {
      out.push(base);
      out.push({ ...base, peer: { kind: "direct", id: PROBE } });
      out.push({ ...base, peer: { kind: "group", id: PROBE } });
    }
  }
  for (const name of Object.keys(raw.channels ?? {})) {
    const c = name.trim().toLowerCase();
    if (c !== "defaults" && c !== "modelbychannel" && !channels.includes(c)) channels.push(c);
  }
  for (const channel of channels) {
    out.push({ channel, peer: { kind: "direct", id: PROBE } });
    out.push({ channel, accountId: "some-other-account", peer: { kind: "group", id: PROBE } });
  }
  return out;
}

function route(cfg, input) {
  try {
    const r = routing.resolveAgentRoute({ cfg, ...input });
    return { agentId: r.agentId, sessionKey: r.sessionKey, matchedBy: r.matchedBy };
  } catch (e) {
    return { error: e.code ?? e.name ?? String(e) };
  }
}

function answers(cfg, list) {
  return list.map((input) => ({ input, ...route(cfg, input) }));
}

function run(args) {
  return execFileSync(deepcli, args, { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
}

function exportOf(dir) {
  try {
    return run(["export", "openclaw", "--config", dir, "--quiet"]);
  } catch (e) {
    // 1 with a fragment: deepcli's own check says OpenClaw would route or gate a message
    // differently; the table records what OpenClaw does with it.
    if (e.status === 1 && e.stdout) return e.stdout;
    throw e;
  }
}

const table = { openclaw: version, imports: {}, exports: {} };

for (const file of fs.readdirSync(fixtures).filter((f) => f.endsWith(".json5")).sort()) {
  const text = fs.readFileSync(path.join(fixtures, file), "utf8");
  const raw = JSON5.parse(text);
  const v = validated(raw);
  const list = inputs(raw);
  const original = answers(v.config, list);
  // The round trip through deepcli.
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "openclaw-routes-"));
  let roundTrip;
  try {
    try {
      run(["import", "openclaw", path.join(fixtures, file), "--out", tmp, "--quiet"]);
    } catch (e) {
      if (e.status !== 1) throw e; // 1: findings; the files are written
    }
    const exported = JSON.parse(exportOf(tmp));
    const ev = validated(exported);
    const again = answers(ev.config, list);
    const differences = [];
    original.forEach((o, i) => {
      if (o.error) return;
      const a = again[i];
      if (a.agentId !== o.agentId || a.sessionKey !== o.sessionKey) {
        differences.push({ input: o.input, original: { agentId: o.agentId, sessionKey: o.sessionKey }, exported: a });
      }
    });
    roundTrip = { valid: ev.ok, issues: ev.issues, compared: original.filter((o) => !o.error).length, differences };
  } catch (e) {
    roundTrip = { error: String(e.stderr ?? e) };
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
  table.imports[file] = { sha256: sha(text), valid: v.ok, issues: v.issues, routes: original, roundTrip };
}

const configs = path.join(fixtures, "deepcli");
for (const name of fs.existsSync(configs) ? fs.readdirSync(configs).sort() : []) {
  const text = exportOf(path.join(configs, name));
  const exported = JSON.parse(text);
  const v = validated(exported);
  table.exports[name] = { sha256: sha(text), valid: v.ok, issues: v.issues, routes: answers(v.config, inputs(exported)) };
}

const out = JSON.stringify(table, null, 2) + "\n";
if (check) {
  const old = fs.existsSync(tablePath) ? fs.readFileSync(tablePath, "utf8") : "";
  if (old !== out) {
    console.error(`scripts/openclaw-routes: ${path.relative(root, tablePath)} differs from OpenClaw ${version}'s answers now; run scripts/openclaw-routes`);
    process.exit(1);
  }
  console.error(`scripts/openclaw-routes: the table matches OpenClaw ${version}`);
} else {
  fs.writeFileSync(tablePath, out);
  console.error(`scripts/openclaw-routes: wrote ${path.relative(root, tablePath)} (OpenClaw ${version})`);
}
