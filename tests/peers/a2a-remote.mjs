#!/usr/bin/env node
// A scripted remote A2A agent on the official A2A JavaScript SDK's server (`@a2a-js/sdk`
// DefaultRequestHandler, InMemoryTaskStore and its express JSON-RPC handler; installed pinned
// into .npm-peers/ by scripts/test). deepcli's integration tests put it behind an agent with
// `runtime.kind: a2a`.
//
//   a2a-remote.mjs PORT_FILE
//
// Listens on a free loopback port and writes `<port>` to PORT_FILE once listening. Its card
// names `http://127.0.0.1:<port>/a2a` as the JSON-RPC endpoint, or A2A_REMOTE_CARD_URL when set
// (a card with a wrong URL). The card is at `/a2a/.well-known/agent-card.json`, or with
// A2A_REMOTE_CARD_AT_ROOT=1 at `/.well-known/agent-card.json` only.
// With A2A_REMOTE_SIGN=1 its card is signed (ES256, a key made at start, the public JWK written
// to PORT_FILE.jwk); A2A_REMOTE_SIGN_TAMPER=1 changes the card after signing. With A2A_REMOTE_BINDING=rest it serves the HTTP+JSON binding there
// instead (the SDK's express REST handler), and its card says so. With A2A_REMOTE_TOKEN set, a
// call without `Authorization: Bearer <it>` gets 401. Each message is answered by a task:
//   slow     works until CancelTask (or 60 s), then ends TASK_STATE_CANCELED
//   ask      ends TASK_STATE_INPUT_REQUIRED with the question "which one?"
//   fail     ends TASK_STATE_FAILED
//   files    an artifact of a text part `files:`, a data part {"n": 1}, a file part `r.txt`
//            (text/plain, the bytes `hello`) and a URL part `https://files.example/big.bin`;
//            TASK_STATE_COMPLETED
//   else     an artifact `remote: <the text's last line> (context turn N)`, TASK_STATE_COMPLETED
//            (`(context turn N, task continued)` when the message named a task of this remote
//            that waited for input: A2A's way to answer it)
// (N counts the messages of the context, so a test sees one contextId per session). Every
// cancel it received is printed on stderr as `cancel <taskId>`.

import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";
import { writeFileSync } from "node:fs";
import { randomUUID } from "node:crypto";

const peers = new URL("../../.npm-peers/package.json", import.meta.url);
const require = createRequire(peers);
const load = (name) => import(pathToFileURL(require.resolve(name)).href);
const sdk = await load("@a2a-js/sdk");
const server = await load("@a2a-js/sdk/server");
const { agentCardHandler, jsonRpcHandler, restHandler, UserBuilder } = await load("@a2a-js/sdk/server/express");
const express = (await load("express")).default;

const { TaskState, Role } = sdk;
const { AgentEvent, DefaultRequestHandler, InMemoryTaskStore } = server;

const part = (text) => ({ content: { $case: "text", value: text }, metadata: undefined, filename: "", mediaType: "text/plain" });
const now = () => new Date().toISOString();
const turns = new Map();
const cancelled = new Set();

const status = (taskId, contextId, state, text) => ({
  taskId,
  contextId,
  status: {
    state,
    timestamp: now(),
    message: text === undefined
      ? undefined
      : { role: Role.ROLE_AGENT, messageId: randomUUID(), parts: [part(text)], taskId, contextId, extensions: [], metadata: {}, referenceTaskIds: [] },
  },
  metadata: {},
});

const executor = {
  cancelTask: async (taskId) => {
    console.error(`cancel ${taskId}`);
    cancelled.add(taskId);
  },
  async execute(ctx, bus) {
    const { taskId, contextId, userMessage } = ctx;
    const text = userMessage.parts.map((p) => (p.content?.$case === "text" ? p.content.value : "")).join("");
    const last = text.trim().split("\n").pop();
    const turn = (turns.get(contextId) ?? 0) + 1;
    turns.set(contextId, turn);
    bus.publish(AgentEvent.task(ctx.task ?? {
      id: taskId, contextId, status: { state: TaskState.TASK_STATE_SUBMITTED, timestamp: now(), message: undefined },
      artifacts: [], history: [userMessage], metadata: {},
    }));
    bus.publish(AgentEvent.statusUpdate(status(taskId, contextId, TaskState.TASK_STATE_WORKING)));
    if (last === "slow") {
      for (let i = 0; i < 600 && !cancelled.has(taskId); i++) await new Promise((r) => setTimeout(r, 100));
      bus.publish(AgentEvent.statusUpdate(status(taskId, contextId, TaskState.TASK_STATE_CANCELED, "stopped")));
      return;
    }
    if (last === "ask") {
      bus.publish(AgentEvent.statusUpdate(status(taskId, contextId, TaskState.TASK_STATE_INPUT_REQUIRED, "which one?")));
      return;
    }
    if (last === "fail") {
      bus.publish(AgentEvent.statusUpdate(status(taskId, contextId, TaskState.TASK_STATE_FAILED, "it broke")));
      return;
    }
    const parts = last === "files"
      ? [
          part("files:"),
          { content: { $case: "data", value: { n: 1 } }, metadata: undefined, filename: "", mediaType: "application/json" },
          { content: { $case: "raw", value: Buffer.from("hello") }, metadata: undefined, filename: "r.txt", mediaType: "text/plain" },
          { content: { $case: "url", value: "https://files.example/big.bin" }, metadata: undefined, filename: "big.bin", mediaType: "" },
        ]
      : [part(`remote: ${last} (context turn ${turn}${ctx.task ? ", task continued" : ""})`)];
    bus.publish(AgentEvent.artifactUpdate({
      taskId, contextId, append: false, lastChunk: true, metadata: {},
      artifact: { artifactId: randomUUID(), name: "reply", description: "", parts, metadata: {}, extensions: [] },
    }));
    bus.publish(AgentEvent.statusUpdate(status(taskId, contextId, TaskState.TASK_STATE_COMPLETED)));
  },
};

