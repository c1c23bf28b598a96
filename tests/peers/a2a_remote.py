#!/usr/bin/env python3
"""A scripted remote A2A agent on the official A2A Python SDK's server (`a2a-sdk`: its
DefaultRequestHandler, InMemoryTaskStore and gRPC handler on grpcio; installed pinned into
.py-peers/ by scripts/test from tests/peers/requirements.txt). deepcli's integration tests put
it behind an agent with `runtime.kind: a2a`.

    a2a_remote.py PORT_FILE [no-streaming | push]

It offers the gRPC binding only: its card names one interface, `GRPC` at
`http://127.0.0.1:<port>` with the tenant `py-tenant`. The card itself is read over HTTP at the
same port (`/.well-known/agent-card.json`), as a hub serving both on one listener does: a
connection that opens with HTTP/2's preface goes to the SDK's gRPC server, any other is
answered the card. With A2A_REMOTE_TLS_CERT and A2A_REMOTE_TLS_KEY (PEM files) it serves both
over TLS (ALPN `h2` and `http/1.1`) and its card names `https://127.0.0.1:<port>`. Writes
`<port>` and a newline to PORT_FILE once listening. With
`no-streaming` its card says `capabilities.streaming: false` (the SDK's handler then refuses
SendStreamingMessage); with `push` too, and `pushNotifications: true`: the SDK's push sender
(httpx) posts each update of a task to the webhook its message gave. Each message is answered
by a task:
  slow   works until CancelTask (or 60 s), then ends TASK_STATE_CANCELED
  ask    ends TASK_STATE_INPUT_REQUIRED with the question "which one?"
  else   an artifact `remote: <the text's last line> (context turn N)`, TASK_STATE_COMPLETED
         (`, task continued` when the message named a task that waited for input)
On stderr: each call as `call <Method> tenant=<the request's tenant> auth=<ok|wrong>` (the
token is A2A_REMOTE_TOKEN), `working slow` when a slow task starts, `cancel <taskId>` for each
cancel, `pushed to <url>` for each push notification sent, `file <filename> <mediaType> <size>
<sha256>` for each file part (bytes) a message carries.
"""

import asyncio
import hashlib
import os
import ssl
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", ".py-peers"))

import grpc  # noqa: E402
from a2a.helpers.proto_helpers import new_task  # noqa: E402
from a2a.server.agent_execution import AgentExecutor, RequestContext  # noqa: E402
from a2a.server.events import EventQueue  # noqa: E402
from a2a.server.request_handlers import DefaultRequestHandler, GrpcHandler  # noqa: E402
from a2a.server.tasks import (  # noqa: E402
    BasePushNotificationSender,
    InMemoryPushNotificationConfigStore,
    InMemoryTaskStore,
    TaskUpdater,
)
import httpx  # noqa: E402
from a2a.types import a2a_pb2_grpc  # noqa: E402
from a2a.types.a2a_pb2 import (  # noqa: E402
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Part,
    TaskState,
)
from google.protobuf.json_format import MessageToJson  # noqa: E402

TOKEN = os.environ.get("A2A_REMOTE_TOKEN", "")
turns = {}
cancelled = set()


def log(line):
    print(line, file=sys.stderr, flush=True)


class Executor(AgentExecutor):
    async def execute(self, context: RequestContext, queue: EventQueue):
        task_id, context_id = context.task_id, context.context_id
        continued = context.current_task is not None
        updater = TaskUpdater(queue, task_id, context_id)
        if not continued:
            await queue.enqueue_event(
                new_task(task_id, context_id, TaskState.TASK_STATE_SUBMITTED, history=[context.message])
            )
        await updater.start_work()
        for part in context.message.parts:
            if part.HasField("raw"):
                digest = hashlib.sha256(part.raw).hexdigest()
                log(f"file {part.filename} {part.media_type} {len(part.raw)} {digest}")
        text = context.get_user_input()
        last = text.strip().split("\n")[-1]
        turn = turns.get(context_id, 0) + 1
        turns[context_id] = turn
        if last == "slow":
            log("working slow")
            for _ in range(600):
                if task_id in cancelled:
                    break
                await asyncio.sleep(0.1)
            return
        if last == "ask":
            await updater.requires_input(updater.new_agent_message([Part(text="which one?")]))
            return
        said = f"remote: {last} (context turn {turn}{', task continued' if continued else ''})"
        await updater.add_artifact([Part(text=said)], name="reply")
        await updater.complete()

    async def cancel(self, context: RequestContext, queue: EventQueue):
        log(f"cancel {context.task_id}")
        cancelled.add(context.task_id)
        await TaskUpdater(queue, context.task_id, context.context_id).cancel()


