#!/usr/bin/env node
// An echo agent on the official ACP TypeScript SDK (`@agentclientprotocol/sdk`, installed pinned
// into .npm-peers/ by scripts/test). deepcli's integration tests run it so that the framing, the
// validation and the error codes deepcli meets come from the reference implementation.
//
// It answers a prompt with "echo: <text>" in two `agent_message_chunk` updates, counts the turns
// of each session, and keeps its sessions in `.sdk-echo-sessions.json` in its working directory
// so that `session/load` works after a restart (it advertises `loadSession`). With
// SDK_ECHO_SEQUENTIAL=1 it numbers its sessions `s-1`, `s-2`, … per process, keeps nothing and
// cannot load sessions, as many real agents do. It offers `session/close`
// (`sessionCapabilities.close`) and says on stderr (the runtime's log) which session it closed.
// With SDK_ECHO_MODELS=a,b,c every session offers a model selection (a session config option
// of category `model`, the first model current), `session/set_config_option` switches it
// (refusing the models in SDK_ECHO_REFUSE_MODELS=x,y as unusable), and every echo ends with
// ` [model <the session's model>]`.
// Prompts that start with a word do more:
//   slow        waits until `session/cancel` (or 60 s), then stops with `cancelled`
//   stubborn    ignores `session/cancel`: waits for it (or 60 s), then answers 3 s later anyway
//               (after the cancel, never before it, however slow the machine is)
//   hold PATH   waits until the file PATH exists, then echoes (a session the test keeps busy)
//   permission [KIND TITLE]  asks the client for permission about a tool call (default
//               delete "delete everything"; all four option kinds offered) and replies
//               `permission: <the optionId chosen, or cancelled>`
//   crash       exits the process with code 3
//   cwd         replies `cwd: <the session's working directory>`
//   blocks      replies `blocks:` and a line per content block of the prompt that is not
//               text: `<type> <mimeType> <uri> <bytes carried, or a link's size> <their sha256>`
//               (`resource/text` or `resource/blob` for an embedded resource; `-` for none);
//               SDK_ECHO_PROMPT_CAPS=image,audio,embeddedContext sets its promptCapabilities
//   raw         replies `raw: <the prompt as deepcli sent it, but its system section>` (with
//               the line before a chat message that says who speaks and where, which every
//               other reply leaves out)
//   system      replies `system: <the system section before this prompt>`, or `system: (none)`
//               (deepcli gives it before a session's first prompt, and again when it changed)
//   exec SHELL  runs SHELL with bash (the rest of the prompt, as a prompt-injected coding agent
//               would) and replies `exec: <its exit code>\n<stdout and stderr>`; the isolation
//               tests probe deepcli's sandbox with it
//   flood KIB   replies KIB kibibytes of text (`word ` repeated), in 64 KiB chunks
//   files-back [KIB]  (an A2A peer's message) for each `[file from the peer] PATH …` line,
//               reads PATH (relative to the session's cwd), copies it to `back/<its name>` and
//               hands that to the peer with artifacts_put (the run id the framing names); with
//               KIB, also hands in `back/big.bin` of KIB kibibytes; replies one line per file,
//               `files-back: <name> <sha256 read> <artifacts_put's result>`
//   usage USD   reports the session's running cost grown by USD dollars (an ACP `usage_update`
//               with `cost: {amount: <the session's total>, currency: "USD"}`), then echoes
// and a prompt with a line `reply: <text>` anywhere (a HEARTBEAT.md, say) is answered with
// exactly <text> (`\n` in it stands for a line break).
//
// The Hub (deepcli's `deepcli` MCP server, which deepcli names in `mcpServers` at session/new
// and session/load): with SDK_ECHO_MCP_HTTP=1 the agent advertises `mcpCapabilities.http`.
// A prompt line
//   mcp TOOL {json}        calls TOOL with those arguments through the official MCP TypeScript
//                          SDK client (`@modelcontextprotocol/sdk`) over the server this session
//                          was given (stdio or streamable HTTP), and replies `mcp: <result JSON>`
//                          (the structured content), or `mcp-error: <message>`
//   mcp-tools              replies `mcp-tools: <the tool names, comma-separated>`
//   mcp-stale TOOL {json}  as `mcp`, with the server config of the first session this process
//                          opened (a token that may since have been revoked)
// and, for scripts/bench-hub:
//   bench-permission       asks for permission (execute "bench <turn>", allow_once and
//                          reject_once offered) and replies `bench-permission: <optionId> <µs
//                          from the request to its answer>` (scripts/bench-approvals)
//   bench-reply            replies `bench:<µs this handler took>`
//   bench-send N AGENT     N sessions_send of `bench-reply` to AGENT's main session, one after
//                          another; replies `bench-send: {"n", "overheadUs": [sorted round trip
//                          minus the target's own µs]}`
//   bench-spawn N          N sessions_spawn (mode run, cleanup delete, task `reply: ok`), each
//                          retried while a limit refuses it; replies `bench-spawn: {"n", "ms"}`
// A message from another session starts with an `[Inter-session message]` line (an A2A
// peer's with `[A2A message]`; the Hub's
// framing): commands are read after it; so they are after a first line that mentions the bot
// (`<@U…> look at this`, then the command on the next line).

