"""The agent RPC through the official client: task/create, message/send (whole and streamed),
event/send, task/cancel and task/interrupt; tasks are sessions of the Sessions API."""

import threading

import agentex
from agentex import Agentex
import pytest

from conftest import WORKSPACE, agent, raw, text, unique, wait_for


def create(client, a, **params):
    return client.agents.create_task(agent_id=a.id, params=params).result


def send(client, a, task_id, content):
    return client.agents.send_message(agent_id=a.id, params={"task_id": task_id, "content": text(content)})


def history(server, task_id):
    status, page = raw(server, "GET", f"/v1/ws/{WORKSPACE}/agent/sessions/{task_id}/history?limit=500")
    assert status == 200, page
    return [e["event"] for e in page["events"]]


def test_task_create_is_get_or_create_by_name(client):
    a = agent(client)
    name = unique("task")
    first = create(client, a, name=name, params={"v": 1}, task_metadata={"owner": "me"})
    assert first.name == name and first.params == {"v": 1} and first.task_metadata == {"owner": "me"}
    assert first.status == "RUNNING"
    again = create(client, a, name=name, params={"v": 2}, task_metadata={"owner": "you"})
    assert again.id == first.id
    assert again.params == {"v": 2}, "params overwrite on get-or-create"
    assert again.task_metadata == {"owner": "me"}, "task_metadata applies only at creation"
    kept = create(client, a, name=name)
    assert kept.params == {"v": 2}
    assert create(client, a).id != create(client, a).id, "without a name every call is a new task"


