"""Shared helpers of the client scripts: findings, failure, the authorized transport."""

import json
import sys

import httpx2
from mcp.client.streamable_http import streamable_http_client


def fail(message):
    print(json.dumps({"ok": False, "error": message}))
    sys.exit(1)


def check(condition, message):
    if not condition:
        fail(message)


def transport(url, token):
    """Streamable HTTP with the session credential on every request."""
    client = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30.0)
    return streamable_http_client(url, http_client=client)


def usage(doc, argc):
    if len(sys.argv) != argc:
        print(doc, file=sys.stderr)
        sys.exit(2)