import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { spawnSync } from "node:child_process";
import { createRequire } from "node:module";
import { createHash, randomUUID } from "node:crypto";
import { Readable, Writable } from "node:stream";
import { pathToFileURL } from "node:url";

// The SDK lives in <repo>/.npm-peers; scripts/test links it here as ./node_modules, so that this
// folder is an ordinary npm package (what deepcli's sandbox lets an agent's command read).
const peers = new URL("./package.json", import.meta.url);
const sdkPath = createRequire(peers).resolve("@agentclientprotocol/sdk");
const { agent, methods, ndJsonStream, RequestError } = await import(pathToFileURL(sdkPath).href);
const sdkVersion = JSON.parse(
  readFileSync(new URL("./node_modules/@agentclientprotocol/sdk/package.json", import.meta.url)),
).version;

// `sessions::system::BEGIN` and `END`.
const SYSTEM_BEGIN = "[deepcli: system section.";
const SYSTEM_END = "[deepcli: end of the system section]";

function withoutSystemSection(prompt) {
  const end = prompt.indexOf(SYSTEM_END);
  if (!prompt.startsWith(SYSTEM_BEGIN) || end < 0) {
    return prompt;
  }
  return prompt.slice(end + SYSTEM_END.length).replace(/^\n+/, "");
}

const sequential = process.env.SDK_ECHO_SEQUENTIAL === "1";
let issued = 0;
const store = ".sdk-echo-sessions.json";
const sessions = (() => {
  try {
    return sequential ? {} : JSON.parse(readFileSync(store, "utf8"));
  } catch {
    return {};
  }
})();
const save = () => sequential || writeFileSync(store, JSON.stringify(sessions));
const cancels = new Map();
// The running cost each session reported (`usage`).
const costs = new Map();
// The MCP servers each session was given, and the first ever given (mcp-stale).
const mcpServers = new Map();
let firstServers;
const mcpHttp = process.env.SDK_ECHO_MCP_HTTP === "1";
// The working directory each session was opened (or loaded) with.
const cwds = new Map();
const list = (name) => (process.env[name] ?? "").split(",").filter((m) => m !== "");
const models = list("SDK_ECHO_MODELS");
const promptCaps = list("SDK_ECHO_PROMPT_CAPS");
const refused = list("SDK_ECHO_REFUSE_MODELS");
// The model of each session, when models are offered.
const sessionModels = new Map();
const modelOf = (sessionId) => sessionModels.get(sessionId) ?? models[0];
const configOptions = (sessionId) =>
  models.length === 0
    ? undefined
    : [
        {
          id: "model",
          name: "Model",
          category: "model",
          type: "select",
          currentValue: modelOf(sessionId),
          options: models.map((m) => ({ value: m, name: m })),
        },
      ];

const text = (prompt) =>
  prompt
    .filter((block) => block.type === "text")
    .map((block) => block.text)
    .join("");

// One line per content block of a prompt that is not text: its type, media type, URI, and
// the size and SHA-256 of what it carries (`-` where it carries nothing).
const describeBlocks = (prompt) =>
  prompt
    .filter((block) => block.type !== "text")
    .map((block) => {
      const resource = block.resource ?? {};
      const carried =
        block.data !== undefined
          ? Buffer.from(block.data, "base64")
          : resource.blob !== undefined
            ? Buffer.from(resource.blob, "base64")
            : resource.text !== undefined
              ? Buffer.from(resource.text, "utf8")
              : undefined;
      const kind = block.type === "resource" ? `resource/${resource.text !== undefined ? "text" : "blob"}` : block.type;
      const size = carried ? carried.length : (block.size ?? "-");
      const sha = carried ? createHash("sha256").update(carried).digest("hex") : "-";
      return `${kind} ${block.mimeType ?? resource.mimeType ?? "-"} ${block.uri ?? resource.uri ?? "-"} ${size} ${sha}`;
    })
    .join("\n");

