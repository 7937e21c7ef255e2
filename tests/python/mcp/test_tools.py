"""Tools through the official client: listing with valid schemas, a turn, an ask, an interrupt,
the time limit of a long turn, timeline reads, scopes and workspaces."""

import time

import anyio
import jsonschema
import pytest

from conftest import WORKSPACE, agent_slug, connect, raw, unique
from sessiond_server import Server

pytestmark = pytest.mark.anyio

TOOLS = {
    "list_agents",
    "list_sessions",
    "create_session",
    "send_message",
    "answer_question",
    "interrupt",
    "get_session",
    "read_timeline",
}
WRITES = {"create_session", "send_message", "answer_question", "interrupt"}


async def test_initialize_and_tools_with_valid_schemas(server):
    async with connect(server) as s:
        assert s.protocol_version == "2025-11-25"
        assert s.initialize_result.capabilities.resources.subscribe is True
        tools = (await s.list_tools()).tools
        assert {t.name for t in tools} == TOOLS
        for t in tools:
            jsonschema.Draft202012Validator.check_schema(t.input_schema)
            jsonschema.Draft202012Validator.check_schema(t.output_schema)
            assert t.input_schema["type"] == "object"
            assert t.output_schema["type"] == "object"
            assert t.annotations.read_only_hint == (t.name not in WRITES)


async def test_turn_is_a_session_of_every_family(server):
    async with connect(server) as s:
        slug = await agent_slug(s)
        out = await s.call_tool("create_session", {"agent": slug, "prompt": "hello there"})
        assert not out.is_error, out.content
        turn = out.structured_content
        assert turn["state"] == "completed"
        assert turn["reply"] == "echo: hello there"
        sid = turn["sessionId"]

        got = (await s.call_tool("get_session", {"sessionId": sid})).structured_content
        assert got["state"] == "completed"
        assert got["reply"] == "echo: hello there"
        assert got["source"] == "mcp"
        assert got["cost"]["cents"] >= 0

        again = await s.call_tool("send_message", {"sessionId": sid, "prompt": "and again", "behavior": "follow_up"})
        assert again.structured_content["state"] == "completed"
        assert again.structured_content["reply"] == "echo: and again"

        listed = (await s.call_tool("list_sessions", {"search": "hello there"})).structured_content
        assert sid in [x["id"] for x in listed["sessions"]]

    # The same session on /v1 and /v2, its inputs authored by the credential's owner.
    status, _, detail = raw(server, "GET", f"/v1/ws/{WORKSPACE}/agent/sessions/{sid}")
    assert status == 200 and detail["id"] == sid
    status, _, record = raw(server, "GET", f"/v2/sessions/{sid}")
    assert status == 200 and record["source"] == "mcp"
    assert record["attribution"]["type"] == "api_key"
    status, _, history = raw(server, "GET", f"/v1/ws/{WORKSPACE}/agent/sessions/{sid}/history")
    prompts = [e["event"] for e in history["events"] if e["event"]["type"] == "prompt_submitted"]
    assert [p["prompt"] for p in prompts] == ["hello there", "and again"]
    assert all(p["sender"]["kind"] == "user" for p in prompts)


async def test_progress_is_reported_during_a_turn(server):
    seen = []

    async def progress(value, total, message):
        seen.append((value, message))

    async with connect(server) as s:
        slug = await agent_slug(s)
        out = await s.call_tool(
            "create_session",
            {"agent": slug, "prompt": "/slow 50\n/stream 3\n/reply done"},
            progress_callback=progress,
        )
        assert out.structured_content["state"] == "completed"
    assert len(seen) >= 2, seen
    values = [v for v, _ in seen]
    assert values == sorted(values) and len(set(values)) == len(values)


async def test_answer_an_ask(server):
    async with connect(server) as s:
        slug = await agent_slug(s)
        asked = (await s.call_tool("create_session", {"agent": slug, "prompt": "/ask Which colour? | red | blue"})).structured_content
        assert asked["state"] == "asking"
        assert asked["questions"][0]["question"] == "Which colour?"
        assert [o["label"] for o in asked["questions"][0]["options"]] == ["red", "blue"]
        sid = asked["sessionId"]
        got = (await s.call_tool("get_session", {"sessionId": sid})).structured_content
        assert got["state"] == "asking"
        answered = (await s.call_tool("answer_question", {"sessionId": sid, "answer": "red"})).structured_content
        assert answered["state"] == "completed"
        assert answered["reply"] == "answer: red"
        # Nothing is asking any more: the core's refusal is the tool's error.
        again = await s.call_tool("answer_question", {"sessionId": sid, "answer": "blue"})
        assert again.is_error and "not_asking" in again.content[0].text