def test_concurrent_get_or_create_makes_one_task(client):
    a = agent(client)
    name = unique("race")
    ids = []
    threads = [threading.Thread(target=lambda: ids.append(create(client, a, name=name).id)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(ids) == 8 and len(set(ids)) == 1


def test_a_task_name_of_another_agent_is_refused(client):
    a, b = agent(client), agent(client)
    name = unique("mine")
    mine = create(client, a, name=name, params={"v": 1})
    r = client.agents.rpc(b.id, method="task/create", params={"name": name, "params": {"v": 2}}, id=5)
    assert r.result is None and r.id == 5
    assert r.error["code"] == -32000 and r.error["data"]["code"] == "task_of_another_agent"
    assert client.tasks.retrieve(mine.id).params == {"v": 1}, "a refused call changes nothing"
    r = client.agents.rpc(b.id, method="message/send", params={"task_name": name, "content": text("hi")})
    assert r.error["data"]["code"] == "task_of_another_agent"


def test_message_send_answers_with_the_agents_messages(server, client):
    a = agent(client)
    task = create(client, a)
    r = send(client, a, task.id, "hello there")
    assert len(r.result) == 1
    m = r.result[0]
    assert m.task_id == task.id and m.streaming_status == "DONE"
    assert m.content.type == "text" and m.content.author == "agent"
    assert m.content.content == "echo: hello there"
    assert client.messages.retrieve(m.id).content.content == "echo: hello there"
    # The same turn, by name and through the low-level RPC.
    r = client.agents.rpc_by_name(a.name, method="message/send", params={"task_id": task.id, "content": text("/reply twice")}, id="req-1")
    assert r.id == "req-1" and r.error is None
    assert [m.content.content for m in r.result] == ["twice"]
    # The task is a session of the Sessions API, on this agent, with the inputs the credential sent.
    status, detail = raw(server, "GET", f"/v1/ws/{WORKSPACE}/agent/sessions/{task.id}")
    assert status == 200 and detail["agent"]["id"] == a.id
    prompts = [e for e in history(server, task.id) if e["type"] == "prompt_submitted"]
    assert [p["prompt"] for p in prompts] == ["hello there", "/reply twice"]
    assert all(p["sender"] == {"kind": "user", "userId": detail["userId"]} for p in prompts)


def test_message_send_without_a_task_opens_one(client):
    a = agent(client)
    r = client.agents.send_message(agent_name=a.name, params={"content": text("first words"), "task_params": {"p": 1}})
    task = client.tasks.retrieve(r.result[0].task_id)
    assert task.params == {"p": 1}
    name = unique("named")
    r = client.agents.send_message(agent_name=a.name, params={"task_name": name, "content": text("one"), "task_params": {"p": 2}})
    task = client.tasks.retrieve_by_name(name)
    assert r.result[0].task_id == task.id and task.params == {"p": 2}
    r = client.agents.send_message(agent_name=a.name, params={"task_name": name, "content": text("two"), "task_params": {"p": 3}})
    assert r.result[0].task_id == task.id
    assert client.tasks.retrieve(task.id).params == {"p": 2}, "task_params apply only when the task is new"
    assert [m.content.content for m in client.messages.list(task_id=task.id, order_direction="asc")] == ["one", "echo: one", "two", "echo: two"]


def test_streamed_message_deltas_join_to_the_scripted_text(client):
    a = agent(client)
    task = create(client, a)
    chunks = list(client.agents.send_message_stream(agent_id=a.id, params={"task_id": task.id, "content": text("/stream 7")}, id=9))
    expected = "".join(f"chunk {i} " for i in range(1, 8))
    updates = [c.result for c in chunks]
    assert all(c.id == 9 and c.error is None for c in chunks)
    assert [u.type for u in updates] == ["start"] + ["delta"] * 7 + ["done"]
    assert {u.index for u in updates} == {0}
    assert "".join(u.delta.text_delta for u in updates if u.type == "delta") == expected
    done = updates[-1].parent_task_message
    assert done.content.content == expected and done.task_id == task.id
    assert client.messages.retrieve(done.id).content.content == expected
    # The whole answer to the same script is the same text.
    assert send(client, a, task.id, "/stream 7").result[0].content.content == expected


def test_a_message_behind_a_running_turn_streams_only_its_own_turn(server, client):
    a = agent(client)
    task = create(client, a)
    client.agents.send_event(agent_id=a.id, params={"task_id": task.id, "content": text("/slow 40\n/stream 25")})
    wait_for(lambda: any(e["type"] == "turn_started" for e in history(server, task.id)), what="the first turn")
    updates = [c.result for c in client.agents.send_message_stream(agent_id=a.id, params={"task_id": task.id, "content": text("/stream 3")})]
    assert [u.type for u in updates] == ["start", "delta", "delta", "delta", "done"]
    assert "".join(u.delta.text_delta for u in updates if u.type == "delta") == "chunk 1 chunk 2 chunk 3 "
    texts = [m.content.content for m in client.messages.list(task_id=task.id, order_direction="asc") if m.content.author == "agent"]
    assert texts == ["".join(f"chunk {i} " for i in range(1, 26)), "chunk 1 chunk 2 chunk 3 "], "the earlier turn ran to its end first"


def test_whole_messages_stream_as_full_updates(client):
    a = agent(client)
    task = create(client, a)
    updates = [c.result for c in client.agents.send_message_stream(agent_id=a.id, params={"task_id": task.id, "content": text("/tool search\n/reply found it")})]
    assert [u.type for u in updates] == ["full", "full", "start", "delta", "done"]
    assert [u.index for u in updates] == [0, 1, 2, 2, 2]
    request, response = updates[0].content, updates[1].content
    assert request.type == "tool_request" and request.name == "search"
    assert response.type == "tool_response" and response.tool_call_id == request.tool_call_id
    assert response.content == "search: ok" and response.is_error is False
    assert updates[-1].parent_task_message.content.content == "found it"


def test_line_separators_inside_json_survive_the_line_readers(client):
    a = agent(client)
    task = create(client, a)
    tricky = "a\u2028b\u2029c\u0085d"
    assert send(client, a, task.id, tricky).result[0].content.content == f"echo: {tricky}"
    updates = [c.result for c in client.agents.send_message_stream(agent_id=a.id, params={"task_id": task.id, "content": text(tricky)})]
    assert updates[-1].parent_task_message.content.content == f"echo: {tricky}"


def test_a_failed_turn_is_an_rpc_error(client):
    a = agent(client)
    task = create(client, a)
    r = client.agents.rpc(a.id, method="message/send", params={"task_id": task.id, "content": text("/fail the model is down")}, id=3)
    assert r.result is None and r.id == 3
    assert r.error["code"] == -32000 and "the model is down" in r.error["message"]
    assert r.error["data"]["code"] == "turn_failed"
    assert client.tasks.retrieve(task.id).status == "RUNNING", "a failed turn does not fail the task"
    assert send(client, a, task.id, "again").result[0].content.content == "echo: again"


def test_a_question_is_answered_by_the_next_message(client):
    a = agent(client)
    task = create(client, a)
    asked = send(client, a, task.id, "/ask Which one? | red | blue").result
    assert len(asked) == 1 and "Which one?" in asked[0].content.content and "- red" in asked[0].content.content
    assert send(client, a, task.id, "blue").result[0].content.content == "answer: blue"


def test_event_send_records_an_event_and_runs_a_turn(server, client):
    a = agent(client)
    task = create(client, a, name=unique("events"))
    e1 = client.agents.send_event(agent_id=a.id, params={"task_id": task.id, "content": text("ping")}).result
    assert e1.task_id == task.id and e1.agent_id == a.id and e1.content.content == "ping"
    wait_for(lambda: any(m.content.content == "echo: ping" for m in client.messages.list(task_id=task.id)), what="the event's answer")
    e2 = client.agents.send_event(agent_name=a.name, params={"task_name": task.name, "content": text("pong")}).result
    assert e2.sequence_id > e1.sequence_id
    assert [e.id for e in client.events.list(task_id=task.id, agent_id=a.id)] == [e1.id, e2.id]
    assert [e.id for e in client.events.list(task_id=task.id, agent_id=a.id, last_processed_event_id=e1.id)] == [e2.id]
    assert client.events.retrieve(e2.id).content.content == "pong"
    bare = client.agents.send_event(agent_id=a.id, params={"task_id": task.id}).result
    assert bare.content is None
    untyped = client.agents.send_event(agent_id=a.id, params={"task_id": task.id, "content": {"author": "user", "content": "no type"}}).result
    assert untyped.content.type == "text"
    assert client.events.list(task_id=task.id, agent_id=a.id)[-1].content.content == "no type"
    r = client.agents.rpc(a.id, method="event/send", params={"content": text("to no one")})
    assert r.error["code"] == -32602


def running_turn(server, client, a):
    """A task whose turn streams slowly for about a minute, once the turn is running."""
    task = create(client, a)
    client.agents.send_event(agent_id=a.id, params={"task_id": task.id, "content": text("/slow 300\n/stream 200")})

    def streaming():
        status, d = raw(server, "GET", f"/v1/ws/{WORKSPACE}/agent/sessions/{task.id}")
        return d["turnStatus"] == "running" and any(e["type"] == "turn_started" for e in history(server, task.id))

    wait_for(streaming, what="the slow turn to start")
    return task


def terminals(server, task_id):
    return [e["type"] for e in history(server, task_id) if e["type"] in ("complete", "interrupted", "ask", "sleep")]


def test_interrupt_stops_the_turn_and_the_task_goes_on(server, client):
    a = agent(client)
    task = running_turn(server, client, a)
    r = client.agents.rpc(a.id, method="task/interrupt", params={"task_id": task.id})
    assert r.error is None and r.result.id == task.id
    wait_for(lambda: client.tasks.retrieve(task.id).status == "INTERRUPTED", what="INTERRUPTED")
    assert terminals(server, task.id) == ["interrupted"]
    # The next message resumes the task.
    assert send(client, a, task.id, "still there?").result[0].content.content == "echo: still there?"
    assert client.tasks.retrieve(task.id).status == "RUNNING"


def test_cancel_stops_the_turn_for_good(server, client):
    a = agent(client)
    task = running_turn(server, client, a)
    cancelled = client.agents.cancel_task(agent_id=a.id, params={"task_id": task.id}).result
    assert cancelled.status == "CANCELED" and cancelled.status_reason
    wait_for(lambda: terminals(server, task.id) == ["interrupted"], what="the turn to stop")
    assert client.tasks.retrieve(task.id).status == "CANCELED"
    r = client.agents.rpc(a.id, method="message/send", params={"task_id": task.id, "content": text("hello?")})
    assert r.result is None and r.error["code"] == -32000 and r.error["data"]["code"] == "task_closed"
    r = client.agents.rpc(a.id, method="event/send", params={"task_id": task.id, "content": text("hello?")})
    assert r.error["data"]["code"] == "task_closed"
    # Cancelling again changes nothing; the task stays cancelled.
    again = client.agents.cancel_task(agent_name=a.name, params={"task_id": task.id}).result
    assert again.status == "CANCELED"
    assert terminals(server, task.id) == ["interrupted"]
    assert not any(m.content.content.startswith("chunk 1 chunk 2") for m in client.messages.list(task_id=task.id) if m.content.type == "text")


def test_cancel_drops_queued_messages(server, client):
    a = agent(client)
    task = running_turn(server, client, a)
    client.agents.send_event(agent_id=a.id, params={"task_id": task.id, "content": text("queued behind the turn")})
    client.agents.cancel_task(agent_id=a.id, params={"task_id": task.id})
    wait_for(lambda: terminals(server, task.id) == ["interrupted"], what="the turn to stop")
    status, d = raw(server, "GET", f"/v1/ws/{WORKSPACE}/agent/sessions/{task.id}")
    assert d["turnStatus"] == "interrupted" and d.get("followUpQueue", []) == []
    assert terminals(server, task.id) == ["interrupted"], "the queued message never ran"


def test_rpc_errors_carry_the_standard_codes(client):
    a = agent(client)
    r = client.agents.rpc(a.id, method="task/cancel", params={}, id=1)
    assert r.error["code"] == -32602 and r.id == 1
    r = client.agents.rpc(a.id, method="task/cancel", params={"task_id": "01a230e0-0000-7000-8000-000000000000"})
    assert r.error["code"] == -32602 and r.error["data"]["code"] == "not_found"
    r = client.agents.rpc(a.id, method="message/send", params={"task_id": create(client, a).id, "content": {"type": "text", "author": "system", "content": "x"}})
    assert r.error["code"] == -32602
    with pytest.raises(agentex.NotFoundError):
        client.agents.rpc(a.id + "0", method="task/create", params={})


def test_a_notification_is_carried_out_and_answered_204_without_a_body(server, client):
    """`jsonrpc="2.0"` without `id` is a JSON-RPC 2.0 notification: no response object. The
    client as users construct it (without strict validation) reads the empty 204 as ""."""
    a = agent(client)
    name = unique("notified")
    plain = Agentex(api_key=server.key, base_url=server.url("/agentex"), max_retries=0)
    try:
        assert plain.agents.rpc(a.id, method="task/create", params={"name": name}, jsonrpc="2.0") == ""
        r = plain.agents.with_raw_response.rpc_by_name(a.name, method="task/delete", params={}, jsonrpc="2.0")
        assert r.status_code == 204 and r.http_response.content == b"", "an error is not answered either"
    finally:
        plain.close()
    assert client.tasks.retrieve_by_name(name).name == name
    # The client's default body (no `jsonrpc`, no `id`) is a call: it is answered.
    r = client.agents.rpc(a.id, method="task/create", params={"name": name})
    assert r.id is None and r.error is None and r.result.name == name


def test_a_body_that_is_not_json_is_refused_415(client):
    a = agent(client)
    name = unique("untyped")
    with pytest.raises(agentex.APIStatusError) as e:
        client.agents.rpc(a.id, method="task/create", params={"name": name}, extra_headers={"Content-Type": "text/plain"})
    assert e.value.status_code == 415 and e.value.body["error"] == "unsupported_media_type"
    with pytest.raises(agentex.NotFoundError):
        client.tasks.retrieve_by_name(name)