const say = (client, sessionId, chunk) =>
  client.notify(methods.client.session.update, {
    sessionId,
    update: { sessionUpdate: "agent_message_chunk", content: { type: "text", text: chunk } },
  });

const app = agent({ name: "sdk-echo" })
  .onRequest(methods.agent.initialize, () => ({
    protocolVersion: 1,
    agentCapabilities: {
      loadSession: !sequential,
      sessionCapabilities: { close: {} },
      mcpCapabilities: { http: mcpHttp, sse: false },
      promptCapabilities: Object.fromEntries(promptCaps.map((c) => [c, true])),
    },
    agentInfo: { name: "sdk-echo", version: sdkVersion },
    authMethods: [],
  }))
  .onRequest(methods.agent.session.new, ({ params }) => {
    const sessionId = sequential ? `s-${++issued}` : randomUUID();
    sessions[sessionId] = 0;
    cwds.set(sessionId, params.cwd);
    rememberServers(sessionId, params.mcpServers);
    save();
    return { sessionId, configOptions: configOptions(sessionId) };
  })
  .onRequest(methods.agent.session.load, ({ params }) => {
    if (!(params.sessionId in sessions)) {
      throw RequestError.invalidParams({ sessionId: params.sessionId }, "unknown session");
    }
    cwds.set(params.sessionId, params.cwd);
    rememberServers(params.sessionId, params.mcpServers);
    return { configOptions: configOptions(params.sessionId) };
  })
  .onRequest(methods.agent.session.setConfigOption, ({ params }) => {
    const { sessionId, configId, value } = params;
    if (!(sessionId in sessions) || configId !== "model" || !models.includes(value)) {
      throw RequestError.invalidParams({ sessionId, configId, value }, "no such option or value");
    }
    if (refused.includes(value)) {
      throw RequestError.invalidParams({ value }, `model ${value} is unavailable`);
    }
    sessionModels.set(sessionId, value);
    console.error(`sdk-echo: session ${sessionId} model ${value}`);
    return { configOptions: configOptions(sessionId) };
  })
  .onRequest(methods.agent.session.close, ({ params }) => {
    if (!(params.sessionId in sessions)) {
      throw RequestError.invalidParams({ sessionId: params.sessionId }, "unknown session");
    }
    delete sessions[params.sessionId];
    cwds.delete(params.sessionId);
    save();
    console.error(`sdk-echo: closed session ${params.sessionId}`);
    return {};
  })
  .onRequest(methods.agent.session.prompt, async ({ params, client }) => {
    const { sessionId } = params;
    if (!(sessionId in sessions)) {
      throw RequestError.invalidParams({ sessionId }, "unknown session");
    }
    const begun = process.hrtime.bigint();
    const prompt = text(params.prompt);
    // deepcli's system section comes first in a session's first prompt, and its line saying
    // who speaks and where first in a chat message's (conversations.md): `raw` shows them;
    // everything else reads the message after them.
    const message = withoutSystemSection(prompt);
    const [first, ...after] = message.split("\n");
    const full = first.startsWith("[deepcli: message from ") ? after.join("\n") : message;
    const said = commandText(full);
    if (said.startsWith("raw")) {
      await say(client, sessionId, `raw: ${message}`);
      return { stopReason: "end_turn" };
    }
    if (said.startsWith("system")) {
      const section = prompt.slice(0, prompt.length - message.length).trimEnd();
      await say(client, sessionId, `system: ${section || "(none)"}`);
      return { stopReason: "end_turn" };
    }
    sessions[sessionId] += 1;
    save();
    const turn = sessions[sessionId];
    if (said.startsWith("crash")) {
      process.exit(3);
    }
    if (said.startsWith("stubborn")) {
      // Ignores session/cancel: answers 3 s after it comes (or after 60 s without one), so
      // the cancel always finds the turn running.
      await new Promise((resolve) => {
        const timer = setTimeout(resolve, 60_000);
        cancels.set(sessionId, () => {
          clearTimeout(timer);
          resolve();
        });
      });
      cancels.delete(sessionId);
      await new Promise((resolve) => setTimeout(resolve, 3000));
      await say(client, sessionId, "stubborn: done anyway");
      return { stopReason: "end_turn" };
    }
    if (said.startsWith("slow")) {
      const cancelled = await new Promise((resolve) => {
        const timer = setTimeout(() => resolve(false), 60_000);
        cancels.set(sessionId, () => {
          clearTimeout(timer);
          resolve(true);
        });
      });
      cancels.delete(sessionId);
      if (cancelled) {
        return { stopReason: "cancelled" };
      }
    }
    if (said.startsWith("hold ")) {
      const path = said.slice("hold ".length).trim();
      await new Promise((resolve) => {
        const look = () => (existsSync(path) ? resolve() : setTimeout(look, 20));
        look();
      });
    }
    if (said.startsWith("permission")) {
      // `permission KIND TITLE…` asks about a tool call of that kind and title (default:
      // delete "delete everything"), offering all four option kinds.
      const words = said.split("\n")[0].split(" ").filter((w) => w !== "");
      const kind = words[0] === "permission" && words.length > 1 ? words[1] : "delete";
      const title = words[0] === "permission" && words.length > 2 ? words.slice(2).join(" ") : "delete everything";
      const answer = await client.request(methods.client.session.requestPermission, {
        sessionId,
        toolCall: {
          toolCallId: `t${turn}`,
          title,
          kind,
          status: "pending",
          content: [{ type: "content", content: { type: "text", text: `${kind}: ${title}` } }],
        },
        options: [
          { optionId: "allow", name: "Allow", kind: "allow_once" },
          { optionId: "allow-always", name: "Always allow", kind: "allow_always" },
          { optionId: "reject", name: "Reject", kind: "reject_once" },
          { optionId: "reject-always", name: "Always reject", kind: "reject_always" },
        ],
      });
      const outcome = answer.outcome.outcome === "selected" ? answer.outcome.optionId : answer.outcome.outcome;
      await say(client, sessionId, `permission: ${outcome}`);
      return { stopReason: "end_turn" };
    }
    if (said.startsWith("bench-permission")) {
      const asked = process.hrtime.bigint();
      const answer = await client.request(methods.client.session.requestPermission, {
        sessionId,
        toolCall: { toolCallId: `b${turn}`, title: `bench ${turn}`, kind: "execute", status: "pending" },
        options: [
          { optionId: "allow", name: "Allow", kind: "allow_once" },
          { optionId: "reject", name: "Reject", kind: "reject_once" },
        ],
      });
      const waited = (process.hrtime.bigint() - asked) / 1000n;
      const outcome = answer.outcome.outcome === "selected" ? answer.outcome.optionId : answer.outcome.outcome;
      await say(client, sessionId, `bench-permission: ${outcome} ${waited}`);
      return { stopReason: "end_turn" };
    }
    if (said.startsWith("bench-reply")) {
      await say(client, sessionId, `bench:${(process.hrtime.bigint() - begun) / 1000n}`);
      return { stopReason: "end_turn" };
    }
    if (said.startsWith("bench-send ") || said.startsWith("bench-spawn ")) {
      await say(client, sessionId, await bench(sessionId, said.split("\n")[0]));
      return { stopReason: "end_turn" };
    }
    if (said.startsWith("files-back")) {
      await say(client, sessionId, await filesBack(sessionId, message, said));
      return { stopReason: "end_turn" };
    }
    const mcpLine = said.split("\n").find((line) => /^mcp(-stale|-tools)?( |$)/.test(line));
    if (mcpLine !== undefined) {
      await say(client, sessionId, await mcpCommand(sessionId, mcpLine));
      return { stopReason: "end_turn" };
    }
    const scripted = said.split("\n").find((line) => line.startsWith("reply: "));
    if (scripted !== undefined) {
      await say(client, sessionId, scripted.slice("reply: ".length).replaceAll("\\n", "\n"));
      return { stopReason: "end_turn" };
    }
    if (said.startsWith("usage ")) {
      const spent = Number(said.slice("usage ".length).trim().split(/\s/)[0]);
      const total = (costs.get(sessionId) ?? 0) + spent;
      costs.set(sessionId, total);
      await client.notify(methods.client.session.update, {
        sessionId,
        update: { sessionUpdate: "usage_update", used: 1000, size: 200000, cost: { amount: total, currency: "USD" } },
      });
    }
    if (said.startsWith("flood ")) {
      const kib = Number(said.slice("flood ".length).trim().split(/\s/)[0]);
      const chunk = "word ".repeat(13108).slice(0, 64 * 1024);
      for (let sent = 0; sent < kib * 1024; sent += chunk.length) {
        await say(client, sessionId, chunk);
      }
      return { stopReason: "end_turn" };
    }
    if (said.startsWith("exec ")) {
      const run = spawnSync("bash", ["-c", said.slice("exec ".length)], { encoding: "utf8", timeout: 30_000 });
      await say(client, sessionId, `exec: ${run.status}\n${run.stdout ?? ""}${run.stderr ?? ""}`);
      return { stopReason: "end_turn" };
    }
    if (said.startsWith("cwd")) {
      await say(client, sessionId, `cwd: ${cwds.get(sessionId)}`);
      return { stopReason: "end_turn" };
    }
    if (said.startsWith("blocks")) {
      await say(client, sessionId, `blocks:\n${describeBlocks(params.prompt)}`);
      return { stopReason: "end_turn" };
    }
    await say(client, sessionId, "echo: ");
    const model = models.length === 0 ? "" : ` [model ${modelOf(sessionId)}]`;
    await say(client, sessionId, `${full} (turn ${turn})${model}`);
    return { stopReason: "end_turn" };
  })
  .onNotification(methods.agent.session.cancel, ({ params }) => {
    cancels.get(params.sessionId)?.();
  });

