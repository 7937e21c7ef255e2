"""Shared fixtures of the /mcp suite: a real sessiond and the official `mcp` SDK's client
(`streamable_http_client` + `ClientSession`) connected to it with an API key."""

import contextlib
import json
import os
import urllib.error
import urllib.request
import uuid

import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from sessiond_server import WORKSPACE, Server

__all__ = ["WORKSPACE", "connect", "raw", "unique", "agent_slug"]


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture(scope="module")
def server():
    s = Server()
    yield s
    s.close()


@contextlib.asynccontextmanager
async def connect(server, key=None, message_handler=None):
    """An initialized `ClientSession` on `<server>/mcp`, as a host configures one: the bearer
    credential on every request of its HTTP client."""
    headers = {"Authorization": f"Bearer {server.key if key is None else key}"}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=120)) as http:
        async with streamable_http_client(server.url("/mcp"), http_client=http) as (read, write):
            async with ClientSession(read, write, message_handler=message_handler) as session:
                await session.initialize()
                yield session


def raw(server, method, path, body=None, key=None, headers=None):
    """A plain HTTP call: `(status, headers, json body or None)`."""
    req = urllib.request.Request(server.url(path), method=method)
    req.add_header("Authorization", f"Bearer {key or server.key}")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    data = None
    if body is not None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, data, timeout=60) as res:
            text = res.read()
            return res.status, dict(res.headers), json.loads(text) if text else None
    except urllib.error.HTTPError as e:
        text = e.read()
        return e.code, dict(e.headers), json.loads(text) if text else None


def unique(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def agent_slug(session):
    """The slug of the workspace's first agent, through `list_agents`."""
    listed = await session.call_tool("list_agents", {})
    return listed.structured_content["agents"][0]["slug"]
