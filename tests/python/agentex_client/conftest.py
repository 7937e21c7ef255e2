"""Shared fixtures of the /agentex suite: a real sessiond and the official `agentex-client`
pointed at it with strict response validation, so every answer must satisfy the client's models.
"""

import json
import os
import urllib.error
import urllib.request
import uuid

import pytest
from agentex import Agentex

from sessiond_server import WORKSPACE, Server, wait_for

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
FAKE_CLI = os.path.join(ROOT, "tests", "fixtures", "fake-cli.sh")
GENERIC_FIXTURE = os.path.join(ROOT, "tests", "fixtures", "generic.jsonl")

# The fake agent CLI is the one program agents may run (deployments name it).
POLICY = f'[policy]\nprograms = ["{FAKE_CLI}"]\n'

__all__ = ["WORKSPACE", "wait_for", "client_for", "raw", "unique", "agent", "FAKE_CLI", "GENERIC_FIXTURE"]


def client_for(server, key=None, **kwargs):
    """The official client as a user constructs it, with strict response validation and no
    retries (a retried failure would hide a wrong first answer)."""
    return Agentex(
        api_key=server.key if key is None else key,
        base_url=server.url("/agentex"),
        _strict_response_validation=True,
        max_retries=0,
        **kwargs,
    )


def raw(server, method, path, body=None, key=None):
    """A plain HTTP call (for the other API families): `(status, json body)`."""
    req = urllib.request.Request(server.url(path), method=method)
    req.add_header("Authorization", f"Bearer {key or server.key}")
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, data, timeout=60) as res:
            text = res.read()
            return res.status, json.loads(text) if text else None
    except urllib.error.HTTPError as e:
        text = e.read()
        return e.code, json.loads(text) if text else None


def unique(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def agent(client, name=None, **kwargs):
    """A fresh agent registered through register-build."""
    return client.agents.register_build(name=name or unique("agent"), description=kwargs.pop("description", "test agent"), **kwargs)


def text(content, author="user"):
    return {"type": "text", "author": author, "content": content}


@pytest.fixture(scope="module")
def server():
    s = Server(config=POLICY)
    yield s
    s.close()


@pytest.fixture
def client(server):
    c = client_for(server)
    yield c
    c.close()