async def test_interrupt_a_running_turn(server):
    async with connect(server) as s:
        slug = await agent_slug(s)
        started = (await s.call_tool("create_session", {"agent": slug, "prompt": "/await_steer", "wait": False})).structured_content
        sid = started["sessionId"]
        assert started["state"] == "running"
        stopped = await s.call_tool("interrupt", {"sessionId": sid})
        assert stopped.structured_content == {"sessionId": sid, "interrupted": True}
        with anyio.fail_after(30):
            while True:
                got = (await s.call_tool("get_session", {"sessionId": sid})).structured_content
                if got["state"] == "interrupted":
                    break
                await anyio.sleep(0.05)


async def test_a_long_turn_returns_its_state_at_the_time_limit():
    server = Server(config="[runner]\nwait_deadline_ms = 400\n")
    try:
        async with connect(server) as s:
            slug = await agent_slug(s)
            began = time.monotonic()
            out = (await s.call_tool("create_session", {"agent": slug, "prompt": "/await_steer"})).structured_content
            assert time.monotonic() - began < 20
            assert out["state"] == "running"
            steered = (await s.call_tool("send_message", {"sessionId": out["sessionId"], "prompt": "go on"})).structured_content
            assert steered["state"] in ("completed", "running")
            await s.call_tool("interrupt", {"sessionId": out["sessionId"]})
    finally:
        server.close()


async def test_read_a_timeline_range(server):
    async with connect(server) as s:
        slug = await agent_slug(s)
        sid = (await s.call_tool("create_session", {"agent": slug, "prompt": "timeline"})).structured_content["sessionId"]
        page = (await s.call_tool("read_timeline", {"sessionId": sid, "limit": 2})).structured_content
        assert [e["seq"] for e in page["events"]] == [1, 2]
        rest = (await s.call_tool("read_timeline", {"sessionId": sid, "after": page["nextCursor"]})).structured_content
        assert rest["events"][0]["seq"] == 3
        assert rest["events"][-1]["event"]["type"] == "complete"
        newest = (await s.call_tool("read_timeline", {"sessionId": sid, "before": 0, "limit": 1})).structured_content
        assert newest["events"][0]["event"]["type"] == "complete"
        bad = await s.call_tool("read_timeline", {"sessionId": sid, "after": 1, "before": 3})
        assert bad.is_error and "invalid_request" in bad.content[0].text


async def test_bad_arguments_and_unknown_things(server):
    async with connect(server) as s:
        missing = await s.call_tool("create_session", {"agent": "no-such-agent", "prompt": "x"})
        assert missing.is_error and "agent_not_found" in missing.content[0].text
        extra = await s.call_tool("get_session", {"sessionId": "x", "surprise": 1})
        assert extra.is_error and "surprise" in extra.content[0].text
        gone = await s.call_tool("get_session", {"sessionId": "0190a5f0-0000-7000-8000-000000000000"})
        assert gone.is_error and "not_found" in gone.content[0].text
        too_long = await s.call_tool("create_session", {"agent": await agent_slug(s), "prompt": "x" * 1_000_001})
        assert too_long.is_error
        from mcp.shared.exceptions import MCPError

        with pytest.raises(MCPError) as e:
            await s.call_tool("no_such_tool", {})
        assert e.value.error.code == -32602


async def test_a_read_only_key_only_reads(server):
    reader = server.token(["sessions:read"], name=unique("reader"))
    async with connect(server) as s:
        sid = (await s.call_tool("create_session", {"agent": await agent_slug(s), "prompt": "for readers"})).structured_content["sessionId"]
    async with connect(server, key=reader) as r:
        assert {t.name for t in (await r.list_tools()).tools} == TOOLS - WRITES
        got = await r.call_tool("get_session", {"sessionId": sid})
        assert not got.is_error and got.structured_content["reply"] == "echo: for readers"
        refused = await r.call_tool("send_message", {"sessionId": sid, "prompt": "no"})
        assert refused.is_error and "forbidden" in refused.content[0].text
    status, _, history = raw(server, "GET", f"/v1/ws/{WORKSPACE}/agent/sessions/{sid}/history")
    assert [e["event"]["prompt"] for e in history["events"] if e["event"]["type"] == "prompt_submitted"] == ["for readers"]


async def test_other_workspaces_do_not_see_sessions(server):
    async with connect(server) as s:
        sid = (await s.call_tool("create_session", {"agent": await agent_slug(s), "prompt": "mine"})).structured_content["sessionId"]
    slug = unique("ws")
    server.cli("workspace", "create", slug)
    other = server.cli("app", "create", "--workspace", slug, "--name", "other", "--scope", "sessions").strip()
    async with connect(server, key=other) as o:
        for tool, args in [
            ("get_session", {"sessionId": sid}),
            ("read_timeline", {"sessionId": sid}),
            ("send_message", {"sessionId": sid, "prompt": "hi"}),
            ("interrupt", {"sessionId": sid}),
        ]:
            out = await o.call_tool(tool, args)
            assert out.is_error and "not_found" in out.content[0].text, (tool, out.content)
        listed = (await o.call_tool("list_sessions", {})).structured_content
        assert sid not in [x["id"] for x in listed["sessions"]]
