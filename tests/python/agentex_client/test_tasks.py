"""Tasks through the official client: retrieve, list with filters, update, final statuses,
interrupt, delete, the live stream, and tasks kept across a restart."""

import json
import threading

import agentex
import pytest

from conftest import WORKSPACE, agent, client_for, raw, text, unique, wait_for
from sessiond_server import Server


def create(client, a, **params):
    return client.agents.create_task(agent_id=a.id, params=params).result


def test_retrieve_by_id_and_name_with_the_agent(client):
    a = agent(client)
    t = create(client, a, name=unique("t"), params={"k": "v"}, task_metadata={"team": "x"})
    got = client.tasks.retrieve(t.id)
    assert got.name == t.name and got.params == {"k": "v"} and got.agents is None
    with_agent = client.tasks.retrieve_by_name(t.name, relationships=["agents"])
    assert with_agent.id == t.id and [x.id for x in with_agent.agents] == [a.id]
    with pytest.raises(agentex.NotFoundError):
        client.tasks.retrieve_by_name(unique("none"))
    with pytest.raises(agentex.NotFoundError):
        client.tasks.retrieve("01a230e0-0000-7000-8000-000000000000")


def test_sessions_of_the_sessions_api_are_tasks(server, client):
    status, made = raw(server, "POST", f"/v1/ws/{WORKSPACE}/agent/sessions", {"prompt": "from v1"})
    assert status == 200
    sid = made["session"]["sessionId"]
    t = client.tasks.retrieve(sid)
    assert t.name is None and t.params is None and t.status == "RUNNING"
    wait_for(lambda: any(m.content.content == "echo: from v1" for m in client.messages.list(task_id=sid)), what="the v1 turn")


def test_list_filters_and_the_lean_form(client):
    a, b = agent(client), agent(client)
    marker = unique("m")
    ta = [create(client, a, name=f"{marker}-a{i}", params={"secret": i}, task_metadata={"m": marker, "i": i}) for i in range(3)]
    tb = create(client, b, task_metadata={"m": marker})
    listed = client.tasks.list(agent_id=a.id)
    assert sorted(t.id for t in listed) == sorted(t.id for t in ta)
    assert all(not hasattr(t, "params") or getattr(t, "params", None) is None for t in listed)
    assert [t.id for t in client.tasks.list(agent_name=b.name)] == [tb.id]
    meta = client.tasks.list(task_metadata=json.dumps({"m": marker}), order_by="name", order_direction="asc")
    # Unnamed tasks sort first by name.
    assert [t.id for t in meta] == [tb.id] + [t.id for t in ta]
    assert [t.id for t in client.tasks.list(task_metadata=json.dumps({"m": marker, "i": 2}))] == [ta[2].id]
    pages = [client.tasks.list(agent_id=a.id, order_by="name", order_direction="asc", limit=2, page_number=n) for n in (1, 2)]
    assert [[t.name for t in p] for p in pages] == [[ta[0].name, ta[1].name], [ta[2].name]]
    with_agents = client.tasks.list(agent_id=b.id, relationships=["agents"])
    assert with_agents[0].agents[0].id == b.id
    client.agents.cancel_task(agent_id=a.id, params={"task_id": ta[1].id})
    assert [t.id for t in client.tasks.list(agent_id=a.id, status="CANCELED")] == [ta[1].id]
    assert sorted(t.id for t in client.tasks.list(agent_id=a.id, status="RUNNING")) == sorted([ta[0].id, ta[2].id])
    with pytest.raises(agentex.BadRequestError):
        client.tasks.list(status="DELETED")
    with pytest.raises(agentex.BadRequestError):
        client.tasks.list(task_metadata="[1, 2]")


def test_update_merges_params_and_replaces_metadata(client):
    a = agent(client)
    t = create(client, a, name=unique("u"), params={"a": 1, "b": 2}, task_metadata={"x": 1})
    u = client.tasks.update_by_id(t.id, merge_params={"b": 3, "c": 4}, task_metadata={"y": 2})
    assert u.params == {"a": 1, "b": 3, "c": 4} and u.task_metadata == {"y": 2}
    u = client.tasks.update_by_name(t.name, merge_params={"a": None})
    assert u.params == {"a": None, "b": 3, "c": 4} and u.task_metadata == {"y": 2}


def test_final_statuses(server, client):
    a = agent(client)
    finals = [
        (client.tasks.cancel, "CANCELED"),
        (client.tasks.complete, "COMPLETED"),
        (client.tasks.fail, "FAILED"),
        (client.tasks.terminate, "TERMINATED"),
        (client.tasks.timeout, "TIMED_OUT"),
    ]
    for finish, status in finals:
        method = finish.__name__
        t = create(client, a)
        done = finish(t.id, reason=f"because {method}")
        assert done.status == status and done.status_reason == f"because {method}"
        with pytest.raises(agentex.ConflictError):
            client.tasks.complete(t.id)
        r = client.agents.rpc(a.id, method="message/send", params={"task_id": t.id, "content": text("more")})
        assert r.error["data"]["code"] == "task_closed"
        status_, page = raw(server, "GET", f"/v1/ws/{WORKSPACE}/agent/sessions/{t.id}/history")
        said = [e["event"]["message"] for e in page["events"] if e["event"]["type"] == "system"]
        assert said == [f"task {status}: because {method}"], "the status change is on the timeline"


