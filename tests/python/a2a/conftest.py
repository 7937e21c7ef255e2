"""Shared fixtures of the /a2a suite: a real sessiond, an agent of its workspace, and the
official `a2a-sdk` client resolved from the agent's card. Every JSON-RPC result this suite reads
raw is parsed with the SDK's own protobuf types strictly (unknown fields refused), so it must be
exactly the protocol's shape."""

import asyncio
import json
import urllib.error
import urllib.request
import uuid

import httpx
import pytest
from google.protobuf import json_format

from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import a2a_pb2 as pb

from sessiond_server import WORKSPACE, Server, wait_for

__all__ = ["WORKSPACE", "wait_for", "pb", "strict", "rpc", "raw", "unique", "connect", "run", "text_message"]


def unique(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def raw(server, method, path, body=None, key=None, headers=None):
    """A plain HTTP call: `(status, json body or None)`."""
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
            return res.status, json.loads(text) if text else None
    except urllib.error.HTTPError as e:
        text = e.read()
        return e.code, json.loads(text) if text else None


def strict(data, message):
    """Parses ProtoJSON into `message` refusing unknown fields: the strict check of a result."""
    return json_format.ParseDict(data, message, ignore_unknown_fields=False)


def rpc(server, slug, method, params, key=None, headers=None):
    """One JSON-RPC call over plain HTTP; returns the response object (HTTP 200 checked)."""
    status, body = raw(
        server, "POST", f"/a2a/{slug}",
        {"jsonrpc": "2.0", "id": 7, "method": method, "params": params},
        key=key, headers=headers,
    )
    assert status == 200, (status, body)
    assert body["jsonrpc"] == "2.0" and body["id"] == 7, body
    return body


def text_message(text, task_id=None):
    m = pb.Message(message_id=str(uuid.uuid4()), role=pb.ROLE_USER, parts=[pb.Part(text=text)])
    if task_id:
        m.task_id = task_id
    return m


def run(coro):
    return asyncio.run(coro)


async def connect(server, slug, streaming=False, key=None):
    """The SDK's client for an agent, from its card, as a user builds it: an httpx client
    carrying the bearer key, the card resolved from the well-known path, the factory's choice of
    transport. Returns `(client, card)`; close with `await client.close()`."""
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {key or server.key}"}, timeout=60)
    card = await A2ACardResolver(http, server.url(f"/a2a/{slug}")).get_agent_card()
    client = ClientFactory(ClientConfig(streaming=streaming, httpx_client=http)).create(card)
    return client, http, card


@pytest.fixture(scope="module")
def server():
    s = Server()
    yield s
    s.close()


@pytest.fixture
def agent(server):
    """A fresh agent (the scripted engine) of the server's workspace: its slug."""
    slug = unique("a2a")
    status, body = raw(server, "POST", f"/v1/ws/{WORKSPACE}/agents", {"slug": slug, "name": f"Agent {slug}"})
    assert status in (200, 201), body
    return slug
