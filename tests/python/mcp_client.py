"""Drive a running worldd with the official Python MCP SDK (2.x, its default mode).

Usage: python3 mcp_client.py URL TOKEN WORKTREE

Connects with the bearer header, lists tools, writes, reads and edits a file, and checks that
a plan refusal arrives as a result (not a JSON-RPC error). Prints one JSON line of findings and
exits non-zero on any mismatch.
"""

import asyncio
import json
import os
import sys

from mcp import Client

from _common import check, fail, transport, usage


async def main(url, token, worktree):
    findings = {}
    async with Client(transport(url, token)) as client:
        findings["protocolVersion"] = client.protocol_version
        check(client.server_info is not None, "the server did not identify itself")
        findings["server"] = client.server_info.name

        tools = await client.list_tools()
        names = sorted(t.name for t in tools.tools)
        findings["tools"] = names
        for needed in ("ailang-read", "ailang-write", "ailang-edit"):
            check(needed in names, f"tools/list lacks {needed}: {names}")

        wrote = await client.call_tool(
            "ailang-write", {"path": "src/hello.txt", "content": "hello world\n"}
        )
        check(not wrote.is_error and wrote.structured_content.get("ok"), f"write failed: {wrote}")
        on_disk = open(os.path.join(worktree, "src/hello.txt")).read()
        check(on_disk == "hello world\n", f"file on disk is {on_disk!r}")

        edited = await client.call_tool(
            "ailang-edit",
            {"path": "src/hello.txt", "old_text": "world", "new_text": "agents"},
        )
        check(not edited.is_error and edited.structured_content.get("ok"), f"edit failed: {edited}")

        read_back = await client.call_tool("ailang-read", {"path": "src/hello.txt"})
        content = read_back.structured_content.get("content")
        check(content == "hello agents\n", f"read returned {content!r}")
        # The text block is exactly the committed output object.
        check(
            json.loads(read_back.content[0].text) == read_back.structured_content,
            "text and structuredContent differ",
        )
        findings["read"] = content

        # A plan refusal is a complete result, never a JSON-RPC error; its classification
        # rides in _meta beside the committed object.
        refused = await client.call_tool("ailang-read", {"path": "a", "limit": 3})
        findings["refused"] = refused.structured_content.get("refused")
        check(
            findings["refused"] == 'unknown argument "limit"; ailang-read admits only: path',
            f"unexpected refusal: {findings['refused']!r}",
        )
        check(refused.structured_content["world"]["effects"] == [], "a plan refusal has no effects")
        outcome = (refused.meta or {}).get("world/outcome")
        check(
            outcome == {"kind": "refused", "reason": "plan", "retryable": False},
            f"unexpected outcome: {outcome}",
        )

    findings["ok"] = True
    print(json.dumps(findings))


if __name__ == "__main__":
    usage(__doc__, 4)
    asyncio.run(main(*sys.argv[1:]))
