"""Drive a running worldd with the official Python MCP SDK.

Usage: python3 mcp_client.py URL TOKEN WORKTREE

Connects with the bearer header, lists tools, writes, reads and edits a file, and checks that
a plan refusal arrives as a result (not an error). Prints one JSON line of findings and exits
non-zero on any mismatch.
"""

import asyncio
import json
import os
import sys

from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client


def fail(message):
    print(json.dumps({"ok": False, "error": message}))
    sys.exit(1)


async def main(url, token, worktree):
    findings = {}
    headers = {"Authorization": f"Bearer {token}"}
    async with streamablehttp_client(url, headers=headers) as (read, write, _):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            findings["protocolVersion"] = init.protocolVersion
            findings["server"] = init.serverInfo.name

            tools = await session.list_tools()
            names = sorted(t.name for t in tools.tools)
            findings["tools"] = names
            for needed in ("ailang-read", "ailang-write", "ailang-edit"):
                if needed not in names:
                    fail(f"tools/list lacks {needed}: {names}")

            wrote = await session.call_tool(
                "ailang-write", {"path": "src/hello.txt", "content": "hello world\n"}
            )
            if wrote.isError or not wrote.structuredContent.get("ok"):
                fail(f"write failed: {wrote}")
            on_disk = open(os.path.join(worktree, "src/hello.txt")).read()
            if on_disk != "hello world\n":
                fail(f"file on disk is {on_disk!r}")

            edited = await session.call_tool(
                "ailang-edit",
                {"path": "src/hello.txt", "old_text": "world", "new_text": "agents"},
            )
            if edited.isError or not edited.structuredContent.get("ok"):
                fail(f"edit failed: {edited}")

            read_back = await session.call_tool("ailang-read", {"path": "src/hello.txt"})
            content = read_back.structuredContent.get("content")
            if content != "hello agents\n":
                fail(f"read returned {content!r}")
            # The text block is exactly the committed output object.
            if json.loads(read_back.content[0].text) != read_back.structuredContent:
                fail("text and structuredContent differ")
            findings["read"] = content

            refused = await session.call_tool("ailang-read", {"path": "a", "limit": 3})
            if refused.isError:
                fail(f"a plan refusal must be a result, not an error: {refused}")
            findings["refused"] = refused.structuredContent.get("refused")
            if findings["refused"] != 'unknown argument "limit"; ailang-read admits only: path':
                fail(f"unexpected refusal: {findings['refused']!r}")
            if refused.structuredContent["world"]["effects"] != []:
                fail("a plan refusal has no effects")

    findings["ok"] = True
    print(json.dumps(findings))


if __name__ == "__main__":
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    asyncio.run(main(*sys.argv[1:]))
