"""The Streamable HTTP transport itself, spoken byte by byte: a dropped stream resumed with
`Last-Event-ID`, sessions and credentials, and malformed JSON-RPC (always a JSON-RPC error,
never a 5xx)."""

import http.client
import json
import urllib.parse

import pytest

from conftest import raw, unique

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}},
}
SSE = {"Accept": "application/json, text/event-stream"}


def initialize(server, key=None):
    status, headers, body = raw(server, "POST", "/mcp", INIT, key=key, headers=SSE)
    assert status == 200, body
    assert body["result"]["protocolVersion"] == "2025-11-25"
    sid = {k.lower(): v for k, v in headers.items()}["mcp-session-id"]
    status, _, _ = raw(server, "POST", "/mcp", {"jsonrpc": "2.0", "method": "notifications/initialized"}, key=key, headers={"Mcp-Session-Id": sid})
    assert status == 202
    return sid


def rpc(server, sid, method, params=None, id=2, key=None):
    body = {"jsonrpc": "2.0", "id": id, "method": method, "params": params or {}}
    return raw(server, "POST", "/mcp", body, key=key, headers={"Mcp-Session-Id": sid, **SSE})


class Events:
    """An SSE response read event by event."""

    def __init__(self, conn, res):
        self.conn, self.res = conn, res

    def next(self):
        event = {}
        while True:
            line = self.res.readline()
            if not line:
                return None
            line = line.decode().rstrip("\r\n")
            if line == "":
                if event:
                    return event
                continue
            if line.startswith(":"):
                continue
            field, _, value = line.partition(":")
            event[field] = value[1:] if value.startswith(" ") else value

    def close(self):
        self.conn.close()


def open_stream(server, method, headers, body=None):
    url = urllib.parse.urlsplit(server.url("/mcp"))
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    data = json.dumps(body).encode() if body is not None else None
    all_headers = {"Authorization": f"Bearer {server.key}", **SSE, **headers}
    if data is not None:
        all_headers["Content-Type"] = "application/json"
    conn.request(method, "/mcp", body=data, headers=all_headers)
    res = conn.getresponse()
    assert res.status == 200, res.read()
    assert res.getheader("Content-Type").startswith("text/event-stream")
    return Events(conn, res)


def test_a_dropped_stream_resumes_with_last_event_id(server):
    sid = initialize(server)
    agent = rpc(server, sid, "tools/call", {"name": "list_agents", "arguments": {}})[2]["result"]["structuredContent"]["agents"][0]["slug"]
    call = {
        "jsonrpc": "2.0",
        "id": "call-1",
        "method": "tools/call",
        "params": {
            "name": "create_session",
            "arguments": {"agent": agent, "prompt": "/await_steer"},
            "_meta": {"progressToken": "p-1"},
        },
    }
    stream = open_stream(server, "POST", {"Mcp-Session-Id": sid}, call)
    priming = stream.next()
    assert priming["data"] == "" and priming["id"].endswith("-0")
    first = stream.next()
    progress = json.loads(first["data"])
    assert progress["method"] == "notifications/progress"
    assert progress["params"]["progressToken"] == "p-1"
    last_id = first["id"]
    # The client loses the stream while the turn waits.
    stream.close()

    # The session is found and steered on another request: the turn ends while no one listens.
    listed = rpc(server, sid, "tools/call", {"name": "list_sessions", "arguments": {"limit": 1}})[2]
    session_id = listed["result"]["structuredContent"]["sessions"][0]["id"]
    steered = rpc(server, sid, "tools/call", {"name": "send_message", "arguments": {"sessionId": session_id, "prompt": "go", "wait": False}})[2]
    assert not steered["result"]["isError"]

    resumed = open_stream(server, "GET", {"Mcp-Session-Id": sid, "Last-Event-ID": last_id})
    ids, messages = [], []
    while True:
        e = resumed.next()
        assert e is not None, "the resumed stream ended before the answer"
        ids.append(e["id"])
        messages.append(json.loads(e["data"]))
        if "id" in messages[-1]:
            break
    resumed.close()
    stream_no = last_id.split("-")[0]
    numbers = [int(i.split("-")[1]) for i in ids]
    assert all(i.split("-")[0] == stream_no for i in ids)
    assert numbers == list(range(int(last_id.split("-")[1]) + 1, numbers[-1] + 1))
    answer = messages[-1]
    assert answer["id"] == "call-1"
    out = answer["result"]["structuredContent"]
    assert out["sessionId"] == session_id
    assert out["state"] == "completed" and out["reply"] == "steered: go"
    values = [m["params"]["progress"] for m in messages[:-1]]
    assert values == sorted(values) and (not values or values[0] > progress["params"]["progress"])

    # From the priming id, the whole stream again.
    again = open_stream(server, "GET", {"Mcp-Session-Id": sid, "Last-Event-ID": priming["id"]})
    replay = []
    while (e := again.next()) is not None:
        replay.append(e["id"])
    again.close()
    assert replay == [first["id"], *ids]


