"""Real agents built with the AgentEx SDK against a real sessiond.

Each agent is a FastACP server started by the test (`uvicorn`, on a free loopback port) with the
SDK's own environment variables, exactly as a person would run it: it registers itself at
`AGENTEX_BASE_URL/agents/register` at start-up (the API key in the URL's user-info), and opens its
port only once registered. The official `agentex-client` then drives the agents through sessiond.
"""

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid

import pytest
from agentex import Agentex

from sessiond_server import WORKSPACE, Server, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
AGENTS = os.path.join(HERE, "agents")

# ACP servers on this machine may register and be called; nothing else.
POLICY = '[policy]\nacp_hosts = ["127.0.0.1"]\n'

__all__ = ["WORKSPACE", "wait_for", "Agent", "client_for", "raw", "unique", "text"]


def unique(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def text(content, author="user"):
    return {"type": "text", "author": author, "content": content}


def client_for(server, key=None):
    return Agentex(
        api_key=server.key if key is None else key,
        base_url=server.url("/agentex"),
        _strict_response_validation=True,
        max_retries=0,
    )


def raw(server, method, path, body=None, headers=None):
    """A plain HTTP call: `(status, json body)`. `headers` replace the default Bearer key."""
    req = urllib.request.Request(server.url(path), method=method)
    for k, v in (headers if headers is not None else {"Authorization": f"Bearer {server.key}"}).items():
        req.add_header(k, v)
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, data, timeout=60) as res:
            body = res.read()
            return res.status, json.loads(body) if body else None
    except urllib.error.HTTPError as e:
        body = e.read()
        return e.code, json.loads(body) if body else None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Agent:
    """An SDK agent process: `module` (in agents/) served by uvicorn, registered as `name`."""

    def __init__(self, server, module, acp_type, name=None, base_url=None, port=None):
        self.server = server
        self.module = module
        self.acp_type = acp_type
        self.name = name or unique(module.replace("_", "-"))
        self.port = port or free_port()
        self.record_path = os.path.join(server._tmp, f"{self.name}.jsonl")
        self.base_url = base_url
        self.proc = None
        self.log = None

    def start(self, wait=True):
        host_port = self.server.base.split("://", 1)[1]
        base_url = self.base_url or f"http://key:{self.server.key}@{host_port}/agentex"
        env = dict(os.environ)
        for k in ("AGENT_ID", "AGENT_API_KEY", "AGENTEX_SDK_API_KEY", "REDIS_URL"):
            env.pop(k, None)
        env.update(
            AGENTEX_BASE_URL=base_url,
            AGENT_NAME=self.name,
            AGENT_DESCRIPTION=f"the {self.module} test agent",
            ACP_URL="http://127.0.0.1",
            ACP_PORT=str(self.port),
            ACP_TYPE=self.acp_type,
            AGENT_RECORD=self.record_path,
            # LiteLLM (an SDK dependency) would fetch its price list from the network first.
            LITELLM_LOCAL_MODEL_COST_MAP="True",
            PYTHONPATH=AGENTS,
        )
        self.log = open(os.path.join(self.server._tmp, f"{self.name}.log"), "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", f"{self.module}:acp", "--host", "127.0.0.1", "--port", str(self.port)],
            cwd=AGENTS,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        if wait:
            wait_for(self.healthy, timeout=60, what=f"agent {self.name} to register and listen")
        return self

    def healthy(self):
        if self.proc.poll() is not None:
            raise AssertionError(f"agent {self.name} exited with {self.proc.returncode}:\n{self.output()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def output(self):
        with open(os.path.join(self.server._tmp, f"{self.name}.log"), "rb") as f:
            return f.read().decode(errors="replace")[-4000:]

    def records(self, method=None):
        try:
            with open(self.record_path) as f:
                lines = [json.loads(l) for l in f if l.strip()]
        except FileNotFoundError:
            return []
        return [r for r in lines if method is None or r["method"] == method]

    def wait_record(self, method, what=None, **match):
        def found():
            return [r for r in self.records(method) if all(r.get(k) == v for k, v in match.items())]

        try:
            return wait_for(found, timeout=30, what=what or f"{method} to reach {self.name}")
        except AssertionError as e:
            raise AssertionError(f"{e}; the agent's log ends with:\n{self.output()}") from None

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.log:
            self.log.close()
            self.log = None


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


@pytest.fixture(scope="module")
def agents(server):
    started = []

    def start(module, acp_type, **kw):
        a = Agent(server, module, acp_type, **kw).start()
        started.append(a)
        return a

    yield start
    for a in started:
        a.stop()