const app = express();
const token = process.env.A2A_REMOTE_TOKEN;
const rest = process.env.A2A_REMOTE_BINDING === "rest";
const listener = app.listen(0, "127.0.0.1", async () => {
  const port = listener.address().port;
  const url = process.env.A2A_REMOTE_CARD_URL || `http://127.0.0.1:${port}/a2a`;
  const card = {
    name: "Remote", description: "A scripted remote agent.",
    supportedInterfaces: [{ url, protocolBinding: rest ? "HTTP+JSON" : "JSONRPC", tenant: "", protocolVersion: sdk.A2A_PROTOCOL_VERSION }],
    version: "1.0.0",
    capabilities: { streaming: true, pushNotifications: false, extensions: [], extendedAgentCard: false },
    securitySchemes: {}, securityRequirements: [],
    defaultInputModes: ["text/plain"], defaultOutputModes: ["text/plain"],
    skills: [{ id: "remote", name: "Remote", description: "Answers from afar.", tags: ["test"], examples: [], inputModes: [], outputModes: [], securityRequirements: [] }],
    documentationUrl: "", signatures: [],
  };
  const handler = new DefaultRequestHandler(card, new InMemoryTaskStore(), executor);
  // A2A_REMOTE_CARD_AT_ROOT=1: the card at the origin's well-known place only (a server of one
  // agent), not under /a2a.
  const cardAt = process.env.A2A_REMOTE_CARD_AT_ROOT === "1" ? `/${sdk.AGENT_CARD_PATH}` : `/a2a/${sdk.AGENT_CARD_PATH}`;
  app.use(cardAt, agentCardHandler({ agentCardProvider: handler }));
  app.use("/a2a", (req, res, next) => {
    if (token && req.headers.authorization !== `Bearer ${token}`) {
      res.status(401).json({ jsonrpc: "2.0", id: null, error: { code: -32000, message: "wrong token" } });
      return;
    }
    next();
  });
  const serve = rest ? restHandler : jsonRpcHandler;
  app.use("/a2a", serve({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication }));
  if (process.env.A2A_REMOTE_SIGN === "1") {
    await signCard(card, `http://127.0.0.1:${port}${cardAt}`, `${process.argv[2]}.jwk`);
  }
  writeFileSync(process.argv[2], String(port));
});

// Signs the card as it is served (A2A 1.0: a JWS, ES256, whose payload is the served card
// without `signatures`, canonicalized by RFC 8785 — keys sorted, JSON.stringify's strings and
// numbers), with a key made here; its public JWK goes to `jwkFile`. With
// A2A_REMOTE_SIGN_TAMPER=1 the description changes after signing.
async function signCard(card, url, jwkFile) {
  const { generateKeyPairSync, sign } = await import("node:crypto");
  const { privateKey, publicKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
  const served = await (await fetch(url)).json();
  delete served.signatures;
  const canonical = (v) =>
    Array.isArray(v)
      ? `[${v.map(canonical).join(",")}]`
      : v !== null && typeof v === "object"
        ? `{${Object.keys(v).sort().map((k) => `${JSON.stringify(k)}:${canonical(v[k])}`).join(",")}}`
        : JSON.stringify(v);
  const b64 = (bytes) => Buffer.from(bytes).toString("base64url");
  const header = b64(JSON.stringify({ alg: "ES256", kid: "remote-1" }));
  const input = `${header}.${b64(canonical(served))}`;
  const signature = sign("sha256", Buffer.from(input), { key: privateKey, dsaEncoding: "ieee-p1363" });
  card.signatures = [{ protected: header, signature: b64(signature) }];
  if (process.env.A2A_REMOTE_SIGN_TAMPER === "1") {
    card.description = "changed after signing";
  }
  writeFileSync(jwkFile, JSON.stringify(publicKey.export({ format: "jwk" })));
}
