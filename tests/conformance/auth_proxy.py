#!/usr/bin/env python3
"""TEST TOOL: a loopback proxy that adds `Authorization: Bearer <token>` to every request.

The official MCP conformance runner has no option for a bearer token, and worldd answers every
unauthenticated request 401. This proxy lets the runner's scenarios reach the daemon as an
authenticated client while forwarding every other header, Host and Origin included, byte for
byte (so `dns-rebinding-protection` still tests the daemon's own Host/Origin checks):

    python3 tests/conformance/auth_proxy.py 127.0.0.1:7645 127.0.0.1:7644 "$(cat .world/demo.session)" &
    npx @modelcontextprotocol/conformance server --url http://127.0.0.1:7645/mcp \
        --scenario dns-rebinding-protection

Each connection carries one request (`Connection: close` is added), so every head is rewritten.
"""

import asyncio
import sys


async def pipe(reader, writer):
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    finally:
        writer.close()


async def handle(client_r, client_w, upstream, token):
    head = await client_r.readuntil(b"\r\n\r\n")
    lines = head[:-4].split(b"\r\n")
    kept = [l for l in lines[1:] if not l.lower().startswith((b"authorization:", b"connection:"))]
    head = b"\r\n".join([lines[0], *kept, b"Authorization: Bearer " + token.encode(), b"Connection: close"]) + b"\r\n\r\n"
    host, port = upstream.rsplit(":", 1)
    up_r, up_w = await asyncio.open_connection(host, int(port))
    up_w.write(head)
    await asyncio.gather(pipe(client_r, up_w), pipe(up_r, client_w), return_exceptions=True)


async def main(listen, upstream, token):
    host, port = listen.rsplit(":", 1)
    server = await asyncio.start_server(lambda r, w: handle(r, w, upstream, token), host, int(port))
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