// Where the commands are: after the Hub's framing line, after a first line that addresses the
// bot in a chat (`<@U…> …`, a Slack mention), and in a spawned child's prompt after its
// `# Task` heading.
function commandText(said) {
  const [first, ...rest] = said.split("\n");
  const framed = /^\[(Inter-session|Operator|A2A) message\]/.test(first) || (/^<@\w+>/.test(first) && rest.length > 0);
  const body = framed ? rest.join("\n") : said;
  const task = body.indexOf("\n# Task\n");
  return task === -1 ? body : body.slice(task + "\n# Task\n".length);
}

function rememberServers(sessionId, servers) {
  const list = servers ?? [];
  mcpServers.set(sessionId, list);
  if (firstServers === undefined && list.length > 0) {
    firstServers = list;
  }
}

let mcpSdk;
async function loadMcp() {
  if (mcpSdk === undefined) {
    const root = new URL("./node_modules/@modelcontextprotocol/sdk/dist/esm/client/", import.meta.url);
    const [index, stdio, http] = await Promise.all([
      import(new URL("index.js", root).href),
      import(new URL("stdio.js", root).href),
      import(new URL("streamableHttp.js", root).href),
    ]);
    mcpSdk = { Client: index.Client, Stdio: stdio.StdioClientTransport, Http: http.StreamableHTTPClientTransport };
  }
  return mcpSdk;
}