class Logged(GrpcHandler):
    """The SDK's handler, each call said on stderr first."""


def logged(method):
    def said(request, context):
        metadata = dict(context.invocation_metadata() or [])
        auth = "ok" if metadata.get("authorization") == f"Bearer {TOKEN}" else "wrong"
        log(f"call {method} tenant={getattr(request, 'tenant', '')} auth={auth}")
        return auth == "ok"

    base = getattr(GrpcHandler, method)
    if method in ("SendStreamingMessage", "SubscribeToTask"):

        async def streamed(self, request, context):
            if not said(request, context):
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, "wrong token")
            async for event in base(self, request, context):
                yield event

        return streamed

    async def unary(self, request, context):
        if not said(request, context):
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "wrong token")
        return await base(self, request, context)

    return unary


for name in ("SendMessage", "SendStreamingMessage", "GetTask", "CancelTask", "SubscribeToTask"):
    setattr(Logged, name, logged(name))


async def main(port_file, streaming, push):
    async def serve(reader, writer):
        try:
            head = await reader.readexactly(24)
        except asyncio.IncompleteReadError as e:
            head = e.partial
        if head.startswith(b"PRI * HTTP/2.0"):
            # gRPC: the connection spliced to the SDK's server, both ways.
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", grpc_port)
            up_writer.write(head)

            async def pump(src, dst):
                try:
                    while data := await src.read(65536):
                        dst.write(data)
                        await dst.drain()
                except ConnectionError:
                    pass
                finally:
                    dst.close()

            await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))
            return
        # An HTTP/1.1 request: the card, whatever the path, and the connection closed.
        while b"\r\n\r\n" not in head:
            more = await reader.read(4096)
            if not more:
                break
            head += more
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
            + str(len(card_json)).encode()
            + b"\r\nconnection: close\r\n\r\n"
            + card_json
        )
        await writer.drain()
        writer.close()

    tls = None
    if os.environ.get("A2A_REMOTE_TLS_CERT"):
        # TLS in front of both: ALPN `h2` (a gRPC client) or `http/1.1` (the card's reader);
        # what comes through decrypted is told apart as above.
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(os.environ["A2A_REMOTE_TLS_CERT"], os.environ["A2A_REMOTE_TLS_KEY"])
        tls.set_alpn_protocols(["h2", "http/1.1"])
    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=tls)
    port = server.sockets[0].getsockname()[1]
    scheme = "https" if tls else "http"
    grpc_server = grpc.aio.server()
    grpc_port = grpc_server.add_insecure_port("127.0.0.1:0")
    card = AgentCard(
        name="Python remote",
        description="A scripted remote agent on the A2A Python SDK's gRPC server.",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(
                url=f"{scheme}://127.0.0.1:{port}",
                protocol_binding="GRPC",
                protocol_version="1.0",
                tenant="py-tenant",
            )
        ],
        capabilities=AgentCapabilities(streaming=streaming, push_notifications=push),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="remote", name="Remote", description="Answers from afar.", tags=["test"])],
    )
    pushed = {}
    if push:
        configs = InMemoryPushNotificationConfigStore()


        async def said(request):
            log(f"pushed to {request.url}")

        client = httpx.AsyncClient(timeout=10, event_hooks={"request": [said]})
        pushed = {
            "push_config_store": configs,
            "push_sender": BasePushNotificationSender(client, configs),
        }
    handler = DefaultRequestHandler(
        agent_executor=Executor(), task_store=InMemoryTaskStore(), agent_card=card, **pushed
    )
    a2a_pb2_grpc.add_A2AServiceServicer_to_server(Logged(handler), grpc_server)
    await grpc_server.start()
    card_json = MessageToJson(card).encode()

    with open(port_file + ".tmp", "w") as f:
        f.write(f"{port}\n")
    os.rename(port_file + ".tmp", port_file)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    modes = sys.argv[2:]
    asyncio.run(main(sys.argv[1], not ({"no-streaming", "push"} & set(modes)), "push" in modes))
