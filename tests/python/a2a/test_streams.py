"""SendStreamingMessage and SubscribeToTask through the official client, and a dropped stream
resumed with Last-Event-ID."""

import json

import httpx

from a2a.client import ClientCallContext

from conftest import connect, pb, rpc, run, strict, text_message, wait_for


def kinds(responses):
    return [r.WhichOneof("payload") for r in responses]


def test_a_streamed_message_reads_as_task_working_reply_completed(server, agent):
    async def go():
        client, http, _ = await connect(server, agent, streaming=True)
        try:
            return [r async for r in client.send_message(pb.SendMessageRequest(message=text_message("/slow 50\n/reply streamed")))]
        finally:
            await client.close()
            await http.aclose()

    out = run(go())
    assert kinds(out)[0] == "task"
    assert kinds(out)[-2:] == ["artifact_update", "status_update"]
    assert pb.TASK_STATE_WORKING in [r.status_update.status.state for r in out if r.HasField("status_update")]
    assert out[-2].artifact_update.artifact.parts[0].text == "streamed"
    assert out[-1].status_update.status.state == pb.TASK_STATE_COMPLETED
    assert {r.status_update.task_id for r in out[1:] if r.HasField("status_update")} == {out[0].task.id}


def sse_events(response):
    """(id, data) of each SSE event of an httpx streaming response."""
    ident, data = None, []
    for line in response.iter_lines():
        if line == "":
            if data:
                yield ident, json.loads("\n".join(data))
            ident, data = None, []
        elif line.startswith("id:"):
            ident = line[3:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())


def test_stream_events_are_strict_stream_responses_with_ids(server, agent):
    body = {"jsonrpc": "2.0", "id": "s1", "method": "SendStreamingMessage",
            "params": {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "/reply raw"}]}}}
    with httpx.stream("POST", server.url(f"/a2a/{agent}"), json=body, timeout=60,
                      headers={"Authorization": f"Bearer {server.key}", "Accept": "text/event-stream"}) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        events = list(sse_events(r))
    assert events[0][0] is None  # the task snapshot is no timeline event
    for ident, data in events:
        assert data["jsonrpc"] == "2.0" and data["id"] == "s1"
        strict(data["result"], pb.StreamResponse())
    assert all(ident and ident.isdigit() for ident, _ in events[1:])
    assert events[-1][1]["result"]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"


def test_subscribe_follows_a_running_task_and_resumes_after_a_dropped_stream(server, agent):
    sent = rpc(server, agent, "SendMessage", {
        "message": {"messageId": "m", "parts": [{"text": "/slow 300\n/tool look\n/reply late"}]},
        "configuration": {"returnImmediately": True},
    })
    task_id = sent["result"]["task"]["id"]
    # Follow the task until its first timeline update, then drop the stream.
    with httpx.stream("POST", server.url(f"/a2a/{agent}"), timeout=60,
                      json={"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask", "params": {"id": task_id}},
                      headers={"Authorization": f"Bearer {server.key}"}) as r:
        assert r.headers["content-type"].startswith("text/event-stream"), r.read()
        seen = []
        for ident, data in sse_events(r):
            seen.append((ident, data))
            if ident:
                break
    assert "task" in seen[0][1]["result"]
    dropped_at = seen[-1][0]
    assert seen[-1][1]["result"]["statusUpdate"]["status"]["state"] == "TASK_STATE_WORKING"

    async def resume():
        client, http, _ = await connect(server, agent, streaming=True)
        try:
            ctx = ClientCallContext(service_parameters={"Last-Event-ID": dropped_at})
            return [r async for r in client.subscribe(pb.SubscribeToTaskRequest(id=task_id), context=ctx)]
        finally:
            await client.close()
            await http.aclose()

    resumed = run(resume())
    assert kinds(resumed)[0] == "task"
    assert resumed[-2].artifact_update.artifact.parts[0].text == "late"
    assert resumed[-1].status_update.status.state == pb.TASK_STATE_COMPLETED


def test_subscribing_to_a_finished_task_is_refused(server, agent):
    sent = rpc(server, agent, "SendMessage", {"message": {"messageId": "m", "parts": [{"text": "/reply done"}]}})
    task_id = sent["result"]["task"]["id"]
    body = rpc(server, agent, "SubscribeToTask", {"id": task_id})
    assert body["error"]["code"] == -32004
