"""Call a tool whose output breaks its own outputSchema with the official Python MCP SDK.

Usage: python3 mcp_output_schema.py URL TOKEN

The SDK validates structuredContent against the tool's outputSchema for every result without
isError, and raised for such a call. Prints one JSON line of findings and exits non-zero on any
mismatch.
"""

import asyncio
import json
import sys

from mcp import Client

from _common import check, fail, transport, usage


async def main(url, token):
    findings = {}
    async with Client(transport(url, token)) as client:
        await client.list_tools()
        fine = await client.call_tool("misfit-do", {"mode": "plain"})
        findings["fine"] = (not fine.is_error) and fine.structured_content.get("ok") is True
        try:
            broken = await client.call_tool("misfit-do", {"mode": "config"})
        except Exception as e:  # the SDK's own validation error, before the fix
            fail(f"call_tool raised {type(e).__name__}: {e}")
        findings["isError"] = broken.is_error
        findings["structured"] = broken.structured_content is not None
        texts = [c.text for c in broken.content]
        check(len(texts) == 2, f"content is {texts!r}")
        findings["outputOk"] = json.loads(texts[0]).get("ok") is True
        findings["ran"] = "ran and its result was committed" in texts[1]
    findings["ok"] = True
    print(json.dumps(findings))


if __name__ == "__main__":
    usage(__doc__, 3)
    asyncio.run(main(*sys.argv[1:]))
