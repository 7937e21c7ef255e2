"""The Python suites' own harness: the server fixture starts, answers, and keeps data across a
restart, so a failure in another suite is about that suite."""

import json
import urllib.request

from sessiond_server import WORKSPACE, Server


def call(server, method, path, body=None, key=None):
    req = urllib.request.Request(server.url(path), method=method)
    req.add_header("Authorization", f"Bearer {key or server.key}")
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, data, timeout=30) as res:
        return res.status, json.loads(res.read())


def test_server_starts_and_keeps_sessions_across_restart():
    server = Server()
    try:
        status, health = call(server, "GET", "/healthz")
        assert status == 200 and health["status"] == "ok"
        status, created = call(server, "POST", f"/v1/ws/{WORKSPACE}/agent/sessions", {"prompt": "hello"})
        assert status == 200
        sid = created["session"]["sessionId"]
        server.restart()
        status, detail = call(server, "GET", f"/v1/ws/{WORKSPACE}/agent/sessions/{sid}")
        assert status == 200 and detail["id"] == sid
    finally:
        server.close()


def test_read_only_key_cannot_write():
    server = Server()
    try:
        reader = server.token(["sessions:read"])
        try:
            call(server, "POST", f"/v1/ws/{WORKSPACE}/agent/sessions", {"prompt": "x"}, key=reader)
            raise AssertionError("a read-only key wrote")
        except urllib.error.HTTPError as e:
            assert e.code == 403
    finally:
        server.close()
