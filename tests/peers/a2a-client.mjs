#!/usr/bin/env node
// An A2A client on the official A2A JavaScript SDK (`@a2a-js/sdk`, installed pinned into
// .npm-peers/ by scripts/test). deepcli's integration tests run it against `deepcli up` so that
// card discovery, the JSON-RPC framing, the SSE parsing and the error mapping deepcli meets
// are the SDK's.
//
//   a2a-client.mjs COMMAND BASE_URL TOKEN [ARGS…]
//
// BASE_URL is where the agent card is found (`<base>/.well-known/agent-card.json`); the SDK
// picks the JSON-RPC interface the card names, or its HTTP+JSON one with A2A_TRANSPORT=rest. TOKEN goes in `Authorization: Bearer` (`-`:
// none). Commands, each printing one JSON document per line on stdout (ProtoJSON, as the SDK's
// own `toJSON` writes it):
//   card                          the public card the SDK resolved
//   transport                     the interface the SDK chose: {protocol, endpoint}
//   send TEXT [CONTEXT] [TASK]    sendMessage (blocking); prints the task or message
//   send-nowait TEXT [CONTEXT]    sendMessage with returnImmediately
//   stream TEXT [CONTEXT]         sendMessageStream; one line per event
//   get TASK [HISTORY]            getTask
//   list [CONTEXT] [STATUS]       listTasks (pageSize 2, every page): {pages, tasks}
//   cancel TASK                   cancelTask
//   subscribe TASK                resubscribeTask; one line per event
//   burst N                       N listTasks one after another: {ok, errors: [messages]}
//   streams N TEXT                N sendMessageStream at once: {n, events: [count per stream],
//                                 finals: [last state per stream], artifacts: [count per stream],
//                                 ms}
//   bench N                       N blocking sends of `bench-reply` (the echo agent answers
//                                 `bench:<µs its handler took>`), one after another, in one
//                                 context: {n, overheadUs: [sorted round trip minus that µs],
//                                 hubUs: [sorted hub share from its Server-Timing header]}
//   bench-get N                   N GetTask calls of one finished task: {n, us: [sorted]}
//   push-send TEXT URL CREDS TOKEN [CONTEXT] [TASK]
//                                 sendMessage (blocking) with a taskPushNotificationConfig:
//                                 URL, authentication Bearer CREDS, token TOKEN; prints the task
//   push-create TASK URL CREDS [ID]  createTaskPushNotificationConfig; prints the config
//   push-get TASK ID              getTaskPushNotificationConfig; prints the config
//   push-list TASK                listTaskPushNotificationConfig; prints {configs, nextPageToken}
//   push-delete TASK ID           deleteTaskPushNotificationConfig; prints {}
//   bench-push N                  N blocking sends, each with a webhook on a local HTTP server
//                                 (node:http) as its push config: {n, lagUs: [sorted µs from the
//                                 send's answer to the webhook's TASK_STATE_COMPLETED, 0 when
//                                 it came first]}
//   send-file TEXT PATH NAME TYPE [MODES]
//                                 sendMessage (blocking) of a text part TEXT and a file part
//                                 with PATH's bytes inline (`raw`), filename NAME, media type
//                                 TYPE; MODES: acceptedOutputModes, comma-separated; prints the
//                                 task
//   stream-file TEXT PATH NAME TYPE  the same with sendMessageStream; one line per event
//   bench-file N KIB              2N blocking sends of `bench-reply` in one context, one with
//                                 text only then one with a KIB KiB file part too, alternately:
//                                 {n, text: {overheadUs, hubUs}, file: {overheadUs, hubUs}}
//                                 (each sorted; as `bench`)
//   extended-card                 getAgentCard, which fetches the authenticated extended card
//                                 when the public card offers one (GetExtendedAgentCard)
// An error the SDK throws is printed as {"error": message, "kind": the SDK's error class} and
// the exit code is 2.

import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";
import { randomUUID } from "node:crypto";

