"""Deployment history and webhook triggers through the official client (strict response
validation), and deliveries to the trigger's URL signed as GitHub and Slack sign them, with
Python's own `hmac`."""

import hashlib
import hmac
import json
import time
import urllib.error
import urllib.request
import uuid

import agentex
import pytest

from conftest import agent, raw, unique


def deliver(url, body, headers):
    """A POST without credentials (what GitHub and Slack send): `(status, json body)`."""
    req = urllib.request.Request(url, data=body.encode(), method="POST")
    req.add_header("Content-Type", "application/json")
    for k, v in headers.items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=60) as res:
            return res.status, json.loads(res.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def github_headers(secret, body, event="issues", delivery=None):
    digest = hmac.new(secret.encode(), body.encode(), hashlib.sha256).hexdigest()
    return {
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
        "X-Hub-Signature-256": f"sha256={digest}",
    }


def slack_headers(secret, body, ts=None):
    ts = str(int(time.time()) if ts is None else ts)
    digest = hmac.new(secret.encode(), f"v0:{ts}:{body}".encode(), hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": f"v0={digest}"}


def test_every_deployment_change_is_in_the_history(client):
    a = agent(client)
    first = client.agents.deployments.create(a.id, docker_image=f"registry.local/{a.name}:1")
    second = client.agents.deployments.create(a.id, docker_image=f"registry.local/{a.name}:2")
    client.agents.deployments.promote(second.id, agent_id=a.id)
    client.agents.deployments.delete(first.id, agent_id=a.id)

    rows = client.deployment_history.list(agent_id=a.id)
    assert [(r.branch_name, r.commit_hash) for r in rows] == [
        ("deleted", first.id),
        ("promoted", second.id),
        ("created", second.id),
        ("created", first.id),
    ]
    for r in rows:
        assert r.agent_id == a.id
        assert r.author_email == "owner@test.local" and r.author_name == "owner@test.local"
        assert r.deployment_timestamp >= r.build_timestamp
        # sessiond's own members, beside the contract's.
        assert r.model_extra["change"] == r.branch_name and r.model_extra["deployment_id"] == r.commit_hash
    assert rows[0].model_extra["docker_image"] == first.docker_image

    by_name = client.deployment_history.list(agent_name=a.name, order_direction="asc", limit=2, page_number=2)
    assert [r.branch_name for r in by_name] == ["promoted", "deleted"]
    built = client.deployment_history.list(agent_id=a.id, order_by="build_timestamp")
    assert len(built) == 4
    one = client.deployment_history.retrieve(rows[1].id)
    assert one == rows[1]

    with pytest.raises(agentex.BadRequestError) as e:
        client.deployment_history.list()
    assert e.value.body["message"].startswith("agent_id")
    with pytest.raises(agentex.BadRequestError):
        client.deployment_history.list(agent_id=a.id, order_by="created_at")
    with pytest.raises(agentex.NotFoundError):
        client.deployment_history.list(agent_name=unique("nobody"))
    with pytest.raises(agentex.NotFoundError):
        client.deployment_history.retrieve(str(uuid.uuid4()))


def test_a_github_trigger_starts_a_task_per_signed_delivery(server, client):
    a = agent(client)
    path = f"github/{unique('cfg')}"
    t = client.webhooks.create_webhook_trigger(agent_name=a.name, forward_path=path, name="acme/widgets")
    assert t.source == "github" and t.agent_name == a.name and t.name == "acme/widgets"
    assert len(t.secret) == 64
    assert t.webhook_path == f"/agents/forward/name/{a.name}/{path}"
    assert t.webhook_url == server.url("/agentex") + t.webhook_path
    assert t.key_id

    body = json.dumps({
        "action": "opened",
        "issue": {"number": 1, "title": "It broke"},
        "repository": {"full_name": "acme/widgets"},
        "sender": {"login": "octocat", "id": 1, "type": "User", "avatar_url": "https://example.com/a.png"},
    })
    delivery = str(uuid.uuid4())
    status, v = deliver(t.webhook_url, body, github_headers(t.secret, body, delivery=delivery))
    assert status == 200 and v["created"] is True, v
    task = client.tasks.retrieve(v["task_id"])
    assert task.name == f"webhook:github:{delivery}"
    assert task.params["webhook"]["event"] == "issues"
    status, record = raw(server, "GET", f"/v2/sessions/{task.id}")
    assert status == 200
    assert record["source"] == "mention" and record["webhook_type"] == "github.issue"
    assert record["webhook_id"] == delivery
    assert record["attribution"]["type"] == "github_user" and record["attribution"]["id"] == "octocat"
    assert record["prompt"] == body

    # Redelivered: the same task. Wrongly signed or unsigned: refused alike, nothing started.
    status, again = deliver(t.webhook_url, body, github_headers(t.secret, body, delivery=delivery))
    assert (status, again["task_id"], again["created"]) == (200, task.id, False)
    before = len(client.tasks.list(agent_id=a.id))
    status, wrong = deliver(t.webhook_url, body, github_headers("not-the-secret-0000", body))
    assert status == 401 and wrong["error"] == "invalid_signature"
    status, unsigned = deliver(t.webhook_url, body, {"X-GitHub-Event": "issues"})
    assert status == 401 and unsigned["error"] == "invalid_signature"
    assert len(client.tasks.list(agent_id=a.id)) == before

    with pytest.raises(agentex.ConflictError):
        client.webhooks.create_webhook_trigger(agent_name=a.name, forward_path="other", name="acme/widgets")


def test_a_slack_trigger_answers_its_challenge_and_takes_events(server, client):
    a = agent(client)
    secret = "8f742231b10e8888abcd99yyyzzz85a5"
    t = client.webhooks.create_webhook_trigger(
        agent_name=a.name, forward_path="slack/events", name="A0APP", source="slack", secret=secret,
        base_url="https://hooks.example/agentex",
    )
    assert t.secret == secret and t.source == "slack"
    assert t.webhook_url == f"https://hooks.example/agentex/agents/forward/name/{a.name}/slack/events"
    url = server.url("/agentex") + t.webhook_path

    challenge = json.dumps({"token": "x", "challenge": "c-123", "type": "url_verification"})
    assert deliver(url, challenge, slack_headers(secret, challenge)) == (200, {"challenge": "c-123"})
    stale = slack_headers(secret, challenge, ts=int(time.time()) - 600)
    status, v = deliver(url, challenge, stale)
    assert status == 401 and v["error"] == "invalid_signature"

    event_id = f"Ev{uuid.uuid4().hex[:10]}"
    event = json.dumps({"api_app_id": "A0APP", "type": "event_callback", "event_id": event_id,
                        "event": {"type": "app_mention", "user": "U1", "text": "hello"}})
    status, v = deliver(url, event, slack_headers(secret, event))
    assert status == 200 and v["created"] is True, v
    status, record = raw(server, "GET", f"/v2/sessions/{v['task_id']}")
    assert record["webhook_type"] == "slack.app_mention" and record["webhook_id"] == event_id
    assert record["attribution"] == {"type": "slack_user", "id": "U1", "user": None}


def test_bad_trigger_requests_are_refused(client):
    a = agent(client)
    with pytest.raises(agentex.BadRequestError) as e:
        client.webhooks.create_webhook_trigger(agent_name=a.name, forward_path="x", name="n", source="external")
    assert e.value.body["message"].startswith("source")
    with pytest.raises(agentex.BadRequestError) as e:
        client.webhooks.create_webhook_trigger(agent_name=a.name, forward_path="x", name="n", source="slack")
    assert e.value.body["message"].startswith("secret")
    with pytest.raises(agentex.BadRequestError) as e:
        client.webhooks.create_webhook_trigger(agent_name=a.name, forward_path="../x", name="n")
    assert e.value.body["message"].startswith("forward_path")
    with pytest.raises(agentex.NotFoundError):
        client.webhooks.create_webhook_trigger(agent_name=unique("nobody"), forward_path="x", name="n")
