"""Agent run schedules through the official AgentEx client (`agentex-client`, unmodified) with
strict response validation: every one of the 16 schedule operations, schedules firing, a restart
keeping schedules (and the sessions they made), the missed-tick rule, and DST-correct next run
times for a New York 09:00 cron.

The tasks a schedule makes are checked where every client sees them: as tasks of the same
client (named after their schedule and tick, with the schedule's params and metadata) and as
sessions of the Sessions API (`/v1/ws/{ws}/agent/sessions`) of the same server.
"""

import json
import time
import urllib.parse
import urllib.request
from datetime import datetime, timedelta, timezone

import pytest
from agentex import Agentex, BadRequestError, ConflictError, NotFoundError, PermissionDeniedError

from sessiond_server import WORKSPACE, Server, wait_for

# Intervals of a second keep the suite fast; three schedules per agent put the limit in reach.
CONFIG = "[schedules]\nmin_interval_seconds = 1\nmax_per_agent = 3\n"
UTC = timezone.utc


def client(server, key=None):
    return Agentex(
        api_key=key or server.key,
        base_url=server.url("/agentex"),
        _strict_response_validation=True,
    )


def call(server, method, path, body=None):
    req = urllib.request.Request(server.url(path), method=method)
    req.add_header("Authorization", f"Bearer {server.key}")
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, data, timeout=30) as res:
        return json.loads(res.read())


_agents = iter(range(1_000_000))


def new_agent(server):
    """A fresh sessiond agent; AgentEx addresses it by its id."""
    slug = f"agent-{next(_agents)}"
    return call(server, "POST", f"/v1/ws/{WORKSPACE}/agents", {"slug": slug, "name": slug})["id"]


def runs(server, agent_id, name):
    """The agent's sessions a schedule called `name` made (their titles say so), newest first."""
    query = urllib.parse.urlencode({"agentId": agent_id, "limit": 100})
    listed = call(server, "GET", f"/v1/ws/{WORKSPACE}/agent/sessions?{query}")["sessions"]
    return [s for s in listed if s["title"].startswith(f"{name} · ")]


def tasks_of(agentex, schedule_id):
    """The tasks a schedule made, through the official client (their metadata names it)."""
    return agentex.tasks.list(task_metadata=json.dumps({"schedule_id": schedule_id}), limit=100)


def history(server, session_id):
    return call(server, "GET", f"/v1/ws/{WORKSPACE}/agent/sessions/{session_id}/history?limit=500")["events"]


def utc(text):
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.fixture
def server():
    s = Server(config=CONFIG)
    try:
        yield s
    finally:
        s.close()


def test_create_retrieve_list_update_and_delete(server):
    agentex = client(server)
    agent_id = new_agent(server)
    created = agentex.agents.schedules.create(
        agent_id,
        name="daily-report",
        description="The morning report",
        cron_expression="0 9 * * *",
        timezone="America/New_York",
        start_at=utc("2030-03-08T00:00:00"),
        initial_input={"content": "Write the morning report", "author": "user", "type": "text"},
        task_params={"depth": 2},
        task_metadata={"team": "ops"},
    )
    assert created.agent_id == agent_id
    assert created.name == "daily-report"
    assert created.initial_input.content == "Write the morning report"
    assert created.initial_input.author == "user"
    assert created.state == "ACTIVE" and created.paused is False
    assert created.live_data_available is True
    assert created.num_actions_taken == 0 and created.last_action_time is None
    assert created.task_params == {"depth": 2} and created.task_metadata == {"team": "ops"}
    assert created.creator_principal.principal_type == "user"
    assert created.creator_principal.user_id
    assert created.initial_input_method

    by_id = agentex.agents.schedules.retrieve(created.id, agent_id=agent_id)
    by_name = agentex.agents.schedules.retrieve_by_name("daily-report", agent_id=agent_id)
    assert by_id.id == by_name.id == created.id
    assert by_id.next_action_times == created.next_action_times

    listed = agentex.agents.schedules.list(agent_id)
    assert listed.total == len(listed.run_schedules) == 1
    assert listed.run_schedules[0].live_data_available is None
    assert listed.run_schedules[0].next_action_times is None
    live = agentex.agents.schedules.list(agent_id, include_live=True, limit=10)
    assert live.run_schedules[0].live_data_available is True
    assert live.run_schedules[0].next_action_times == created.next_action_times

    updated = agentex.agents.schedules.update(
        created.id, agent_id=agent_id, cron_expression="30 17 * * MON-FRI", description=None
    )
    assert updated.cron_expression == "30 17 * * MON-FRI"
    assert updated.description is None
    # Friday 2030-03-08 17:30 EST, then Monday 2030-03-11 17:30 EDT.
    assert updated.next_action_times[:2] == [utc("2030-03-08T22:30:00"), utc("2030-03-11T21:30:00")]
    renamed = agentex.agents.schedules.update_by_name(
        "daily-report", agent_id=agent_id, body_name="weekday-report", interval_seconds=3600
    )
    assert renamed.name == "weekday-report"
    assert renamed.interval_seconds == 3600 and renamed.cron_expression is None
    with pytest.raises(NotFoundError):
        agentex.agents.schedules.retrieve_by_name("daily-report", agent_id=agent_id)

    other = agentex.agents.schedules.create(
        agent_id, name="other", interval_seconds=60, initial_input={"content": "x"}
    )
    deleted = agentex.agents.schedules.delete_by_name("other", agent_id=agent_id)
    assert deleted.id == other.id and deleted.message
    deleted = agentex.agents.schedules.delete(created.id, agent_id=agent_id)
    assert deleted.id == created.id
    with pytest.raises(NotFoundError):
        agentex.agents.schedules.retrieve(created.id, agent_id=agent_id)
    assert agentex.agents.schedules.list(agent_id).total == 0


