"""The MCP Python SDK 2.x forced to the legacy handshake still works with worldd.

Usage: python3 mcp_legacy.py URL TOKEN WORKTREE

mode="legacy": `initialize` at 2025-11-25, then tools/list and tools/call. A refusal is a
complete result flagged isError, as under every revision; _meta carries the classification.
"""

import asyncio
import json
import os
import sys

from mcp import Client

from _common import check, transport, usage


async def main(url, token, worktree):
    findings = {}
    async with Client(transport(url, token), mode="legacy") as client:
        findings["protocolVersion"] = client.protocol_version
        check(client.protocol_version == "2025-11-25", f"negotiated {client.protocol_version}")
        check(client.session.initialize_result is not None, "no initialize result")
        findings["server"] = client.server_info.name
        names = sorted(t.name for t in (await client.list_tools()).tools)
        check("ailang-write" in names, f"tools: {names}")
        wrote = await client.call_tool("ailang-write", {"path": "legacy.txt", "content": "old\n"})
        check(not wrote.is_error and wrote.structured_content["ok"], f"write failed: {wrote}")
        check(open(os.path.join(worktree, "legacy.txt")).read() == "old\n", "not written")
        findings["outcome"] = wrote.meta["world/outcome"]
        refused = await client.call_tool("ailang-read", {"path": "a", "limit": 3})
        check(refused.is_error is True, "a refusal under a handshake revision is not flagged isError")
        findings["refusedOutcome"] = refused.meta["world/outcome"]
    findings["ok"] = True
    print(json.dumps(findings))


if __name__ == "__main__":
    usage(__doc__, 4)
    asyncio.run(main(*sys.argv[1:]))
