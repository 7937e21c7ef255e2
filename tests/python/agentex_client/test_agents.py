"""Agents through the official client: register-build, retrieve, list, delete; auth and
workspace isolation."""

import json

import agentex
import pytest

from conftest import WORKSPACE, agent, client_for, raw, text, unique


def test_register_build_is_idempotent_by_name(client):
    name = unique("bot")
    first = client.agents.register_build(
        name=name,
        description="first",
        agent_input_type="text",
        registration_metadata={"commit": "abc"},
    )
    second = client.agents.register_build(name=name, description="second")
    assert second.id == first.id
    assert second.name == name
    assert second.description == "second"
    assert second.registration_metadata is None
    assert second.registered_at >= first.registered_at
    assert first.acp_type == "sync"
    assert first.status == "Ready"
    assert first.agent_input_type == "text"
    assert first.registration_metadata == {"commit": "abc"}


def test_an_agent_is_sessionds_agent(server, client):
    a = agent(client)
    status, v1 = raw(server, "GET", f"/v1/ws/{WORKSPACE}/agents/{a.name}")
    assert status == 200
    assert v1["id"] == a.id and v1["slug"] == a.name
    # An agent made through the Sessions API is an agent here too, its description "".
    slug = unique("plain")
    status, made = raw(server, "POST", f"/v1/ws/{WORKSPACE}/agents", {"slug": slug, "name": "Plain"})
    assert status == 201
    seen = client.agents.retrieve_by_name(slug)
    assert seen.id == made["id"] and seen.description == "" and seen.acp_type == "sync"


def test_retrieve_by_id_and_name(client):
    a = agent(client)
    assert client.agents.retrieve(a.id).name == a.name
    assert client.agents.retrieve_by_name(a.name).id == a.id
    with pytest.raises(agentex.NotFoundError):
        client.agents.retrieve("01a230e0-0000-7000-8000-000000000000")
    with pytest.raises(agentex.NotFoundError):
        client.agents.retrieve_by_name(unique("nobody"))


def test_register_build_refuses_bad_names(client):
    with pytest.raises(agentex.BadRequestError) as e:
        client.agents.register_build(name="Not A Slug", description="x")
    assert "name" in str(e.value)


def test_list_filters_orders_and_pages(client):
    marker = unique("card")
    made = [
        agent(client, name=f"{marker}-{i}", registration_metadata={"agent_card": {"metadata": {"tag": marker, "i": i}}})
        for i in range(3)
    ]
    tagged = client.agents.list(agent_card_metadata=json.dumps({"tag": marker}))
    assert sorted(a.id for a in tagged) == sorted(a.id for a in made)
    one = client.agents.list(agent_card_metadata=json.dumps({"tag": marker, "i": 1}))
    assert [a.id for a in one] == [made[1].id]
    assert client.agents.list(agent_card_metadata=json.dumps({"tag": "none-" + marker})) == []
    by_name = client.agents.list(agent_card_metadata=json.dumps({"tag": marker}), order_by="name", order_direction="asc")
    assert [a.name for a in by_name] == [f"{marker}-{i}" for i in range(3)]
    pages = [
        client.agents.list(agent_card_metadata=json.dumps({"tag": marker}), order_by="name", order_direction="asc", limit=2, page_number=n)
        for n in (1, 2, 3)
    ]
    assert [[a.name for a in p] for p in pages] == [[f"{marker}-0", f"{marker}-1"], [f"{marker}-2"], []]
    with pytest.raises(agentex.BadRequestError):
        client.agents.list(page_number=0)
    with pytest.raises(agentex.BadRequestError):
        client.agents.list(order_by="secret")


def test_list_by_task(client):
    a = agent(client)
    agent(client)
    task = client.agents.create_task(agent_id=a.id, params={}).result
    assert [x.id for x in client.agents.list(task_id=task.id)] == [a.id]


def test_delete_by_id_and_by_name(client):
    a = agent(client)
    gone = client.agents.delete(a.id)
    assert gone.id == a.id and a.id in gone.message
    with pytest.raises(agentex.NotFoundError):
        client.agents.retrieve(a.id)
    b = agent(client)
    gone = client.agents.delete_by_name(b.name)
    assert gone.id == b.id
    with pytest.raises(agentex.NotFoundError):
        client.agents.delete_by_name(b.name)


def test_an_agent_with_tasks_or_the_root_agent_is_not_deleted(client):
    a = agent(client)
    client.agents.create_task(agent_id=a.id, params={})
    with pytest.raises(agentex.ConflictError):
        client.agents.delete(a.id)
    assert client.agents.retrieve(a.id).id == a.id
    with pytest.raises(agentex.ConflictError):
        client.agents.delete_by_name("root")


def test_credentials_and_scopes(server):
    anonymous = agentex.Agentex(api_key=None, base_url=server.url("/agentex"), _strict_response_validation=True, max_retries=0)
    with pytest.raises(agentex.AuthenticationError):
        anonymous.agents.list()
    with pytest.raises(agentex.AuthenticationError):
        client_for(server, key="sk_nope_nope").agents.list()
    reader = client_for(server, key=server.token(["sessions:read"]))
    assert any(a.name == "root" for a in reader.agents.list())
    with pytest.raises(agentex.PermissionDeniedError):
        reader.agents.register_build(name=unique("ro"), description="x")
    with pytest.raises(agentex.PermissionDeniedError):
        reader.agents.rpc_by_name("root", method="task/create", params={})


def test_workspaces_are_isolated(server, client):
    mine = agent(client)
    task = client.agents.create_task(agent_id=mine.id, params={"name": unique("iso")}).result
    slug = unique("ws")
    server.cli("workspace", "create", slug)
    other = client_for(server, key=server.cli("app", "create", "--workspace", slug, "--name", "other", "--scope", "sessions"))
    assert mine.id not in [a.id for a in other.agents.list()]
    with pytest.raises(agentex.NotFoundError):
        other.agents.retrieve(mine.id)
    with pytest.raises(agentex.NotFoundError):
        other.agents.retrieve_by_name(mine.name)
    with pytest.raises(agentex.NotFoundError):
        other.tasks.retrieve(task.id)
    with pytest.raises(agentex.NotFoundError):
        other.tasks.retrieve_by_name(task.name)
    with pytest.raises(agentex.NotFoundError):
        other.agents.rpc(mine.id, method="message/send", params={"task_id": task.id, "content": text("hi")})
    assert task.id not in [t.id for t in other.tasks.list()]
    # The same name is free in another workspace, and names another agent there.
    theirs = other.agents.register_build(name=mine.name, description="theirs")
    assert theirs.id != mine.id