def test_pause_resume_skip_unskip_and_trigger(server):
    agentex = client(server)
    agent_id = new_agent(server)
    s = agentex.agents.schedules.create(
        agent_id,
        name="standup",
        cron_expression="0 9 * * MON-FRI",
        timezone="Europe/Berlin",
        start_at=utc("2030-06-03T00:00:00"),
        initial_input={"content": "Prepare the standup notes"},
    )
    # Monday 2030-06-03 09:00 CEST is 07:00Z.
    first, second = s.next_action_times[:2]
    assert first == utc("2030-06-03T07:00:00") and second == utc("2030-06-04T07:00:00")

    skipped = agentex.agents.schedules.skip(s.id, agent_id=agent_id, scheduled_time=first)
    assert skipped.skipped_action_times == [first]
    assert skipped.next_action_times[0] == second
    unskipped = agentex.agents.schedules.unskip(s.id, agent_id=agent_id, scheduled_time=first)
    assert unskipped.skipped_action_times == []
    assert unskipped.next_action_times[0] == first
    with pytest.raises(BadRequestError):
        agentex.agents.schedules.skip(s.id, agent_id=agent_id, scheduled_time=first + timedelta(minutes=1))

    paused = agentex.agents.schedules.pause(s.id, agent_id=agent_id, note="holiday")
    assert paused.paused is True and paused.state == "PAUSED" and paused.next_action_times == []
    resumed = agentex.agents.schedules.resume(s.id, agent_id=agent_id)
    assert resumed.paused is False and resumed.state == "ACTIVE"
    assert resumed.next_action_times[0] == first
    assert agentex.agents.schedules.pause_by_name("standup", agent_id=agent_id).state == "PAUSED"

    # A trigger runs even a paused schedule, now, as one more session.
    triggered = agentex.agents.schedules.trigger(s.id, agent_id=agent_id)
    assert triggered.num_actions_taken == 1 and triggered.last_action_time is not None
    assert triggered.paused is True
    assert agentex.agents.schedules.resume_by_name("standup", agent_id=agent_id).state == "ACTIVE"
    again = agentex.agents.schedules.trigger_by_name("standup", agent_id=agent_id)
    assert again.num_actions_taken == 2
    made = runs(server, agent_id, "standup")
    assert len(made) == 2 and all(r["title"].endswith("(run now)") for r in made)
    tasks = tasks_of(agentex, s.id)
    assert {t.id for t in tasks} == {r["id"] for r in made}
    assert all(t.task_metadata["trigger_type"] == "manual" for t in tasks)
    prompts = [e["event"] for e in history(server, made[0]["id"]) if e["event"]["type"] == "prompt_submitted"]
    assert prompts[0]["prompt"] == "Prepare the standup notes"


