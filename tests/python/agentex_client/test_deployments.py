"""Deployments through the official client: engine versions of an agent, promotion to
production and the preview RPC against a deployment's engine."""

import agentex
import pytest

from conftest import FAKE_CLI, GENERIC_FIXTURE, WORKSPACE, agent, raw, text, unique

# A deployment whose engine is the fake agent CLI replaying a recorded run (its answer differs
# from the scripted engine's `echo: …`).
CLI_ENGINE = {"kind": "command", "program": FAKE_CLI, "env": {"FAKE_FIXTURE": GENERIC_FIXTURE}}


def deploy(client, a, engine=None, **kwargs):
    metadata = dict(kwargs.pop("registration_metadata", {}))
    if engine is not None:
        metadata["engine"] = engine
    return client.agents.deployments.create(
        a.id,
        docker_image=kwargs.pop("docker_image", f"registry.local/{a.name}:{unique('v')}"),
        registration_metadata=metadata,
        **kwargs,
    )


def engine_of(server, a):
    status, v1 = raw(server, "GET", f"/v1/ws/{WORKSPACE}/agents/{a.name}")
    assert status == 200
    return v1["engine"]


def test_create_list_retrieve_delete(client):
    a = agent(client)
    d = deploy(client, a, helm_release_name="rel-1", sgp_deploy_id="sgp-1", registration_metadata={"commit_hash": "abc"})
    assert d.agent_id == a.id and d.status == "Ready" and not d.is_production
    assert d.helm_release_name == "rel-1" and d.sgp_deploy_id == "sgp-1"
    assert d.promoted_at is None and d.acp_url is None
    # Without an engine of its own, a deployment carries the agent's engine of the moment.
    assert d.registration_metadata == {"commit_hash": "abc", "engine": {}}
    e = deploy(client, a, engine={"kind": "scripted", "tiers": ["economy"]})
    assert e.registration_metadata["engine"] == {"kind": "scripted", "tiers": ["economy"]}
    assert client.agents.deployments.retrieve(e.id, agent_id=a.id).docker_image == e.docker_image
    assert [x.id for x in client.agents.deployments.list(a.id, order_direction="asc")] == [d.id, e.id]
    assert [x.id for x in client.agents.deployments.list(a.id, limit=1, page_number=2, order_direction="asc")] == [e.id]
    gone = client.agents.deployments.delete(d.id, agent_id=a.id)
    assert gone.id == d.id
    with pytest.raises(agentex.NotFoundError):
        client.agents.deployments.retrieve(d.id, agent_id=a.id)
    other = agent(client)
    with pytest.raises(agentex.NotFoundError):
        client.agents.deployments.retrieve(e.id, agent_id=other.id)


def test_an_engine_the_policy_forbids_is_refused(client):
    a = agent(client)
    with pytest.raises(agentex.BadRequestError) as e:
        deploy(client, a, engine={"kind": "command", "program": "/bin/sh"})
    assert "policy" in str(e.value)
    with pytest.raises(agentex.BadRequestError):
        deploy(client, a, engine={"kind": "teleport"})
    assert client.agents.deployments.list(a.id) == []


def test_promote_makes_exactly_one_production_deployment(server, client):
    a = agent(client)
    first = deploy(client, a, engine={"kind": "scripted", "tiers": ["balanced"]})
    second = deploy(client, a, engine=CLI_ENGINE)
    promoted = client.agents.deployments.promote(first.id, agent_id=a.id)
    assert promoted.is_production and promoted.promoted_at is not None
    assert client.agents.retrieve(a.id).production_deployment_id == first.id
    assert engine_of(server, a) == {"kind": "scripted", "tiers": ["balanced"]}
    promoted = client.agents.deployments.promote(second.id, agent_id=a.id)
    assert promoted.is_production
    production = [d.id for d in client.agents.deployments.list(a.id) if d.is_production]
    assert production == [second.id]
    assert client.agents.retrieve(a.id).production_deployment_id == second.id
    assert engine_of(server, a)["program"] == FAKE_CLI
    # The agent now answers with the promoted engine.
    task = client.agents.create_task(agent_id=a.id, params={}).result
    answer = client.agents.send_message(agent_id=a.id, params={"task_id": task.id, "content": text("count the files")}).result
    assert answer[-1].content.content == "There are 3 files."
    with pytest.raises(agentex.ConflictError):
        client.agents.deployments.delete(second.id, agent_id=a.id)
    client.agents.deployments.delete(first.id, agent_id=a.id)


def test_preview_rpc_runs_a_deployments_engine_without_promoting_it(server, client):
    a = agent(client)
    d = deploy(client, a, engine=CLI_ENGINE)
    created = client.agents.deployments.preview_rpc(d.id, agent_id=a.id, method="task/create", params={"name": unique("preview")})
    task = created.result
    reply = client.agents.deployments.preview_rpc(
        d.id, agent_id=a.id, method="message/send", params={"task_id": task.id, "content": text("count the files")}, id=4
    )
    assert reply.id == 4 and reply.error is None
    kinds = [(m.content.type, m.content.author) for m in reply.result]
    assert kinds == [
        ("reasoning", "agent"),
        ("tool_request", "agent"),
        ("tool_response", "agent"),
        ("tool_request", "agent"),
        ("tool_response", "agent"),
        ("text", "agent"),
    ]
    assert reply.result[0].content.content == ["Thinking about the files."]
    assert reply.result[1].content.arguments == {"dir": "."}
    assert reply.result[2].content.content == "3 files" and reply.result[2].content.is_error is False
    assert reply.result[4].content.content == "no such file" and reply.result[4].content.is_error is True
    assert reply.result[-1].content.content == "There are 3 files."
    # Nothing was promoted: the agent's own tasks still run its engine.
    assert client.agents.retrieve(a.id).production_deployment_id is None
    assert not client.agents.deployments.retrieve(d.id, agent_id=a.id).is_production
    plain = client.agents.send_message(agent_id=a.id, params={"content": text("hi")}).result
    assert plain[0].content.content == "echo: hi"
    # A preview addresses only the tasks it opened.
    r = client.agents.deployments.preview_rpc(
        d.id, agent_id=a.id, method="message/send", params={"task_id": plain[0].task_id, "content": text("x")}
    )
    assert r.result is None and r.error["data"]["code"] == "task_of_another_deployment"
    # The preview's task keeps its engine when reached through the agent's own RPC route.
    again = client.agents.send_message(agent_id=a.id, params={"task_id": task.id, "content": text("once more")}).result
    assert again[-1].content.content == "There are 3 files."


def test_streamed_preview_carries_reasoning_deltas(client):
    a = agent(client)
    d = deploy(client, a, engine=CLI_ENGINE)
    with client.agents.deployments.with_streaming_response.preview_rpc(
        d.id, agent_id=a.id, method="message/send", params={"content": text("go"), "stream": True}
    ) as response:
        assert response.headers["content-type"].startswith("application/x-ndjson")
        lines = [line for line in response.iter_lines() if line.strip()]
    import json

    updates = [json.loads(line)["result"] for line in lines]
    assert updates[0]["type"] == "start" and updates[0]["content"]["type"] == "reasoning"
    assert updates[1]["delta"] == {"type": "reasoning_content", "content_index": 0, "content_delta": "Thinking about "}
    assert updates[2]["type"] == "done" and updates[2]["parent_task_message"]["content"]["content"] == ["Thinking about the files."]
    assert updates[-1]["type"] == "done" and updates[-1]["parent_task_message"]["content"]["content"] == "There are 3 files."