const peers = new URL("../../.npm-peers/package.json", import.meta.url);
const require = createRequire(peers);
const sdk = await import(pathToFileURL(require.resolve("@a2a-js/sdk")).href);
const {
  ClientFactory,
  ClientFactoryOptions,
  DefaultAgentCardResolver,
  JsonRpcTransportFactory,
  RestTransportFactory,
} = await import(pathToFileURL(require.resolve("@a2a-js/sdk/client")).href);

const [command, base, token, ...args] = process.argv.slice(2);
// The hub's own share of the last response, from its `Server-Timing: hub;dur=<ms>` header.
let lastHubMs = null;
const authFetch = async (input, init = {}) => {
  const headers = new Headers(init.headers ?? {});
  if (token && token !== "-") headers.set("Authorization", `Bearer ${token}`);
  const response = await fetch(input, { ...init, headers });
  const timing = response.headers.get("server-timing") ?? "";
  const hub = /(?:^|,)\s*hub;dur=([0-9.]+)/.exec(timing);
  lastHubMs = hub ? Number(hub[1]) : null;
  return response;
};
const factory = new ClientFactory(
  ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
    transports: [
      process.env.A2A_TRANSPORT === "rest"
        ? new RestTransportFactory({ fetchImpl: authFetch })
        : new JsonRpcTransportFactory({ fetchImpl: authFetch }),
    ],
    cardResolver: new DefaultAgentCardResolver({ fetchImpl: authFetch }),
    preferredTransports: process.env.A2A_TRANSPORT === "rest" ? ["HTTP+JSON"] : undefined,
  }),
);

const out = (doc) => process.stdout.write(JSON.stringify(doc) + "\n");
const message = (text, contextId, taskId) => ({
  messageId: randomUUID(),
  role: sdk.Role.ROLE_USER,
  parts: [{ content: { $case: "text", value: text } }],
  contextId: contextId || "",
  taskId: taskId || "",
  extensions: [],
  referenceTaskIds: [],
});
const result = (value) =>
  value && "status" in value ? sdk.Task.toJSON(value) : sdk.Message.toJSON(value);
const event = (ev) => sdk.StreamResponse.toJSON(ev);

