"""An SDK agent that writes its answer with the SDK's streaming message helper: the message it
opens IN_PROGRESS and then updates with its full text and DONE is one message in `/agentex`,
and its final text is in the Sessions API's history and the Task events API."""

import pytest

from conftest import WORKSPACE, raw, text, unique, wait_for


@pytest.fixture(scope="module")
def worker(agents):
    return agents("streaming_agent", "async")


def test_a_streamed_message_ends_with_its_full_text(server, client, worker):
    a = worker
    task = client.agents.create_task(agent_name=a.name, params={"name": unique("s")}).result
    client.agents.send_event(agent_name=a.name, params={"task_id": task.id, "content": text("hello there")})
    opened = a.wait_record("opened", task_id=task.id)[0]
    assert opened["streaming_status"] == "IN_PROGRESS"
    handled = a.wait_record("handled", task_id=task.id)[0]
    assert handled["message_id"] == opened["message_id"]

    final = "streamed: hello there "
    mine = [m for m in client.messages.list(task_id=task.id) if m.content.author == "agent"]
    assert [(m.id, m.content.content, m.streaming_status) for m in mine] == [(opened["message_id"], final, "DONE")]
    assert client.messages.retrieve(opened["message_id"]).content.content == final

    status, page = raw(server, "GET", f"/v1/ws/{WORKSPACE}/agent/sessions/{task.id}/history?limit=500")
    assert status == 200
    said = [e["event"]["message"] for e in page["events"] if e["event"]["type"] == "agent_message"]
    assert said == [final]
    status, v2 = raw(server, "GET", f"/v2/sessions/{task.id}/events?limit=500")
    assert status == 200
    completed = [e["data"]["text"] for e in v2["events"] if e["type"] == "message.completed"]
    assert completed[-1] == final, completed

    # A second event: a second message, the first one unchanged.
    client.agents.send_event(agent_name=a.name, params={"task_id": task.id, "content": text("again")})
    wait_for(lambda: len(a.records("handled")) >= 2, what="the second event to be handled")
    texts = [m.content.content for m in client.messages.list(task_id=task.id, order_direction="asc") if m.content.author == "agent"]
    assert texts == [final, "streamed: again "]
