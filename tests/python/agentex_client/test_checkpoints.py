"""LangGraph checkpoints (`client.checkpoints`) and workflow queries (`client.tasks.query_workflow`)
through the official client with strict response validation: every method, LangGraph's
checkpointer contract as the AgentEx SDK's HTTP checkpointer uses it (base64 blobs, `upsert` for
special channels, `null` for no checkpoint), a thread as a task (another workspace's, another
agent's or a random one is not found), and bad input refused."""

import base64

import agentex
import pytest
from agentex import Agentex
from agentex.types import CheckpointGetTupleResponse, CheckpointPutResponse

from conftest import POLICY, agent, client_for, raw, unique
from sessiond_server import Server

RANDOM = "01a230e0-0000-7000-8000-000000000000"


@pytest.fixture(scope="module")
def server():
    """This module's server also lets agents register as ACP servers on loopback (they are never
    called: their key is what the tests need)."""
    s = Server(config=POLICY + 'acp_hosts = ["127.0.0.1"]\n')
    yield s
    s.close()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def version(step):
    return f"{step:032}.{0.5:016}"


def put(client, thread, cid, parent=None, ns="", step=0, **kw):
    """A put as the SDK's `HttpCheckpointSaver.aput` sends it: inline primitives in
    `channel_values`, the rest as typed blobs, `empty` for channels without a value."""
    return client.checkpoints.put(
        thread_id=thread,
        checkpoint_ns=ns,
        checkpoint_id=cid,
        parent_checkpoint_id=parent,
        checkpoint={
            "v": 4,
            "id": cid,
            "ts": "2026-01-01T00:00:00+00:00",
            "channel_values": {"step": step},
            "channel_versions": {"messages": version(step), "branch:to:agent": version(step)},
            "versions_seen": {"__input__": {}},
        },
        metadata=kw.pop("metadata", {"source": "loop", "step": step, "parents": {}}),
        blobs=[
            {"channel": "messages", "version": version(step), "type": "msgpack", "blob": b64(bytes([0x92, step, 0xFF]))},
            {"channel": "branch:to:agent", "version": version(step), "type": "empty", "blob": None},
        ],
        **kw,
    )


def task_of(client):
    return client.agents.create_task(agent_id=agent(client).id, params={}).result


