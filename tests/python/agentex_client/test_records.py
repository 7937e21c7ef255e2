"""Messages (added, streamed and revised), states, spans and trackers through the official
client."""

import datetime
import json

import agentex
import pytest

from conftest import WORKSPACE, agent, raw, text, unique, wait_for


@pytest.fixture
def conversation(client):
    """A task with three turns: six messages, user and agent in turn."""
    a = agent(client)
    t = client.agents.create_task(agent_id=a.id, params={}).result
    for word in ("one", "two", "three"):
        client.agents.send_message(agent_id=a.id, params={"task_id": t.id, "content": text(word)})
    return a, t


EXPECTED = ["one", "echo: one", "two", "echo: two", "three", "echo: three"]


def test_messages_list_by_page(client, conversation):
    _, t = conversation
    assert [m.content.content for m in client.messages.list(task_id=t.id)] == EXPECTED[::-1]
    assert [m.content.content for m in client.messages.list(task_id=t.id, order_direction="asc")] == EXPECTED
    pages = [client.messages.list(task_id=t.id, order_direction="asc", limit=4, page_number=n) for n in (1, 2, 3)]
    assert [[m.content.content for m in p] for p in pages] == [EXPECTED[:4], EXPECTED[4:], []]
    users = client.messages.list(task_id=t.id, order_direction="asc", filters=json.dumps([{"content": {"author": "user"}}]))
    assert [m.content.content for m in users] == ["one", "two", "three"]
    not_users = client.messages.list(task_id=t.id, order_direction="asc", filters=json.dumps([{"content": {"author": "user"}, "exclude": True}]))
    assert [m.content.content for m in not_users] == ["echo: one", "echo: two", "echo: three"]
    assert client.messages.list(task_id=t.id, filters=json.dumps([{"streaming_status": "IN_PROGRESS"}])) == []
    with pytest.raises(agentex.BadRequestError):
        client.messages.list(task_id=t.id, filters="{not json")
    with pytest.raises(agentex.NotFoundError):
        client.messages.list(task_id="01a230e0-0000-7000-8000-000000000000")


def test_messages_by_cursor_both_ways(client, conversation):
    _, t = conversation
    seen, cursor = [], None
    while True:
        page = client.messages.list_paginated(task_id=t.id, limit=4, cursor=cursor)
        seen += [m.content.content for m in page.data]
        if not page.has_more:
            assert page.next_cursor is None
            break
        cursor = page.next_cursor
    assert seen == EXPECTED[::-1]
    first = client.messages.list_paginated(task_id=t.id, limit=2, direction="newer")
    assert [m.content.content for m in first.data] == EXPECTED[:2] and first.has_more
    rest = client.messages.list_paginated(task_id=t.id, limit=10, direction="newer", cursor=first.next_cursor)
    assert [m.content.content for m in rest.data] == EXPECTED[2:] and not rest.has_more
    with pytest.raises(agentex.BadRequestError):
        client.messages.list_paginated(task_id=t.id, cursor="forged")


