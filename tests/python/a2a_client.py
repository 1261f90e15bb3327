"""Drive worldd with the official A2A Python SDK (1.x): resolve the card, send a message that
runs a tool, read the result, read the task back by its id and fail to cancel it; then the same
through the SDK's 0.3 compatibility transport.

Usage: python3 a2a_client.py BASE_URL TOKEN WORKTREE
"""

import asyncio
import json
import os
import sys
import uuid

import httpx
from a2a.client import ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    TaskState,
)
from a2a.utils.errors import TaskNotCancelableError, TaskNotFoundError
from google.protobuf import json_format, struct_pb2

from _common import check, usage


def request(skill, args, message_id=None):
    data = struct_pb2.Value()
    json_format.ParseDict(args, data)
    msg = Message(message_id=message_id or str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(data=data)])
    req = SendMessageRequest(message=msg)
    req.metadata.update({"skill_id": skill})
    return req


async def send(client, req):
    tasks = []
    async for event in client.send_message(req):
        tasks.append(json_format.MessageToDict(event.task))
    check(len(tasks) == 1, f"expected one task, got {tasks}")
    return tasks[0]


async def read_back(client, task_id, state):
    """GetTask (tasks/get) of a sent task, then CancelTask (tasks/cancel), which no call allows."""
    got = json_format.MessageToDict(await client.get_task(GetTaskRequest(id=task_id)))
    check(got["id"] == task_id and got["status"]["state"] == state, f"get_task: {got}")
    check(got["metadata"]["replayed"] is True, f"get_task ran the call again: {got['metadata']}")
    try:
        await client.cancel_task(CancelTaskRequest(id=task_id))
        check(False, "cancel_task of a committed task succeeded")
    except TaskNotCancelableError:
        pass
    try:
        await client.get_task(GetTaskRequest(id="never-sent"))
        check(False, "get_task of a task never sent succeeded")
    except TaskNotFoundError:
        pass
    return got


async def main(base, token, worktree):
    findings = {}
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30.0)
    factory = ClientFactory(ClientConfig(httpx_client=http, streaming=False))
    client = await factory.create_from_url(base)
    card = client._card
    findings["skills"] = {s.id: list(s.tags) for s in card.skills}
    check(findings["skills"].get("ailang-read") == ["read"], f"skills: {findings['skills']}")
    check(findings["skills"].get("ailang-write") == ["write"], f"skills: {findings['skills']}")

    wrote = await send(client, request("ailang-write", {"path": "a2a.txt", "content": "via a2a\n"}, "a2a-w-1"))
    check(wrote["status"]["state"] == "TASK_STATE_COMPLETED", f"write: {wrote}")
    check(wrote["id"] == "a2a-w-1", f"task id {wrote['id']}")
    check(open(os.path.join(worktree, "a2a.txt")).read() == "via a2a\n", "not written")
    read = await send(client, request("ailang-read", {"path": "a2a.txt"}))
    data = read["artifacts"][0]["parts"][0]["data"]
    check(data["content"] == "via a2a\n", f"read: {data}")
    findings["read"] = data["content"]
    findings["outcome"] = read["metadata"]["outcome"]
    findings["invocation"] = read["metadata"]["invocation_id"]
    again = await send(client, request("ailang-write", {"path": "a2a.txt", "content": "via a2a\n"}, "a2a-w-1"))
    check(again["metadata"]["replayed"] is True, f"a resent message ran again: {again['metadata']}")
    refused = await send(client, request("ailang-read", {"path": "a", "nope": 1}))
    check(refused["status"]["state"] == "TASK_STATE_REJECTED", f"refusal: {refused['status']}")
    got = await read_back(client, "a2a-w-1", "TASK_STATE_COMPLETED")
    findings["gotTask"] = got["metadata"]["invocation_id"]
    await client.close()

    # The 0.3 wire (message/send, kind discriminators) through the SDK's compatibility layer.
    legacy_card = type(card)()
    legacy_card.CopyFrom(card)
    del legacy_card.supported_interfaces[:]
    legacy_card.supported_interfaces.extend(i for i in card.supported_interfaces if i.protocol_version == "0.3")
    client = ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create(legacy_card)
    old = await send(client, request("ailang-read", {"path": "a2a.txt"}))
    check(old["status"]["state"] == "TASK_STATE_COMPLETED", f"0.3: {old}")
    check(old["artifacts"][0]["parts"][0]["data"]["content"] == "via a2a\n", f"0.3: {old}")
    findings["v03"] = old["metadata"]["invocation_id"]
    got = await read_back(client, old["id"], "TASK_STATE_COMPLETED")
    check(got["artifacts"] == old["artifacts"], f"0.3 get_task: {got}")
    await client.close()
    await http.aclose()
    findings["ok"] = True
    print(json.dumps(findings))


if __name__ == "__main__":
    usage(__doc__, 4)
    asyncio.run(main(*sys.argv[1:]))
