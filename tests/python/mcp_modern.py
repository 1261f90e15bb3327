"""The MCP Python SDK 2.x in its default mode negotiates 2026-07-28 with worldd.

Usage: python3 mcp_modern.py URL TOKEN WORKTREE

Asserts the negotiated version, the truthful annotations, an exactly-once keyed write (the
second send replays the committed bytes), the named conflict for a reused key, and that a
refusal is a complete result flagged isError with its classification in _meta. Prints one JSON
line of findings.
"""

import asyncio
import json
import os
import sys

from mcp import Client
from mcp.shared.exceptions import MCPError

from _common import check, transport, usage


async def main(url, token, worktree):
    findings = {}
    async with Client(transport(url, token)) as client:
        findings["protocolVersion"] = client.protocol_version
        check(client.protocol_version == "2026-07-28", f"negotiated {client.protocol_version}")
        check(client.session.discover_result is not None, "no server/discover result")
        check(client.session.initialize_result is None, "initialize ran on a 2026-07-28 server")
        findings["server"] = client.server_info.name if client.server_info else None

        tools = {t.name: t for t in (await client.list_tools()).tools}
        read, write = tools["ailang-read"].annotations, tools["ailang-write"].annotations
        check(read.read_only_hint is True and read.destructive_hint is False, f"read: {read}")
        check(read.idempotent_hint is True, f"read: {read}")
        check(write.read_only_hint is False and write.destructive_hint is True, f"write: {write}")
        check(write.idempotent_hint is False, f"write: {write}")

        args = {"path": "once.txt", "content": "exactly once\n"}
        key = {"world/idempotencyKey": "py-write-1"}
        first = await client.call_tool("ailang-write", args, meta=key)
        check(not first.is_error, f"write failed: {first}")
        check(first.result_type == "complete", f"resultType {first.result_type}")
        second = await client.call_tool("ailang-write", args, meta=key)
        check(second.content[0].text == first.content[0].text, "a replay changed the bytes")
        check(second.meta["world/replayed"] is True, f"second send ran again: {second.meta}")
        check(
            second.meta["world/entryIndex"] == first.meta["world/entryIndex"],
            "a replay committed another entry",
        )
        findings["entryIndex"] = first.meta["world/entryIndex"]
        findings["invocationId"] = first.meta["world/invocationId"]
        findings["budgetAfter"] = first.meta["world/effects"][0]["budgetAfter"]
        check(
            open(os.path.join(worktree, "once.txt")).read() == "exactly once\n",
            "the file was not written",
        )

        try:
            await client.call_tool("ailang-write", {"path": "other.txt", "content": ""}, meta=key)
            check(False, "a conflicting reuse of the key was accepted")
        except MCPError as e:
            findings["conflict"] = {"code": e.code, "message": e.message, "data": e.data}
        check(findings["conflict"]["code"] == -32602, f"conflict: {findings['conflict']}")

        refused = await client.call_tool("ailang-read", {"path": "a", "limit": 3})
        check(refused.is_error is True, "a refusal under 2026-07-28 is not flagged isError")
        findings["refusedOutcome"] = refused.meta["world/outcome"]
        check(refused.structured_content["ok"] is False, "the committed object changed")

    findings["ok"] = True
    print(json.dumps(findings))


if __name__ == "__main__":
    usage(__doc__, 4)
    asyncio.run(main(*sys.argv[1:]))
