"""What the official A2A Python SDK (1.x) makes of worldd's A2A 1.0 errors: the exception it
raises, its message and its `data` (the SDK keeps only an ErrorInfo's metadata), for a misspelt
skill, a task id reused with other arguments, a task never sent, and an expired credential
(which A2A's -32001 makes a TaskNotFoundError: its data must tell it from a missing task).

Usage: python3 a2a_errors.py BASE_URL TOKEN EXPIRED_TOKEN
"""

import asyncio
import json
import sys

import httpx
from a2a.client import ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import GetTaskRequest, Message, Part, Role, SendMessageRequest
from a2a.utils.errors import A2AError
from google.protobuf import json_format, struct_pb2

from _common import check, usage


def request(skill, args, message_id):
    data = struct_pb2.Value()
    json_format.ParseDict(args, data)
    msg = Message(message_id=message_id, role=Role.ROLE_USER, parts=[Part(data=data)])
    req = SendMessageRequest(message=msg)
    req.metadata.update({"skill_id": skill})
    return req


async def send(client, req):
    return [event async for event in client.send_message(req)]


async def raised(call):
    """The A2A error `call` raises: its class, message and data."""
    try:
        await call
    except A2AError as e:
        return [type(e).__name__, e.message, e.data]
    check(False, "no error was raised")


async def main(base, token, expired):
    findings = {}
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30.0)
    config = ClientConfig(httpx_client=http, streaming=False)
    client = await ClientFactory(config).create_from_url(base)
    findings["misspelt"] = await raised(send(client, request("ailang-reed", {"path": "a"}, "sdk-0")))
    await send(client, request("ailang-read", {"path": "a"}, "sdk-1"))
    findings["conflict"] = await raised(send(client, request("ailang-read", {"path": "b"}, "sdk-1")))
    findings["missingTask"] = await raised(client.get_task(GetTaskRequest(id="never-sent")))
    card = client._card
    await client.close()
    await http.aclose()

    # The same agent once its credential has expired.
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {expired}"}, timeout=30.0)
    client = ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create(card)
    findings["expired"] = await raised(send(client, request("ailang-read", {"path": "a"}, "sdk-2")))
    await client.close()
    await http.aclose()
    findings["ok"] = True
    print(json.dumps(findings))


if __name__ == "__main__":
    usage(__doc__, 4)
    asyncio.run(main(*sys.argv[1:]))
