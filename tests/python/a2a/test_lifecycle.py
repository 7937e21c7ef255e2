"""ListTasks, CancelTask and the input-required round trip through the official client."""

from conftest import WORKSPACE, connect, pb, raw, rpc, run, strict, text_message, wait_for


def send(client, text, task_id=None):
    async def go():
        out = [r async for r in client.send_message(pb.SendMessageRequest(message=text_message(text, task_id)))]
        return out[-1].task
    return go()


def test_list_tasks_pages_through_the_agents_sessions(server, agent):
    async def go():
        client, http, _ = await connect(server, agent)
        try:
            ids = [(await send(client, f"/reply n{i}")).id for i in range(3)]
            page1 = await client.list_tasks(pb.ListTasksRequest(page_size=2))
            page2 = await client.list_tasks(pb.ListTasksRequest(page_size=2, page_token=page1.next_page_token))
            one = await client.list_tasks(pb.ListTasksRequest(context_id=ids[0]))
            done = await client.list_tasks(pb.ListTasksRequest(status=pb.TASK_STATE_COMPLETED, include_artifacts=True))
            return ids, page1, page2, one, done
        finally:
            await client.close()
            await http.aclose()

    ids, page1, page2, one, done = run(go())
    listed = [t.id for t in page1.tasks] + [t.id for t in page2.tasks]
    assert sorted(listed) == sorted(ids)
    assert page1.next_page_token and not page2.next_page_token
    assert [t.id for t in one.tasks] == [ids[0]]
    assert all(t.status.state == pb.TASK_STATE_COMPLETED for t in done.tasks)
    assert all(t.artifacts for t in done.tasks)
    body = rpc(server, agent, "ListTasks", {"pageSize": 2})
    strict(body["result"], pb.ListTasksResponse())
    assert rpc(server, agent, "ListTasks", {"pageSize": 0})["error"]["code"] == -32602
    assert rpc(server, agent, "ListTasks", {"pageToken": "bogus"})["error"]["code"] == -32602


def test_an_agents_question_is_input_required_and_the_next_message_answers_it(server, agent):
    async def go():
        client, http, _ = await connect(server, agent)
        try:
            asked = await send(client, "/ask Which colour? | red | blue")
            answered = await send(client, "blue", asked.id)
            return asked, answered
        finally:
            await client.close()
            await http.aclose()

    asked, answered = run(go())
    assert asked.status.state == pb.TASK_STATE_INPUT_REQUIRED
    assert "Which colour?" in asked.status.message.parts[0].text
    assert answered.id == asked.id
    assert answered.status.state == pb.TASK_STATE_COMPLETED
    assert answered.artifacts[-1].parts[0].text == "answer: blue"
    # On /v1 the answer is the session's answer, authored by the key's owner.
    status, page = raw(server, "GET", f"/v1/ws/{WORKSPACE}/agent/sessions/{asked.id}/history?limit=100")
    assert status == 200
    assert "answer_submitted" in [e["event"]["type"] for e in page["events"]]


def test_cancel_task_interrupts_a_running_turn(server, agent):
    sent = rpc(server, agent, "SendMessage", {
        "message": {"messageId": "m", "parts": [{"text": "/slow 200\n/tool a\n/tool b\n/tool c\n/reply never"}]},
        "configuration": {"returnImmediately": True},
    })
    task_id = sent["result"]["task"]["id"]
    wait_for(lambda: rpc(server, agent, "GetTask", {"id": task_id})["result"]["status"]["state"] == "TASK_STATE_WORKING",
             what="the turn to start")

    async def go():
        client, http, _ = await connect(server, agent)
        try:
            return await client.cancel_task(pb.CancelTaskRequest(id=task_id))
        finally:
            await client.close()
            await http.aclose()

    task = run(go())
    assert task.status.state == pb.TASK_STATE_CANCELED
    assert not task.artifacts
    # A canceled task cannot be canceled again.
    assert rpc(server, agent, "CancelTask", {"id": task_id})["error"]["code"] == -32002


def test_canceling_a_task_waiting_for_input_cancels_it(server, agent):
    sent = rpc(server, agent, "SendMessage", {"message": {"messageId": "m", "parts": [{"text": "/ask Go on? | yes | no"}]}})
    task_id = sent["result"]["task"]["id"]
    assert sent["result"]["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    body = rpc(server, agent, "CancelTask", {"id": task_id})
    assert body["result"]["status"]["state"] == "TASK_STATE_CANCELED", body