def test_sessions_belong_to_their_credential(server):
    sid = initialize(server)
    other_key = server.token(["sessions"], name=unique("other"))
    status, _, body = rpc(server, sid, "tools/list", key=other_key)
    assert status == 404 and body["error"]["code"] == -32600
    status, _, body = rpc(server, "no-such-session", "tools/list")
    assert status == 404
    status, _, body = raw(server, "POST", "/mcp", {"jsonrpc": "2.0", "id": 3, "method": "tools/list"}, headers=SSE)
    assert status == 400 and body["error"]["code"] == -32600
    status, _, body = raw(server, "POST", "/mcp", INIT, key="sk-not-a-key", headers=SSE)
    assert status == 401
    status, _, _ = raw(server, "DELETE", "/mcp", headers={"Mcp-Session-Id": sid})
    assert status == 204
    status, _, _ = rpc(server, sid, "tools/list")
    assert status == 404


@pytest.mark.parametrize(
    "body, status, code",
    [
        (b"{not json", 400, -32700),
        (b"[]", 400, -32600),
        (b'[{"jsonrpc":"2.0","id":1,"method":"ping"}]', 400, -32600),
        (b'"ping"', 400, -32600),
        (b'{"jsonrpc":"1.0","id":1,"method":"ping"}', 400, -32600),
        (b'{"jsonrpc":"2.0","id":{},"method":"ping"}', 400, -32600),
        (b'{"jsonrpc":"2.0","id":1}', 400, -32600),
        (b'{"jsonrpc":"2.0","id":1,"method":7}', 400, -32600),
        (b'{"jsonrpc":"2.0","id":1,"method":"ping","params":[1]}', 400, -32602),
    ],
)
def test_malformed_json_rpc_gets_json_rpc_errors(server, body, status, code):
    sid = initialize(server)
    got, _, answer = raw(server, "POST", "/mcp", body, headers={"Mcp-Session-Id": sid, **SSE})
    assert (got, answer["jsonrpc"], answer["error"]["code"]) == (status, "2.0", code)


def test_requests_the_server_refuses(server):
    sid = initialize(server)
    status, _, body = rpc(server, sid, "no/such/method")
    assert status == 200 and body["error"]["code"] == -32601 and body["id"] == 2
    status, _, body = rpc(server, sid, "tools/call", {"arguments": {}})
    assert body["error"]["code"] == -32602
    status, _, body = rpc(server, sid, "tools/call", {"name": "get_session", "arguments": [1]})
    assert body["error"]["code"] == -32602
    status, _, body = rpc(server, sid, "resources/read", {"uri": "sessiond://sessions/nope"})
    assert body["error"]["code"] == -32002
    # `initialize` again opens another MCP session.
    status, headers, body = rpc(server, sid, "initialize", INIT["params"])
    assert status == 200 and body["result"]["protocolVersion"] == "2025-11-25"
    assert {k.lower(): v for k, v in headers.items()}["mcp-session-id"] != sid
    status, _, body = rpc(server, sid, "ping")
    assert status == 200 and body["result"] == {}
    status, _, body = raw(server, "POST", "/mcp", {"jsonrpc": "2.0", "id": 9, "method": "ping"}, headers={"Mcp-Session-Id": sid, "MCP-Protocol-Version": "1999-01-01"})
    assert status == 400 and body["error"]["code"] == -32600
    # Not JSON: refused by the transport, still as a JSON-RPC error.
    req_headers = {"Mcp-Session-Id": sid, "Content-Type": "text/plain"}
    url = urllib.parse.urlsplit(server.url("/mcp"))
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    conn.request("POST", "/mcp", body=b"{}", headers={"Authorization": f"Bearer {server.key}", **req_headers})
    res = conn.getresponse()
    answer = json.loads(res.read())
    assert res.status == 415 and answer["error"]["code"] == -32600
    conn.close()
    # An older protocol version is agreed to; an unknown one is answered with the newest.
    old = dict(INIT, params=dict(INIT["params"], protocolVersion="2025-06-18"))
    assert raw(server, "POST", "/mcp", old, headers=SSE)[2]["result"]["protocolVersion"] == "2025-06-18"
    new = dict(INIT, params=dict(INIT["params"], protocolVersion="2099-01-01"))
    assert raw(server, "POST", "/mcp", new, headers=SSE)[2]["result"]["protocolVersion"] == "2025-11-25"


def test_a_stream_ends_when_its_key_is_revoked(server):
    name = unique("revoked")
    key = server.token(["sessions"], name=name)
    sid = initialize(server, key=key)
    url = urllib.parse.urlsplit(server.url("/mcp"))
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    conn.request("GET", "/mcp", headers={"Authorization": f"Bearer {key}", "Mcp-Session-Id": sid, **SSE})
    res = conn.getresponse()
    assert res.status == 200
    stream = Events(conn, res)
    assert stream.next()["data"] == ""  # the priming event
    key_id = next(line.split("\t")[0] for line in server.cli("token", "list").splitlines() if f"\t{name}\t" in line)
    server.cli("token", "revoke", key_id)
    # The stream ends (keep-alive comments are skipped by `next`); a new request is refused.
    assert stream.next() is None
    stream.close()
    status, _, _ = rpc(server, sid, "tools/list", key=key)
    assert status == 401
