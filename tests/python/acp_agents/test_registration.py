"""`POST /agentex/agents/register` as the SDK sends it, without running an agent (registration
never calls the agent): the answer, re-registration, its credentials and the host policy."""

import base64

from conftest import POLICY, raw, unique
from sessiond_server import Server


def body(name, **kw):
    b = {
        "name": name,
        "description": "registered by hand",
        "acp_url": "http://127.0.0.1:8123",
        "acp_type": "async",
        "principal_context": None,
        "registration_metadata": {"agent_card": {"name": name}},
    }
    b.update(kw)
    return b


def test_the_answer_and_a_re_registration(server, client):
    name = unique("reg")
    status, first = raw(server, "POST", "/agentex/agents/register", body(name))
    assert status == 200, first
    assert first["name"] == name and first["acp_type"] == "async" and first["agent_api_key"].startswith("agx_")
    agent = client.agents.retrieve(first["id"])
    assert agent.registration_metadata == {"agent_card": {"name": name}}
    assert agent.description == "registered by hand"
    # By name again, as an agent does at every start: the same agent and key, the new URL and type.
    status, again = raw(server, "POST", "/agentex/agents/register", body(name, acp_type="sync", acp_url="http://127.0.0.1:8124", description="v2", agent_id=first["id"]))
    assert status == 200, again
    assert again["id"] == first["id"] and again["agent_api_key"] == first["agent_api_key"]
    assert again["acp_type"] == "sync" and again["description"] == "v2"
    assert again["registered_at"] >= first["registered_at"]
    # An agent_id of another agent is refused.
    status, other = raw(server, "POST", "/agentex/agents/register", body(unique("reg")))
    status, err = raw(server, "POST", "/agentex/agents/register", body(name, agent_id=other["id"]))
    assert status == 409, err


def test_credentials_bearer_basic_and_none(server):
    name = unique("cred")
    basic = base64.b64encode(f"key:{server.key}".encode()).decode()
    status, _ = raw(server, "POST", "/agentex/agents/register", body(name), headers={"Authorization": f"Basic {basic}"})
    assert status == 200
    alone = base64.b64encode(f"{server.key}:".encode()).decode()
    status, _ = raw(server, "POST", "/agentex/agents/register", body(name), headers={"Authorization": f"Basic {alone}"})
    assert status == 200
    status, err = raw(server, "POST", "/agentex/agents/register", body(unique("anon")), headers={})
    assert status == 401, err
    status, err = raw(server, "POST", "/agentex/agents/register", body(unique("bad")), headers={"Authorization": "Bearer sk_nope"})
    assert status == 401, err
    read_only = server.token(["sessions:read"], name="ro")
    status, err = raw(server, "POST", "/agentex/agents/register", body(unique("ro")), headers={"Authorization": f"Bearer {read_only}"})
    assert status == 403, err


def test_the_host_policy_and_bad_bodies_change_nothing(server, client):
    for bad in [
        body(unique("far"), acp_url="http://10.1.2.3:8000"),
        body(unique("far"), acp_url="http://localhost:8000"),
        body(unique("far"), acp_url="http://user:pw@127.0.0.1:8000"),
        body(unique("far"), acp_url="file:///etc/passwd"),
        body(unique("typ"), acp_type="temporal"),
        body("Not A Slug"),
        {"name": unique("missing")},
    ]:
        status, err = raw(server, "POST", "/agentex/agents/register", bad)
        assert status == 400, (bad, err)
        assert err["error"] == "invalid_request"
        if "name" in bad and bad["name"] != "Not A Slug":
            assert bad["name"] not in [a.name for a in client.agents.list()]
    status, err = raw(server, "POST", "/agentex/agents/register", body(unique("far"), acp_url="http://10.1.2.3:8000"))
    assert "acp_url" in err["message"] and "policy.acp_hosts" in err["message"]


def test_loopback_registration_only_when_the_policy_allows_it():
    s = Server(config=POLICY + "acp_register_from_loopback = true\n")
    try:
        status, reg = raw(s, "POST", "/agentex/agents/register", body(unique("local")), headers={})
        assert status == 200, reg
        assert reg["agent_api_key"]
    finally:
        s.close()
