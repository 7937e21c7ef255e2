"""An async agent written with the AgentEx SDK that answers each event through the SDK's
streaming message helper (`adk.streaming.streaming_task_message_context`): the helper creates
the message IN_PROGRESS, streams its deltas, and on closing updates the message with the
accumulated text and DONE."""

from agentex.lib import adk
from agentex.lib.sdk.fastacp.fastacp import FastACP
from agentex.lib.types.fastacp import AsyncACPConfig
from agentex.protocol.acp import SendEventParams
from agentex.types.task_message_delta import TextDelta
from agentex.types.task_message_update import StreamTaskMessageDelta
from agentex.types.text_content import TextContent

from record import record, watch_keys

acp = FastACP.create(acp_type="async", config=AsyncACPConfig(type="base"))
watch_keys(acp)


@acp.on_task_event_send
async def handle_event_send(params: SendEventParams):
    text = params.event.content.content if params.event.content else ""
    record("event/send", task_id=params.task.id, text=text)
    async with adk.streaming.streaming_task_message_context(
        task_id=params.task.id,
        initial_content=TextContent(author="agent", content=""),
    ) as ctx:
        record("opened", task_id=params.task.id, message_id=ctx.task_message.id,
               streaming_status=ctx.task_message.streaming_status)
        for word in f"streamed: {text}".split(" "):
            await ctx.stream_update(
                StreamTaskMessageDelta(
                    type="delta",
                    parent_task_message=ctx.task_message,
                    delta=TextDelta(type="text", text_delta=word + " "),
                )
            )
    record("handled", task_id=params.task.id, message_id=ctx.task_message.id, text=text)
