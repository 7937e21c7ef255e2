"""Sessions as resources through the official client: listed, read, and subscribed to, with a
`notifications/resources/updated` for the session's new events."""

import json

import anyio
import pytest
from mcp import types
from mcp.shared.exceptions import MCPError

from conftest import agent_slug, connect

pytestmark = pytest.mark.anyio


async def test_list_and_read_a_session_resource(server):
    async with connect(server) as s:
        sid = (await s.call_tool("create_session", {"agent": await agent_slug(s), "prompt": "as a resource"})).structured_content["sessionId"]
        uri = f"sessiond://sessions/{sid}"
        templates = (await s.list_resource_templates()).resource_templates
        assert [t.uri_template for t in templates] == ["sessiond://sessions/{id}"]
        listed = (await s.list_resources()).resources
        assert uri in [str(r.uri) for r in listed]
        read = await s.read_resource(uri)
        [content] = read.contents
        assert content.mime_type == "application/json"
        body = json.loads(content.text)
        assert body["sessionId"] == sid
        assert body["reply"] == "echo: as a resource"
        assert body["events"][-1]["event"]["type"] == "complete"
        with pytest.raises(MCPError) as e:
            await s.read_resource("sessiond://sessions/0190a5f0-0000-7000-8000-000000000000")
        assert e.value.error.code == -32002
        with pytest.raises(MCPError) as e:
            await s.read_resource("file:///etc/passwd")
        assert e.value.error.code == -32002


async def test_a_subscription_notifies_new_events(server):
    updates = []
    got_one = anyio.Event()

    async def on_message(message):
        note = getattr(message, "root", message)
        if isinstance(note, types.ResourceUpdatedNotification):
            updates.append(note.params)
            got_one.set()

    async with connect(server, message_handler=on_message) as s:
        sid = (await s.call_tool("create_session", {"agent": await agent_slug(s), "prompt": "watch me"})).structured_content["sessionId"]
        uri = f"sessiond://sessions/{sid}"
        await s.subscribe_resource(uri)
        # Another connection (another MCP session) writes to the session.
        async with connect(server) as writer:
            done = (await writer.call_tool("send_message", {"sessionId": sid, "prompt": "more"})).structured_content
            assert done["state"] == "completed"
        with anyio.fail_after(30):
            await got_one.wait()
            while not any(u.meta and u.meta.get("sessiond/type") == "complete" for u in updates):
                await anyio.sleep(0.05)
        assert all(str(u.uri) == uri for u in updates)
        seqs = [u.meta["sessiond/seq"] for u in updates if u.meta]
        assert seqs == sorted(seqs) and seqs[-1] == done["terminalSeq"]

        await s.unsubscribe_resource(uri)
        count = len(updates)
        # After unsubscribing, a new turn sends nothing (the turn's own answer says it ended).
        await s.call_tool("send_message", {"sessionId": sid, "prompt": "quiet"})
        await anyio.sleep(0.3)
        assert len(updates) == count
