"""A sync agent written with the AgentEx SDK: it streams its echo of each message word by word.

`slow` makes it stream one word and then wait (until its caller goes away); `boom` makes it fail.
"""

import asyncio

from agentex.lib.sdk.fastacp.fastacp import FastACP
from agentex.protocol.acp import SendMessageParams
from agentex.types.task_message_delta import TextDelta
from agentex.types.task_message_update import (
    StreamTaskMessageDelta,
    StreamTaskMessageDone,
    StreamTaskMessageStart,
)
from agentex.types.text_content import TextContent

from record import record, watch_keys

acp = FastACP.create(acp_type="sync")
watch_keys(acp)


@acp.on_message_send
async def handle_message_send(params: SendMessageParams):
    text = params.content.content
    record(
        "message/send",
        task_id=params.task.id,
        agent_id=params.agent.id,
        acp_type=params.agent.acp_type,
        stream=params.stream,
        text=text,
    )
    if text == "boom":
        raise RuntimeError("the echo agent was told to fail")
    yield StreamTaskMessageStart(type="start", index=0, content=TextContent(author="agent", content=""))
    if text == "slow":
        yield StreamTaskMessageDelta(type="delta", index=0, delta=TextDelta(type="text", text_delta="working"))
        try:
            await asyncio.sleep(120)
        finally:
            record("closed", task_id=params.task.id)
        return
    words = f"echo: {text}".split(" ")
    for i, word in enumerate(words):
        chunk = word if i == 0 else " " + word
        yield StreamTaskMessageDelta(type="delta", index=0, delta=TextDelta(type="text", text_delta=chunk))
    yield StreamTaskMessageDone(type="done", index=0)
