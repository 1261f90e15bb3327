"""The HTTP clients docs/agents.md tells an agent to build, taken from the page itself, must wait
out a call that takes longer than httpx's default 5 s: the daemon may answer a POST after up to
20 s (a handler runs up to 10 s, a call waits behind its episode's running one), and a client
that gives up first loses the answer of a call that runs and commits anyway.

Each client is the page's own `http = ….AsyncClient(…)` statement (from the Python MCP SDK
snippet and the A2A SDK recipe), evaluated here as written, then used to run `ailang-run` on a
program that hangs until the ailang plugin's time limit stops it (about 9.5 s).

Usage: python3 doc_clients_slow_call.py BASE_URL MCP_TOKEN A2A_TOKEN
"""

import ast
import asyncio
import json
import os
import re
import sys
import time
import uuid

import httpx
import httpx2
from a2a.client import ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import Message, Part, Role, SendMessageRequest
from google.protobuf import json_format, struct_pb2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from _common import check, usage

PAGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "agents.md")


def page_client(marker, names):
    """The `http = …` statement of the page's python block holding `marker`, evaluated."""
    text = open(PAGE, encoding="utf-8").read()
    blocks = re.findall(r"^```python[^\n]*\n(.*?)^```", text, re.S | re.M)
    block = [b for b in blocks if marker in b]
    check(len(block) == 1, f"agents.md has {len(block)} python blocks holding {marker!r}")
    # The A2A recipe awaits at the top level, as in an async function's body.
    tree = ast.parse("async def _():\n" + "".join("    " + line + "\n" for line in block[0].splitlines()))
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["http"]:
            return eval(compile(ast.Expression(node.value), "agents.md", "eval"), names)
    check(False, f"no `http = …` in agents.md's python block holding {marker!r}")


async def mcp_run(base, token):
    http = page_client("streamable_http_client", {"httpx2": httpx2, "token": token})
    started = time.monotonic()
    try:
        async with Client(streamable_http_client(base + "/mcp/", http_client=http)) as client:
            r = await client.call_tool("ailang-run", {"path": "hang.ail"})
            return {
                "seconds": time.monotonic() - started,
                "isError": r.is_error,
                "outcome": r.meta["world/outcome"],
                "structured": r.structured_content,
            }
    except BaseException as e:  # an ExceptionGroup from the SDK's task group, or a timeout
        return {"seconds": time.monotonic() - started, "error": f"{type(e).__name__}: {e!r}"[:400]}


async def a2a_run(base, token):
    http = page_client("ClientFactory", {"httpx": httpx, "token": token})
    client = await ClientFactory(ClientConfig(httpx_client=http)).create_from_url(base)
    data = struct_pb2.Value()
    json_format.ParseDict({"path": "hang.ail"}, data)
    msg = Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(data=data)])
    req = SendMessageRequest(message=msg)
    req.metadata.update({"skill_id": "ailang-run"})
    started = time.monotonic()
    try:
        states = []
        async for event in client.send_message(req):
            states.append(json_format.MessageToDict(event.task)["status"]["state"])
        return {"seconds": time.monotonic() - started, "states": states}
    except BaseException as e:
        return {"seconds": time.monotonic() - started, "error": f"{type(e).__name__}: {e!r}"[:400]}
    finally:
        await client.close()


async def main(base, mcp_token, a2a_token):
    got_mcp, got_a2a = await asyncio.gather(mcp_run(base, mcp_token), a2a_run(base, a2a_token))
    check("error" not in got_mcp, f"the page's MCP client lost the answer: {got_mcp}")
    check("error" not in got_a2a, f"the page's A2A client lost the answer: {got_a2a}")
    print(json.dumps({"ok": True, "mcp": got_mcp, "a2a": got_a2a}))


if __name__ == "__main__":
    usage(__doc__, 4)
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