def test_rest_interrupt_of_a_running_turn(server, client):
    a = agent(client)
    t = create(client, a)
    client.agents.send_event(agent_id=a.id, params={"task_id": t.id, "content": text("/slow 300\n/stream 200")})

    def running():
        status, d = raw(server, "GET", f"/v1/ws/{WORKSPACE}/agent/sessions/{t.id}")
        return d["turnStatus"] == "running"

    wait_for(running, what="the turn")
    client.tasks.interrupt(t.id, reason="enough")
    wait_for(lambda: client.tasks.retrieve(t.id).status == "INTERRUPTED", what="INTERRUPTED")
    client.tasks.cancel(t.id)
    with pytest.raises(agentex.ConflictError):
        client.tasks.interrupt(t.id)


def test_delete_by_id_and_name(server, client):
    a = agent(client)
    t = create(client, a, name=unique("d"))
    assert client.tasks.delete(t.id).id == t.id
    with pytest.raises(agentex.NotFoundError):
        client.tasks.retrieve(t.id)
    status, _ = raw(server, "GET", f"/v1/ws/{WORKSPACE}/agent/sessions/{t.id}")
    assert status == 404, "the task was its session"
    t = create(client, a, name=unique("d"))
    assert client.tasks.delete_by_name(t.name).id == t.id
    # The name is free again.
    assert create(client, a, name=t.name).id != t.id


def test_the_stream_carries_updates_status_changes_and_ends_when_final(client):
    a = agent(client)
    t = create(client, a)
    seen = []
    stream = client.tasks.stream_events(t.id)

    def read():
        for event in stream:
            seen.append(event)

    reader = threading.Thread(target=read)
    reader.start()
    wait_for(lambda: seen, what="connected")
    assert seen[0] == {"type": "connected", "taskId": t.id}
    client.agents.send_message(agent_id=a.id, params={"task_id": t.id, "content": text("/stream 3")})
    wait_for(lambda: any(e.get("type") == "done" for e in seen), what="the streamed message")
    kinds = [e["type"] for e in seen[1:]]
    assert kinds == ["full", "start", "delta", "delta", "delta", "done"]
    assert seen[1]["content"] == {"type": "text", "author": "user", "content": "/stream 3", "format": "plain", "style": "static"}
    assert "".join(e["delta"]["text_delta"] for e in seen if e["type"] == "delta") == seen[-1]["parent_task_message"]["content"]["content"]
    client.tasks.cancel(t.id)
    reader.join(timeout=30)
    assert not reader.is_alive(), "the stream ends once the task is final"
    assert seen[-1]["type"] == "task_updated" and seen[-1]["task"]["status"] == "CANCELED"


def test_the_stream_by_name_sees_interrupts(server, client):
    a = agent(client)
    t = create(client, a, name=unique("s"))
    seen = []
    stream = client.tasks.stream_events_by_name(t.name)
    reader = threading.Thread(target=lambda: seen.extend(stream))
    reader.start()
    wait_for(lambda: seen, what="connected")
    client.agents.send_event(agent_id=a.id, params={"task_id": t.id, "content": text("/slow 300\n/stream 100")})
    wait_for(lambda: any(e.get("type") == "delta" for e in seen), what="deltas")
    client.agents.rpc(a.id, method="task/interrupt", params={"task_name": t.name})
    wait_for(lambda: any(e.get("type") == "task_updated" for e in seen), what="task_updated")
    update = next(e for e in seen if e.get("type") == "task_updated")
    assert update["task"]["status"] == "INTERRUPTED"
    # The cut-off message is what the runner keeps of it: the text streamed so far, stored.
    wait_for(lambda: any(e.get("type") == "done" for e in seen), what="done")
    done = next(e for e in seen if e.get("type") == "done")
    streamed = "".join(e["delta"]["text_delta"] for e in seen if e.get("type") == "delta" and e["index"] == done["index"])
    assert streamed and done["parent_task_message"]["content"]["content"] == streamed
    assert client.messages.retrieve(done["parent_task_message"]["id"]).content.content == streamed
    client.tasks.delete(t.id)
    reader.join(timeout=30)
    assert not reader.is_alive() and seen[-1]["type"] == "error"


def test_tasks_survive_a_restart():
    server = Server()
    try:
        client = client_for(server)
        a = agent(client)
        t = create(client, a, name=unique("keep"), params={"p": 1}, task_metadata={"m": 2})
        client.agents.send_message(agent_id=a.id, params={"task_id": t.id, "content": text("before")})
        e = client.agents.send_event(agent_id=a.id, params={"task_id": t.id, "content": text("event")}).result
        wait_for(lambda: len(client.messages.list(task_id=t.id)) == 4, what="the event's answer")
        before = [m.id for m in client.messages.list(task_id=t.id)]
        server.restart()
        client = client_for(server)
        kept = client.tasks.retrieve_by_name(t.name)
        assert (kept.id, kept.params, kept.task_metadata) == (t.id, {"p": 1}, {"m": 2})
        assert [m.id for m in client.messages.list(task_id=t.id)] == before
        assert [x.id for x in client.events.list(task_id=t.id, agent_id=a.id)] == [e.id]
        assert create(client, a, name=t.name).id == t.id
        after = client.agents.send_message(agent_id=a.id, params={"task_id": t.id, "content": text("after")}).result
        assert after[0].content.content == "echo: after"
    finally:
        server.close()