try {
  const client = await factory.createFromUrl(base);
  switch (command) {
    case "card":
      // The public card the client was made from (getAgentCard would fetch the extended one).
      out(sdk.AgentCard.toJSON(client.agentCard));
      break;
    case "transport":
      out({ protocol: client.transport.protocolName, endpoint: client.transport.endpoint });
      break;
    case "send":
      out(result(await client.sendMessage({ message: message(args[0], args[1], args[2]) })));
      break;
    case "send-nowait":
      out(
        result(
          await client.sendMessage({
            message: message(args[0], args[1]),
            configuration: { acceptedOutputModes: [], returnImmediately: true },
          }),
        ),
      );
      break;
    case "stream":
      for await (const ev of client.sendMessageStream({ message: message(args[0], args[1]) })) {
        out(event(ev));
      }
      break;
    case "get":
      out(
        sdk.Task.toJSON(
          await client.getTask({ id: args[0], historyLength: args[1] === undefined ? undefined : Number(args[1]) }),
        ),
      );
      break;
    case "list": {
      const tasks = [];
      let pageToken = "";
      let pages = 0;
      do {
        const page = await client.listTasks({
          contextId: args[0] || "",
          status: args[1] ? sdk.taskStateFromJSON(args[1]) : 0,
          pageSize: 2,
          pageToken,
        });
        pages += 1;
        tasks.push(...page.tasks.map((t) => sdk.Task.toJSON(t)));
        pageToken = page.nextPageToken;
      } while (pageToken);
      out({ pages, tasks });
      break;
    }
    case "cancel":
      out(sdk.Task.toJSON(await client.cancelTask({ id: args[0] })));
      break;
    case "subscribe":
      for await (const ev of client.resubscribeTask({ id: args[0] })) {
        out(event(ev));
      }
      break;
    case "burst": {
      let ok = 0;
      const errors = [];
      for (let i = 0; i < Number(args[0]); i++) {
        try {
          await client.listTasks({ contextId: "", status: 0, pageSize: 1, pageToken: "" });
          ok += 1;
        } catch (e) {
          errors.push(String(e?.message ?? e));
        }
      }
      out({ ok, errors });
      break;
    }
    case "streams": {
      const n = Number(args[0]);
      const started = Date.now();
      const runs = await Promise.all(
        Array.from({ length: n }, async (_, i) => {
          const seen = [];
          for await (const ev of client.sendMessageStream({ message: message(`${args[1]} ${i}`) })) {
            seen.push(event(ev));
          }
          return seen;
        }),
      );
      const last = (evs) => {
        const e = evs[evs.length - 1] ?? {};
        return e.statusUpdate?.status?.state ?? e.task?.status?.state ?? null;
      };
      out({
        n,
        events: runs.map((r) => r.length),
        finals: runs.map(last),
        artifacts: runs.map((r) => r.filter((e) => e.artifactUpdate).length),
        ms: Date.now() - started,
      });
      break;
    }
    case "bench": {
      const overheadUs = [];
      const hubUs = [];
      const contextId = `bench-${randomUUID()}`;
      for (let i = 0; i < Number(args[0]); i++) {
        const t0 = process.hrtime.bigint();
        const task = sdk.Task.toJSON(await client.sendMessage({ message: message("bench-reply", contextId) }));
        const roundTrip = Number((process.hrtime.bigint() - t0) / 1000n);
        const reply = task.artifacts?.[0]?.parts?.[0]?.text ?? "";
        const own = Number(reply.replace(/^echo: /, "").replace("bench:", ""));
        if (!reply.startsWith("bench:") || Number.isNaN(own)) throw new Error(`not a bench reply: ${reply}`);
        overheadUs.push(roundTrip - own);
        if (lastHubMs !== null) hubUs.push(Math.round(lastHubMs * 1000));
      }
      overheadUs.sort((a, b) => a - b);
      hubUs.sort((a, b) => a - b);
      out({ n: overheadUs.length, overheadUs, hubUs });
      break;
    }
    case "bench-file": {
      const contextId = `bench-${randomUUID()}`;
      const bytes = Buffer.alloc(Number(args[1]) * 1024);
      for (let i = 0; i < bytes.length; i++) bytes[i] = (i * 2654435761) >>> 24;
      const runs = { text: { overheadUs: [], hubUs: [] }, file: { overheadUs: [], hubUs: [] } };
      for (let i = 0; i < Number(args[0]); i++) {
        for (const kind of ["text", "file"]) {
          const msg = message("bench-reply", contextId);
          if (kind === "file") {
            msg.parts.push({ content: { $case: "raw", value: bytes }, filename: "bench.bin", mediaType: "application/octet-stream", metadata: undefined });
          }
          const t0 = process.hrtime.bigint();
          const task = sdk.Task.toJSON(await client.sendMessage({ message: msg }));
          const roundTrip = Number((process.hrtime.bigint() - t0) / 1000n);
          const reply = task.artifacts?.[0]?.parts?.[0]?.text ?? "";
          const own = Number(reply.replace("bench:", ""));
          if (!reply.startsWith("bench:") || Number.isNaN(own)) throw new Error(`not a bench reply: ${reply}`);
          runs[kind].overheadUs.push(roundTrip - own);
          if (lastHubMs !== null) runs[kind].hubUs.push(Math.round(lastHubMs * 1000));
        }
      }
      for (const r of Object.values(runs)) {
        r.overheadUs.sort((a, b) => a - b);
        r.hubUs.sort((a, b) => a - b);
      }
      out({ n: Number(args[0]), ...runs });
      break;
    }
    case "bench-get": {
      // N GetTask calls of one finished task: the round trip of the SDK client, HTTP and the
      // hub's door and task read, with no agent and no Hub run.
      const task = sdk.Task.toJSON(await client.sendMessage({ message: message("bench-reply", "") }));
      const us = [];
      for (let i = 0; i < Number(args[0]); i++) {
        const t0 = process.hrtime.bigint();
        await client.getTask({ id: task.id, historyLength: 0 });
        us.push(Number((process.hrtime.bigint() - t0) / 1000n));
      }
      us.sort((a, b) => a - b);
      out({ n: us.length, us });
      break;
    }
    case "push-send": {
      const [text, url, credentials, pushToken, contextId, taskId] = args;
      const config = {
        tenant: "",
        id: "",
        taskId: "",
        url,
        token: pushToken,
        authentication: { scheme: "Bearer", credentials },
      };
      out(
        result(
          await client.sendMessage({
            message: message(text, contextId, taskId),
            configuration: { acceptedOutputModes: [], taskPushNotificationConfig: config, returnImmediately: false },
          }),
        ),
      );
      break;
    }
    case "push-create": {
      const [taskId, url, credentials, id] = args;
      const config = await client.createTaskPushNotificationConfig({
        tenant: "",
        id: id ?? "",
        taskId,
        url,
        token: "",
        authentication: { scheme: "Bearer", credentials },
      });
      out(sdk.TaskPushNotificationConfig.toJSON(config));
      break;
    }
    case "push-get":
      out(
        sdk.TaskPushNotificationConfig.toJSON(
          await client.getTaskPushNotificationConfig({ tenant: "", taskId: args[0], id: args[1] }),
        ),
      );
      break;
    case "push-list":
      out(
        sdk.ListTaskPushNotificationConfigsResponse.toJSON(
          await client.listTaskPushNotificationConfig({ tenant: "", taskId: args[0], pageSize: 0, pageToken: "" }),
        ),
      );
      break;
    case "push-delete":
      await client.deleteTaskPushNotificationConfig({ tenant: "", taskId: args[0], id: args[1] });
      out({});
      break;
    case "bench-push": {
      const { createServer } = await import("node:http");
      const arrived = new Map();
      const waiting = new Map();
      const server = createServer((req, res) => {
        let body = "";
        req.on("data", (c) => (body += c));
        req.on("end", () => {
          const at = process.hrtime.bigint();
          res.writeHead(200).end();
          const doc = JSON.parse(body || "{}");
          const update = doc.statusUpdate;
          if (update?.status?.state === "TASK_STATE_COMPLETED") {
            arrived.set(update.taskId, at);
            waiting.get(update.taskId)?.();
          }
        });
      });
      await new Promise((ok) => server.listen(0, "127.0.0.1", ok));
      const hook = `http://127.0.0.1:${server.address().port}/hook`;
      const lagUs = [];
      for (let i = 0; i < Number(args[0]); i++) {
        const config = { tenant: "", id: "", taskId: "", url: hook, token: "", authentication: undefined };
        const task = await client.sendMessage({
          message: message("bench-reply", ""),
          configuration: { acceptedOutputModes: [], taskPushNotificationConfig: config, returnImmediately: false },
        });
        const answered = process.hrtime.bigint();
        if (!arrived.has(task.id)) await new Promise((ok) => waiting.set(task.id, ok));
        const lag = Number((arrived.get(task.id) - answered) / 1000n);
        lagUs.push(Math.max(0, lag));
      }
      server.close();
      lagUs.sort((a, b) => a - b);
      out({ n: lagUs.length, lagUs });
      break;
    }
    case "send-file":
    case "stream-file": {
      const { readFileSync } = await import("node:fs");
      const [text, path, filename, mediaType, modes] = args;
      const msg = message(text);
      msg.parts.push({
        content: { $case: "raw", value: new Uint8Array(readFileSync(path)) },
        filename,
        mediaType,
        metadata: undefined,
      });
      const request = {
        message: msg,
        configuration: {
          acceptedOutputModes: modes ? modes.split(",") : [],
          returnImmediately: false,
        },
      };
      if (command === "send-file") {
        out(result(await client.sendMessage(request)));
      } else {
        for await (const ev of client.sendMessageStream(request)) {
          out(event(ev));
        }
      }
      break;
    }
    case "extended-card":
      out(sdk.AgentCard.toJSON(await client.getAgentCard()));
      break;
    default:
      throw new Error(`unknown command ${command}`);
  }
} catch (e) {
  const cause = e?.cause ?? e;
  out({ error: String(e?.message ?? e), kind: cause?.constructor?.name ?? null });
  process.exit(2);
}
