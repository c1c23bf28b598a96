#!/usr/bin/env python3
"""A client of deepcli's A2A server over the gRPC binding, on the official A2A Python SDK
(`a2a-sdk` with its grpc extra: grpcio, installed pinned into .py-peers/ by scripts/test from
tests/peers/requirements.txt).

    a2a_grpc_client.py URL TOKEN WEBHOOK
    a2a_grpc_client.py bench TARGET TENANT TOKEN N

The client reads the Agent Card at URL, picks the card's GRPC interface (its `url` the
listener, its `tenant` the agent), and with the bearer TOKEN in the `authorization` metadata:
sends a message (blocking), streams one, gets and lists the tasks, streams a `slow` message,
subscribes to its task, creates, lists and deletes a push config (to WEBHOOK) on it, cancels
it, reads the extended card, asks for a task that does not exist (the SDK's error class and the
status's ErrorInfo), sends with no tenant (the hub's endpoint, routed), and calls once with no
token. One JSON document per line on stdout, each
{"step": …, …} (messages as ProtoJSON). A failure is one line {"error", "type"} and exit
status 1.

`bench` (scripts/bench-a2a) makes N blocking SendMessage calls of `bench-reply` to TARGET
(`host:port`) for the agent TENANT, one after another in one contextId, on grpcio's stub, and
prints {"hubUs": [sorted: the hub's share from each answer's `server-timing` metadata],
"overheadUs": [sorted: the round trip minus the echo agent's own handler time]}.
"""

import asyncio
import json
import os
import sys
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", ".py-peers"))

import grpc  # noqa: E402
import httpx  # noqa: E402
from a2a.client import ClientConfig, ClientFactory  # noqa: E402
from a2a.types import a2a_pb2_grpc  # noqa: E402
from a2a.types.a2a_pb2 import (  # noqa: E402
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskPushNotificationConfig,
)
from a2a.utils.grpc_status import status_from_call  # noqa: E402
from google.protobuf.json_format import MessageToDict  # noqa: E402
from google.rpc import error_details_pb2  # noqa: E402


def say(doc):
    print(json.dumps(doc), flush=True)


def target(url):
    """A gRPC target (`host:port`) from the interface's URL (`http://host:port`)."""
    return url.split("://", 1)[-1].rstrip("/")


class Bearer:
    """`authorization: Bearer <token>` on every call: one interceptor per kind of call (grpcio
    files an interceptor under the first kind it is)."""

    def __init__(self, token):
        self.token = token

    def details(self, d):
        metadata = list(d.metadata or []) + [("authorization", f"Bearer {self.token}")]
        return grpc.aio.ClientCallDetails(
            d.method, d.timeout, metadata, d.credentials, d.wait_for_ready
        )

    def interceptors(self):
        bearer = self

        class Unary(grpc.aio.UnaryUnaryClientInterceptor):
            async def intercept_unary_unary(self, continuation, details, request):
                return await continuation(bearer.details(details), request)

        class Streamed(grpc.aio.UnaryStreamClientInterceptor):
            async def intercept_unary_stream(self, continuation, details, request):
                return await continuation(bearer.details(details), request)

        return [Unary(), Streamed()]


def message(text):
    return SendMessageRequest(
        message=Message(
            message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text=text)]
        )
    )


def raw_status(e):
    """A failed call's code and the ErrorInfo in its status details."""
    doc = {"code": e.code().name, "message": e.details()}
    status = status_from_call(e)
    for detail in status.details if status else []:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            doc["errorInfo"] = MessageToDict(info)
    return doc