// One MCP client per server config, kept while the process lives.
const mcpClients = new Map();
async function mcpClient(server) {
  const key = JSON.stringify(server);
  if (!mcpClients.has(key)) {
    const { Client, Stdio, Http } = await loadMcp();
    const transport =
      server.type === "http"
        ? new Http(new URL(server.url), {
            requestInit: { headers: Object.fromEntries((server.headers ?? []).map((h) => [h.name, h.value])) },
          })
        : new Stdio({
            command: server.command,
            args: server.args,
            env: { ...process.env, ...Object.fromEntries((server.env ?? []).map((e) => [e.name, e.value])) },
            stderr: "inherit",
          });
    const mcp = new Client({ name: "sdk-echo", version: sdkVersion });
    await mcp.connect(transport);
    mcpClients.set(key, mcp);
  }
  return mcpClients.get(key);
}

async function mcpCommand(sessionId, line) {
  try {
    const [word, tool, ...rest] = line.split(" ");
    const servers = word === "mcp-stale" ? firstServers : mcpServers.get(sessionId);
    const server = (servers ?? []).find((s) => s.name === "deepcli");
    if (server === undefined) {
      return "mcp-error: this session was given no `deepcli` MCP server";
    }
    const mcp = await mcpClient(server);
    if (word === "mcp-tools") {
      const { tools } = await mcp.listTools();
      return `mcp-tools: ${tools.map((t) => t.name).join(",")}`;
    }
    const args = rest.length === 0 ? {} : JSON.parse(rest.join(" "));
    const result = await mcp.callTool({ name: tool, arguments: args });
    const body = result.structuredContent ?? result.content?.map((c) => c.text).join("");
    return `${result.isError ? "mcp-error" : "mcp"}: ${typeof body === "string" ? body : JSON.stringify(body)}`;
  } catch (e) {
    return `mcp-error: ${e.message}`;
  }
}