def test_every_checkpoint_method_keeps_langgraphs_contract(client):
    thread = task_of(client).id
    assert client.checkpoints.get_tuple(thread_id=thread) is None
    assert client.checkpoints.list(thread_id=thread) == []

    at = put(client, thread, "1f0a-01", step=0, metadata={"source": "input", "step": -1, "parents": {}})
    assert isinstance(at, CheckpointPutResponse)
    assert (at.thread_id, at.checkpoint_ns, at.checkpoint_id) == (thread, "", "1f0a-01")
    put(client, thread, "1f0a-02", parent="1f0a-01", step=1)
    put(client, thread, "1f0a-03", parent="1f0a-02", step=2)
    put(client, thread, "1f0a-07", ns="tools:6f1e", step=0)

    latest = client.checkpoints.get_tuple(thread_id=thread)
    assert isinstance(latest, CheckpointGetTupleResponse)
    assert (latest.checkpoint_id, latest.parent_checkpoint_id, latest.checkpoint_ns) == ("1f0a-03", "1f0a-02", "")
    assert latest.checkpoint["channel_values"] == {"step": 2}
    assert latest.metadata == {"source": "loop", "step": 2, "parents": {}}
    blobs = {b.channel: b for b in latest.blobs}
    assert set(blobs) == {"messages", "branch:to:agent"}
    assert base64.b64decode(blobs["messages"].blob) == bytes([0x92, 2, 0xFF]), "the bytes come back exactly"
    assert (blobs["messages"].type, blobs["messages"].version) == ("msgpack", version(2))
    assert blobs["branch:to:agent"].blob is None and blobs["branch:to:agent"].type == "empty"
    assert latest.pending_writes == []

    first = client.checkpoints.get_tuple(thread_id=thread, checkpoint_id="1f0a-01", checkpoint_ns="")
    assert first.checkpoint_id == "1f0a-01" and first.parent_checkpoint_id is None
    assert base64.b64decode({b.channel: b for b in first.blobs}["messages"].blob) == bytes([0x92, 0, 0xFF])
    assert client.checkpoints.get_tuple(thread_id=thread, checkpoint_id="1f0a-99") is None
    assert client.checkpoints.get_tuple(thread_id=thread, checkpoint_ns="tools:6f1e").checkpoint_id == "1f0a-07"

    ids = lambda items: [c.checkpoint_id for c in items]  # noqa: E731
    assert ids(client.checkpoints.list(thread_id=thread)) == ["1f0a-07", "1f0a-03", "1f0a-02", "1f0a-01"]
    assert ids(client.checkpoints.list(thread_id=thread, checkpoint_ns="")) == ["1f0a-03", "1f0a-02", "1f0a-01"]
    assert ids(client.checkpoints.list(thread_id=thread, checkpoint_ns="", before_checkpoint_id="1f0a-03", limit=1)) == ["1f0a-02"]
    assert ids(client.checkpoints.list(thread_id=thread, filter_metadata={"source": "input"})) == ["1f0a-01"]
    assert ids(client.checkpoints.list(thread_id=thread, checkpoint_ns=None, filter_metadata={"step": 0})) == ["1f0a-07"]
    listed = client.checkpoints.list(thread_id=thread, limit=1)[0]
    assert listed.thread_id == thread and listed.checkpoint_ns == "tools:6f1e" and listed.metadata["step"] == 0

    # Writes as `aput_writes` sends them: an ordinary task's writes once per (task, idx); the
    # special channels (negative idx) with upsert.
    def write(task_id, idx, channel, data, type_="msgpack"):
        return {"task_id": task_id, "idx": idx, "channel": channel, "type": type_, "blob": b64(data), "task_path": "~__pregel_pull, agent"}

    assert client.checkpoints.put_writes(thread_id=thread, checkpoint_id="1f0a-03", checkpoint_ns="", writes=[write("t1", 0, "messages", b"a"), write("t1", 1, "step", b"b")]) is None
    assert client.checkpoints.put_writes(thread_id=thread, checkpoint_id="1f0a-03", writes=[write("t1", 0, "messages", b"replayed")]) is None
    client.checkpoints.put_writes(thread_id=thread, checkpoint_id="1f0a-03", writes=[write("t1", -3, "__interrupt__", b"first", type_=None)], upsert=True)
    client.checkpoints.put_writes(thread_id=thread, checkpoint_id="1f0a-03", writes=[write("t1", -3, "__interrupt__", b"second", type_=None)], upsert=True)
    pending = client.checkpoints.get_tuple(thread_id=thread).pending_writes
    assert [(w.task_id, w.idx, w.channel, w.type, base64.b64decode(w.blob)) for w in pending] == [
        ("t1", -3, "__interrupt__", None, b"second"),
        ("t1", 0, "messages", "msgpack", b"a"),
        ("t1", 1, "step", "msgpack", b"b"),
    ]
    assert client.checkpoints.get_tuple(thread_id=thread, checkpoint_id="1f0a-02").pending_writes == []

    assert client.checkpoints.delete_thread(thread_id=thread) is None
    assert client.checkpoints.get_tuple(thread_id=thread) is None
    assert client.checkpoints.get_tuple(thread_id=thread, checkpoint_ns="tools:6f1e") is None
    assert client.checkpoints.list(thread_id=thread) == []


def test_bad_input_and_unknown_threads_are_refused(client):
    thread = task_of(client).id
    put(client, thread, "1f0b-01")
    with pytest.raises(agentex.NotFoundError):
        client.checkpoints.list(thread_id=RANDOM)
    with pytest.raises(agentex.NotFoundError):
        client.checkpoints.get_tuple(thread_id="not-a-task")
    with pytest.raises(agentex.NotFoundError):
        put(client, RANDOM, "1f0b-02")
    with pytest.raises(agentex.NotFoundError):
        client.checkpoints.put_writes(thread_id=RANDOM, checkpoint_id="c", writes=[])
    with pytest.raises(agentex.NotFoundError):
        client.checkpoints.delete_thread(thread_id=RANDOM)
    for call, field in [
        (lambda: client.checkpoints.list(thread_id=thread, limit=0), "limit"),
        (lambda: client.checkpoints.list(thread_id=thread, limit=1001), "limit"),
        (lambda: client.checkpoints.list(thread_id=thread, filter_metadata={'a"': 1}), "metadata"),
        (lambda: client.checkpoints.get_tuple(thread_id=thread, checkpoint_id="x" * 1025), "checkpoint_id"),
        (lambda: put(client, thread, ""), "checkpoint_id"),
        (lambda: client.checkpoints.put(thread_id=thread, checkpoint_id="c", checkpoint={}, blobs=[{"channel": "c", "version": "1", "type": "msgpack", "blob": "%%%"}]), "blobs[0]/blob"),
        (lambda: client.checkpoints.put_writes(thread_id=thread, checkpoint_id="1f0b-01", writes=[{"task_id": "t", "idx": 0, "channel": "c", "blob": "no padding"}]), "writes[0]/blob"),
        (lambda: client.checkpoints.put_writes(thread_id=thread, checkpoint_id="1f0b-01", writes=[{"task_id": "t", "idx": 2**40, "channel": "c", "blob": ""}]), "writes[0]/idx"),
    ]:
        with pytest.raises(agentex.BadRequestError) as e:
            call()
        assert e.value.body["error"] == "invalid_request" and field in e.value.body["message"], e.value.body
    assert [c.checkpoint_id for c in client.checkpoints.list(thread_id=thread)] == ["1f0b-01"]
    assert client.checkpoints.get_tuple(thread_id=thread).pending_writes == []