async def main(url, token, webhook):
    http = httpx.AsyncClient(timeout=30)
    channels = []

    def channel(u):
        c = grpc.aio.insecure_channel(target(u), interceptors=Bearer(token).interceptors())
        channels.append(c)
        return c

    def config(streaming):
        return ClientConfig(
            streaming=streaming,
            httpx_client=http,
            supported_protocol_bindings=["GRPC"],
            use_client_preference=True,
            grpc_channel_factory=channel,
        )

    blocking = await ClientFactory(config(False)).create_from_url(url)
    streaming = await ClientFactory(config(True)).create_from_url(url)
    grpc_interface = [
        i for i in blocking._card.supported_interfaces if i.protocol_binding == "GRPC"
    ]
    say(
        {
            "step": "transport",
            "transport": type(streaming._transport).__name__,
            "interfaces": [MessageToDict(i) for i in grpc_interface],
        }
    )

    events = [MessageToDict(e) async for e in blocking.send_message(message("hello over grpc"))]
    say({"step": "send", "events": events})
    sent_id = events[-1]["task"]["id"]

    events = [MessageToDict(e) async for e in streaming.send_message(message("streamed over grpc"))]
    say({"step": "stream", "events": events})

    task = await blocking.get_task(GetTaskRequest(id=sent_id, history_length=1))
    say({"step": "get", "task": MessageToDict(task)})

    listed = await blocking.list_tasks(ListTasksRequest(page_size=10))
    say({"step": "list", "page": MessageToDict(listed)})

    # A task that works until it is canceled: subscribe to it, hang a webhook on it, cancel it.
    slow = streaming.send_message(message("slow"))
    first = MessageToDict(await slow.__anext__())
    slow_id = first["task"]["id"]
    subscribed = streaming.subscribe(SubscribeToTaskRequest(id=slow_id))
    sub_events = [MessageToDict(await subscribed.__anext__())]
    # The run working (its prompt sent to the agent) before anything is asked of it.
    for _ in range(500):
        got = await blocking.get_task(GetTaskRequest(id=slow_id))
        if MessageToDict(got)["status"]["state"] == "TASK_STATE_WORKING":
            break
        await asyncio.sleep(0.02)

    created = await blocking.create_task_push_notification_config(
        TaskPushNotificationConfig(task_id=slow_id, url=webhook, token="hook-token-1")
    )
    configs = await blocking.list_task_push_notification_configs(
        ListTaskPushNotificationConfigsRequest(task_id=slow_id)
    )
    await blocking.delete_task_push_notification_config(
        DeleteTaskPushNotificationConfigRequest(task_id=slow_id, id=created.id)
    )
    after = await blocking.list_task_push_notification_configs(
        ListTaskPushNotificationConfigsRequest(task_id=slow_id)
    )
    say(
        {
            "step": "push",
            "created": MessageToDict(created),
            "listed": MessageToDict(configs),
            "afterDelete": MessageToDict(after),
        }
    )

    canceled = await blocking.cancel_task(CancelTaskRequest(id=slow_id))
    rest = [MessageToDict(e) async for e in slow]
    sub_events += [MessageToDict(e) async for e in subscribed]
    say(
        {
            "step": "cancel",
            "task": MessageToDict(canceled),
            "stream": [first] + rest,
            "subscribe": sub_events,
        }
    )

    card = await blocking.get_extended_agent_card(GetExtendedAgentCardRequest())
    say({"step": "extendedCard", "card": MessageToDict(card)})

    try:
        await blocking.get_task(GetTaskRequest(id="no-such-task"))
        say({"step": "notFound", "sdkError": None})
    except Exception as e:  # the SDK's class for the ErrorInfo's reason
        say({"step": "notFound", "sdkError": type(e).__name__, "message": str(e)})
    tenant = grpc_interface[0].tenant if grpc_interface else ""
    raw = a2a_pb2_grpc.A2AServiceStub(channel(grpc_interface[0].url))
    try:
        await raw.GetTask(GetTaskRequest(id="no-such-task", tenant=tenant))
    except grpc.aio.AioRpcError as e:
        say({"step": "notFoundStatus", **raw_status(e)})

    # No tenant: the hub's endpoint, where bindings.yaml routes the peer.
    routed = await raw.SendMessage(message("cwd"))
    say({"step": "routed", "task": MessageToDict(routed.task)})

    bare = grpc.aio.insecure_channel(target(grpc_interface[0].url))
    channels.append(bare)
    try:
        await a2a_pb2_grpc.A2AServiceStub(bare).GetTask(
            GetTaskRequest(id=sent_id, tenant=tenant)
        )
        say({"step": "noToken", "code": "OK"})
    except grpc.aio.AioRpcError as e:
        say({"step": "noToken", **raw_status(e)})

    await blocking.close()
    await streaming.close()
    for c in channels:
        await c.close()
    await http.aclose()


async def bench(target_, tenant, token, n):
    import re
    import time

    channel = grpc.aio.insecure_channel(target_)
    stub = a2a_pb2_grpc.A2AServiceStub(channel)
    metadata = [("authorization", f"Bearer {token}")]
    context = f"bench-{uuid.uuid4()}"
    hub, overhead = [], []
    for _ in range(int(n)):
        request = message("bench-reply")
        request.tenant = tenant
        request.message.context_id = context
        begun = time.perf_counter()
        call = stub.SendMessage(request, metadata=metadata)
        answer = await call
        took = (time.perf_counter() - begun) * 1e6
        timing = dict(await call.initial_metadata()).get("server-timing", "")
        m = re.search(r"hub;dur=([0-9.]+)", timing)
        if m:
            hub.append(float(m.group(1)) * 1000)
        reply = answer.task.artifacts[0].parts[0].text
        own = float(reply.replace("echo: ", "").replace("bench:", "") or 0)
        overhead.append(took - own)
    await channel.close()
    say({"hubUs": sorted(hub), "overheadUs": sorted(overhead)})


if __name__ == "__main__":
    try:
        if sys.argv[1] == "bench":
            asyncio.run(bench(*sys.argv[2:6]))
        else:
            asyncio.run(main(*sys.argv[1:4]))
    except Exception as e:  # the test reads what failed
        say({"error": str(e), "type": type(e).__name__})
        sys.exit(1)