def test_an_interval_schedule_fires_sessions(server):
    agentex = client(server)
    agent_id = new_agent(server)
    s = agentex.agents.schedules.create(
        agent_id,
        name="heartbeat",
        interval_seconds=1,
        initial_input={"content": "Check the queue"},
        task_params={"queue": "inbox"},
        task_metadata={"team": "ops"},
    )
    made = wait_for(lambda: runs(server, agent_id, "heartbeat"), what="a tick's session")
    session = made[-1]
    assert session["title"].startswith("heartbeat · ") and session["title"].endswith(" UTC")

    # The session is a task of the same client: named after the schedule and its tick, with the
    # schedule's params and its metadata beside the tick's own.
    task = next(t for t in tasks_of(agentex, s.id) if t.id == session["id"])
    assert task.name.startswith(f"scheduled-run:{s.id}:")
    assert task.task_metadata["team"] == "ops" and task.task_metadata["schedule_name"] == "heartbeat"
    assert task.task_metadata["trigger_type"] == "scheduled"
    assert task.name == f"scheduled-run:{s.id}:{task.task_metadata['fire_time']}"
    by_name = agentex.tasks.retrieve_by_name(task.name)
    assert by_name.id == task.id and by_name.params == {"queue": "inbox"}
    assert [a.id for a in agentex.tasks.retrieve(task.id, relationships=["agents"]).agents] == [agent_id]
    wait_for(
        lambda: any(e["event"]["type"] == "complete" for e in history(server, session["id"])),
        what="the tick's turn to complete",
    )
    events = history(server, session["id"])
    prompt = next(e["event"] for e in events if e["event"]["type"] == "prompt_submitted")
    assert prompt["prompt"] == "Check the queue"
    assert prompt["sender"] == {"kind": "user", "userId": s.creator_principal.user_id}
    fired = wait_for(
        lambda: (r := agentex.agents.schedules.retrieve(s.id, agent_id=agent_id)).num_actions_taken >= 2 and r,
        what="a second tick",
    )
    assert fired.last_action_time is not None
    assert fired.next_action_times[0] > fired.last_action_time - timedelta(seconds=1)


def test_a_restart_keeps_schedules_and_the_sessions_they_made(server):
    agent_id = new_agent(server)
    agentex = client(server)
    cron = agentex.agents.schedules.create(
        agent_id,
        name="nine-am",
        cron_expression="0 9 * * *",
        timezone="America/New_York",
        start_at=utc("2030-11-01T00:00:00"),
        initial_input={"content": "Good morning", "author": "agent"},
    )
    ticking = agentex.agents.schedules.create(
        agent_id, name="ticking", interval_seconds=1, initial_input={"content": "tick"}
    )
    before = wait_for(lambda: runs(server, agent_id, "ticking"), what="a tick before the restart")
    server.restart()
    agentex = client(server)
    kept = agentex.agents.schedules.retrieve_by_name("nine-am", agent_id=agent_id)
    assert kept.id == cron.id
    assert kept.initial_input.author == "agent"
    assert kept.next_action_times == cron.next_action_times
    assert kept.created_at == cron.created_at
    after = runs(server, agent_id, "ticking")
    assert {r["id"] for r in before} <= {r["id"] for r in after}, "the sessions made before are kept"
    assert {r["id"] for r in before} <= {t.id for t in tasks_of(agentex, ticking.id)}, "and their tasks"
    wait_for(lambda: len(runs(server, agent_id, "ticking")) > len(after), what="ticks after the restart")
    paused = agentex.agents.schedules.pause(ticking.id, agent_id=agent_id)
    assert paused.num_actions_taken == len(runs(server, agent_id, "ticking")), "one session per tick"


def test_ticks_missed_while_down_become_one_catch_up_run(server):
    agentex = client(server)
    agent_id = new_agent(server)
    agentex.agents.schedules.create(
        agent_id, name="every-second", interval_seconds=1, initial_input={"content": "tick"}
    )
    wait_for(lambda: runs(server, agent_id, "every-second"), what="the first tick")
    server.kill()
    stopped_at = time.time()
    # At least three ticks fall due while the server is down.
    wait_for(lambda: time.time() > stopped_at + 3.5, timeout=10, what="the outage")
    restarting_at = datetime.now(UTC)
    server.start()
    catch_up = wait_for(
        lambda: next(
            (
                r
                for r in reversed(runs(server, agent_id, "every-second"))  # the first one
                if r["title"].endswith("(catch-up)") and r["createdAt"] / 1000 > stopped_at
            ),
            None,
        ),
        what="the catch-up run",
    )
    after_stop = sorted(
        (r for r in runs(server, agent_id, "every-second") if r["createdAt"] / 1000 > stopped_at),
        key=lambda r: r["createdAt"],
    )
    assert after_stop[0]["id"] == catch_up["id"], "the outage is one run, the first after the restart"
    s = client(server).agents.schedules.retrieve_by_name("every-second", agent_id=agent_id)
    assert s.next_action_times[0] > restarting_at, "the schedule goes on from now"


