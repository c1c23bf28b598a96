#!/usr/bin/env python3
"""Push notification configs on deepcli's A2A server through the official A2A Python SDK
(`a2a-sdk`, installed pinned into .py-peers/ by scripts/test): 1.0's paging, and 0.3's method
names through the SDK's 0.3 compatibility transport.

    a2a_push_client.py URL TOKEN WEBHOOK

With the bearer TOKEN, against the agent whose card is at URL: sends a message (blocking), then
on its task creates three configs (`c-1`, `c-2`, `c-3`, to WEBHOOK) and lists them two a page
(`pages`); then, over A2A 0.3's JSON-RPC (`tasks/pushNotificationConfig/set`, `get`, `list`,
`delete`, the SDK's CompatJsonRpcTransport), sets `v03-1`, gets it, lists, deletes it and lists
again (`v03`). One JSON document per line on stdout (messages as ProtoJSON). A failure is one
line {"error", "type"} and exit status 1.
"""

import asyncio
import json
import os
import sys
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", ".py-peers"))

import httpx  # noqa: E402
from a2a.client import ClientConfig, ClientFactory  # noqa: E402
from a2a.compat.v0_3.jsonrpc_transport import CompatJsonRpcTransport  # noqa: E402
from a2a.types.a2a_pb2 import (  # noqa: E402
    AuthenticationInfo,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    ListTaskPushNotificationConfigsRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    TaskPushNotificationConfig,
)
from google.protobuf.json_format import MessageToDict  # noqa: E402


def say(doc):
    print(json.dumps(doc), flush=True)


async def main(url, token, webhook):
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    config = ClientConfig(
        streaming=False,
        httpx_client=http,
        supported_protocol_bindings=["JSONRPC"],
        use_client_preference=True,
    )
    client = await ClientFactory(config).create_from_url(url)
    request = SendMessageRequest(
        message=Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text="hello")]),
        configuration=SendMessageConfiguration(),
    )
    events = [MessageToDict(e) async for e in client.send_message(request)]
    task = events[-1]["task"]["id"]
    for n in (3, 1, 2):
        await client.create_task_push_notification_config(
            TaskPushNotificationConfig(task_id=task, id=f"c-{n}", url=webhook, token=f"t-{n}")
        )
    first = await client.list_task_push_notification_configs(
        ListTaskPushNotificationConfigsRequest(task_id=task, page_size=2)
    )
    second = await client.list_task_push_notification_configs(
        ListTaskPushNotificationConfigsRequest(
            task_id=task, page_size=2, page_token=first.next_page_token
        )
    )
    say({"step": "pages", "task": task, "first": MessageToDict(first), "second": MessageToDict(second)})

    # A2A 0.3: the interface the card names for JSON-RPC serves 0.3's names too.
    endpoint = client._card.supported_interfaces[0].url
    old = CompatJsonRpcTransport(http, client._card, endpoint)
    created = await old.create_task_push_notification_config(
        TaskPushNotificationConfig(
            task_id=task,
            id="v03-1",
            url=webhook,
            token="t-v03",
            authentication=AuthenticationInfo(scheme="Bearer", credentials="hook-secret"),
        )
    )
    got = await old.get_task_push_notification_config(
        GetTaskPushNotificationConfigRequest(task_id=task, id="v03-1")
    )
    listed = await old.list_task_push_notification_configs(
        ListTaskPushNotificationConfigsRequest(task_id=task)
    )
    await old.delete_task_push_notification_config(
        DeleteTaskPushNotificationConfigRequest(task_id=task, id="v03-1")
    )
    after = await old.list_task_push_notification_configs(
        ListTaskPushNotificationConfigsRequest(task_id=task)
    )
    say(
        {
            "step": "v03",
            "created": MessageToDict(created),
            "got": MessageToDict(got),
            "listed": MessageToDict(listed),
            "afterDelete": MessageToDict(after),
        }
    )


if __name__ == "__main__":
    try:
        asyncio.run(main(*sys.argv[1:4]))
    except Exception as e:  # noqa: BLE001
        say({"error": str(e), "type": type(e).__name__})
        sys.exit(1)