def test_messages_added_by_a_client(server, client, conversation):
    a, t = conversation
    note = client.messages.create(task_id=t.id, content=text("a note for later"))
    assert note.content.author == "user" and note.task_id == t.id
    said = client.messages.create(task_id=t.id, content=text("said on the agent's behalf", author="agent"), streaming_status="DONE")
    assert said.content.author == "agent"
    assert client.messages.retrieve(said.id).content.content == "said on the agent's behalf"
    batch = client.messages.batch.create(task_id=t.id, contents=[text("b1"), text("b2", author="agent")])
    assert [m.content.content for m in batch] == ["b1", "b2"]
    latest = client.messages.list(task_id=t.id, limit=4)
    assert [m.content.content for m in latest] == ["b2", "b1", "said on the agent's behalf", "a note for later"]
    # A note starts no turn: it is context the agent reads with its next message.
    status, page = raw(server, "GET", f"/v1/ws/{WORKSPACE}/agent/sessions/{t.id}/history?limit=500")
    types = [e["event"]["type"] for e in page["events"]]
    assert types.count("turn_started") == 3 and types.count("note_submitted") == 2
    with pytest.raises(agentex.BadRequestError):
        client.messages.create(task_id=t.id, content={"type": "data", "author": "user", "data": {"a": 1}})
    with pytest.raises(agentex.BadRequestError):
        # Only the agent's own text is streamed; a user's words are complete when sent.
        client.messages.create(task_id=t.id, content=text("still streaming"), streaming_status="IN_PROGRESS")
    with pytest.raises(agentex.BadRequestError):
        client.messages.batch.create(task_id=t.id, contents=[text("fine"), text("")])
    assert len(client.messages.list(task_id=t.id)) == 10, "a refused batch adds nothing"
    with pytest.raises(agentex.NotFoundError):
        client.messages.retrieve(f"{t.id}.999999")


def test_messages_revised_by_the_agent(server, client, conversation):
    _, t = conversation
    opened = client.messages.create(task_id=t.id, content=text("", author="agent"), streaming_status="IN_PROGRESS")
    assert opened.streaming_status == "IN_PROGRESS" and opened.content.content == ""
    in_progress = json.dumps([{"streaming_status": "IN_PROGRESS"}])
    assert [m.id for m in client.messages.list(task_id=t.id, filters=in_progress)] == [opened.id]
    done = client.messages.update(opened.id, task_id=t.id, content=text("written in full", author="agent"), streaming_status="DONE")
    assert (done.id, done.streaming_status, done.content.content) == (opened.id, "DONE", "written in full")
    assert done.created_at == opened.created_at and done.updated_at >= opened.updated_at
    assert client.messages.retrieve(opened.id) == done
    assert client.messages.list(task_id=t.id, filters=in_progress) == []
    latest = client.messages.list(task_id=t.id, limit=2)
    assert [m.content.content for m in latest] == ["written in full", "echo: three"]
    assert client.messages.list_paginated(task_id=t.id, limit=1).data == [done]

    one, two = client.messages.batch.create(task_id=t.id, contents=[text("first", author="agent"), text("second", author="agent")])
    revised = client.messages.batch.update(task_id=t.id, updates={one.id: text("first!", author="agent"), two.id: text("second!", author="agent")})
    assert sorted((m.id, m.content.content) for m in revised) == sorted([(one.id, "first!"), (two.id, "second!")])
    assert [m.content.content for m in client.messages.list(task_id=t.id, limit=3)] == ["second!", "first!", "written in full"]

    # The Sessions API's history has every revision as an event of its own, in order.
    status, page = raw(server, "GET", f"/v1/ws/{WORKSPACE}/agent/sessions/{t.id}/history?limit=500")
    assert status == 200
    said = [e["event"]["message"] for e in page["events"] if e["event"]["type"] == "agent_message"]
    assert said[-5:] == ["written in full", "first", "second", "first!", "second!"]

    # Refused: a user's message, content that is not the agent's text, a message of no task.
    count = len(client.messages.list(task_id=t.id, limit=100))
    user = client.messages.list(task_id=t.id, order_direction="asc", limit=1)[0]
    with pytest.raises(agentex.BadRequestError):
        client.messages.update(user.id, task_id=t.id, content=text("rewritten", author="agent"))
    with pytest.raises(agentex.BadRequestError):
        client.messages.update(done.id, task_id=t.id, content={"type": "data", "author": "agent", "data": {}})
    with pytest.raises(agentex.NotFoundError):
        client.messages.update(f"{t.id}.999999", task_id=t.id, content=text("x", author="agent"))
    with pytest.raises(agentex.BadRequestError):
        client.messages.batch.update(task_id=t.id, updates={one.id: text("x", author="agent"), user.id: text("y", author="agent")})
    assert client.messages.retrieve(one.id).content.content == "first!", "a refused batch changes nothing"
    assert len(client.messages.list(task_id=t.id, limit=100)) == count