def test_new_york_nine_am_is_13_utc_in_summer_and_14_utc_in_winter(server):
    agentex = client(server)
    agent_id = new_agent(server)
    spring = agentex.agents.schedules.create(
        agent_id,
        name="spring",
        cron_expression="0 9 * * *",
        timezone="America/New_York",
        start_at="2030-03-08T00:00:00Z",
        initial_input={"content": "report"},
    )
    # US daylight saving time starts on 2030-03-10 and ends on 2030-11-03.
    assert spring.next_action_times[:4] == [
        utc("2030-03-08T14:00:00"),
        utc("2030-03-09T14:00:00"),
        utc("2030-03-10T13:00:00"),
        utc("2030-03-11T13:00:00"),
    ]
    autumn = agentex.agents.schedules.update(
        spring.id, agent_id=agent_id, start_at=datetime(2030, 11, 1, tzinfo=UTC)
    )
    assert autumn.next_action_times[:4] == [
        utc("2030-11-01T13:00:00"),
        utc("2030-11-02T13:00:00"),
        utc("2030-11-03T14:00:00"),
        utc("2030-11-04T14:00:00"),
    ]
    server.restart()
    again = client(server).agents.schedules.retrieve(spring.id, agent_id=agent_id)
    assert again.next_action_times == autumn.next_action_times


def test_bad_input_is_refused_and_changes_nothing(server):
    agentex = client(server)
    agent_id = new_agent(server)
    kept = agentex.agents.schedules.create(
        agent_id, name="kept", interval_seconds=600, initial_input={"content": "x"}
    )
    bad = [
        dict(name="a", initial_input={"content": "x"}),
        dict(name="a", cron_expression="* * * * *", interval_seconds=60, initial_input={"content": "x"}),
        dict(name="a", cron_expression="every day", initial_input={"content": "x"}),
        dict(name="a", cron_expression="0 9 * * *", timezone="Atlantis/Capital", initial_input={"content": "x"}),
        dict(name="a", interval_seconds=0, initial_input={"content": "x"}),
        dict(name="Not A Slug", interval_seconds=60, initial_input={"content": "x"}),
        dict(name="a", interval_seconds=60, initial_input={"content": ""}),
        dict(
            name="a",
            interval_seconds=60,
            initial_input={"content": "x"},
            start_at="2030-01-02T00:00:00Z",
            end_at="2030-01-01T00:00:00Z",
        ),
    ]
    for params in bad:
        with pytest.raises(BadRequestError):
            agentex.agents.schedules.create(agent_id, **params)
    with pytest.raises(ConflictError):
        agentex.agents.schedules.create(agent_id, name="kept", interval_seconds=60, initial_input={"content": "x"})
    for name in ("two", "three"):
        agentex.agents.schedules.create(agent_id, name=name, interval_seconds=600, initial_input={"content": "x"})
    with pytest.raises(ConflictError):
        agentex.agents.schedules.create(agent_id, name="four", interval_seconds=600, initial_input={"content": "x"})
    with pytest.raises(BadRequestError):
        agentex.agents.schedules.update(kept.id, agent_id=agent_id, cron_expression="* * * * *", interval_seconds=60)
    with pytest.raises(NotFoundError):
        agentex.agents.schedules.retrieve("0190aaaa-0000-7000-8000-000000000000", agent_id=agent_id)
    with pytest.raises(NotFoundError):
        agentex.agents.schedules.list("0190aaaa-0000-7000-8000-000000000000")

    reader = client(server, key=server.token(["sessions:read"]))
    assert reader.agents.schedules.list(agent_id).total == 3
    with pytest.raises(PermissionDeniedError):
        reader.agents.schedules.trigger(kept.id, agent_id=agent_id)

    again = agentex.agents.schedules.retrieve(kept.id, agent_id=agent_id)
    assert again.updated_at == kept.updated_at and again.num_actions_taken == 0
    assert agentex.agents.schedules.list(agent_id).total == 3