def test_threads_stay_in_their_workspace_and_with_their_agent(server, client):
    thread = task_of(client).id
    put(client, thread, "1f0c-01")
    slug = unique("ws")
    server.cli("workspace", "create", slug)
    other = client_for(server, key=server.cli("app", "create", "--workspace", slug, "--name", "other", "--scope", "sessions"))
    for call in [
        lambda: other.checkpoints.list(thread_id=thread),
        lambda: other.checkpoints.get_tuple(thread_id=thread),
        lambda: put(other, thread, "1f0c-02"),
        lambda: other.checkpoints.put_writes(thread_id=thread, checkpoint_id="1f0c-01", writes=[]),
        lambda: other.checkpoints.delete_thread(thread_id=thread),
        lambda: other.tasks.query_workflow("get_status", task_id=thread),
    ]:
        with pytest.raises(agentex.NotFoundError):
            call()
    assert [c.checkpoint_id for c in client.checkpoints.list(thread_id=thread)] == ["1f0c-01"]

    # An agent's key (as the SDK's checkpointer sends it) reaches its own tasks' threads only.
    regs = []
    for name in (unique("mine"), unique("theirs")):
        status, reg = raw(server, "POST", "/agentex/agents/register", {"name": name, "description": "d", "acp_url": "http://127.0.0.1:9", "acp_type": "sync"})
        assert status == 200, reg
        regs.append(reg)
    mine, theirs = (client.agents.create_task(agent_id=r["id"], params={}).result.id for r in regs)
    as_agent = Agentex(base_url=server.url("/agentex"), default_headers={"x-agent-api-key": regs[0]["agent_api_key"]}, _strict_response_validation=True, max_retries=0)
    try:
        put(as_agent, mine, "1f0d-01")
        assert as_agent.checkpoints.get_tuple(thread_id=mine).checkpoint_id == "1f0d-01"
        assert [c.checkpoint_id for c in as_agent.checkpoints.list(thread_id=mine)] == ["1f0d-01"]
        as_agent.checkpoints.put_writes(thread_id=mine, checkpoint_id="1f0d-01", writes=[{"task_id": "t", "idx": 0, "channel": "c", "blob": b64(b"x")}])
        assert as_agent.tasks.query_workflow("get_status", task_id=mine) == {"task_id": mine, "query": "get_status", "result": "RUNNING"}
        put(client, theirs, "1f0e-01")
        for call in [
            lambda: as_agent.checkpoints.list(thread_id=theirs),
            lambda: as_agent.checkpoints.get_tuple(thread_id=theirs),
            lambda: put(as_agent, theirs, "1f0e-02"),
            lambda: as_agent.checkpoints.delete_thread(thread_id=theirs),
            lambda: as_agent.tasks.query_workflow("get_status", task_id=theirs),
        ]:
            with pytest.raises(agentex.NotFoundError):
                call()
        assert [c.checkpoint_id for c in client.checkpoints.list(thread_id=theirs)] == ["1f0e-01"]
        as_agent.checkpoints.delete_thread(thread_id=mine)
        assert client.checkpoints.list(thread_id=mine) == []
    finally:
        as_agent.close()


def test_workflow_queries_answer_status_and_state(client):
    a = agent(client)
    t = client.agents.create_task(agent_id=a.id, params={}).result
    for name in ("get_status", "status"):
        assert client.tasks.query_workflow(name, task_id=t.id) == {"task_id": t.id, "query": name, "result": "RUNNING"}
    assert client.tasks.query_workflow("get_state", task_id=t.id)["result"] is None
    client.states.create(task_id=t.id, agent_id=a.id, state={"plan": ["look", "reply"], "turn": 1})
    for name in ("get_state", "state", "current_state"):
        assert client.tasks.query_workflow(name, task_id=t.id) == {"task_id": t.id, "query": name, "result": {"plan": ["look", "reply"], "turn": 1}}
    client.tasks.complete(t.id)
    assert client.tasks.query_workflow("get_status", task_id=t.id)["result"] == "COMPLETED"
    with pytest.raises(agentex.BadRequestError) as e:
        client.tasks.query_workflow("get_graph_mermaid", task_id=t.id)
    assert "get_graph_mermaid" in e.value.body["message"] and "get_status" in e.value.body["message"]
    with pytest.raises(agentex.NotFoundError):
        client.tasks.query_workflow("get_status", task_id=RANDOM)
