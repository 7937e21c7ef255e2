"""The official client's own resumption: a tool call abandoned mid-stream is taken up again with
the resumption token (`Last-Event-ID`) the client was given, and its result arrives."""

import anyio
import pytest
from mcp import types
from mcp.shared.message import ClientMessageMetadata

from conftest import agent_slug, connect

pytestmark = pytest.mark.anyio


async def test_the_client_resumes_an_abandoned_call(server):
    tokens = []
    got_progress = anyio.Event()

    async def on_token(token):
        tokens.append(token)

    async def on_progress(value, total, message):
        got_progress.set()

    async with connect(server) as s:
        slug = await agent_slug(s)
        call = types.CallToolRequest(
            params=types.CallToolRequestParams(name="create_session", arguments={"agent": slug, "prompt": "/await_steer"})
        )
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:

                async def first_try():
                    await s.send_request(
                        call,
                        types.CallToolResult,
                        metadata=ClientMessageMetadata(on_resumption_token_update=on_token),
                        progress_callback=on_progress,
                    )

                tg.start_soon(first_try)
                with anyio.fail_after(30):
                    await got_progress.wait()
                    while len(tokens) < 2:
                        await anyio.sleep(0.01)
                scope.cancel()
        assert scope.cancelled_caught
        # The turn goes on without the caller: find its session and steer it to its end.
        listed = (await s.call_tool("list_sessions", {"limit": 1})).structured_content
        sid = listed["sessions"][0]["id"]
        await s.call_tool("send_message", {"sessionId": sid, "prompt": "go", "wait": False})

        resumed = await s.send_request(
            call,
            types.CallToolResult,
            metadata=ClientMessageMetadata(resumption_token=tokens[-1]),
        )
        assert not resumed.is_error
        out = resumed.structured_content
        assert out["sessionId"] == sid
        assert out["state"] == "completed" and out["reply"] == "steered: go"
