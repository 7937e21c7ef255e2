"""An async agent built with the AgentEx SDK: task/create reaches it, event/send answers at once
and the agent's messages and state written through the API land in the task, cancel reaches it;
its key acts only on its own tasks."""

import pytest

from conftest import WORKSPACE, raw, text, unique, wait_for


@pytest.fixture(scope="module")
def worker(agents):
    """One async agent for the module (an SDK agent takes many seconds to start)."""
    return agents("async_agent", "async")


def test_events_become_the_agents_messages_and_state(server, client, worker):
    a = worker
    agent = client.agents.retrieve_by_name(a.name)
    assert agent.acp_type == "async"
    task = client.agents.create_task(agent_name=a.name, params={"name": unique("t"), "params": {"goal": "count"}}).result
    # task/create was handled before the RPC answered (the SDK answers it after its handler).
    created = a.records("task/create")
    assert [c["task_id"] for c in created] == [task.id] and created[0]["params"] == {"goal": "count"}
    assert created[0]["acp_type"] == "async"
    state = client.states.list(task_id=task.id)
    assert [s.state for s in state] == [{"events": 0}]

    event = client.agents.send_event(agent_name=a.name, params={"task_id": task.id, "content": text("first")}).result
    call = a.wait_record("event/send", task_id=task.id, text="first")[0]
    assert call["event_id"] == event.id
    a.wait_record("handled", task_id=task.id, text="first")
    messages = wait_for(
        lambda: [m for m in client.messages.list(task_id=task.id) if m.content.author == "agent"],
        what="the agent's message",
    )
    assert [m.content.content for m in messages] == ["got: first"]
    assert client.states.list(task_id=task.id)[0].state == {"events": 1}
    # The same message in the Sessions API's history.
    status, page = raw(server, "GET", f"/v1/ws/{WORKSPACE}/agent/sessions/{task.id}/history?limit=500")
    assert status == 200
    said = [e["event"].get("message") for e in page["events"] if e["event"]["type"] == "agent_message"]
    assert said == ["got: first"]
    # A message from the Sessions API reaches the agent as an event too.
    status, _ = raw(server, "POST", f"/v1/ws/{WORKSPACE}/agent/sessions/{task.id}/messages", {"prompt": "from v1"})
    assert status in (200, 202), _
    a.wait_record("handled", task_id=task.id, text="from v1")
    assert client.states.list(task_id=task.id)[0].state == {"events": 2}


def test_cancel_reaches_the_agent(client, worker):
    a = worker
    task = client.agents.create_task(agent_name=a.name, params={}).result
    client.agents.cancel_task(agent_name=a.name, params={"task_id": task.id})
    a.wait_record("task/cancel", task_id=task.id)
    assert client.tasks.retrieve(task.id).status == "CANCELED"
    other = client.agents.create_task(agent_name=a.name, params={}).result
    client.tasks.cancel(other.id)
    a.wait_record("task/cancel", task_id=other.id)


def register(server, name, port, acp_type="sync"):
    status, reg = raw(
        server,
        "POST",
        "/agentex/agents/register",
        {"name": name, "description": "d", "acp_url": f"http://127.0.0.1:{port}", "acp_type": acp_type},
    )
    assert status == 200, reg
    return reg


def test_an_agent_key_acts_only_on_its_own_tasks(server, client, worker):
    a = worker
    # Another agent (registered, never called: sync agents hear nothing of task/create).
    other = register(server, unique("other"), 9)
    mine = client.agents.create_task(agent_name=a.name, params={}).result
    theirs = client.agents.create_task(agent_name=other["name"], params={}).result
    # Registering again by name answers with the same key.
    reg = register(server, a.name, a.port, "async")
    key = {"x-agent-api-key": reg["agent_api_key"]}
    body = {"task_id": mine.id, "content": text("by key", author="agent")}
    status, m = raw(server, "POST", "/agentex/messages", body, headers=key)
    assert status == 200, m
    status, _ = raw(server, "POST", "/agentex/messages", {**body, "task_id": theirs.id}, headers=key)
    assert status == 404
    # It revises its own messages; another agent's are as unknown as a message that does not exist.
    status, revised = raw(server, "PUT", f"/agentex/messages/{m['id']}", {**body, "content": text("by key, revised", author="agent")}, headers=key)
    assert status == 200 and revised["content"]["content"] == "by key, revised", revised
    status, theirs_m = raw(server, "POST", "/agentex/messages", {"task_id": theirs.id, "content": text("theirs", author="agent")})
    assert status == 200, theirs_m
    status, _ = raw(server, "PUT", f"/agentex/messages/{theirs_m['id']}", {"task_id": theirs.id, "content": text("mine now", author="agent")}, headers=key)
    assert status == 404
    status, _ = raw(server, "PUT", "/agentex/messages/batch", {"task_id": theirs.id, "updates": {theirs_m["id"]: text("mine now", author="agent")}}, headers=key)
    assert status == 404
    status, _ = raw(server, "PUT", f"/agentex/messages/{theirs_m['id']}", {"task_id": mine.id, "content": text("mine now", author="agent")}, headers=key)
    assert status == 404
    status, still = raw(server, "GET", f"/agentex/messages/{theirs_m['id']}")
    assert still["content"]["content"] == "theirs"
    status, _ = raw(server, "GET", f"/agentex/tasks/{theirs.id}", headers=key)
    assert status == 404
    status, _ = raw(server, "GET", f"/agentex/tasks/{mine.id}", headers=key)
    assert status == 200
    status, _ = raw(server, "GET", "/agentex/tasks", headers=key)
    assert status == 403
    # Records: its own task's, not another's, and lists only by one of its tasks.
    status, states = raw(server, "GET", f"/agentex/states?task_id={mine.id}", headers=key)
    assert status == 200 and len(states) == 1, states
    status, _ = raw(server, "GET", f"/agentex/states/{states[0]['id']}", headers=key)
    assert status == 200
    status, _ = raw(server, "GET", f"/agentex/states?task_id={theirs.id}", headers=key)
    assert status == 404
    status, _ = raw(server, "GET", "/agentex/states", headers=key)
    assert status == 400
    # Another agent's task is as unknown as a task that does not exist (400 here, like one).
    status, err = raw(server, "POST", "/agentex/states", {"task_id": theirs.id, "agent_id": other["id"], "state": {}}, headers=key)
    assert status == 400 and err["message"] == f"task_id: no task {theirs.id}", err
    status, _ = raw(server, "POST", f"/agentex/agents/name/{a.name}/rpc", {"method": "task/create", "params": {}}, headers=key)
    assert status == 403
    status, _ = raw(server, "GET", f"/agentex/tasks/{mine.id}", headers={"x-agent-api-key": "agx_not-a-key"})
    assert status == 401
    # The key the agent uses is that one: its calls all carried it.
    assert all(c["key_matches"] for c in a.records("http"))


def test_a_message_that_opens_a_task_announces_it_first(client, worker):
    name = unique("opened")
    r = client.agents.rpc_by_name(worker.name, method="message/send", params={"task_name": name, "content": text("hello")})
    assert r.error is None, r.error
    task = client.tasks.retrieve_by_name(name)
    worker.wait_record("handled", task_id=task.id, text="hello")
    mine = [x["method"] for x in worker.records() if x.get("task_id") == task.id]
    assert mine[:2] == ["task/create", "event/send"], mine
