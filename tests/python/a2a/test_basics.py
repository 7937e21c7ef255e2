"""The card, SendMessage and GetTask through the official client; the session they make is the
same session on /v1, with its provenance."""

import pytest

from conftest import WORKSPACE, connect, pb, raw, rpc, run, strict, text_message


def test_card_resolves_with_the_sdk_and_names_its_jsonrpc_interface(server, agent):
    async def go():
        client, http, card = await connect(server, agent)
        await client.close()
        await http.aclose()
        return card

    card = run(go())
    assert card.name == f"Agent {agent}"
    [iface] = card.supported_interfaces
    assert iface.protocol_binding == "JSONRPC"
    assert iface.protocol_version == "1.0"
    assert iface.url == server.url(f"/a2a/{agent}")
    assert card.capabilities.streaming
    assert card.security_schemes["bearer"].http_auth_security_scheme.scheme == "Bearer"
    assert [s.id for s in card.skills] == [agent]
    # The card as served parses strictly as the protocol's AgentCard.
    status, body = raw(server, "GET", f"/a2a/{agent}/.well-known/agent-card.json")
    assert status == 200
    strict(body, pb.AgentCard())
    # The workspace's list of cards has it too.
    status, body = raw(server, "GET", "/a2a")
    assert status == 200
    assert agent in [c["skills"][0]["id"] for c in body["agents"]]


def test_cards_need_a_credential_and_an_existing_agent(server, agent):
    status, body = raw(server, "GET", f"/a2a/{agent}/.well-known/agent-card.json", key="sk-nonsense")
    assert status == 401, body
    status, body = raw(server, "GET", "/a2a/no-such-agent/.well-known/agent-card.json")
    assert status == 404, body
    status, body = raw(server, "POST", "/a2a/no-such-agent", {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {}})
    assert status == 404, body


def test_send_message_runs_a_turn_and_get_task_reads_it(server, agent):
    async def go():
        client, http, _ = await connect(server, agent)
        try:
            out = [r async for r in client.send_message(pb.SendMessageRequest(message=text_message("/reply hello there")))]
            task = out[-1].task
            got = await client.get_task(pb.GetTaskRequest(id=task.id))
            short = await client.get_task(pb.GetTaskRequest(id=task.id, history_length=1))
            return task, got, short
        finally:
            await client.close()
            await http.aclose()

    task, got, short = run(go())
    assert task.status.state == pb.TASK_STATE_COMPLETED
    assert task.context_id == task.id
    assert task.artifacts[0].parts[0].text == "hello there"
    assert got.id == task.id and got.status.state == pb.TASK_STATE_COMPLETED
    assert [m.role for m in got.history] == [pb.ROLE_USER, pb.ROLE_AGENT]
    assert got.history[0].parts[0].text == "/reply hello there"
    assert len(short.history) == 1 and short.history[0].role == pb.ROLE_AGENT
    # The raw result is exactly a Task.
    body = rpc(server, agent, "GetTask", {"id": task.id})
    strict(body["result"], pb.Task())
    # The same session on /v1, started over A2A by the key, recorded as such on /v2.
    status, s = raw(server, "GET", f"/v1/ws/{WORKSPACE}/agent/sessions/{task.id}")
    assert status == 200, s
    status, record = raw(server, "GET", f"/v2/sessions/{task.id}")
    assert status == 200, record
    assert record["source"] == "a2a"


def test_a_message_with_the_task_continues_its_session(server, agent):
    first = rpc(server, agent, "SendMessage", {"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "/reply one"}]}})
    task_id = first["result"]["task"]["id"]
    second = rpc(server, agent, "SendMessage", {"message": {"messageId": "m2", "role": "ROLE_USER", "taskId": task_id, "parts": [{"text": "/reply two"}]}})
    task = strict(second["result"], pb.SendMessageResponse()).task
    assert task.id == task_id
    assert [a.parts[0].text for a in task.artifacts] == ["one", "two"]
    # contextId alone names the task too.
    third = rpc(server, agent, "SendMessage", {"message": {"messageId": "m3", "contextId": task_id, "parts": [{"text": "/reply three"}]}})
    assert third["result"]["task"]["id"] == task_id


def test_tasks_of_other_agents_and_unknown_ids_are_not_found(server, agent):
    other = rpc(server, agent, "SendMessage", {"message": {"messageId": "m", "parts": [{"text": "hi"}]}})
    task_id = other["result"]["task"]["id"]
    status, _ = raw(server, "POST", f"/v1/ws/{WORKSPACE}/agents", {"slug": agent + "-b", "name": "B"})
    assert status in (200, 201)
    for slug, tid in [(agent + "-b", task_id), (agent, "0190d6f0-0000-7000-8000-000000000000"), (agent, "nonsense")]:
        body = rpc(server, slug, "GetTask", {"id": tid})
        assert body["error"]["code"] == -32001, body
        assert "result" not in body


@pytest.mark.parametrize(
    "payload, code",
    [
        (b"{not json", -32700),
        (b"[1, 2]", -32600),
        (b'{"jsonrpc": "1.0", "id": 1, "method": "GetTask"}', -32600),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "NoSuchMethod", "params": {}}', -32601),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": [1]}', -32602),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {"messageId": "m", "parts": []}}}', -32602),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {"messageId": "m", "parts": [{"url": "https://example.com/a.png"}]}}}', -32005),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {}}', -32009),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "GetExtendedAgentCard", "params": {}}', -32007),
    ],
)
def test_malformed_calls_get_the_protocols_errors(server, agent, payload, code):
    status, body = raw(server, "POST", f"/a2a/{agent}", payload)
    assert status == 200, body
    assert body["error"]["code"] == code, body
    assert body["error"]["data"][0]["@type"] == "type.googleapis.com/google.rpc.ErrorInfo"


def test_a_version_other_than_1_0_is_refused(server, agent):
    body = rpc(server, agent, "GetTask", {"id": "x"}, headers={"A2A-Version": "0.3"})
    assert body["error"]["code"] == -32009


def test_a_read_only_key_reads_but_does_not_send(server, agent):
    read_key = server.token(["sessions:read"], name="reader")
    sent = rpc(server, agent, "SendMessage", {"message": {"messageId": "m", "parts": [{"text": "hi"}]}})
    task_id = sent["result"]["task"]["id"]
    assert "result" in rpc(server, agent, "GetTask", {"id": task_id}, key=read_key)
    status, body = raw(server, "POST", f"/a2a/{agent}",
                       {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {"messageId": "m", "parts": [{"text": "hi"}]}}},
                       key=read_key)
    assert status == 403, body
