#!/usr/bin/env python3
"""A client of deepcli's A2A server on the official A2A Python SDK (`a2a-sdk`, installed pinned
into .py-peers/ by scripts/test from tests/peers/requirements.txt).

    a2a_client.py BINDING URL TOKEN TEXT [FILE NAME TYPE]

BINDING is the protocol binding the client prefers (`JSONRPC` or `HTTP+JSON`). The client reads
the Agent Card at URL, picks the card's interface for that binding, sends TEXT as a streaming
message with the bearer TOKEN (and FILE's bytes inline as a file part named NAME, of media
type TYPE, when given), then gets the task back. One JSON document per line on stdout:
{"binding", "url"} of the transport chosen, each stream event (ProtoJSON), then the task. A
failure is one line {"error", "type"} and exit status 1.
"""

import asyncio
import json
import os
import sys
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", ".py-peers"))

import httpx  # noqa: E402
from a2a.client import ClientConfig, ClientFactory  # noqa: E402
from a2a.types.a2a_pb2 import (  # noqa: E402
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
)
from google.protobuf.json_format import MessageToDict  # noqa: E402


def say(doc):
    print(json.dumps(doc), flush=True)


async def main(binding, url, token, text, file=None, name=None, media_type=None):
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    config = ClientConfig(
        streaming=True,
        httpx_client=http,
        supported_protocol_bindings=[binding],
        use_client_preference=True,
    )
    client = await ClientFactory(config).create_from_url(url)
    transport = getattr(client, "_transport", None)
    say({"binding": binding, "url": getattr(transport, "url", None)})
    parts = [Part(text=text)]
    if file:
        with open(file, "rb") as f:
            parts.append(Part(raw=f.read(), filename=name, media_type=media_type))
    request = SendMessageRequest(
        message=Message(
            message_id=str(uuid.uuid4()),
            role=Role.ROLE_USER,
            parts=parts,
        )
    )
    task_id = None
    async for event in client.send_message(request):
        doc = MessageToDict(event)
        say(doc)
        for kind in ("task", "statusUpdate", "artifactUpdate"):
            if kind in doc:
                task_id = doc[kind].get("id") or doc[kind].get("taskId") or task_id
    if task_id:
        task = await client.get_task(GetTaskRequest(id=task_id))
        say({"task": MessageToDict(task)})
    await client.close()
    await http.aclose()


if __name__ == "__main__":
    try:
        asyncio.run(main(*sys.argv[1:8]))
    except Exception as e:  # the test reads what failed
        say({"error": str(e), "type": type(e).__name__})
        sys.exit(1)
