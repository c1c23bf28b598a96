// The pinned OpenClaw package (.openclaw-peer/, installed by scripts/openclaw-routes from
// tests/openclaw-peer/package-lock.json), for the scripts that run it.
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

// A function of OpenClaw's bundle that no public entry point exports, found by name (the chunk
// names are content hashes): the gateway's validation with its bundled channel plugins, say.
export async function findExport(peer, fnName) {
  const dist = path.join(peer, "dist");
  for (const file of fs.readdirSync(dist)) {
    if (!file.endsWith(".mjs") && !file.endsWith(".js")) continue;
    const text = fs.readFileSync(path.join(dist, file), "utf8");
    if (!text.includes(`function ${fnName}(`)) continue;
    const m = text.match(new RegExp(`\\b${fnName} as (\\w+)\\b`));
    if (!m) continue;
    const mod = await import(pathToFileURL(path.join(dist, file)).href);
    return mod[m[1]];
  }
  throw new Error(`${fnName} not found in ${dist}`);
}