async function filesBack(sessionId, message, said) {
  const { createHash } = await import("node:crypto");
  const { mkdirSync, readFileSync: read, writeFileSync: write } = await import("node:fs");
  const { basename, join } = await import("node:path");
  const run = /artifacts_put \{"taskId": "([^"]+)"/.exec(message)?.[1];
  const cwd = cwds.get(sessionId) ?? ".";
  const server = (mcpServers.get(sessionId) ?? []).find((s) => s.name === "deepcli");
  if (run === undefined || server === undefined) {
    return `files-back: no run id (${run}) or no deepcli MCP server`;
  }
  const mcp = await mcpClient(server);
  mkdirSync(join(cwd, "back"), { recursive: true });
  const handIn = async (path) => {
    const result = await mcp.callTool({ name: "artifacts_put", arguments: { taskId: run, path } });
    return JSON.stringify(result.structuredContent ?? result.content?.map((c) => c.text).join(""));
  };
  const lines = [];
  for (const line of said.split("\n")) {
    const m = /^\[file from the peer\] (\S+) /.exec(line);
    if (!m) continue;
    const bytes = read(join(cwd, m[1]));
    const name = basename(m[1]);
    write(join(cwd, "back", name), bytes);
    const sha = createHash("sha256").update(bytes).digest("hex");
    lines.push(`files-back: ${m[1]} ${sha} ${await handIn(`back/${name}`)}`);
  }
  const kib = Number(said.split("\n")[0].split(" ")[1]);
  if (kib > 0) {
    const big = Buffer.alloc(kib * 1024);
    for (let i = 0; i < big.length; i++) big[i] = (i * 131 + (i >> 10)) & 0xff;
    write(join(cwd, "back", "big.bin"), big);
    const sha = createHash("sha256").update(big).digest("hex");
    lines.push(`files-back: back/big.bin ${sha} ${await handIn("back/big.bin")}`);
  }
  return lines.join("\n");
}

async function bench(sessionId, line) {
  const [word, count, agentId] = line.split(" ");
  const n = Number(count);
  const server = (mcpServers.get(sessionId) ?? []).find((s) => s.name === "deepcli");
  const mcp = await mcpClient(server);
  const call = async (name, args) => (await mcp.callTool({ name, arguments: args })).structuredContent;
  if (word === "bench-send") {
    const overhead = [];
    for (let i = 0; i < n; i++) {
      const t0 = process.hrtime.bigint();
      const result = await call("sessions_send", { agentId, message: "bench-reply", timeoutSeconds: 60 });
      const roundTrip = Number((process.hrtime.bigint() - t0) / 1000n);
      const own = Number(String(result.reply ?? "").replace("bench:", ""));
      if (result.status !== "ok" || Number.isNaN(own)) {
        return `bench-error: ${JSON.stringify(result)}`;
      }
      overhead.push(roundTrip - own);
    }
    overhead.sort((a, b) => a - b);
    return `bench-send: ${JSON.stringify({ n, overheadUs: overhead })}`;
  }
  const t0 = Date.now();
  let refused = 0;
  for (let i = 0; i < n; ) {
    const result = await call("sessions_spawn", { task: "reply: ok", mode: "run", cleanup: "delete" });
    if (result.status === "accepted") {
      i++;
    } else if (result.status === "forbidden") {
      refused++;
      await new Promise((resolve) => setTimeout(resolve, 20));
    } else {
      return `bench-error: ${JSON.stringify(result)}`;
    }
  }
  return `bench-spawn: ${JSON.stringify({ n, refused, ms: Date.now() - t0 })}`;
}

// An agent lives as long as its client: stdin's end (the client closed it, or died) ends the
// process, whatever else is still open in it.
process.stdin.on("end", () => process.exit(0));
const connection = app.connect(ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin)));
await connection.closed;
process.exit(0);
