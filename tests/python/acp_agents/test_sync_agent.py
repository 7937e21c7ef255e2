"""A sync agent built with the AgentEx SDK, registered with sessiond and driven by the official
client: registration, listing, message/send whole and streamed, failure, interrupt, an agent
that is down, and a sessiond restart."""

import threading

import pytest

from conftest import WORKSPACE, client_for, raw, text, unique, wait_for


@pytest.fixture(scope="module")
def echo(agents):
    """One sync agent for the module (an SDK agent takes many seconds to start)."""
    return agents("sync_echo", "sync")


def history(server, task_id):
    status, page = raw(server, "GET", f"/v1/ws/{WORKSPACE}/agent/sessions/{task_id}/history?limit=500")
    assert status == 200, page
    return [e["event"] for e in page["events"]]


def test_registration_lists_the_agent_with_its_acp_type(client, echo):
    a = echo
    found = client.agents.retrieve_by_name(a.name)
    assert found.acp_type == "sync"
    assert found.registered_at is not None
    assert found.description == "the sync_echo test agent"
    assert found.status == "Ready"
    assert a.name in [x.name for x in client.agents.list()]
    # Nothing called the agent while it registered.
    assert a.records("http") == []


def test_message_send_whole_and_streamed(server, client, echo):
    a = echo
    agent = client.agents.retrieve_by_name(a.name)
    task = client.agents.create_task(agent_name=a.name, params={"name": unique("t")}).result
    r = client.agents.send_message(agent_name=a.name, params={"task_id": task.id, "content": text("hello big world")})
    assert r.error is None, r.error
    assert [m.content.content for m in r.result] == ["echo: hello big world"]
    assert r.result[0].content.author == "agent"
    call = a.wait_record("message/send", task_id=task.id)[0]
    assert call["agent_id"] == agent.id and call["acp_type"] == "sync" and call["text"] == "hello big world"
    # Streamed: the agent's deltas arrive as deltas, then the whole message.
    updates = [c.result for c in client.agents.send_message_stream(agent_name=a.name, params={"task_id": task.id, "content": text("one two three")})]
    deltas = "".join(u.delta.text_delta for u in updates if u.type == "delta")
    assert deltas == "echo: one two three", updates
    done = [u for u in updates if u.type in ("done", "full")]
    assert done and done[-1].parent_task_message.content.content == "echo: one two three"
    # The messages of the task, through /agentex and /v1.
    contents = [m.content.content for m in client.messages.list(task_id=task.id, order_direction="asc")]
    assert contents == ["hello big world", "echo: hello big world", "one two three", "echo: one two three"]
    steps = [e["step"]["text"] for e in history(server, task.id) if e["type"] == "step" and e["step"]["type"] == "text"]
    assert steps == ["echo: hello big world", "echo: one two three"]
    # Every call carried the key the agent was issued and a request id.
    calls = a.records("http")
    assert calls and all(c["key_matches"] and c["request_id"] for c in calls)


def test_an_agent_that_fails_fails_the_turn_with_its_reason(client, echo):
    a = echo
    task = client.agents.create_task(agent_name=a.name, params={}).result
    # The low-level call: the client's send_message helper keeps only messages.
    r = client.agents.rpc_by_name(a.name, method="message/send", params={"task_id": task.id, "content": text("boom")}, id=4)
    assert r.result is None and r.id == 4
    assert r.error["data"]["code"] == "turn_failed"
    assert "the echo agent was told to fail" in r.error["message"]
    # The task goes on: the next message is answered.
    r = client.agents.send_message(agent_name=a.name, params={"task_id": task.id, "content": text("again")})
    assert [m.content.content for m in r.result] == ["echo: again"]


def test_an_interrupt_closes_the_agents_stream(server, client, echo):
    a = echo
    task = client.agents.create_task(agent_name=a.name, params={}).result
    updates = []

    def stream():
        for c in client.agents.send_message_stream(agent_name=a.name, params={"task_id": task.id, "content": text("slow")}):
            updates.append(c)

    t = threading.Thread(target=stream)
    t.start()
    a.wait_record("message/send", task_id=task.id, text="slow")
    wait_for(lambda: any(getattr(u.result, "type", None) == "delta" for u in updates), what="the first delta")
    client.tasks.interrupt(task.id)
    a.wait_record("closed", task_id=task.id, what="the agent to see its caller go away")
    t.join(timeout=30)
    assert not t.is_alive()
    assert client.tasks.retrieve(task.id).status == "INTERRUPTED"
    # The partial text is kept.
    steps = [e["step"]["text"] for e in history(server, task.id) if e["type"] == "step" and e["step"]["type"] == "text"]
    assert steps == ["working"]


def test_an_agent_that_is_down_fails_the_turn_after_retries(server, client, echo):
    a = echo
    task = client.agents.create_task(agent_name=a.name, params={}).result
    a.stop()
    r = client.agents.rpc_by_name(a.name, method="message/send", params={"task_id": task.id, "content": text("anyone?")})
    assert r.error["data"]["code"] == "turn_failed"
    assert "cannot be reached" in r.error["message"] and "gave up after" in r.error["message"]
    warnings = [e for e in history(server, task.id) if e["type"] == "system" and "retrying" in e.get("message", "")]
    assert len(warnings) >= 1
    # Back up (same port, registering again): the task is served again.
    a.start()
    r = client.agents.send_message(agent_name=a.name, params={"task_id": task.id, "content": text("back")})
    assert [m.content.content for m in r.result] == ["echo: back"]


def test_registrations_survive_a_restart_of_sessiond(server, echo):
    a = echo
    server.restart()
    c = client_for(server)
    try:
        assert c.agents.retrieve_by_name(a.name).acp_type == "sync"
        task = c.agents.create_task(agent_name=a.name, params={}).result
        r = c.agents.send_message(agent_name=a.name, params={"task_id": task.id, "content": text("after restart")})
        assert [m.content.content for m in r.result] == ["echo: after restart"]
        # Still the key the agent was issued before the restart.
        assert all(x["key_matches"] for x in a.records("http"))
    finally:
        c.close()