def test_states(client, conversation):
    a, t = conversation
    s = client.states.create(agent_id=a.id, task_id=t.id, state={"step": 1})
    assert s.state == {"step": 1} and s.task_id == t.id and s.agent_id == a.id
    with pytest.raises(agentex.ConflictError):
        client.states.create(agent_id=a.id, task_id=t.id, state={"step": 9})
    u = client.states.update(s.id, state={"step": 2})
    assert u.state == {"step": 2} and u.updated_at is not None
    assert client.states.retrieve(s.id).state == {"step": 2}
    assert [x.id for x in client.states.list(task_id=t.id)] == [s.id]
    assert [x.id for x in client.states.list(agent_id=a.id)] == [s.id]
    assert client.states.delete(s.id).id == s.id
    with pytest.raises(agentex.NotFoundError):
        client.states.retrieve(s.id)
    with pytest.raises(agentex.BadRequestError):
        client.states.create(agent_id=a.id, task_id="01a230e0-0000-7000-8000-000000000000", state={})


def test_spans(client, conversation):
    _, t = conversation
    trace = unique("trace")
    start = datetime.datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=datetime.timezone.utc)
    s = client.spans.create(name="plan", start_time=start, trace_id=trace, task_id=t.id, input={"q": "x"}, data=[{"a": 1}])
    assert s.start_time == start and s.task_id == t.id and s.data == [{"a": 1}] and s.end_time is None
    child = client.spans.create(
        id=unique("span"), name="call", start_time=start + datetime.timedelta(seconds=1), trace_id=trace, parent_id=s.id
    )
    end = start + datetime.timedelta(seconds=5)
    u = client.spans.update(s.id, end_time=end, output={"ok": True})
    assert u.end_time == end and u.output == {"ok": True} and u.input == {"q": "x"}
    assert client.spans.retrieve(s.id).end_time == end
    assert [x.id for x in client.spans.list(trace_id=trace, order_by="start_time", order_direction="asc")] == [s.id, child.id]
    assert [x.id for x in client.spans.list(task_id=t.id)] == [s.id]
    with pytest.raises(agentex.ConflictError):
        client.spans.create(id=child.id, name="again", start_time=start, trace_id=trace)
    with pytest.raises(agentex.BadRequestError):
        client.spans.update(s.id, end_time=start - datetime.timedelta(seconds=1))
    with pytest.raises(agentex.NotFoundError):
        client.spans.retrieve(unique("nospan"))


def test_trackers(client, conversation):
    a, t = conversation
    listed = client.tracker.list(task_id=t.id)
    assert [(k.id, k.agent_id, k.task_id) for k in listed] == [(t.id, a.id, t.id)]
    assert listed[0].last_processed_event_id is None
    e = client.agents.send_event(agent_id=a.id, params={"task_id": t.id, "content": text("tick")}).result
    k = client.tracker.update(t.id, last_processed_event_id=e.id, status="PROCESSING")
    assert k.last_processed_event_id == e.id and k.status == "PROCESSING"
    k = client.tracker.update(t.id, status_reason="caught up")
    assert (k.last_processed_event_id, k.status, k.status_reason) == (e.id, "PROCESSING", "caught up")
    assert client.tracker.retrieve(t.id).status_reason == "caught up"
    assert [x.id for x in client.tracker.list(agent_id=a.id)] == [t.id]
    with pytest.raises(agentex.BadRequestError):
        client.tracker.update(t.id, last_processed_event_id="01a230e0-0000-7000-8000-000000000000")
    with pytest.raises(agentex.NotFoundError):
        client.tracker.retrieve("01a230e0-0000-7000-8000-000000000000")
    wait_for(lambda: any(m.content.content == "echo: tick" for m in client.messages.list(task_id=t.id)), what="the event's turn")
